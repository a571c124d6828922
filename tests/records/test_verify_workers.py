"""`tapis record verify --workers N`: the records verified in chunks on a process pool give the
output of one worker byte for byte (the timing aside), in file and record order, whatever order
the chunks complete in: invalid records, file problems in their place, keys; and Ctrl-C."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import re
import signal
import subprocess
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tapis_cartes.clients.corpus import make_corpus
from tapis_cartes.records.codec import MAGIC, decode_record, encode_file, envelope, iter_frames
from tapis_cartes.records.signing import TrustedKey, public_pem, sign
from tapis_cartes.records.verify import (
    VerifyResult,
    VerifyTask,
    result_json,
    verify_data,
    verify_file,
    verify_files,
    verify_task,
)
from tapis_cartes.v1 import record_pb2 as pb
from tests.commands import INTERRUPTIBLE, ROOT, cli_command
from tests.commands import tapis as archive_tapis

CHUNK = 7  # records per task: many chunks in flight
# Injected in a child: `record verify` verifies in chunks of CHUNK records.
SMALL_CHUNKS = f"from tapis_cartes.records import verify\nverify.VERIFY_CHUNK = {CHUNK}"


def _framed(frames: Iterable[bytes]) -> bytes:
    out = bytearray()
    for frame in frames:
        n = len(frame)
        while n >= 0x80:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        out.append(n)
        out += frame
    return bytes(out)


def _outcome_changed(env: pb.RecordEnvelope, key: Ed25519PrivateKey) -> pb.RecordEnvelope:
    """The record with its first final score changed, signed: invalid, whatever the keys."""
    rec = decode_record(env.record)
    rec.outcome.scores[0].points += 1
    return sign(rec.SerializeToString(deterministic=True), key)


class Corpus:
    """Record files of a few hundred Hearts records, signed by `key` but for some: unsigned,
    signed by another key, tampered; a bad envelope; a file of one (invalid) record; a cut
    file; a missing file and one that is not a record file."""

    def __init__(self, folder: Path) -> None:
        self.key = Ed25519PrivateKey.generate()
        other = Ed25519PrivateKey.generate()
        envs = make_corpus("hearts", 240, seed="workers", kind="random")
        frames = []
        for i, env in enumerate(envs):
            if i % 37 == 5:
                out = env
            elif i % 41 == 7:
                out = _outcome_changed(env, self.key)
            elif i % 53 == 11:
                out = sign(env.record, other)
            else:
                out = sign(env.record, self.key)
            frames.append(out.SerializeToString(deterministic=True))
        frames.insert(100, b"\x0b\x0b\x0b")  # not an envelope: file:bad-envelope, then on
        self.main = folder / "main.tapis"
        self.main.write_bytes(MAGIC + _framed(frames))
        self.one = folder / "one.tapis"
        self.one.write_bytes(encode_file([_outcome_changed(envs[0], self.key)]))
        self.cut = folder / "cut.tapis"  # 51 whole records (not a multiple of CHUNK), then cut
        self.cut.write_bytes((MAGIC + _framed(frames[:52]))[:-30])
        self.missing = folder / "missing.tapis"
        self.not_records = folder / "notes.txt"
        self.not_records.write_text("not records\n")
        self.paths = [
            self.main, self.one, self.one, self.missing, self.cut, self.not_records,
        ]  # fmt: skip
        self.key_file = folder / "referee.pem"
        self.key_file.write_text(public_pem(self.key.public_key()))
        self.unsigned = folder / "unsigned.tapis"  # for Ctrl-C: about 3 s of work on one core
        self.unsigned.write_bytes(encode_file([envelope(e.record) for e in envs] * 12))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return Corpus(tmp_path_factory.mktemp("verify-workers"))


# --- the order of the results ---------------------------------------------------------------

T = TypeVar("T")
R = TypeVar("R")


class ReversedWindows:
    """An executor that completes its tasks in windows of five, the last first."""

    def map_tasks(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[tuple[T, R]]:
        window: list[T] = []
        for task in tasks:
            window.append(task)
            if len(window) == 5:
                yield from ((t, fn(t)) for t in reversed(window))
                window = []
        yield from ((t, fn(t)) for t in reversed(window))


def _docs(results: Iterable[tuple[int, int | None, VerifyResult]]) -> list[dict[str, Any]]:
    return [result_json(str(file), index, r) for file, index, r in results]


def test_results_in_file_and_record_order_whatever_order_chunks_complete(
    corpus: Corpus,
) -> None:
    keys = [TrustedKey.from_key(corpus.key.public_key(), "club")]
    paths = [corpus.missing, *corpus.paths]  # a file problem first, and last
    expected: list[tuple[int, int | None, VerifyResult]] = []
    for file, path in enumerate(paths):
        # The reference: the streaming reader of one file's content, frame after frame.
        found = verify_data(path.read_bytes(), str(path), keys) if path.is_file() else None
        expected.extend((file, i, r) for i, r in found or verify_file(path, keys))
    for chunk in (1, 3, CHUNK, 500):
        got = verify_files(paths, keys, ReversedWindows(), chunk)
        assert _docs(got) == _docs(expected), chunk
    codes = {d["error"]["code"] for d in _docs(expected) if d["error"]}
    assert codes == {
        "outcome", "signature-missing", "signature-unknown-key", "file:bad-envelope",
        "file:unreadable", "file:truncated", "file:not-a-record-file",
    }  # fmt: skip


def test_tasks_and_results_cross_processes_whole(corpus: Corpus) -> None:
    """A task pickles with its keys (rebuilt from their raw bytes), a result with its error
    (of its own class, code and position)."""
    keys = (TrustedKey.from_key(corpus.key.public_key(), "club"),)
    frames = tuple(itertools.islice(iter_frames(corpus.main.read_bytes()), 12))
    task = VerifyTask(0, str(corpus.main), 1, frames, keys)
    copy = pickle.loads(pickle.dumps(task))
    assert copy.keys[0].key_id == keys[0].key_id and copy.keys[0].label == "club"
    assert [result_json("f", i, r) for i, r in verify_task(copy)] == [
        result_json("f", i, r) for i, r in verify_task(task)
    ]
    results = [r for _, _, r in verify_files(corpus.paths, keys)]
    errors = [r.error for r in results if r.error is not None]
    assert len({type(e) for e in errors}) == 3  # a record's, a signature's, a file's
    for r in results:
        back = pickle.loads(pickle.dumps(r))
        assert result_json("f", 1, back) == result_json("f", 1, r)
        if r.error is not None:
            assert type(back.error) is type(r.error) and back.error.__dict__ == r.error.__dict__


# --- the command, one worker or two -----------------------------------------------------------


def tapis(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return archive_tapis(*args, setup=SMALL_CHUNKS)


def _untimed(stdout: str) -> str:
    return re.sub(r" hands in [\d.]+ s \([\d,]+ hands/s\)", " hands in T s (R hands/s)", stdout)


@pytest.mark.parametrize(
    "options",
    [("-v",), ("--json",), ("-v", "--key", "KEY"), ("--json", "--key", "KEY")],
    ids=["verbose", "json", "verbose-key", "json-key"],
)
def test_two_workers_print_what_one_prints(corpus: Corpus, options: tuple[str, ...]) -> None:
    args = [corpus.key_file if o == "KEY" else o for o in options]
    one = tapis("record", "verify", *corpus.paths, *args, "--workers", "1")
    two = tapis("record", "verify", *corpus.paths, *args, "--workers", "2")
    assert one.returncode == two.returncode == 2, one.stderr
    assert _untimed(two.stdout) == _untimed(one.stdout)
    assert two.stderr == one.stderr
    assert "Traceback" not in one.stderr + two.stderr
    if "--json" in options:
        docs = [json.loads(line) for line in two.stdout.splitlines()]
        where = [(Path(d["file"]).name, d["index"]) for d in docs]
        assert where[:3] == [("main.tapis", 1), ("main.tapis", 2), ("main.tapis", 3)]
        assert where[240:] == [
            ("main.tapis", 241), ("one.tapis", 1), ("one.tapis", 1), ("missing.tapis", None),
            *(("cut.tapis", i) for i in range(1, 53)), ("notes.txt", None),
        ]  # fmt: skip
        assert docs[100]["error"]["code"] == "file:bad-envelope" and docs[101]["ok"]
        signed = "valid" if "--key" in options else "unchecked"
        assert docs[0]["signature"] == signed
    else:
        lines = two.stdout.splitlines()
        assert f"{corpus.main} (record 1): valid (" in lines[0]
        assert f"{corpus.one}: INVALID: final scores are " in two.stdout
        assert re.fullmatch(
            r"293 records, \d+ valid, \d+ invalid, [\d,]+ hands in [\d.]+ s \([\d,]+ hands/s\); "
            r"4 file errors",
            lines[-2 if "--key" not in options else -1],
        )
        starts = [
            f"{corpus.main}: record 101 is not a record envelope: ",
            f"{corpus.missing}: No such file or directory",
            f"{corpus.cut}: record 52 claims ",
            f"{corpus.not_records} is not a Tapis record file",
        ]
        errors = two.stderr.splitlines()
        assert len(errors) == len(starts)
        assert all(e.startswith(s) for e, s in zip(errors, starts, strict=True)), errors


# --- records from a pipe ---------------------------------------------------------------------


def _piped(path: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """`tapis ARGS...` with the file `path` on its standard input, through a pipe."""
    with subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE) as cat:
        done = subprocess.run(
            cli_command(SMALL_CHUNKS, *args),
            stdin=cat.stdout,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
    return done


@pytest.mark.parametrize("workers", ["1", "2"])
def test_records_from_a_pipe_are_read_to_its_end(corpus: Corpus, workers: str) -> None:
    """A pipe has no size (its `st_size` is 0): its records are read to its end and checked,
    as a file's are; a pipe of garbage is a file error, not "0 records" and exit 0."""
    by_path = tapis("record", "verify", corpus.main, "--key", corpus.key_file, "--workers", "1")
    piped = _piped(
        corpus.main, "record", "verify", "/dev/stdin", "--key", corpus.key_file,
        "--workers", workers,
    )  # fmt: skip
    assert piped.returncode == by_path.returncode == 2, piped.stderr
    assert _untimed(piped.stdout) == _untimed(by_path.stdout).replace(
        str(corpus.main), "/dev/stdin"
    )
    assert "240 records" in piped.stdout and "1 file error" in piped.stdout, piped.stdout
    garbage = corpus.not_records.with_name("garbage.tapis")
    garbage.write_bytes(MAGIC + os.urandom(5000))
    done = _piped(garbage, "record", "verify", "/dev/stdin", "--workers", workers)
    assert done.returncode == 2 and "/dev/stdin: record 1 " in done.stderr, done.stderr
    # Commands that read a file twice (counted first, then used) read a pipe into a copy:
    # of records (a stream of empty records without end is cut at the bound, and its copy
    # removed).
    endless = subprocess.run(
        [*cli_command("from tapis_cartes.clients import record_cmd\nrecord_cmd.MAX_PIPED = 10_000",
                      "record", "show", "/dev/stdin")],
        input=MAGIC + bytes(1_000_000), capture_output=True, cwd=ROOT, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TMPDIR": str(garbage.parent)},
    )  # fmt: skip
    assert endless.returncode == 2, endless.stderr
    assert b"past the 10000 bytes this command takes from a pipe" in endless.stderr
    assert not list(garbage.parent.glob("tapis-*"))
    shown = _piped(corpus.main, "record", "show", "/dev/stdin")
    direct = tapis("record", "show", corpus.main)
    assert shown.returncode == direct.returncode and shown.stdout == direct.stdout, shown
    assert shown.stderr == direct.stderr.replace(str(corpus.main), "/dev/stdin")


# --- Ctrl-C -----------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_exits_130_without_a_traceback(corpus: Corpus, workers: str) -> None:
    """SIGINT to the process group, as a terminal sends it, once results are coming."""
    proc = subprocess.Popen(
        cli_command(INTERRUPTIBLE + SMALL_CHUNKS, "record", "verify", corpus.unsigned, "--json",
                    "--workers", workers),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        for _ in range(100):  # several chunks done: every worker is up
            assert json.loads(proc.stdout.readline())["ok"]
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err == "interrupted: not every record was verified\n"
    assert len(out.splitlines()) < 2880 - 100
