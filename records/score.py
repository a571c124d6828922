"""Scores of a record: the JSON of TRANSCRIPT.md and a score sheet a person reads; and the
record re-scored under other options (`replay_changed`: the same deals and actions, the
options changed), with the first score line that differs."""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tapis_cartes.records.codec import score_from_pb
from tapis_cartes.records.replay import BaseVisitor, replay
from tapis_cartes.referee.engine import (
    IllegalAction,
    InvalidAction,
    Match,
    RecordError,
    RulesError,
    ScoreLine,
    TapisError,
    find_game,
)
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.referee.engine.wire import HandFields
from tapis_cartes.referee.errors import NotReplayable, terminal_text
from tapis_cartes.v1 import record_pb2 as pb

__all__ = [
    "NotReplayable",
    "counted",
    "diff_text",
    "first_diff",
    "named_seats",
    "replay_changed",
    "score_json",
    "score_sheet",
    "scores_text",
    "seat_name",
    "text_table",
]


def replay_changed(
    rec: pb.GameRecord,
    changes: Mapping[str, Option],
    hands: list[HandFields] | None = None,
    record_bytes: bytes = b"",
) -> Match:
    """The match of `rec` replayed with its options changed by `changes`: hand by hand with
    the recorded deals and actions, stopping where the match now ends (or at the record's
    end, the match then unfinished); a hand that now ends sooner (mid-hand: a target reached
    by a declaration, a contract decided) drops its remaining actions. `NotReplayable` when
    the new rules refuse it, or when a field of the record does not fit its own game (rule
    `record:<code>`). `hands`: its hands' fields, when read from its bytes (`record_bytes`,
    by `decode_apart`)."""
    return replay(rec, _ChangedVisitor(), changes, hands, record_bytes)


class _ChangedVisitor(BaseVisitor[Match]):
    """The replay under changed options: the match; a fault is `NotReplayable`, with the rule
    that refused (the engine's), the option that does not hold, or the record's fault."""

    # Every field the engine reads is checked before the replay (records/strict.py: nothing
    # out of its game's range reaches the engine, whoever changed the record). The fields it
    # never reads, which `check_fields` leaves to verify's rebuild (the score lines' and
    # scores' units, the scores after each hand, the outcome), are not checked again here:
    # the report quotes them as the record has them (`first_diff`, the old scores and
    # winners); verifying them is `tapis record verify`'s job, and `archive add` did.
    engine_fields_only = True

    def handle_error(self, error: RecordError, cause: TapisError | None) -> None:
        if isinstance(cause, IllegalAction):
            raise NotReplayable(cause.rule, f"hand {error.hand}: {cause}") from None
        if isinstance(cause, InvalidAction):
            raise NotReplayable("action", f"hand {error.hand}: {cause}") from None
        if isinstance(cause, RulesError):
            rule = f"option:{cause.key}" if cause.key else "options"
            raise NotReplayable(rule, str(cause)) from None
        raise NotReplayable(f"record:{error.code}", str(error)) from None

    def result(self) -> Match:
        return self.match


def first_diff(
    units: tuple[str, ...],
    rec: pb.GameRecord,
    new: Sequence[Sequence[ScoreLine]],
    start: int = 0,
) -> dict[str, Any] | None:
    """The first score line, hand by hand, that is not the same after re-scoring (the hands
    before `start` known to be the same)."""
    key = _line_key(units)
    hands = rec.hands
    for h in range(start, max(len(hands), len(new))):
        old_lines = hands[h].lines if h < len(hands) else ()
        new_lines = new[h] if h < len(new) else ()
        # A hand's lines as flat tuples (seat, kind, each unit, rule), compared at once: the
        # record's read in C (`key`), the line that differs looked for only when one does.
        old_keys = list(map(key, old_lines))
        new_keys = [(n[0], n[1], *n[2], n[3]) for n in new_lines]  # seat, kind, delta, rule
        if old_keys == new_keys:
            continue
        i = next(
            (i for i, (o, n) in enumerate(zip(old_keys, new_keys, strict=False)) if o != n),
            min(len(old_keys), len(new_keys)),
        )
        o = old_keys[i] if i < len(old_keys) else None
        n = new_lines[i] if i < len(new_lines) else None
        return {
            "hand": h + 1,
            "line": i + 1,
            "old_rule": o[-1] if o else "",
            "new_rule": n.rule if n else "",
            "old": [o[0], o[1], list(o[2:-1])] if o else None,
            "new": [n.seat, n.kind, list(n.delta)] if n else None,
        }
    return None


