"""An archive this process cannot write is read by the `archive` commands that only read it
(query, show, runs, export), and refused with its reason by those that write it (add,
rescore); an archive whose schema needs upgrading says so. "Cannot write" is a read-only bind
mount here (root only): it also forbids SQLite's `-wal` and `-shm` files beside the archive.
A path that cannot be an archive (a folder, in a folder that does not exist) is said as it
is. All through the real command line, on real SQLite files."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tapis_cartes.clients.corpus import make_corpus
from tapis_cartes.records.codec import write_envelopes
from tapis_cartes.v1 import record_pb2 as pb
from tests.commands import tapis
from tests.records.archives import SET, archive_of

N = 6  # Dame de Pique matches, random bots


@pytest.fixture(scope="module")
def corpus() -> list[pb.RecordEnvelope]:
    return make_corpus("hearts", N, seed="read-only-test", kind="random")


@pytest.fixture(scope="module")
def archive(corpus: list[pb.RecordEnvelope], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive of the corpus with a re-scoring run kept (for `runs`), closed: the file
    alone, in WAL mode, as Tapis leaves it."""
    db = archive_of(corpus, tmp_path_factory.mktemp("archive"))
    done = tapis("archive", "rescore", db, *SET, "--workers", "1")
    assert done.returncode == 0, done.stderr
    assert not db.with_name(db.name + "-wal").exists()
    return db


