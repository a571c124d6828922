"""The re-scoring runs of an archive, counted: the summary SQL of a run (what
`archive rescore` reports and `rescore_runs` keeps), the runs kept and one run's results."""

from __future__ import annotations

from typing import Any

import sqlite_utils

from tapis_cartes.records.archive.schema import ArchiveError, from_json, now

__all__ = ["list_runs", "run_results", "summarize"]


def summarize(db: sqlite_utils.Database, run_id: int, finish: bool) -> dict[str, Any]:
    """Count a run's results into `rescore_runs` (with `finish`, the run is marked finished)
    and return the counts, up to 5 changed records and the refusals by rule."""
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
                now() if finish else None,
                run_id,
            ],
        )
    samples = []
    for rid, old, new, ow, nw, diff, game, players in db.execute(
        "SELECT r.record_id, r.old_scores, r.new_scores, r.old_winners, r.new_winners, "
        "r.first_diff, records.game, records.players "
        "FROM rescore_results r JOIN records USING (record_id) "
        "WHERE r.run_id = ? AND r.status = 'ok' AND r.new_scores != r.old_scores "
        "ORDER BY records.rowid LIMIT 5",
        [run_id],
    ):
        at = f"record {rid} (run {run_id})"
        samples.append(
            {
                "record_id": rid,
                "old_scores": from_json(old, "rescore_results.old_scores", at),
                "new_scores": from_json(new, "rescore_results.new_scores", at),
                "old_winners": from_json(ow, "rescore_results.old_winners", at),
                "new_winners": from_json(nw, "rescore_results.new_winners", at),
                "first_diff": from_json(diff, "rescore_results.first_diff", at) if diff else None,
                "game": game,
                "names": from_json(players, "records.players", at),
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


_RUN_COLUMNS = (
    "run_id, options, game, started_at, finished_at, total, scored, not_replayable, "
    "scores_changed, winners_changed, no_longer_finished, now_finished"
)


def list_runs(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    """The re-scoring runs kept in the archive, oldest first (an unfinished run was
    interrupted: its counts are those of its last summary, if any)."""
    out = []
    for row in db.query(f"SELECT {_RUN_COLUMNS} FROM rescore_runs ORDER BY run_id"):
        row["options"] = from_json(row["options"], "rescore_runs.options", f"run {row['run_id']}")
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
    run["options"] = from_json(run["options"], "rescore_runs.options", f"run {run_id}")
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
        decoded = ("old_scores", "new_scores", "old_winners", "new_winners", "first_diff", "names")
        at = f"record {row['record_id']} (run {run_id})"
        for key in decoded:
            column = "records.players" if key == "names" else f"rescore_results.{key}"
            row[key] = None if row[key] is None else from_json(row[key], column, at)
        for key in ("old_finished", "new_finished"):
            row[key] = None if row[key] is None else bool(row[key])
        results.append(row)
    return run, results
