"""An archive of records in one SQLite file (sqlite-utils), and re-scoring it.

- `add_files(db, paths, keys=...)`: every record of some record files, each verified first
  (`records.verify.verify_frame`); a bad one is reported (file, index, error) and kept out,
  the rest goes in, deduplicated by record id. With keys, only records signed by one of them
  go in; the others are counted apart (`untrusted`). Whatever is wrong with one record (even
  a failure of the verifier itself), it is reported and the others still go in. The records
  are verified in chunks (tasks run by an executor, records/executors.py) and each chunk is
  stored in one transaction, so an interrupted add keeps whole chunks and a rerun adds the
  rest. A file that is truncated or damaged in its framing is reported; the records before
  the damage still go in.
- Table `records`: one row per record, summary columns plus the envelope bytes; table
  `record_players` (record_id, seat, name) to find a player's records.
- `rescore(db_path, changes, ...)`: replays every selected record under its own rules with
  some options changed (the deals and actions are kept) and stores the new scores and winners
  in `rescore_runs` / `rescore_results`. The work is split in shards of rowid ranges that the
  tasks read themselves (read-only); an executor runs them (in this process, on a local
  process pool, or on Dask) and the caller, the one writer, stores each shard's results in its
  own transaction. An interrupted run is continued by the same call.

Scores are stored as JSON lists, one list per seat of the game's units (`[[26], [0], ...]`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from records.codec import (
    RecordFileError,
    decode_record,
    file_chunks,
    options_from_pb,
)
from records.executors import Executor, SerialExecutor, make_executor, map_in_order
from records.rescore import Rescored, RescoreSummary, record_scores, rescore_record
from records.signing import TrustedKey
from records.verify import (
    Keys,
    VerifyResult,
    internal_error,
    keyring,
    verify_envelope,
    verify_frame,
)
from referee.engine import (
    RulesError,
    TapisError,
    find_game,
    make_rules,
)
from referee.engine.errors import quoted
from tapis.v1 import record_pb2 as pb

__all__ = [
    "AddReport",
    "ArchiveError",
    "RescoreSummary",
    "Selection",
    "Shard",
    "add_envelopes",
    "add_files",
    "find_record",
    "iter_envelopes",
    "list_runs",
    "open_archive",
    "query_records",
    "rescore",
    "rescore_record",
    "run_results",
]

Option = bool | int | str


class ArchiveError(TapisError):
    """A request the archive cannot answer (no such archive, unknown or ambiguous id, ...)."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


# --- the database ---------------------------------------------------------------------------


def open_archive(path: str | Path, create: bool = True) -> sqlite_utils.Database:
    """The archive at `path`, its tables made if missing; `ArchiveError` if it does not exist
    and `create` is false, or if it is not an SQLite file."""
    p = Path(path)
    if not create and not p.is_file():
        raise ArchiveError(f"{p}: no such archive")
    try:
        db = sqlite_utils.Database(p)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA busy_timeout=30000")
        _ensure_schema(db)
    except sqlite3.DatabaseError as exc:
        raise ArchiveError(f"{p}: not an archive ({exc})") from None
    return db


