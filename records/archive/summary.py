"""The re-scoring runs of an archive, counted: the summary SQL of a run (what
`archive rescore` reports and `rescore_runs` keeps), the runs kept and one run's results."""

from __future__ import annotations

from typing import Any

import sqlite_utils

from tapis_cartes.records.archive.provenance import is_ours, local_key
from tapis_cartes.records.archive.schema import (
    FIRST_DIFF,
    NAMES,
    OPTIONS,
    SCORES,
    SEATS,
    ArchiveError,
    Shape,
    now,
    record_at,
    stored,
)
from tapis_cartes.referee.engine import RulesError, find_game

__all__ = ["list_runs", "run_results", "summarize"]

# What each column of a run, and of a record's result, holds (schema.py `stored`), under the
# names the queries below give them; those that may be NULL.
_RUN_KINDS: dict[str, type | Shape] = {
    "run_id": int,
    "options": OPTIONS,
    "game": str,
    "started_at": str,
    "finished_at": str,
    "total": int,
    "scored": int,
    "not_replayable": int,
    "scores_changed": int,
    "winners_changed": int,
    "no_longer_finished": int,
    "now_finished": int,
}
# The statuses of a result (records/rescore.py `Rescored.status`).
STATUSES = ("ok", "not-replayable")
_RESULT_KINDS: dict[str, type | Shape | tuple[str, ...]] = {
    "record_id": str,
    "status": STATUSES,
    "rule": str,
    "detail": str,
    "old_scores": SCORES,
    "new_scores": SCORES,
    "old_winners": SEATS,
    "new_winners": SEATS,
    "old_finished": int,
    "new_finished": int,
    "first_diff": FIRST_DIFF,
    "game": str,
    "names": NAMES,
}
_NULLABLE = {"finished_at", "new_scores", "new_winners", "new_finished", "first_diff"}
_TABLE_OF = {"game": "records.game", "names": "records.players"}  # the others: the run's


def _checked(row: dict[str, Any], table: str, at: str) -> dict[str, Any]:
    """`row` (of `table`: "rescore_runs" or "rescore_results"), each value checked and JSON
    decoded; a result's scores and score lines also in the units of its game (as a run's text
    reads them)."""
    kinds = _RUN_KINDS if table == "rescore_runs" else _RESULT_KINDS
    for key, kind in kinds.items():
        if key in row:
            column = _TABLE_OF.get(key, f"{table}.{key}")
            row[key] = stored(row[key], kind, column, at, nullable=key in _NULLABLE)
    if table == "rescore_results":
        try:
            units = find_game(row["game"]).units
        except RulesError:
            raise ArchiveError(
                f"the archive's records.game of {at} is {row['game']!r}, not a game this Tapis "
                "knows (was the file changed by another program?)"
            ) from None
        diff = row["first_diff"]
        widths = {
            "old_scores": row["old_scores"] or [],
            "new_scores": row["new_scores"] or [],
            "first_diff": [diff[k][2] for k in ("old", "new") if diff[k]] if diff else [],
        }
        for key, scores in widths.items():
            if any(len(s) != len(units) for s in scores):
                raise ArchiveError(
                    f"the archive's {table}.{key} of {at} is not in the units of {row['game']} "
                    f"({', '.join(units)}): was the file changed by another program?"
                )
    return row


def summarize(db: sqlite_utils.Database, run_id: int, finish: bool) -> dict[str, Any]:
    """Count a run's results into `rescore_runs` (with `finish`, the run is marked finished)
    and return the counts, up to 5 changed records and the refusals by rule. `ArchiveError`
    for a result of a status Tapis does not store (it would count as one or the other)."""
    for rid, status in db.execute(
        "SELECT record_id, status FROM rescore_results WHERE run_id = ? "
        "AND status NOT IN (?, ?) LIMIT 1",
        [run_id, *STATUSES],
    ):
        stored(status, STATUSES, "rescore_results.status", f"{record_at(rid)} (run {run_id})")
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
    # Everything read before the run is marked finished: a read that fails (a damaged
    # archive) leaves it unfinished.
    samples = []
    for row in db.query(
        "SELECT r.record_id, r.old_scores, r.new_scores, r.old_winners, r.new_winners, "
        "r.first_diff, records.game, records.players AS names "
        "FROM rescore_results r JOIN records USING (record_id) "
        "WHERE r.run_id = ? AND r.status = 'ok' AND r.new_scores != r.old_scores "
        "ORDER BY records.rowid LIMIT 5",
        [run_id],
    ):
        samples.append(
            _checked(row, "rescore_results", f"{record_at(row['record_id'])} (run {run_id})")
        )
    refusals = {
        rule: int(n)
        for rule, n in db.execute(
            "SELECT rule, count(*) FROM rescore_results WHERE run_id = ? AND status != 'ok' "
            "GROUP BY rule ORDER BY count(*) DESC, rule",
            [run_id],
        )
    }
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
                now() if finish else None,
                run_id,
            ],
        )
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


_RUN_COLUMNS = (
    "run_id, options, game, started_at, finished_at, total, scored, not_replayable, "
    "scores_changed, winners_changed, no_longer_finished, now_finished"
)


def list_runs(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    """The re-scoring runs kept in the archive, oldest first (`_run`)."""
    key = local_key(make=False)
    return [
        _run(db, row, key)
        for row in db.query(f"SELECT {_RUN_COLUMNS}, made_by FROM rescore_runs ORDER BY run_id")
    ]


def _run(db: sqlite_utils.Database, row: dict[str, Any], key: bytes | None) -> dict[str, Any]:
    """A run's row, checked; `here`: whether this user began it (provenance.py: else its
    results are only what the file says, and an unfinished one is not continued). An
    unfinished run was interrupted: its counts are those of its last summary, if any, and
    `stored` says how many of its results are stored."""
    made_by = row.pop("made_by")
    here = is_ours(key, row["run_id"], row["options"], row["game"], row["started_at"], made_by)
    run = _checked(row, "rescore_runs", f"run {row['run_id']}")
    run["here"] = here
    if run["finished_at"] is None:  # its counts are not made yet: the results stored
        ((stored,),) = db.execute(
            "SELECT count(*) FROM rescore_results WHERE run_id = ?", [run["run_id"]]
        ).fetchall()
        run["stored"] = int(stored)
    return run


def run_results(
    db: sqlite_utils.Database, run_id: int, changed: bool = False, limit: int | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run and its per-record results (JSON decoded), in archive order; with `changed`,
    only the records whose scores, winners or finish changed, or that were not replayable.
    `ArchiveError` when there is no such run."""
    row = next(
        iter(
            db.query(f"SELECT {_RUN_COLUMNS}, made_by FROM rescore_runs WHERE run_id = ?", [run_id])
        ),
        None,
    )
    if row is None:
        raise ArchiveError(f"no re-scoring run {run_id} in the archive")
    run = _run(db, row, local_key(make=False))
    sql = (
        "SELECT r.record_id, r.status, r.rule, r.detail, r.old_scores, r.new_scores, "
        "r.old_winners, r.new_winners, r.old_finished, r.new_finished, r.first_diff, "
        "records.game, records.players AS names "
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
        row = _checked(row, "rescore_results", f"{record_at(row['record_id'])} (run {run_id})")
        for key in ("old_finished", "new_finished"):
            row[key] = None if row[key] is None else bool(row[key])
        results.append(row)
    return run, results
