"""Adding record files to the archive.

`add_files(db, paths, keys=...)`: every record of some record files, each verified first
(`verify_frame`, records/verify.py); a bad one is reported (file, index, error) and kept out, the
rest goes in, deduplicated by record id. With keys, only records signed by one of them go
in; the others are counted apart (`untrusted`). Whatever is wrong with one record (even a
failure of the verifier itself), it is reported and the others still go in. The records are
verified in chunks (tasks run by an executor, records/executors.py) and each chunk is stored
in one transaction, so an interrupted add keeps whole chunks and a rerun adds the rest. A
file that is truncated or damaged in its framing is reported; the records before the damage
still go in.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlite_utils

from tapis_cartes.records.archive.schema import (
    CHANGED_ELSEWHERE,
    now,
    record_at,
    to_json,
    writing,
)
from tapis_cartes.records.codec import RecordFileError, decode_record, file_chunks, options_from_pb
from tapis_cartes.records.executors import Executor, SerialExecutor, map_in_order
from tapis_cartes.records.rescore import record_scores
from tapis_cartes.records.signing import TrustedKey
from tapis_cartes.records.verify import (
    Keys,
    VerifyResult,
    internal_error,
    keyring,
    verify_envelope,
    verify_frame,
)
from tapis_cartes.v1 import record_pb2 as pb

__all__ = [
    "ADD_CHUNK",
    "SUMMARY_COLUMNS",
    "AddReport",
    "AddTask",
    "Checked",
    "add_envelopes",
    "add_files",
    "check_task",
]


@dataclass
class AddReport:
    """What `add_files` did. The records refused and those kept out as untrusted are counted
    whole, and listed (file, index, error) up to `LISTED` of each: a file of millions of
    bad records (three bytes each at least) is reported in bounded memory."""

    added: int = 0
    duplicates: int = 0
    refused: list[tuple[str, int, str]] = field(default_factory=list)  # (file, index, error)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (file, error)
    # keys given: records not signed by one of them (file, index, why), kept out
    untrusted: list[tuple[str, int, str]] = field(default_factory=list)
    refused_count: int = 0  # all refused, listed or not
    untrusted_count: int = 0

    def note(
        self, refused: list[tuple[str, int, str]], untrusted: list[tuple[str, int, str]]
    ) -> None:
        """Count the refusals of a chunk, and list them while fewer than `LISTED` are."""
        self.refused_count += len(refused)
        self.untrusted_count += len(untrusted)
        self.refused.extend(refused[: max(0, LISTED - len(self.refused))])
        self.untrusted.extend(untrusted[: max(0, LISTED - len(self.untrusted))])


# The refusals of each kind an `AddReport` lists (the others are counted): more than a
# person reads, and a thousandth of the memory a million took (748 MB for 3M empty frames).
LISTED = 1000


SUMMARY_COLUMNS = (  # the summary columns of `records`, then the envelope itself
    "record_id",
    "game",
    "ruleset",
    "options",
    "players",
    "player_count",
    "hands",
    "finished",
    "winners",
    "scores",
    "source",
    "played_at",
    "added_at",
)
_COLUMNS = (*SUMMARY_COLUMNS, "envelope")
_INSERT_RECORD = (
    f"INSERT INTO records ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
)


def _summary(rid: str, rec: pb.GameRecord, env_bytes: bytes, added_at: str) -> tuple[Any, ...]:
    """A `records` row, in the order of `_COLUMNS`."""
    return (
        rid,
        rec.rules.game,
        rec.rules.ruleset,
        to_json(options_from_pb(rec.rules.options)),
        to_json([s.name for s in rec.seats]),
        len(rec.seats),
        len(rec.hands),
        int(rec.outcome.finished),
        to_json(list(rec.outcome.winners)),
        to_json(record_scores(rec)),
        rec.provenance.source,
        rec.provenance.played_at.upper(),  # ("t" and "z", which RFC 3339 allows: SQLite's "T", "Z")
        added_at,
        env_bytes,
    )


@dataclass
class Checked:
    """What verifying a chunk of envelopes gave: rows to insert and records refused."""

    rows: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # by record id
    where: dict[str, tuple[str, int]] = field(default_factory=dict)  # its (file, index)
    players: list[tuple[str, int, str]] = field(default_factory=list)
    refused: list[tuple[str, int, str]] = field(default_factory=list)
    untrusted: list[tuple[str, int, str]] = field(default_factory=list)
    duplicates: int = 0  # the same record twice in the chunk


# With keys: a record not signed, or signed by a key not given, is not refused as bad but
# kept out as not signed by a trusted key. A signature that claims a key given and does not
# hold is a tampered record: refused.
_UNTRUSTED = ("signature-missing", "signature-unknown-key")


def _check(
    out: Checked,
    name: str,
    index: int,
    stored: bytes,
    added_at: str,
    verify: Callable[[], VerifyResult],
) -> None:
    """Verify one record and keep it for the chunk (`stored`: its envelope bytes, canonical
    once verified) or report it; never raises: a failure of the verifier itself refuses this
    record only (code `internal`)."""
    try:
        result = verify()
        if not result.ok:
            error = result.error
            assert error is not None
            bad = out.untrusted if error.code in _UNTRUSTED else out.refused
            bad.append((name, index, f"{error} ({error.code})"))
            return
        rid = result.record_id
        if rid in out.rows:
            out.duplicates += 1
            return
        rec = decode_record(pb.RecordEnvelope.FromString(stored).record)
        row = _summary(rid, rec, stored, added_at)
        players = [(rid, seat, s.name) for seat, s in enumerate(rec.seats)]
    except Exception as exc:  # a bug in Tapis: this record is refused, the others go on
        error = internal_error(exc)
        out.refused.append((name, index, f"{error} ({error.code})"))
        return
    out.rows[rid] = row
    out.where[rid] = (name, index)
    out.players.extend(players)


@dataclass(frozen=True)
class AddTask:
    """A chunk of one record file: its envelope frames, the first being record `first`, and
    the keys its records must be signed by (none: any record that verifies)."""

    name: str
    first: int
    frames: tuple[bytes, ...]
    added_at: str
    keys: tuple[TrustedKey, ...] = ()


def check_task(task: AddTask) -> Checked:
    """Verify a chunk's records (run by an executor, in any process)."""
    out = Checked()
    for index, frame in enumerate(task.frames, task.first):
        # a frame that verifies is its envelope's canonical bytes (verify_frame checks it)
        _check(
            out,
            task.name,
            index,
            frame,
            task.added_at,
            functools.partial(verify_frame, frame, task.keys, task.name, index),
        )
    return out


