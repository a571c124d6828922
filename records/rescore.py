"""The report of a re-scoring: what a record's scores, winners and finish become under other
options (the same deals and actions), and its text for a person. One report for
`tapis record score --set`, `tapis archive rescore` and `tapis archive runs`; the commands
print it.

- `rescore_record(rid, rec, changes)`: the report of one record (`Rescored`), never raising
  for a record that does not replay (`status` "not-replayable", with the rule that refused);
  `rescored(rid, rec, match)` the report of a replay already made (`tapis_cartes.records.score.
  replay_changed`).
- `changes_text`, `result_text`: one record's report, as `record score --set` and `archive
  runs` print it; `summary_text`, `runs_text`: a whole run (`RescoreSummary`, kept in the
  archive's `rescore_runs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tapis_cartes.records.codec import decode_record, score_getter, unit_fields
from tapis_cartes.records.score import (
    NotReplayable,
    counted,
    diff_text,
    first_diff,
    replay_changed,
    scores_text,
    seat_name,
)
from tapis_cartes.referee.engine import Match, RecordError, RulesError, find_game
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.referee.engine.wire import HandFields, hands_hold
from tapis_cartes.v1 import record_pb2 as pb

__all__ = [
    "RescoreSummary",
    "Rescored",
    "changes_text",
    "record_scores",
    "rescore_record",
    "rescored",
    "result_text",
    "runs_text",
    "summary_text",
]


@dataclass
class Rescored:
    """One record re-scored: as recorded (`old_*`) and under the changed options (`new_*`,
    None when not replayable). Not frozen: compiled, a frozen dataclass sets each field
    through `object.__setattr__` (15,000 instructions a record, a tenth of a re-score's own
    work besides the replay); nothing changes a report once made."""

    record_id: str
    status: str  # "ok" or "not-replayable"
    rule: str  # the rule that refused the replay (not-replayable)
    detail: str
    old_scores: list[list[int]]
    new_scores: list[list[int]] | None
    old_winners: list[int]
    new_winners: list[int] | None
    first_diff: dict[str, Any] | None  # the first score line that differs
    old_finished: bool = True
    new_finished: bool | None = None


def record_scores(rec: pb.GameRecord, units: tuple[str, ...] | None = None) -> list[list[int]]:
    """The final scores a record says, one list of the game's units (`units`, if known) per
    seat; none when the record names no game Tapis knows (an archive's record changed in the
    file: the report still says it is not replayable, never raises)."""
    if units is None:
        try:
            units = find_game(rec.rules.game).units
        except RulesError:
            return []
    read = score_getter(units)
    return [list(read(s)) for s in rec.outcome.scores[:]]  # a slice: a list in one call of C


def rescored(
    rid: str,
    rec: pb.GameRecord,
    match: Match,
    record_bytes: bytes = b"",
    hands: list[HandFields] | None = None,
) -> Rescored:
    """The report of `rec` against `match`, its replay under changed options. With the
    record's bytes and its hands read from them (`decode_apart`: `rec` then may have no
    hands), the hands whose score lines and scores are byte for byte the replay's are not
    decoded (wire.py `hands_hold`); the record is decoded whole only from the first that is not.
    `RecordError` when it then does not decode."""
    units = find_game(match.rules.game).units  # (the record's game: a protobuf look-up less)
    results = match.results
    same = 0
    if hands is not None:
        same = hands_hold(record_bytes, hands, results, unit_fields(units), False)
    if hands is not None and same == len(hands) == len(results):
        diff = None
    else:
        whole = decode_record(record_bytes) if hands is not None else rec
        diff = first_diff(units, whole, [r.lines for r in results], same)
    outcome = rec.outcome  # (each look-up of a protobuf field costs a call of the library)
    return Rescored(
        rid,
        "ok",
        "",
        "",
        record_scores(rec, units),
        [list(s) for s in match.scores],
        outcome.winners[:],  # a slice: a list in one call of C
        list(match.winners),
        diff,
        outcome.finished,
        match.finished,
    )


def rescore_record(
    rid: str,
    rec: pb.GameRecord,
    changes: Mapping[str, Option],
    hands: list[HandFields] | None = None,
    record_bytes: bytes = b"",
) -> Rescored:
    """Replay `rec` with its options changed by `changes`, hand by hand with the recorded deals
    and actions, stopping when the match ends; never raises for a record that does not fit.
    `hands` and `record_bytes`: its hands' fields as `decode_apart` read them from its bytes
    (`rec` then decoded without its hands), and those bytes."""
    try:
        match = replay_changed(rec, changes, hands, record_bytes)
        return rescored(rid, rec, match, record_bytes, hands)
    except (NotReplayable, RecordError) as exc:
        rule, detail = (
            (exc.rule, exc.detail)
            if isinstance(exc, NotReplayable)
            else (f"record:{exc.code}", str(exc))
        )
        return Rescored(
            rid,
            "not-replayable",
            rule,
            detail,
            record_scores(rec),
            None,
            list(rec.outcome.winners),
            None,
            None,
            rec.outcome.finished,
        )


def _winners(seats: Sequence[int] | None, names: Sequence[str]) -> str:
    return ", ".join(seat_name(names, w) for w in seats or ()) or "none"


def changes_text(r: Rescored, names: Sequence[str], units: tuple[str, ...]) -> str:
    """What the changed options change in one record, seats by name (`record score`)."""
    same = r.old_scores == r.new_scores
    parts = ["same scores"]
    if not same:
        old, new = (scores_text(s or [], names, units) for s in (r.old_scores, r.new_scores))
        parts = [f"scores {old} -> {new}"]
    if r.old_winners != r.new_winners:
        parts.append(
            f"winners {_winners(r.old_winners, names)} -> {_winners(r.new_winners, names)}"
        )
    if r.old_finished != r.new_finished:
        parts.append("no longer finished" if r.old_finished else "now finished")
    if r.first_diff is None and len(parts) == 1 and same:
        return "compared with the record: nothing changes"
    parts.append("first differing line: " + diff_text(r.first_diff, names, units))
    return "compared with the record: " + "; ".join(parts)


def result_text(r: Rescored, names: Sequence[str], units: tuple[str, ...]) -> str:
    """One record of a run, on one line, seats by name (`archive runs RUN_ID`)."""
    head = f"{r.record_id[:12]}: "
    if r.status != "ok":
        return head + f"not replayable [{r.rule}] {r.detail}"
    old, new = (scores_text(s or [], names, units) for s in (r.old_scores, r.new_scores))
    text = head + (f"{old} -> {new}" if old != new else f"same scores ({old})")
    if r.new_winners != r.old_winners:
        text += f"; winners {_winners(r.old_winners, names)} -> {_winners(r.new_winners, names)}"
    if r.new_finished != r.old_finished:
        text += "; no longer finished" if r.old_finished else "; now finished"
    return text + f"; first differing line: {diff_text(r.first_diff, names, units)}"


@dataclass
class RescoreSummary:
    """A re-scoring run of an archive, counted."""

    run_id: int
    options: dict[str, Option]
    game: str
    total: int
    scored: int
    not_replayable: int
    scores_changed: int
    winners_changed: int
    no_longer_finished: int  # finished as recorded, unfinished under the new options
    now_finished: int  # unfinished as recorded, finished under the new options
    resumed: int  # records already done by an earlier, interrupted call
    finished: bool
    samples: list[dict[str, Any]]  # up to 5 changed records and their first differing line
    refusals: dict[str, int]  # not replayable, by rule

    def as_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "options": self.options,
            "game": self.game,
            "total": self.total,
            "scored": self.scored,
            "not_replayable": self.not_replayable,
            "scores_changed": self.scores_changed,
            "winners_changed": self.winners_changed,
            "no_longer_finished": self.no_longer_finished,
            "now_finished": self.now_finished,
            "resumed": self.resumed,
            "finished": self.finished,
            "samples": self.samples,
            "refusals": self.refusals,
        }


def _opts(options: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(options.items()))


def summary_text(s: RescoreSummary, elapsed: float) -> str:
    """A run's summary for a person (`archive rescore`), with its rate over `elapsed`."""
    opts = _opts(s.options)
    rate = (s.total - s.resumed) / elapsed if elapsed > 0 else 0.0
    lines = [
        f"run {s.run_id} ({opts}{', game ' + s.game if s.game else ''}): "
        + counted(s.total, "record"),
        f"  scored:          {s.scored:,}",
        f"  not replayable:  {s.not_replayable:,}"
        + (
            " (" + ", ".join(f"{rule or '?'}: {n}" for rule, n in s.refusals.items()) + ")"
            if s.refusals
            else ""
        ),
        f"  scores changed:  {s.scores_changed:,}",
        f"  winners changed: {s.winners_changed:,}",
    ]
    if s.no_longer_finished:
        lines.append(f"  no longer finished: {s.no_longer_finished} (the match now goes on)")
    if s.now_finished:
        lines.append(f"  now finished:       {s.now_finished} (the match now ends sooner)")
    if s.resumed:
        lines.append(f"  continued an interrupted run: {counted(s.resumed, 'record')} done before")
    done = counted(s.total - s.resumed, "record")
    lines.append(f"  {done} in {elapsed:.2f} s ({rate:,.0f} records/s)")
    for sample in s.samples:
        names, units = sample["names"], find_game(sample["game"]).units
        old, new = (scores_text(sample[k], names, units) for k in ("old_scores", "new_scores"))
        lines.append(
            f"  {sample['record_id'][:12]}: {old} -> {new}; "
            f"first differing line: {diff_text(sample['first_diff'], names, units)}"
        )
    return "\n".join(lines)


