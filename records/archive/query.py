"""Reading the archive: the records a selection takes (by game, ruleset, player, date), their
summaries or envelopes, and one record by its id (or a unique prefix of it)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlite_utils
from google.protobuf.message import DecodeError

from tapis_cartes.records.archive.add import SUMMARY_COLUMNS
from tapis_cartes.records.archive.schema import (
    CHANGED_ELSEWHERE,
    ENVELOPE,
    NAMES,
    OPTIONS,
    SCORES,
    SEATS,
    ArchiveError,
    Shape,
    another_record,
    damaged,
    envelope_too_long,
    record_at,
    stored,
)
from tapis_cartes.records.codec import decode_record
from tapis_cartes.records.strict import bound_key
from tapis_cartes.referee.engine import RecordError, RulesError, find_game
from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.v1 import record_pb2 as pb

__all__ = [
    "Selection",
    "find_record",
    "iter_envelopes",
    "iter_records",
    "query_records",
    "stored_envelope",
    "where_sql",
]


def _date_bound(flag: str, text: str, end: bool) -> tuple[str, str]:
    """A `played_at` bound as SQL compares it: the operator, and the instant as
    `played_at_key` gives it (UTC). `text` is an ISO 8601 date or date-time; one without an
    offset is UTC (as Tapis writes); a date alone as an end bound takes in the whole day.
    `ArchiveError` when it is not a date."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ArchiveError(
            f"{flag}: {quoted(text)} is not a date (YYYY-MM-DD or an ISO 8601 date-time)"
        ) from None
    whole_day = end and len(text) <= 10 and "T" not in text and ":" not in text
    try:
        if when.tzinfo is not None:
            when = when.astimezone(UTC).replace(tzinfo=None)
        if whole_day:  # before the next day
            return "<", bound_key(when + timedelta(days=1))
    except OverflowError:  # past the last day Python dates hold (9999-12-31), or before the first
        when = datetime.max if when.year > 1 else datetime.min
    if end and when == datetime.max:
        return "<=", "9999-12-31T24"  # (after every instant, as `played_at_key` says them)
    return (">=" if not end else "<="), bound_key(when)