def _insert(db: sqlite_utils.Database, checked: Checked, report: AddReport) -> None:
    """Store a verified chunk in one transaction; records already in the archive are
    counted as duplicates. A new record's rows of `record_players` left in the archive
    without it (its record removed by another program) are replaced by its own. A record
    that SQLite still refuses to store (a constraint of its rows) is refused alone, named:
    the others of the chunk go in."""
    report.note(checked.refused, checked.untrusted)
    report.duplicates += checked.duplicates
    with writing(db):
        existing: set[str] = set()
        ids = list(checked.rows)
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            existing.update(
                r[0]
                for r in db.execute(
                    f"SELECT record_id FROM records WHERE record_id IN ({marks})", chunk
                )
            )
        new = [rid for rid in checked.rows if rid not in existing]
        players: dict[str, list[tuple[str, int, str]]] = {rid: [] for rid in new}
        for p in checked.players:
            if p[0] in players:
                players[p[0]].append(p)
        try:
            with _savepoint(db):
                _store(db, new, checked, players)
            added = len(new)
        except sqlite3.IntegrityError:  # one record's rows, not found at once: one at a time
            added = 0
            for rid in new:
                try:
                    with _savepoint(db):
                        _store(db, [rid], checked, players)
                    added += 1
                except sqlite3.IntegrityError as exc:
                    name, index = checked.where[rid]
                    refusal = (
                        f"{record_at(rid)} cannot be stored in the archive: {exc} "
                        f"{CHANGED_ELSEWHERE}"
                    )
                    report.note([(name, index, refusal)], [])
    report.added += added
    report.duplicates += len(existing)