def _ensure_schema(db: sqlite_utils.Database) -> None:
    with db.atomic():
        db.execute(
            """CREATE TABLE IF NOT EXISTS records (
                record_id TEXT PRIMARY KEY, game TEXT NOT NULL, ruleset TEXT NOT NULL,
                options TEXT NOT NULL, players TEXT NOT NULL, player_count INTEGER NOT NULL,
                hands INTEGER NOT NULL, finished INTEGER NOT NULL, winners TEXT NOT NULL,
                scores TEXT NOT NULL, source TEXT NOT NULL, played_at TEXT NOT NULL,
                added_at TEXT NOT NULL, envelope BLOB NOT NULL)"""
        )
        db.execute(
            """CREATE TABLE IF NOT EXISTS record_players (
                record_id TEXT NOT NULL REFERENCES records(record_id), seat INTEGER NOT NULL,
                name TEXT NOT NULL, PRIMARY KEY (record_id, seat))"""
        )
        db.execute(
            """CREATE TABLE IF NOT EXISTS rescore_runs (
                run_id INTEGER PRIMARY KEY, options TEXT NOT NULL, game TEXT NOT NULL,
                started_at TEXT NOT NULL, finished_at TEXT, total INTEGER NOT NULL DEFAULT 0,
                scored INTEGER NOT NULL DEFAULT 0, not_replayable INTEGER NOT NULL DEFAULT 0,
                scores_changed INTEGER NOT NULL DEFAULT 0,
                winners_changed INTEGER NOT NULL DEFAULT 0,
                no_longer_finished INTEGER NOT NULL DEFAULT 0,
                now_finished INTEGER NOT NULL DEFAULT 0)"""
        )
        db.execute(
            """CREATE TABLE IF NOT EXISTS rescore_results (
                run_id INTEGER NOT NULL REFERENCES rescore_runs(run_id),
                record_id TEXT NOT NULL REFERENCES records(record_id), status TEXT NOT NULL,
                rule TEXT NOT NULL, detail TEXT NOT NULL, old_scores TEXT NOT NULL,
                new_scores TEXT, old_winners TEXT NOT NULL, new_winners TEXT,
                first_diff TEXT, old_finished INTEGER NOT NULL DEFAULT 1,
                new_finished INTEGER, PRIMARY KEY (run_id, record_id))"""
        )
        for table, cols in (
            ("records", "game"),
            ("records", "ruleset"),
            ("records", "game, ruleset"),
            ("records", "played_at"),
            ("record_players", "name"),
            ("rescore_results", "run_id, status"),
        ):
            name = f"idx_{table}_{cols.replace(', ', '_')}"
            db.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({cols})")
        # columns added after the first archives were made
        for table, col, decl in (
            ("rescore_runs", "no_longer_finished", "INTEGER NOT NULL DEFAULT 0"),
            ("rescore_runs", "now_finished", "INTEGER NOT NULL DEFAULT 0"),
            ("rescore_results", "old_finished", "INTEGER NOT NULL DEFAULT 1"),
            ("rescore_results", "new_finished", "INTEGER"),
        ):
            if col not in db[table].columns_dict:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {col} {decl}")


# --- adding ---------------------------------------------------------------------------------


@dataclass
class AddReport:
    added: int = 0
    duplicates: int = 0
    refused: list[tuple[str, int, str]] = field(default_factory=list)  # (file, index, error)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (file, error)
    # keys given: records not signed by one of them (file, index, why), kept out
    untrusted: list[tuple[str, int, str]] = field(default_factory=list)


