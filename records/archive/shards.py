"""The task of a re-scoring run (records/archive/rescoring.py), as a worker runs it: `Shard`,
the pending records of a run in a range of rowids, and `run_shard`, which reads them from the
archive (read-only), re-scores them and returns their `rescore_results` rows. A worker
imports this module alone: plain `sqlite3`, no sqlite-utils (nor what it loads), so that a
worker process starts quickly.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from tapis_cartes.records.archive.schema import (
    CHANGED_ELSEWHERE,
    ENVELOPE,
    MAX_VALUE,
    another_record,
    damaged,
    envelope_too_long,
    is_damage,
    read_text,
    stored,
    to_json,
)
from tapis_cartes.records.codec import decode_record
from tapis_cartes.records.rescore import Rescored, rescore_record
from tapis_cartes.records.strict import decode_apart
from tapis_cartes.referee.engine import RecordError
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.referee.errors import ArchiveError
from tapis_cartes.v1 import record_pb2 as pb

__all__ = ["NOT_DONE", "Shard", "result_row", "run_shard"]

# A record without a result in the run (`?`: the run id): looked up in the results' primary
# key, record by record. (`record_id NOT IN (SELECT ...)` would build the list of the run's
# results afresh for each shard: a cost that grows with the results stored so far.)
NOT_DONE = (
    "NOT EXISTS (SELECT 1 FROM rescore_results r "
    "WHERE r.run_id = ? AND r.record_id = records.record_id)"
)


# The index a shard's records are listed from again when the records table gave fewer than
# listed (`Shard.count`): any index of `records` holds every row's rowid.
_LISTED = "INDEXED BY idx_records_game"


@dataclass(frozen=True)
class Shard:
    """A task: the pending records of one run with rowid in [lo, hi] (and the game filter:
    a canonical game name, or "" for every game); `count`: how many the run's list of
    pending records (read from an index) holds there, -1 when not known."""

    db_path: str
    run_id: int
    lo: int
    hi: int
    game: str
    changes: tuple[tuple[str, Option], ...]
    count: int = -1


def run_shard(shard: Shard) -> list[tuple[Any, ...]]:
    """Read the shard's records from the archive (read-only), re-score them, and return the
    `rescore_results` rows. `ArchiveError` when the archive cannot be read, or when its
    records table lacks records its index lists (a damaged file: a run must not count
    them as none). A row that cannot be read as a record (its id not text, or longer than
    an archive holds) is one result, not replayable (`record:id`), under a stand-in id
    (`_stand_in`): the others are re-scored, and the run can finish."""
    uri = Path(shard.db_path).as_uri() + "?mode=ro"
    game, params = ("game = ?", [shard.game]) if shard.game else ("1", [])
    where = f"WHERE {game} AND rowid BETWEEN ? AND ? AND {NOT_DONE}"
    args = [*params, shard.lo, shard.hi, shard.run_id]
    changes = dict(shard.changes)
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=30)
        conn.text_factory = read_text  # (as open_archive's)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE)  # (as open_archive's)
        try:
            select = f"SELECT rowid, record_id, {ENVELOPE} FROM records"
            try:
                rows = conn.execute(f"{select} {where} ORDER BY rowid", args).fetchall()
            except sqlite3.Error as exc:
                if exc.sqlite_errorcode != sqlite3.SQLITE_TOOBIG:
                    raise
                rows = _one_by_one(conn, select, game, [*params, shard.lo, shard.hi], shard.run_id)
            # Fewer than listed: listed again from the index, whose rows SQLite then looks up in
            # the table, and finds missing (the damage, said as SQLite's error); fewer may also
            # have been done meanwhile by the same run elsewhere, and are not listed again.
            listed = shard.count
            if len(rows) < listed:
                listed = len(
                    conn.execute(f"SELECT rowid FROM records {_LISTED} {where}", args).fetchall()
                )
            results = []
            for n, rid, env, length in rows:
                unusable = _unusable_id(rid, n)
                rescored = (
                    _rescored(rid, env, changes, length)
                    if unusable is None
                    else _not_replayable(_stand_in(conn, n), "id", unusable)
                )
                results.append(result_row(shard.run_id, rescored))
        finally:
            conn.close()
    except sqlite3.Error as exc:
        if is_damage(exc):
            raise damaged(shard.db_path, str(exc)) from None
        import socket

        raise ArchiveError(
            f"{shard.db_path}: a worker (on {socket.gethostname()}) cannot read the archive: "
            f"{exc} (a worker of a Dask cluster must see the archive at this same path)"
        ) from None
    if len(rows) < listed:
        raise damaged(
            shard.db_path,
            f"its records table gave {len(rows)} of the {listed} records its index lists",
        )
    return results


# A record id SQLite would not read (longer than `MAX_VALUE`), in a row `_one_by_one` gives.
_UNREADABLE = object()


def _one_by_one(
    conn: sqlite3.Connection, select: str, game: str, args: list[Any], run_id: int
) -> list[tuple[Any, ...]]:
    """The shard's rows (`select`), read one at a time: a value in one of them is longer than
    SQLite reads here (`MAX_VALUE`), which failed the reading of the whole shard. Its row is
    given with the record id `_UNREADABLE`."""
    rows: list[tuple[Any, ...]] = []
    for (n,) in conn.execute(
        f"SELECT rowid FROM records WHERE {game} AND rowid BETWEEN ? AND ? ORDER BY rowid", args
    ).fetchall():
        try:
            rows += conn.execute(f"{select} WHERE rowid = ? AND {NOT_DONE}", [n, run_id])
        except sqlite3.Error as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_TOOBIG:
                raise
            rows.append((n, _UNREADABLE, None, None))
    return rows


def _unusable_id(rid: Any, rowid: int) -> str | None:
    """Why the record id `rid` read in row `rowid` is no record's id (NULL, not text, too
    long to be read), naming the row and the column; None when it is text."""
    if rid is _UNREADABLE:
        return (
            f"the archive's records.record_id of row {rowid} is longer than an archive holds"
            f" ({MAX_VALUE:,} bytes) {CHANGED_ELSEWHERE}"
        )
    try:
        stored(rid, str, "records.record_id", f"row {rowid}")
    except ArchiveError as exc:
        return str(exc)
    return None


def _stand_in(conn: sqlite3.Connection, rowid: int) -> str:
    """The id a result of the row `rowid` is stored under when the row's own record id is
    none (NULL, not text, too long to read): "(records row N)", which no record's id is (an
    id is 64 hexadecimal digits; one changed to this text by another program too is looked
    up, and passed with "'"). The same for the same row in every shard and every run, so
    that a run continued replaces its result, and the run's results number its records."""
    key = f"(records row {rowid})"
    while conn.execute("SELECT 1 FROM records WHERE record_id = ?", [key]).fetchone():
        key += "'"
    return key