def _store(
    db: sqlite_utils.Database,
    rids: list[str],
    checked: Checked,
    players: dict[str, list[tuple[str, int, str]]],
) -> None:
    """Insert the rows of the records `rids` (new in the archive), their players' rows in
    place of any the archive holds for them."""
    db.conn.executemany("DELETE FROM record_players WHERE record_id = ?", [(r,) for r in rids])
    db.conn.executemany(_INSERT_RECORD, [checked.rows[rid] for rid in rids])
    db.conn.executemany(
        "INSERT INTO record_players (record_id, seat, name) VALUES (?, ?, ?)",
        [p for rid in rids for p in players[rid]],
    )


@contextlib.contextmanager
def _savepoint(db: sqlite_utils.Database) -> Iterator[None]:
    """A part of the transaction undone alone when it fails."""
    db.execute("SAVEPOINT part")
    try:
        yield
    except BaseException:
        if db.conn.in_transaction:  # (else SQLite undid the whole transaction: a full disk)
            db.execute("ROLLBACK TO part")
            db.execute("RELEASE part")
        raise
    db.execute("RELEASE part")


def add_envelopes(
    db: sqlite_utils.Database,
    items: Iterable[tuple[str, int, pb.RecordEnvelope]],
    report: AddReport | None = None,
    keys: Keys = (),
) -> AddReport:
    """Verify (file, index, envelope) items here and add the valid new ones in one
    transaction (with `keys`: only those signed by one of them)."""
    report = report or AddReport()
    checked = Checked()
    added_at = now()
    ring = tuple(keyring(keys).values())
    for name, index, env in items:
        stored = env.SerializeToString(deterministic=True)
        _check(
            checked, name, index, stored, added_at, functools.partial(verify_envelope, env, ring)
        )
    _insert(db, checked, report)
    return report


ADD_CHUNK = 500  # records verified per task and stored per transaction


def _add_tasks(
    paths: Sequence[str | Path], report: AddReport, chunk: int, keys: tuple[TrustedKey, ...]
) -> Iterator[AddTask]:
    """The chunks of the files, read one file at a time; a file that cannot be read, or
    whose framing breaks, is reported in `report.unreadable` after the chunks before the
    break."""
    added_at = now()
    for path in paths:
        name = str(path)
        try:
            for first, frames in file_chunks(path, chunk):
                yield AddTask(name, first, frames, added_at, keys)
        except RecordFileError as exc:
            report.unreadable.append((name, str(exc)))


def add_files(
    db: sqlite_utils.Database,
    paths: Sequence[str | Path],
    executor: Executor | None = None,
    chunk: int = ADD_CHUNK,
    progress: Callable[[int], None] | None = None,
    keys: Keys = (),
) -> AddReport:
    """Add the records of record files, verified in chunks by `executor` (default: here),
    each chunk stored in one transaction. With `keys` (public keys, or `TrustedKey`s), only
    the records signed by one of them go in; the records not signed, or signed by another
    key, are reported in `untrusted`. A file that is not a record file, or is damaged, is
    reported in `unreadable` (its records before the damage still go in).
    `progress(records)` is called after each stored chunk."""
    report = AddReport()
    executor = executor or SerialExecutor()
    done = 0
    tasks = _add_tasks(paths, report, chunk, tuple(keyring(keys).values()))
    results = map_in_order(executor, check_task, tasks)
    try:
        for task, checked in results:  # stored in file order, whatever order they complete in
            _insert(db, checked, report)
            done += len(task.frames)
            if progress is not None:
                progress(done)
    finally:
        results.close()
    return report