def runs_text(runs: Sequence[Mapping[str, Any]]) -> str:
    """The runs kept in an archive, one line each (`archive runs`)."""
    lines = []
    for r in runs:
        game = f", game {r['game']}" if r["game"] else ""
        # (A run not marked as this user's: archive/provenance.py.)
        elsewhere = "not marked as yours (begun elsewhere, or by an older Tapis)"
        if not r["finished_at"]:
            stored = counted(r.get("stored", 0), "result")
            lines.append(
                f"run {r['run_id']} ({_opts(r['options'])}{game}): started {r['started_at']}, "
                f"unfinished (interrupted, or under way); {stored} stored "
                + (
                    "(the same command continues it)"
                    if r.get("here", True)
                    else f"({elsewhere}: the same command begins a new run)"
                )
            )
            continue
        state = f"finished {r['finished_at']}"
        lines.append(
            f"run {r['run_id']} ({_opts(r['options'])}{game}): started {r['started_at']}, "
            f"{state}; {counted(r['total'], 'record')}, {r['scored']:,} scored, "
            f"{r['not_replayable']:,} not replayable, {r['scores_changed']:,} scores changed, "
            f"{r['winners_changed']:,} winners changed, {r['no_longer_finished']:,} no longer "
            f"finished, {r['now_finished']:,} now finished"
            + ("" if r.get("here", True) else f"; {elsewhere}")
        )
    return "\n".join(lines) or "no re-scoring runs"
