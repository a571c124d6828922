"""Re-scoring an archive: `rescore(db_path, changes, ...)` replays every selected record
under its own rules with some options changed (the deals and actions are kept;
records/rescore.py re-scores one record) and stores the new scores and winners in
`rescore_runs` / `rescore_results`. The work is split in shards of rowid ranges that the
tasks read themselves (read-only); an executor runs them (in this process, on a local
process pool, or on Dask) and the caller, the one writer, stores each shard's results in its
own transaction. An interrupted run is continued by the same call.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlite_utils

from tapis_cartes.records.archive.query import where_sql
from tapis_cartes.records.archive.schema import ArchiveError, now, open_archive, to_json
from tapis_cartes.records.archive.summary import summarize
from tapis_cartes.records.codec import decode_record
from tapis_cartes.records.executors import Executor, make_executor
from tapis_cartes.records.rescore import Rescored, RescoreSummary, rescore_record
from tapis_cartes.referee.engine import RulesError, find_game, make_rules
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.v1 import record_pb2 as pb

__all__ = ["Shard", "check_changes", "rescore", "run_shard", "store_shard"]


def _result_row(run_id: int, r: Rescored) -> tuple[Any, ...]:
    """A `rescore_results` row (made by the task, so the writer only inserts)."""
    return (
        run_id,
        r.record_id,
        r.status,
        r.rule,
        r.detail,
        to_json(r.old_scores),
        None if r.new_scores is None else to_json(r.new_scores),
        to_json(r.old_winners),
        None if r.new_winners is None else to_json(r.new_winners),
        None if r.first_diff is None else to_json(r.first_diff),
        int(r.old_finished),
        None if r.new_finished is None else int(r.new_finished),
    )


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
            where, params = where_sql(shard.game or None)
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
            [options, game, now()],
        )
    assert cur.lastrowid is not None
    return int(cur.lastrowid), False


def store_shard(db: sqlite_utils.Database, rows: Sequence[tuple[Any, ...]]) -> None:
    """Store a shard's `rescore_results` rows, in one transaction."""
    with db.atomic():
        db.conn.executemany(
            "INSERT OR REPLACE INTO rescore_results (run_id, record_id, status, rule, detail, "
            "old_scores, new_scores, old_winners, new_winners, first_diff, old_finished, "
            "new_finished) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


def _shards(rowids: Sequence[int], size: int, base: Callable[[int, int], Shard]) -> list[Shard]:
    return [
        base(rowids[i], rowids[min(i + size, len(rowids)) - 1]) for i in range(0, len(rowids), size)
    ]


def check_changes(
    db: sqlite_utils.Database, changes: Mapping[str, Option], game: str | None
) -> None:
    """`ArchiveError` when the changed options do not hold for a game and ruleset selected
    (an unknown option, a wrong value): such a run would refuse every record."""
    where, params = where_sql(game)
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
    called after each stored shard."""
    db = open_archive(db_path, create=False)
    try:
        game_name = ""
        if game:
            try:
                game_name = find_game(game).name
            except RulesError as exc:
                raise ArchiveError(str(exc)) from None
        check_changes(db, changes, game_name or None)
        options = to_json(dict(changes))
        run_id, _ = _run_for(db, options, game_name)
        where, params = where_sql(game_name or None)
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
        executor = executor or make_executor("local", workers)
        done = resumed
        if progress is not None:
            progress(done, total)
        results_of = executor.map_tasks(run_shard, shards)
        try:
            for _, results in results_of:
                store_shard(db, results)  # one transaction per shard
                done += len(results)
                if progress is not None:
                    progress(done, total)
        finally:
            close = getattr(results_of, "close", None)
            if close is not None:
                close()  # stop the pool's workers now, not when collected
        counts = summarize(db, run_id, finish=True)
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