def where_sql(
    game: str | None,
    ruleset: str | None = None,
    player: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    # Instants compared as instants (`played_at_key`, the archive connection's SQL function
    # `played_at_key`), not as text: "2026-01-01T01:00:00+01:00" is "2026-01-01T00:00:00Z".
    for flag, text, end in (("--since", since, False), ("--until", until, True)):
        if text is not None:
            op, bound = _date_bound(flag, text, end)
            clauses.append(f"played_at_key(played_at) {op} ?")
            params.append(bound)
    if game:
        with contextlib.suppress(RulesError):  # an unknown game matches nothing
            game = find_game(game).name
        clauses.append("game = ?")
        params.append(game)
    if ruleset:
        clauses.append("ruleset = ?")
        params.append(ruleset)
    if player:
        clauses.append("record_id IN (SELECT record_id FROM record_players WHERE name = ?)")
        params.append(player)
    return (" AND ".join(clauses) or "1"), params


@dataclass(frozen=True)
class Selection:
    """Which records a query or an export takes: by game (name or alias), ruleset, a
    player's name, the date played (`since`/`until`: ISO 8601, compared as instants; one
    without an offset is UTC, as Tapis writes; a date alone as `until` takes in the whole
    day), at most `limit`."""

    game: str | None = None
    ruleset: str | None = None
    player: str | None = None
    since: str | None = None
    until: str | None = None
    limit: int | None = None

    def rows(self, db: sqlite_utils.Database, columns: str) -> Iterator[tuple[Any, ...]]:
        """The selected rows of `records` (those columns), oldest added first. `ArchiveError`
        at the end when the records table gave fewer than its indexes list: a damaged table
        (a page of it lost) reads as holding fewer records, or none, without an error."""
        where, params = where_sql(self.game, self.ruleset, self.player, self.since, self.until)
        # Counted first, from an index (SQLite counts from the smallest that serves): records
        # added meanwhile only add rows; Tapis removes none.
        listed = db.execute(f"SELECT count(*) FROM records WHERE {where}", params).fetchone()[0]
        sql = f"SELECT {columns} FROM records WHERE {where} ORDER BY rowid"
        if self.limit is not None:
            sql += " LIMIT ?"
            params.append(self.limit)
            listed = min(listed, self.limit)
        read = 0
        for row in db.execute(sql, params):
            read += 1
            yield row
        if read < listed:
            path = db.execute("PRAGMA database_list").fetchone()[2]  # (main: the archive)
            raise damaged(
                path, f"its records table gave {read} of the {listed} records its indexes list"
            )


# What each summary column of `records` holds (schema.py `stored`).
_KINDS: dict[str, type | Shape] = {
    "record_id": str,
    "game": str,
    "ruleset": str,
    "options": OPTIONS,
    "players": NAMES,
    "player_count": int,
    "hands": int,
    "finished": int,
    "winners": SEATS,
    "scores": SCORES,
    "source": str,
    "played_at": str,
    "added_at": str,
}
assert tuple(_KINDS) == SUMMARY_COLUMNS
_VALUE_KINDS = tuple(_KINDS.items())[1:]  # after the record id


def query_records(db: sqlite_utils.Database, selection: Selection) -> list[dict[str, Any]]:
    """Summaries of the selected records (`iter_records`), in a list."""
    return list(iter_records(db, selection))


def iter_records(
    db: sqlite_utils.Database, selection: Selection
) -> Generator[dict[str, Any], None, None]:
    """Summaries of the selected records (JSON columns decoded, no envelope), one at a time
    (memory does not grow with the archive), each value checked (`ArchiveError` naming the
    column and the record)."""
    for rowid, rid, *values in selection.rows(db, "rowid, " + ", ".join(SUMMARY_COLUMNS)):
        rid = stored(rid, str, "records.record_id", f"row {rowid}")
        at = record_at(rid)
        row = {"record_id": rid}
        for (column, kind), value in zip(_VALUE_KINDS, values, strict=True):
            row[column] = stored(value, kind, f"records.{column}", at)
        row["finished"] = bool(row["finished"])
        yield row


def stored_envelope(value: Any, rid: str, length: Any = None) -> pb.RecordEnvelope:
    """The envelope stored for record `rid`, checked: bytes that decode as a record envelope
    whose record decodes; `ArchiveError` naming the record and what is wrong otherwise.
    (`value`, `length`: as selected by schema.py's `ENVELOPE`.)"""
    too_long = envelope_too_long(value, length)
    if too_long is not None:
        raise ArchiveError(f"{record_at(rid)}: its stored envelope {too_long} {CHANGED_ELSEWHERE}")
    stored(value, bytes, "records.envelope", record_at(rid))
    try:
        env = pb.RecordEnvelope.FromString(value)
        decode_record(env.record)
    except (DecodeError, RecordError) as exc:
        why = "is not a record envelope" if isinstance(exc, DecodeError) else "holds no record"
        raise ArchiveError(
            f"{record_at(rid)}: its stored envelope {why}: {exc} {CHANGED_ELSEWHERE}"
        ) from None
    other = another_record(env.record, rid)
    if other is not None:
        raise ArchiveError(f"{record_at(rid)}: its stored envelope {other}")
    return env


def iter_envelopes(
    db: sqlite_utils.Database,
    selection: Selection,
    refuse: Callable[[ArchiveError], None] | None = None,
) -> Iterator[bytes]:
    """The stored envelopes (bytes) of the selected records, each checked (`stored_envelope`):
    one that is not a record envelope ends the iteration with its `ArchiveError`, or with
    `refuse`, is given to it and left out."""
    for rowid, rid, envelope_bytes, length in selection.rows(db, f"rowid, record_id, {ENVELOPE}"):
        try:
            rid = stored(rid, str, "records.record_id", f"row {rowid}")
            stored_envelope(envelope_bytes, rid, length)
        except ArchiveError as exc:
            if refuse is None:
                raise
            refuse(exc)
            continue
        yield envelope_bytes


def find_record(db: sqlite_utils.Database, prefix: str) -> tuple[str, pb.RecordEnvelope]:
    """The record whose id is or starts with `prefix` (unique), its envelope checked
    (`stored_envelope`); `ArchiveError` otherwise."""
    text = prefix.strip().lower()
    if not text or any(c not in "0123456789abcdef" for c in text):
        raise ArchiveError(f"{quoted(prefix)} is not a record id (lowercase hex)")
    rows = list(
        db.execute(
            f"SELECT record_id, {ENVELOPE} FROM records WHERE record_id >= ? AND record_id < ? "
            "ORDER BY record_id LIMIT 2",
            [text, text + "g"],
        )
    )
    if not rows:
        raise ArchiveError(f"no record {quoted(prefix)} in the archive")
    if len(rows) > 1:
        raise ArchiveError(f"record id prefix {quoted(prefix)} is ambiguous: give more digits")
    rid = rows[0][0]  # text: only text compares between two texts in SQLite
    return rid, stored_envelope(rows[0][1], rid, rows[0][2])
