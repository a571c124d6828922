"""Archives for the `tapis archive` tests: one made from a corpus, read back with SQL, copied
before a test changes it; a tampered record; the rescoring both archive suites check."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tapis_cartes.records.codec import canonical_bytes, decode_record, envelope, write_envelopes
from tapis_cartes.v1 import record_pb2 as pb
from tests.commands import tapis
from tests.records.replaying import replayed_with

# The options both archive suites re-score Dame de Pique under, as a dict and as flags.
CHANGES: dict[str, bool | int | str] = {"moon_mode": "subtract_self", "end_threshold": 60}
SET = ["--set", "moon_mode=subtract_self", "--set", "end_threshold=60"]


def archive_of(corpus: list[pb.RecordEnvelope], folder: Path, *flags: str) -> Path:
    """An archive of the whole corpus, added by `tapis archive add` (with `flags`) in
    `folder` (copy it before changing it)."""
    write_envelopes(folder / "corpus.tapis", corpus)
    db = folder / "archive.db"
    done = tapis("archive", "add", db, folder / "corpus.tapis", *flags)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"{len(corpus)} added, 0 duplicates, 0 refused"
    return db


def copy_of(db: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy.db"
    src = sqlite3.connect(db)
    dst = sqlite3.connect(out)
    src.backup(dst)  # the WAL included
    src.close()
    dst.close()
    return out


def rows(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def tampered(env: pb.RecordEnvelope) -> pb.RecordEnvelope:
    """The record with its first score line changed (it no longer verifies)."""
    rec = decode_record(env.record)
    line = rec.hands[0].lines[0]
    line.delta.points += 1
    return envelope(canonical_bytes(rec))


def expected_outcome(
    env: pb.RecordEnvelope, changes: dict[str, bool | int | str]
) -> tuple[list[list[int]], list[int]]:
    """Independently: the record with its rules replaced, replayed by records/verify.py."""
    match = replayed_with(env, changes)
    return [list(s) for s in match.scores], list(match.winners)


# Injected in a child: `archive rescore` stops (as Ctrl-C would) once its first shard is stored.
STOP_AFTER_ONE_SHARD = """
import tapis_cartes.records.archive.rescoring as rescoring
store = rescoring.store_shard
def store_then_stop(db, rows):
    store(db, rows)
    raise KeyboardInterrupt
rescoring.store_shard = store_then_stop
"""
