"""Re-scoring an archive: `rescore(db_path, changes, ...)` replays every selected record
under its own rules with some options changed (the deals and actions are kept;
records/rescore.py re-scores one record) and stores the new scores and winners in
`rescore_runs` / `rescore_results`. The work is split in shards of rowid ranges that the
tasks read themselves (read-only; records/archive/shards.py); an executor runs them (in this
process, on a local process pool, or on Dask) and the caller, the one writer, stores the
results as they come: the first shard's at once, then in one transaction a second at most
(`STORE_SECONDS`, `STORE_ROWS`). An interrupted run is continued by the same call; the
results of its last second, not stored, are made again.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any

import sqlite_utils

from tapis_cartes.records.archive.provenance import is_ours, local_key, mark
from tapis_cartes.records.archive.query import where_sql
from tapis_cartes.records.archive.schema import (
    ArchiveError,
    now,
    open_archive,
    record_at,
    stored,
    to_json,
    writing,
)
from tapis_cartes.records.archive.shards import NOT_DONE, Shard, run_shard
from tapis_cartes.records.archive.summary import summarize
from tapis_cartes.records.executors import Executor, make_executor
from tapis_cartes.records.rescore import RescoreSummary
from tapis_cartes.referee.engine import RulesError, find_game, make_rules
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.referee.errors import quoted

__all__ = ["Shard", "check_changes", "rescore", "run_shard", "store_shard"]


def _run_for(db: sqlite_utils.Database, options: str, game: str) -> tuple[int, bool]:
    """The unfinished run with these options that this user began (provenance.py), to
    continue it, or a new one: looked for and made under the archive's write lock, so that
    the same command run twice at once makes one run, which both continue. An unfinished run
    begun elsewhere (an archive from someone else: its results are the sender's word) is
    left as it is."""
    key = local_key()
    with writing(db):
        for run_id, started_at, made_by in db.execute(
            "SELECT run_id, started_at, made_by FROM rescore_runs WHERE options = ? AND game = ? "
            "AND finished_at IS NULL ORDER BY run_id DESC",
            [options, game],
        ):
            if is_ours(key, run_id, options, game, started_at, made_by):
                return int(run_id), True
        # A new id, above every run's and every result's: the id of a run removed (its
        # command failed) is never given again, to results it may have left or not.
        run_id = 1 + _last_run_id(db)
        started_at = now()
        db.execute(
            "INSERT INTO rescore_runs (run_id, options, game, started_at, made_by) "
            "VALUES (?, ?, ?, ?, ?)",
            [
                run_id,
                options,
                game,
                started_at,
                None if key is None else mark(key, run_id, options, game, started_at),
            ],
        )
    return run_id, False


def _last_run_id(db: sqlite_utils.Database) -> int:
    """The largest run id of the runs and the results (0 for none). `ArchiveError` when it
    is no id or the largest SQLite holds (no run can be numbered after it)."""
    last = 0
    for table in ("rescore_runs", "rescore_results"):
        (top,) = db.execute(f"SELECT max(run_id) FROM {table}").fetchone()
        if top is None:
            continue
        if not isinstance(top, int) or top >= _MAX_ID:
            raise ArchiveError(
                f"the archive's {table}.run_id holds {quoted(top, 40)}, "
                + ("not a run id" if not isinstance(top, int) else "the largest id SQLite holds")
                + ": no new re-scoring run can be numbered (was the file changed by another "
                "program?)"
            )
        last = max(last, top)
    return last


_MAX_ID = 2**63 - 1  # SQLite's largest integer


def store_shard(db: sqlite_utils.Database, rows: Sequence[tuple[Any, ...]]) -> None:
    """Store `rescore_results` rows (of one or more shards, of one run), in one transaction,
    in the order of their record ids: the order of the results' key, whose pages are then
    each written once (the shards follow the rowids, in no order of record id).
    `ArchiveError` when the run was removed meanwhile."""
    run_id = rows[0][0] if rows else None
    with writing(db):
        # The run is still there: the command that began it, failing before any result was
        # stored, removes it (`_drop_if_empty`), maybe while another command continues it.
        if (
            run_id is not None
            and not db.execute("SELECT 1 FROM rescore_runs WHERE run_id = ?", [run_id]).fetchone()
        ):
            raise ArchiveError(
                f"re-scoring run {run_id} was removed meanwhile (the command that began it "
                "failed before any result was stored): run this command again, for a new run"
            )
        db.conn.executemany(
            "INSERT OR REPLACE INTO rescore_results (run_id, record_id, status, rule, detail, "
            "old_scores, new_scores, old_winners, new_winners, first_diff, old_finished, "
            "new_finished) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            sorted(rows, key=itemgetter(1)),
        )


# The results are stored a second at most after they come (or once this many are waiting):
# a transaction per shard would write most pages of the results' key again for each shard.
STORE_SECONDS, STORE_ROWS = 1.0, 20_000

# The pages the write-ahead log of a re-scoring's connection holds before they are copied
# into the archive (SQLite's default: 1000, 4 MB). Each copy writes again the pages of the
# results' key that every store changes, and waits for the disk: for 100,000 records, the
# stores took 1.6 s (1.1 s of it working) with the default, 1.1 s (0.8 s) with this, and the
# last copy, when the archive is closed, 0.1 s. (At most about 40 MB of log, for the run.)
CHECKPOINT_PAGES = 10_000


# A shard holds at most MAX_SHARD records, and at least MIN_SHARD while that many are left.
MAX_SHARD, MIN_SHARD = 500, 50


def _shards(
    rowids: Sequence[int], size: int | None, workers: int, base: Callable[[int, int, int], Shard]
) -> list[Shard]:
    """The shards of `rowids` (`base(lo, hi, count)`: the records with rowid in [lo, hi],
    `count` of them): of `size` records each when given; else a quarter of what is
    left per worker, at most MAX_SHARD records and at least MIN_SHARD (fewer in a small
    archive: 4 shards a worker at least), so that the last shards are small and the workers
    finish together."""
    out = []
    i, n, share = 0, len(rowids), 4 * max(1, workers)
    least = min(MIN_SHARD, -(-n // share))
    while i < n:
        step = size or min(MAX_SHARD, max(least, -(-(n - i) // share)))
        last = min(i + step, n)
        out.append(base(rowids[i], rowids[last - 1], last - i))
        i += step
    return out


def _pending(
    db: sqlite_utils.Database, where: str, params: list[Any], run_id: int | None
) -> list[int]:
    """The rowids of the selected records still to re-score in run `run_id` (None: a new run,
    every selected record), ascending. Read from an index, sorted here: ordered by rowid,
    SQLite would read the records table itself, envelopes and all."""
    if run_id is None:
        sql, args = f"SELECT rowid FROM records WHERE {where}", params
    else:
        sql, args = f"SELECT rowid FROM records WHERE {where} AND {NOT_DONE}", [*params, run_id]
    return sorted(r[0] for r in db.execute(sql, args))


# The distinct rule sets of the selected records (`where`: records/archive/query.py
# `where_sql`), read from an index alone (schema.py, version 3).
RULE_SETS = "SELECT DISTINCT game, ruleset, player_count FROM records WHERE {where}"


def check_changes(
    db: sqlite_utils.Database, changes: Mapping[str, Option], game: str | None
) -> None:
    """`ArchiveError` when the changed options do not hold for a game and ruleset selected
    (an unknown option, a wrong value): such a run would refuse every record."""
    where, params = where_sql(game)
    sets = list(db.execute(RULE_SETS.format(where=where), params))
    for g, ruleset, count in sets:
        # A record of this rule set, for the messages (a rule set is that of many records).
        one = db.execute(
            "SELECT record_id FROM records WHERE game = ? AND ruleset = ? AND player_count = ? "
            "LIMIT 1",
            [g, ruleset, count],
        ).fetchone()
        at = record_at(one[0]) if one else "a record"
        stored(g, str, "records.game", at)
        stored(ruleset, str, "records.ruleset", at)
        stored(count, int, "records.player_count", at)
        try:
            make_rules(g, ruleset or None, dict(changes), count)
        except RulesError as exc:
            try:
                make_rules(g, ruleset or None, {}, count)
            except RulesError as own:  # not the changes: the summary holds no rule set
                raise ArchiveError(
                    f"the archive's records.game, ruleset and player_count of {at} "
                    f"({g!r}, {ruleset!r}, {count}) are no rule set of Tapis: {own} (was the "
                    "file changed by another program?)"
                ) from None
            if len(sets) == 1:  # the changes do not hold for the one rule set chosen
                raise ArchiveError(f"{g} ({ruleset}): {exc}") from None
            hint = (
                "--game chooses the records of one game"
                if game is None
                else "an option of one ruleset cannot be changed where records of another "
                "are chosen too"
            )
            raise ArchiveError(
                f"{g} ({ruleset}): {exc}. The archive holds records of this rule set: {hint}"
            ) from None


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
    called after each store."""
    db = open_archive(db_path, create=False, writes=True)
    db.execute(f"PRAGMA wal_autocheckpoint = {CHECKPOINT_PAGES}")  # (this connection's)
    new_run = None  # the run made by this call, until it is finished
    try:
        game_name = ""
        if game:
            try:
                game_name = find_game(game).name
            except RulesError as exc:
                raise ArchiveError(str(exc)) from None
        check_changes(db, changes, game_name or None)
        options = to_json(dict(changes))
        run_id, continued = _run_for(db, options, game_name)
        new_run = None if continued else run_id
        where, params = where_sql(game_name or None)
        total = int(db.execute(f"SELECT count(*) FROM records WHERE {where}", params).fetchone()[0])
        pending = _pending(db, where, params, run_id if continued else None)
        resumed = total - len(pending)
        frozen = tuple(sorted(changes.items()))
        path = str(Path(db_path).resolve())
        shards = _shards(
            pending,
            shard_size,
            workers,
            lambda lo, hi, count: Shard(path, run_id, lo, hi, game_name, frozen, count),
        )
        executor = executor or make_executor("local", workers)
        done = resumed
        if progress is not None:
            progress(done, total)
        results_of = executor.map_tasks(run_shard, shards)
        waiting: list[tuple[Any, ...]] = []
        stored_at = -STORE_SECONDS  # the first shard's results are stored at once
        try:
            for _, results in results_of:
                waiting += results
                if len(waiting) >= STORE_ROWS or time.monotonic() - stored_at >= STORE_SECONDS:
                    store_shard(db, waiting)
                    stored_at = time.monotonic()
                    done += len(waiting)
                    waiting = []
                    if progress is not None:
                        progress(done, total)
            if waiting:
                store_shard(db, waiting)
                done += len(waiting)
                if progress is not None:
                    progress(done, total)
        finally:
            close = getattr(results_of, "close", None)
            if close is not None:
                close()  # stop the pool's workers now, not when collected
        _check_complete(db, run_id, total, path)
        counts = summarize(db, run_id, finish=True)
        return RescoreSummary(
            run_id=run_id,
            options=dict(changes),
            game=game_name,
            resumed=resumed,
            finished=True,
            **counts,
        )
    except Exception:  # not an interruption (KeyboardInterrupt): that run is continued
        if new_run is not None:
            _drop_if_empty(db, new_run)
        raise
    finally:
        db.close()


def _check_complete(db: sqlite_utils.Database, run_id: int, total: int, path: str) -> None:
    """`ArchiveError` when the run holds fewer results than the records selected when it
    began (`total`): another command continuing it is not done, or a worker read a file that
    lacks some (another copy of the archive at the same path, on another machine). The run
    is then not finished."""
    (done,) = db.execute(
        "SELECT count(*) FROM rescore_results WHERE run_id = ?", [run_id]
    ).fetchone()
    if done < total:
        raise ArchiveError(
            f"{path}: re-scoring run {run_id} holds results for {done:,} of the {total:,} "
            "records selected, and is left unfinished: another command continuing it may "
            "still be storing the others (run this command again once it is done), or a "
            "worker read a file that lacks them (each worker of a Dask cluster must see this "
            "archive itself at this path, not a copy of it)"
        )


def _drop_if_empty(db: sqlite_utils.Database, run_id: int) -> None:
    """Remove a new run that failed before any of its results was stored: a failed command
    leaves no run behind. (One with results is kept: the same call continues it.)"""
    # Under the write lock: another command continuing the run stores its results under it
    # too, and finds the run gone (`store_shard`) or keeps it.
    with contextlib.suppress(sqlite3.Error), writing(db):  # a damaged archive: its error stands
        try:
            if db.execute("SELECT 1 FROM rescore_results WHERE run_id = ?", [run_id]).fetchone():
                return
        except sqlite3.Error:
            pass  # no results can be read (the table dropped): none to keep
        db.execute("DELETE FROM rescore_runs WHERE run_id = ?", [run_id])