@pytest.fixture
def shelf(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A folder (`src`, written by the test) and the same folder mounted read-only (`ro`, a
    bind mount), unmounted after the test; skipped where a bind mount cannot be made."""
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    src, ro = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    done = subprocess.run(
        ["mount", "--bind", "-o", "ro", src, ro], capture_output=True, text=True, timeout=30
    )
    if done.returncode != 0:
        pytest.skip(f"no read-only bind mount here: {done.stderr.strip()}")
    try:
        if os.access(ro, os.W_OK):  # (an older mount(8) binds read-write, ignoring -o ro)
            pytest.skip("the bind mount is not read-only")
        yield src, ro
    finally:
        subprocess.run(["umount", ro], check=True, timeout=30)


def _journal_mode(db: Path) -> str:
    """The journal mode written in the file's header (bytes 18 and 19: 2 for WAL)."""
    return "wal" if db.read_bytes()[18:20] == b"\x02\x02" else "rollback"


def _reads(db: Path, out: Path, record_id: str) -> list[str]:
    """What the reading commands print of `db` (export: the file it writes too)."""
    said = []
    for args in (
        ("query", db, "--json"),
        ("show", db, record_id[:12]),
        ("runs", db, "--json"),
        ("runs", db, "1", "--json"),
        ("export", db, "-o", out),
    ):
        done = tapis("archive", *args)
        assert done.returncode == 0, (args, done.stderr)
        said.append(done.stdout.replace(str(db), "DB").replace(str(out), "OUT"))
    said.append(out.read_bytes().hex())
    return said


def _first_id(db: Path) -> str:
    done = tapis("archive", "query", db, "--json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout.splitlines()[0])["record_id"])


@pytest.mark.parametrize("mode", ["wal", "rollback"])
def test_the_reading_commands_read_an_archive_they_cannot_write(
    archive: Path, shelf: tuple[Path, Path], tmp_path: Path, mode: str
) -> None:
    """In WAL mode (without `-shm`, which SQLite cannot make beside it) and in rollback
    journal mode, as the same commands read the archive where it can be written."""
    src, ro = shelf
    shutil.copy(archive, src / "a.db")
    if mode == "rollback":
        conn = sqlite3.connect(src / "a.db")
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.close()
    assert _journal_mode(src / "a.db") == mode
    before = (src / "a.db").read_bytes()
    record_id = _first_id(archive)
    assert _reads(ro / "a.db", tmp_path / "ro.tapis", record_id) == _reads(
        archive, tmp_path / "rw.tapis", record_id
    )
    assert (src / "a.db").read_bytes() == before
    assert sorted(os.listdir(src)) == ["a.db"]


def test_changes_still_in_the_write_ahead_log_are_read_and_never_skipped(
    corpus: list[pb.RecordEnvelope], shelf: tuple[Path, Path], tmp_path: Path
) -> None:
    """An archive copied while it was open: its `-wal` holds records not yet in the file.
    With its `-shm`, SQLite reads them; without, the archive cannot be read here (read as
    an immutable file, it would lack them): an error naming the `-wal`, not fewer records."""
    src, ro = shelf
    write_envelopes(tmp_path / "first.tapis", corpus[: N // 2])
    write_envelopes(tmp_path / "rest.tapis", corpus[N // 2 :])
    db = tmp_path / "open.db"
    assert tapis("archive", "add", db, tmp_path / "first.tapis").returncode == 0
    holder = sqlite3.connect(db)  # open, so the next add leaves its changes in the -wal
    try:
        holder.execute("SELECT count(*) FROM records").fetchone()
        assert tapis("archive", "add", db, tmp_path / "rest.tapis").returncode == 0
        for suffix in ("", "-wal", "-shm"):
            shutil.copy(f"{db}{suffix}", src / f"a.db{suffix}")
    finally:
        holder.close()
    conn = sqlite3.connect(f"{(src / 'a.db').as_uri()}?mode=ro&immutable=1", uri=True)
    in_file = conn.execute("SELECT count(*) FROM records").fetchone()[0]
    conn.close()
    assert in_file == N // 2  # (the rest is in the -wal alone)

    done = tapis("archive", "query", ro / "a.db", "--json")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == N

    (src / "a.db-shm").unlink()
    done = tapis("archive", "query", ro / "a.db", "--json")
    assert done.returncode == 2, done.stdout
    assert f"{ro / 'a.db'}: the archive cannot be read here" in done.stderr
    assert "a.db-wal" in done.stderr


def test_an_archive_needing_an_upgrade_it_cannot_have_says_so(
    archive: Path, shelf: tuple[Path, Path]
) -> None:
    src, ro = shelf
    shutil.copy(archive, src / "a.db")
    conn = sqlite3.connect(src / "a.db")
    conn.execute("PRAGMA user_version = 2")  # as the Tapis before the rule sets' index left it
    conn.close()
    before = (src / "a.db").read_bytes()
    for args in (("query", ro / "a.db"), ("runs", ro / "a.db")):
        done = tapis("archive", *args)
        assert done.returncode == 2, args
        assert f"{ro / 'a.db'}: the archive needs upgrading" in done.stderr, done.stderr
        assert "read-only file system" in done.stderr
        assert "where it can be written" in done.stderr
    assert (src / "a.db").read_bytes() == before


def test_the_writing_commands_say_the_archive_cannot_be_written(
    archive: Path, corpus: list[pb.RecordEnvelope], shelf: tuple[Path, Path], tmp_path: Path
) -> None:
    src, ro = shelf
    shutil.copy(archive, src / "a.db")
    before = (src / "a.db").read_bytes()
    write_envelopes(tmp_path / "more.tapis", make_corpus("hearts", 1, seed="read-only-more"))
    done = tapis("archive", "add", ro / "a.db", tmp_path / "more.tapis")
    assert done.returncode == 2, done.stdout
    assert done.stderr.strip() == (
        f"{ro / 'a.db'}: the archive cannot be written: it is on a read-only file system"
    )
    done = tapis("archive", "rescore", ro / "a.db", "--set", "end_threshold=80")
    assert done.returncode == 2, done.stdout
    assert done.stderr.strip() == (  # said when it is opened, before any work
        f"{ro / 'a.db'}: the archive cannot be written: it is on a read-only file system"
    )
    done = tapis("archive", "add", ro / "new.db", tmp_path / "more.tapis")
    assert done.returncode == 2, done.stdout
    assert "new.db: the archive cannot be written: it is on a read-only file system" in (
        done.stderr
    )
    assert (src / "a.db").read_bytes() == before
    assert sorted(os.listdir(src)) == ["a.db"]


def test_a_folder_or_a_missing_folder_is_said_as_it_is(tmp_path: Path) -> None:
    records = tmp_path / "one.tapis"
    write_envelopes(records, make_corpus("hearts", 1, seed="read-only-path"))
    nowhere = tmp_path / "nowhere" / "a.db"
    for args, said in (
        (("query", tmp_path), f"{tmp_path}: is a folder, not an archive"),
        (("add", tmp_path, records), f"{tmp_path}: is a folder, not an archive"),
        (("add", nowhere, records), f"{nowhere}: cannot make the archive: there is no folder"),
        (("query", nowhere), f"{nowhere}: no such archive: there is no folder"),
        (("add", records / "a.db", records), f"{records / 'a.db'}: cannot make the archive:"),
    ):
        done = tapis("archive", *args)
        assert done.returncode == 2, args
        assert said in done.stderr, (args, done.stderr)
        assert "unable to open" not in done.stderr
    assert not nowhere.parent.exists()