@functools.cache
def _line_key(units: tuple[str, ...]) -> Callable[[pb.ScoreLine], tuple[Any, ...]]:
    """A function from a record's score line to (seat, kind, its delta in each of `units`,
    rule): one C call."""
    return operator.attrgetter("seat", "kind", *(f"delta.{u}" for u in units), "rule")


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
    names = [terminal_text(s.name) for s in rec.seats] or [
        f"seat {i}" for i in range(rec.rules.players)
    ]
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
    title = f"{find_game(rec.rules.game).title}"
    if rec.rules.ruleset != "standard":
        title += f" ({rec.rules.ruleset})"
    totals = ["total", "", *(_fmt(units, score_from_pb(units, s)) for s in rec.outcome.scores)]
    table = text_table(["hand", "dealer", *names], rows, totals)
    return "\n".join([f"{title}: {', '.join(names)}", *table, result_line(rec)])


def text_table(
    header: list[str], rows: list[list[str]], footer: list[str] | None = None
) -> list[str]:
    """Columns for a person: the header, a rule, the rows, and a footer below another rule,
    each column as wide as its widest cell."""
    every = [header, *rows, *([footer] if footer else [])]
    widths = [max(len(r[i]) for r in every) for i in range(len(header))]
    rule = "  ".join("-" * w for w in widths)

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [line(header), rule, *(line(r) for r in rows)]
    if footer:
        out += [rule, line(footer)]
    return out


def result_line(rec: pb.GameRecord) -> str:
    names = [s.name for s in rec.seats]
    out = rec.outcome
    if not out.finished:  # (stopped by the referee, or a transcript of a match not played out)
        why = f": {named_seats(out.reason, names)}" if out.reason else ""
        return f"The match is not finished{why}."
    winners = ", ".join(seat_name(names, w) for w in out.winners)
    verb = "share the victory" if len(out.winners) > 1 else "wins"
    reason = f" ({named_seats(out.reason, names)})" if out.reason else ""
    return f"{winners} {verb}{reason}."


def counted(n: int, noun: str, plural: str = "") -> str:
    """`n` and the noun it counts: "1 record", "3 records", "0 duplicates"."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def scores_text(
    scores: Sequence[Sequence[int]], names: Sequence[str], units: tuple[str, ...]
) -> str:
    """Each seat's score by name: "Ann 12, Bob 3" (L'Impériale: "Ann 2F 3J")."""
    return ", ".join(
        f"{seat_name(names, s)} {_fmt(units, tuple(score))}" for s, score in enumerate(scores)
    )


# A seat as the engine's text names it ("seat 2", "seats 0, 2"): its number, or numbers.
_SEATS = re.compile(r"\bseats? (\d+(?:, \d+)*)\b")


def named_seats(text: str, names: Sequence[str]) -> str:
    """The engine's text about a hand (its notes, `describe`, the outcome's reason) with the
    seats it numbers ("seat 2", "seats 0, 2") said by their players' names, as every other
    line of a record shown."""
    return _SEATS.sub(lambda m: ", ".join(seat_name(names, int(n)) for n in m[1].split(", ")), text)


def seat_name(names: Sequence[str], seat: int) -> str:
    """A seat's name as printed (`terminal_text`: a name is text a record carries as given),
    or "seat N" for a seat without one."""
    return terminal_text(names[seat]) if 0 <= seat < len(names) else f"seat {seat}"


def _line_text(line: Sequence[Any] | None, names: Sequence[str], units: tuple[str, ...]) -> str:
    """A `first_diff` side ([seat, kind, delta]) for a person: "Ann penalty +4"; "none"."""
    if not line:
        return "none"
    seat, kind, delta = line
    return f"{seat_name(names, seat)} {kind} {_fmt_delta(units, tuple(delta))}"


def diff_text(
    d: dict[str, Any] | None, names: Sequence[str] = (), units: tuple[str, ...] = ("points",)
) -> str:
    """A `first_diff` for a person, with the rule ids on both sides and the seats by name:
    "hand 2, line 3: DP.SCORE -> DP.MOON (Ann penalty +4 -> Bob moon +26)"."""
    if not d:
        return "no line differs"
    old, new = (_line_text(d[k], names, units) for k in ("old", "new"))
    return (
        f"hand {d['hand']}, line {d['line']}: {d['old_rule'] or '(none)'} -> "
        f"{d['new_rule'] or '(none)'} ({old} -> {new})"
    )