def _rescored(rid: str, envelope: Any, changes: dict[str, Option], length: Any = None) -> Rescored:
    """One stored record re-scored; not replayable (rule `record:decode`, ...) when its
    stored envelope is not bytes (NULL, a number, text) or no longer decodes, and
    (`record:id`) when it holds a record other than the one its id names (the archive is a
    file anyone may have changed: another record's results must not pass for this one's)."""
    too_long = envelope_too_long(envelope, length)
    if too_long is not None:
        return _not_replayable(rid, "decode", f"the stored envelope {too_long}")
    if type(envelope) is not bytes:
        kind = "NULL" if envelope is None else type(envelope).__name__
        return _not_replayable(rid, "decode", f"the stored envelope is {kind}, not bytes")
    try:
        record = pb.RecordEnvelope.FromString(envelope).record
        rec, hands = decode_apart(record)
        other = another_record(record, rid)
        if other is not None:
            return _not_replayable(rid, "id", f"the stored envelope {other}")
        report = rescore_record(rid, rec, changes, hands, record)
        if report.status != "ok" and hands is not None:
            decode_record(record)  # one that fails must first decode whole: else record:decode
    except DecodeError:
        return _not_replayable(rid, "decode", "the envelope does not decode")
    except RecordError as exc:
        return _not_replayable(rid, exc.code, str(exc))
    return report


def _not_replayable(rid: str, code: str, detail: str) -> Rescored:
    return Rescored(rid, "not-replayable", f"record:{code}", detail, [], None, [], None, None)


def result_row(run_id: int, r: Rescored) -> tuple[Any, ...]:
    """A `rescore_results` row (made by the task, so the writer only inserts). New scores or
    winners equal to the old (most records) reuse their text."""
    old_scores, old_winners = to_json(r.old_scores), to_json(r.old_winners)
    new_scores, new_winners = r.new_scores, r.new_winners
    return (
        run_id,
        r.record_id,
        r.status,
        r.rule,
        r.detail,
        old_scores,
        _json_as(new_scores, r.old_scores, old_scores),
        old_winners,
        _json_as(new_winners, r.old_winners, old_winners),
        None if r.first_diff is None else to_json(r.first_diff),
        int(r.old_finished),
        None if r.new_finished is None else int(r.new_finished),
    )


def _json_as(value: Any, old: Any, old_text: str) -> str | None:
    """The JSON text of `value` (None for None): `old_text` when it equals `old`."""
    if value is None:
        return None
    return old_text if value == old else to_json(value)