_SUMMARY = (  # the summary columns of `records`, then the envelope itself
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
_COLUMNS = (*_SUMMARY, "envelope")
_INSERT_RECORD = (
    f"INSERT INTO records ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
)


def _summary(rid: str, rec: pb.GameRecord, env_bytes: bytes, added_at: str) -> tuple[Any, ...]:
    """A `records` row, in the order of `_COLUMNS`."""
    return (
        rid,
        rec.rules.game,
        rec.rules.ruleset,
        _json(options_from_pb(rec.rules.options)),
        _json([s.name for s in rec.seats]),
        len(rec.seats),
        len(rec.hands),
        int(rec.outcome.finished),
        _json(list(rec.outcome.winners)),
        _json(record_scores(rec)),
        rec.provenance.source,
        rec.provenance.played_at,
        added_at,
        env_bytes,
    )


@dataclass
class Checked:
    """What verifying a chunk of envelopes gave: rows to insert and records refused."""

    rows: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # by record id
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
    counted as duplicates."""
    report.refused.extend(checked.refused)
    report.untrusted.extend(checked.untrusted)
    report.duplicates += checked.duplicates
    with db.atomic():
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
        new = [row for rid, row in checked.rows.items() if rid not in existing]
        if new:
            db.conn.executemany(_INSERT_RECORD, new)
            db.conn.executemany(
                "INSERT INTO record_players (record_id, seat, name) VALUES (?, ?, ?)",
                [p for p in checked.players if p[0] not in existing],
            )
    report.added += len(new)
    report.duplicates += len(existing)


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
    added_at = _now()
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
    added_at = _now()
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


# --- reading --------------------------------------------------------------------------------


def _date_bound(flag: str, text: str, end: bool) -> str:
    """A `played_at` bound: an ISO 8601 date or date-time; a date alone as an end bound
    takes in the whole day. `ArchiveError` when it is not a date."""
    try:
        datetime.fromisoformat(text)
    except ValueError:
        raise ArchiveError(
            f"{flag}: {quoted(text)} is not a date (YYYY-MM-DD or an ISO 8601 date-time)"
        ) from None
    return text + "T~" if end and "T" not in text else text  # "~" sorts after any time


def _where(
    game: str | None,
    ruleset: str | None = None,
    player: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if since:
        clauses.append("played_at >= ?")
        params.append(_date_bound("--since", since, end=False))
    if until:
        clauses.append("played_at <= ?")
        params.append(_date_bound("--until", until, end=True))
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
    player's name, the date played (`since`/`until`: ISO 8601, compared as written; Tapis
    writes UTC; a date alone as `until` takes in the whole day), at most `limit`."""

    game: str | None = None
    ruleset: str | None = None
    player: str | None = None
    since: str | None = None
    until: str | None = None
    limit: int | None = None

    def rows(self, db: sqlite_utils.Database, columns: str) -> Iterator[tuple[Any, ...]]:
        """The selected rows of `records` (those columns), oldest added first."""
        where, params = _where(self.game, self.ruleset, self.player, self.since, self.until)
        sql = f"SELECT {columns} FROM records WHERE {where} ORDER BY rowid"
        if self.limit is not None:
            sql += " LIMIT ?"
            params.append(self.limit)
        yield from db.execute(sql, params)


def query_records(db: sqlite_utils.Database, selection: Selection) -> list[dict[str, Any]]:
    """Summaries of the selected records (JSON columns decoded, no envelope)."""
    out = []
    for values in selection.rows(db, ", ".join(_SUMMARY)):
        row = dict(zip(_SUMMARY, values, strict=True))
        for key in ("options", "players", "winners", "scores"):
            row[key] = json.loads(row[key])
        row["finished"] = bool(row["finished"])
        out.append(row)
    return out


def iter_envelopes(db: sqlite_utils.Database, selection: Selection) -> Iterator[bytes]:
    """The stored envelopes (bytes) of the selected records."""
    for (envelope_bytes,) in selection.rows(db, "envelope"):
        yield envelope_bytes


_RUN_COLUMNS = (
    "run_id, options, game, started_at, finished_at, total, scored, not_replayable, "
    "scores_changed, winners_changed, no_longer_finished, now_finished"
)


def list_runs(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    """The re-scoring runs kept in the archive, oldest first (an unfinished run was
    interrupted: its counts are those of its last summary, if any)."""
    out = []
    for row in db.query(f"SELECT {_RUN_COLUMNS} FROM rescore_runs ORDER BY run_id"):
        row["options"] = json.loads(row["options"])
        out.append(row)
    return out


def run_results(
    db: sqlite_utils.Database, run_id: int, changed: bool = False, limit: int | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run and its per-record results (JSON decoded), in archive order; with `changed`,
    only the records whose scores, winners or finish changed, or that were not replayable.
    `ArchiveError` when there is no such run."""
    run = next(
        iter(db.query(f"SELECT {_RUN_COLUMNS} FROM rescore_runs WHERE run_id = ?", [run_id])),
        None,
    )
    if run is None:
        raise ArchiveError(f"no re-scoring run {run_id} in the archive")
    run["options"] = json.loads(run["options"])
    sql = (
        "SELECT r.record_id, r.status, r.rule, r.detail, r.old_scores, r.new_scores, "
        "r.old_winners, r.new_winners, r.old_finished, r.new_finished, r.first_diff "
        "FROM rescore_results r JOIN records USING (record_id) WHERE r.run_id = ?"
    )
    if changed:
        sql += (
            " AND (r.status != 'ok' OR r.new_scores != r.old_scores "
            "OR r.new_winners != r.old_winners OR r.new_finished != r.old_finished)"
        )
    sql += " ORDER BY records.rowid"
    params: list[Any] = [run_id]
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    results = []
    for row in db.query(sql, params):
        for key in ("old_scores", "new_scores", "old_winners", "new_winners", "first_diff"):
            row[key] = None if row[key] is None else json.loads(row[key])
        for key in ("old_finished", "new_finished"):
            row[key] = None if row[key] is None else bool(row[key])
        results.append(row)
    return run, results


def find_record(db: sqlite_utils.Database, prefix: str) -> tuple[str, pb.RecordEnvelope]:
    """The record whose id is or starts with `prefix` (unique); `ArchiveError` otherwise."""
    text = prefix.strip().lower()
    if not text or any(c not in "0123456789abcdef" for c in text):
        raise ArchiveError(f"{quoted(prefix)} is not a record id (lowercase hex)")
    rows = list(
        db.execute(
            "SELECT record_id, envelope FROM records WHERE record_id >= ? AND record_id < ? "
            "ORDER BY record_id LIMIT 2",
            [text, text + "g"],
        )
    )
    if not rows:
        raise ArchiveError(f"no record {quoted(prefix)} in the archive")
    if len(rows) > 1:
        raise ArchiveError(f"record id prefix {quoted(prefix)} is ambiguous: give more digits")
    return rows[0][0], pb.RecordEnvelope.FromString(rows[0][1])


# --- re-scoring one record (records/rescore.py) -----------------------------------------


def _result_row(run_id: int, r: Rescored) -> tuple[Any, ...]:
    """A `rescore_results` row (made by the task, so the writer only inserts)."""
    return (
        run_id,
        r.record_id,
        r.status,
        r.rule,
        r.detail,
        _json(r.old_scores),
        None if r.new_scores is None else _json(r.new_scores),
        _json(r.old_winners),
        None if r.new_winners is None else _json(r.new_winners),
        None if r.first_diff is None else _json(r.first_diff),
        int(r.old_finished),
        None if r.new_finished is None else int(r.new_finished),
    )


# --- shards and executors -------------------------------------------------------------------


@dataclass(frozen=True)
class Shard:
    """A task: the pending records of one run with rowid in [lo, hi] (and the game filter)."""

    db_path: str
    run_id: int
    lo: int
    hi: int
    game: str
    changes: tuple[tuple[str, Option], ...]


def run_shard(shard: Shard) -> list[tuple[Any, ...]]:
    """Read the shard's records from the archive (read-only), re-score them, and return the
    `rescore_results` rows."""
    uri = Path(shard.db_path).as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=30)
        try:
            where, params = _where(shard.game or None)
            rows = conn.execute(
                f"SELECT record_id, envelope FROM records WHERE {where} "
                "AND rowid BETWEEN ? AND ? AND record_id NOT IN "
                "(SELECT record_id FROM rescore_results WHERE run_id = ?) ORDER BY rowid",
                [*params, shard.lo, shard.hi, shard.run_id],
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        import socket

        raise ArchiveError(
            f"{socket.gethostname()} cannot read the archive {shard.db_path}: {exc} "
            "(every worker must see the archive at this path)"
        ) from None
    changes = dict(shard.changes)
    out = []
    for rid, env_bytes in rows:
        env = pb.RecordEnvelope.FromString(env_bytes)
        rescored = rescore_record(rid, decode_record(env.record), changes)
        out.append(_result_row(shard.run_id, rescored))
    return out


# --- re-scoring the archive -----------------------------------------------------------------


def _run_for(db: sqlite_utils.Database, options: str, game: str) -> tuple[int, bool]:
    """The unfinished run with these options (to continue it), or a new one."""
    row = db.execute(
        "SELECT run_id FROM rescore_runs WHERE options = ? AND game = ? AND finished_at IS NULL "
        "ORDER BY run_id DESC LIMIT 1",
        [options, game],
    ).fetchone()
    if row is not None:
        return int(row[0]), True
    with db.atomic():
        cur = db.execute(
            "INSERT INTO rescore_runs (options, game, started_at) VALUES (?, ?, ?)",
            [options, game, _now()],
        )
    assert cur.lastrowid is not None
    return int(cur.lastrowid), False


def _store(db: sqlite_utils.Database, rows: Sequence[tuple[Any, ...]]) -> None:
    with db.atomic():
        db.conn.executemany(
            "INSERT OR REPLACE INTO rescore_results (run_id, record_id, status, rule, detail, "
            "old_scores, new_scores, old_winners, new_winners, first_diff, old_finished, "
            "new_finished) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


def _summarize(db: sqlite_utils.Database, run_id: int, finish: bool) -> dict[str, Any]:
    counts = db.execute(
        "SELECT count(*), "
        "coalesce(sum(status = 'ok'), 0), "
        "coalesce(sum(status != 'ok'), 0), "
        "coalesce(sum(status = 'ok' AND new_scores != old_scores), 0), "
        "coalesce(sum(status = 'ok' AND new_winners != old_winners), 0), "
        "coalesce(sum(status = 'ok' AND old_finished = 1 AND new_finished = 0), 0), "
        "coalesce(sum(status = 'ok' AND old_finished = 0 AND new_finished = 1), 0) "
        "FROM rescore_results WHERE run_id = ?",
        [run_id],
    ).fetchone()
    total, scored, refused, changed, winners, unfinished, finished = (int(x) for x in counts)
    with db.atomic():
        db.execute(
            "UPDATE rescore_runs SET total = ?, scored = ?, not_replayable = ?, "
            "scores_changed = ?, winners_changed = ?, no_longer_finished = ?, "
            "now_finished = ?, finished_at = ? WHERE run_id = ?",
            [
                total,
                scored,
                refused,
                changed,
                winners,
                unfinished,
                finished,
                _now() if finish else None,
                run_id,
            ],
        )
    samples = []
    for rid, old, new, ow, nw, diff in db.execute(
        "SELECT r.record_id, r.old_scores, r.new_scores, r.old_winners, r.new_winners, "
        "r.first_diff FROM rescore_results r JOIN records USING (record_id) "
        "WHERE r.run_id = ? AND r.status = 'ok' AND r.new_scores != r.old_scores "
        "ORDER BY records.rowid LIMIT 5",
        [run_id],
    ):
        samples.append(
            {
                "record_id": rid,
                "old_scores": json.loads(old),
                "new_scores": json.loads(new),
                "old_winners": json.loads(ow),
                "new_winners": json.loads(nw),
                "first_diff": json.loads(diff) if diff else None,
            }
        )
    refusals = {
        rule: int(n)
        for rule, n in db.execute(
            "SELECT rule, count(*) FROM rescore_results WHERE run_id = ? AND status != 'ok' "
            "GROUP BY rule ORDER BY count(*) DESC, rule",
            [run_id],
        )
    }
    return {
        "total": total,
        "scored": scored,
        "not_replayable": refused,
        "scores_changed": changed,
        "winners_changed": winners,
        "no_longer_finished": unfinished,
        "now_finished": finished,
        "samples": samples,
        "refusals": refusals,
    }


def _shards(rowids: Sequence[int], size: int, base: Callable[[int, int], Shard]) -> list[Shard]:
    return [
        base(rowids[i], rowids[min(i + size, len(rowids)) - 1]) for i in range(0, len(rowids), size)
    ]


def check_changes(
    db: sqlite_utils.Database, changes: Mapping[str, Option], game: str | None
) -> None:
    """`ArchiveError` when the changed options do not hold for a game and ruleset selected
    (an unknown option, a wrong value): such a run would refuse every record."""
    where, params = _where(game)
    for g, ruleset, count in db.execute(
        f"SELECT DISTINCT game, ruleset, player_count FROM records WHERE {where}", params
    ):
        try:
            make_rules(g, ruleset or None, dict(changes), count)
        except RulesError as exc:
            raise ArchiveError(f"{g} ({ruleset}): {exc}") from None


def rescore(
    db_path: str | Path,
    changes: Mapping[str, Option],
    game: str | None = None,
    executor: Executor | None = None,
    shard_size: int | None = None,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> RescoreSummary:
    """Re-score the selected records with `changes` applied to their options. Continues the
    unfinished run with the same options and selection, if any. `progress(done, total)` is
    called after each stored shard. A test may set TAPIS_RESCORE_STOP_AFTER=N to stop (as
    Ctrl-C would) after N shards are stored."""
    db = open_archive(db_path, create=False)
    try:
        game_name = ""
        if game:
            try:
                game_name = find_game(game).name
            except RulesError as exc:
                raise ArchiveError(str(exc)) from None
        check_changes(db, changes, game_name or None)
        options = _json(dict(changes))
        run_id, _ = _run_for(db, options, game_name)
        where, params = _where(game_name or None)
        total = int(db.execute(f"SELECT count(*) FROM records WHERE {where}", params).fetchone()[0])
        pending = [
            int(r[0])
            for r in db.execute(
                f"SELECT rowid FROM records WHERE {where} AND record_id NOT IN "
                "(SELECT record_id FROM rescore_results WHERE run_id = ?) ORDER BY rowid",
                [*params, run_id],
            )
        ]
        resumed = total - len(pending)
        size = shard_size or max(1, min(500, -(-len(pending) // (4 * max(1, workers)))))
        frozen = tuple(sorted(changes.items()))
        path = str(Path(db_path).resolve())
        shards = _shards(
            pending,
            size,
            lambda lo, hi: Shard(path, run_id, lo, hi, game_name, frozen),
        )
        stop_after = int(os.environ.get("TAPIS_RESCORE_STOP_AFTER", "0") or 0)
        executor = executor or make_executor("local", workers)
        done = resumed
        stored = 0
        if progress is not None:
            progress(done, total)
        results_of = executor.map_tasks(run_shard, shards)
        try:
            for _, results in results_of:
                _store(db, results)  # one transaction per shard
                done += len(results)
                stored += 1
                if progress is not None:
                    progress(done, total)
                if stop_after and stored >= stop_after:
                    raise KeyboardInterrupt
        finally:
            close = getattr(results_of, "close", None)
            if close is not None:
                close()  # stop the pool's workers now, not when collected
        counts = _summarize(db, run_id, finish=True)
        return RescoreSummary(
            run_id=run_id,
            options=dict(changes),
            game=game_name,
            resumed=resumed,
            finished=True,
            **counts,
        )
    finally:
        db.close()
