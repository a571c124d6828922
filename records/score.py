"""Scores of a record: the JSON of TRANSCRIPT.md and a score sheet a person reads."""

from __future__ import annotations

from typing import Any

from records.codec import score_from_pb
from referee.engine import find_game
from tapis.v1 import record_pb2 as pb

__all__ = ["score_json", "score_sheet"]


def _units(rec: pb.GameRecord) -> tuple[str, ...]:
    return find_game(rec.rules.game).units


def _score_obj(units: tuple[str, ...], score: pb.Score) -> dict[str, int]:
    return dict(zip(units, score_from_pb(units, score), strict=True))


def score_json(rec: pb.GameRecord) -> dict[str, Any]:
    """The score document of TRANSCRIPT.md ("Scores"), key for key."""
    units = _units(rec)
    hands = []
    for hand in rec.hands:
        if not hand.scores_after:
            continue  # a hand still in progress has no scores yet
        hands.append(
            {
                "number": hand.number,
                "dealer": hand.dealer,
                "lines": [
                    {"seat": line.seat, "kind": line.kind}
                    | _score_obj(units, line.delta)
                    | {"rule": line.rule}
                    for line in hand.lines
                ],
                "scores_after": [_score_obj(units, s) for s in hand.scores_after],
            }
        )
    return {
        "game": rec.rules.game,
        "ruleset": rec.rules.ruleset,
        "hands": hands,
        "scores": [_score_obj(units, s) for s in rec.outcome.scores],
        "finished": rec.outcome.finished,
        "winners": list(rec.outcome.winners),
    }


# How a score sheet abbreviates a unit: fiches (impériales) F, jetons J (RULES.md 0.1).
_ABBREVIATION = {"imperiales": "F", "jetons": "J", "points": ""}


def _fmt(units: tuple[str, ...], values: tuple[int, ...]) -> str:
    if len(units) == 1:
        return str(values[0])
    return " ".join(f"{v}{_ABBREVIATION[u]}" for u, v in zip(units, values, strict=True))


def _fmt_delta(units: tuple[str, ...], values: tuple[int, ...]) -> str:
    if not any(values):
        return "."
    if len(units) == 1:
        return f"{values[0]:+d}"
    parts = (f"{v:+d}{_ABBREVIATION[u]}" for u, v in zip(units, values, strict=True) if v)
    return " ".join(parts)


def score_sheet(rec: pb.GameRecord) -> str:
    """A table: one row per hand with each seat's change and running total, then the result."""
    units = _units(rec)
    names = [s.name for s in rec.seats] or [f"seat {i}" for i in range(rec.rules.players)]
    start = [score_from_pb(units, s) for s in rec.start.scores] or [
        tuple(0 for _ in units) for _ in names
    ]
    rows: list[list[str]] = []
    if any(any(s) for s in start):
        rows.append(["start", ""] + [_fmt(units, s) for s in start])
    for hand in rec.hands:
        if not hand.scores_after:
            blank = [""] * (len(names) - 1)
            rows.append([str(hand.number), names[hand.dealer], "(in progress)", *blank])
            continue
        deltas = [tuple(0 for _ in units) for _ in names]
        for line in hand.lines:
            d = score_from_pb(units, line.delta)
            deltas[line.seat] = tuple(a + b for a, b in zip(deltas[line.seat], d, strict=True))
        after = [score_from_pb(units, s) for s in hand.scores_after]
        rows.append(
            [str(hand.number), names[hand.dealer]]
            + [
                f"{_fmt_delta(units, d)} = {_fmt(units, a)}"
                for d, a in zip(deltas, after, strict=True)
            ]
        )
    header = ["hand", "dealer", *names]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out = []
    title = f"{find_game(rec.rules.game).title}"
    if rec.rules.ruleset != "standard":
        title += f" ({rec.rules.ruleset})"
    out.append(f"{title}: {', '.join(names)}")
    out.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    out.append("  ".join("-" * w for w in widths))
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    totals = [score_from_pb(units, s) for s in rec.outcome.scores]
    out.append("  ".join("-" * w for w in widths))
    out.append(
        "  ".join(
            c.ljust(w)
            for c, w in zip(["total", "", *(_fmt(units, t) for t in totals)], widths, strict=True)
        ).rstrip()
    )
    out.append(result_line(rec))
    return "\n".join(out)


def result_line(rec: pb.GameRecord) -> str:
    names = [s.name for s in rec.seats]
    out = rec.outcome
    if not out.finished:
        return "The match is not finished."
    winners = ", ".join(names[w] if w < len(names) else f"seat {w}" for w in out.winners)
    verb = "share the victory" if len(out.winners) > 1 else "wins"
    reason = f" ({out.reason})" if out.reason else ""
    return f"{winners} {verb}{reason}."
