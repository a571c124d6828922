"""`tapis corpus`: the records of clients/corpus.py's matches, written and added to an
archive; its errors one line each, before any match is played."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from tapis_cartes.clients.corpus import make_corpus
from tapis_cartes.records.codec import read_envelopes
from tapis_cartes.v1 import record_pb2 as pb
from tests.commands import INTERRUPTIBLE, ROOT, cli_command, tapis


def test_corpus_writes_the_matches_and_adds_them(tmp_path: Path) -> None:
    out, db = tmp_path / "c.tapis", tmp_path / "c.db"
    done = tapis(
        "corpus", "--game", "nap", "-n", "3", "--bots", "random", "--seed", "t",
        "-o", out, "--archive", db,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    want = make_corpus("nap", 3, "t", "random")
    assert [e.record for e in read_envelopes(out)] == [e.record for e in want]
    hands = sum(_hands(e.record) for e in want)
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"3 matches, {hands} hands played in ")
    assert lines[1:] == [f"wrote {out}", "3 records added, 0 duplicates, 0 refused"]
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM records").fetchone() == (3,)
    assert done.stdout == ""


def _hands(record: bytes) -> int:
    return len(pb.GameRecord.FromString(record).hands)


def test_corpus_errors_are_one_line_before_any_match(tmp_path: Path) -> None:
    out = tmp_path / "c.tapis"
    other = tmp_path / "other.txt"  # a file that is no archive: found once all was played
    other.write_text("not an archive")
    cases = [
        (("--archive", other, "-n", "300"), 2, "other.txt: not an archive"),
        (("--archive", tmp_path / "none" / "a.db"), 2, "none/a.db: cannot write: no folder"),
        (("--option", "end_threshold=5000", "-o", out), 1, "end_threshold"),
        (("--game", "heart", "-o", out), 1, "unknown game 'heart'"),
        (("-o", tmp_path / "none" / "c.tapis"), 2, "cannot write: no folder"),
        (("--archive", tmp_path / "none" / "c.db"), 2, "cannot write: no folder"),
        ((), 2, "give -o RECORDS and/or --archive DB"),
        (("-n", "0", "-o", out), 2, "must be at least 1"),
        (("-n", "abc", "-o", out), 2, "argument -n/--count: 'abc' is not a whole number"),
        (("-n", "\u0665", "-o", out), 2, "is not a whole number"),  # an Arabic-Indic 5
        (("--jobs", "100000000000", "-o", out), 2, "the number of workers must be 1 to 256"),
    ]
    for args, code, message in cases:
        done = tapis("corpus", *args)
        assert done.returncode == code, (args, done.stderr)
        assert "Traceback" not in done.stderr, args
        assert " played in " not in done.stderr, args  # before any match
        assert message in done.stderr.strip().splitlines()[-1], args  # the last line says why
        assert not out.exists()


def test_a_corpus_has_the_games_own_number_of_players_by_default() -> None:
    """Without --players, each game's default (L'Impériale: 2, not 4), as `make_rules` says."""
    from tapis_cartes.referee.engine import make_rules

    for game in ("imperiale", "triomphe", "napoleon", "dame-de-pique"):
        (env,) = make_corpus(game, 1, "t", "random")
        record = pb.GameRecord.FromString(env.record)
        assert record.rules.players == make_rules(game, None, {}, None).players, game


def test_ctrl_c_twice_stops_a_corpus_of_two_processes_at_once(tmp_path: Path) -> None:
    """`tapis corpus --jobs 2`, a process pool of its own, waited for the chunks under way at a
    Ctrl-C, then hung for ever at a second one (a worker waiting on the pool's queue). It now
    runs on the archive's pool: stopped at once, nothing left running or written."""
    out = tmp_path / "out.tapis"
    proc = subprocess.Popen(
        cli_command(INTERRUPTIBLE, "corpus", "-n", "2000", "-o", out, "--jobs", "2"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, start_new_session=True,
    )  # fmt: skip
    try:
        time.sleep(4)  # the second process is up and playing
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "tapis: interrupted" in err
    for _ in range(50):  # its workers go with it
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("processes of the command are still running")
    assert list(tmp_path.iterdir()) == []
