"""`show`: a record for a person: the hands as dealt, every action, each trick with its
winner, the score lines with their rule ids, and the score sheet.

Rendering knows no rule: tricks, winners and per-hand notes come from replaying the record
through the engine. The texts a record carries as it was given (seat names, provenance,
comments) are written through `terminal_text`: no control character of theirs reaches a
terminal.
"""

from __future__ import annotations

from tapis_cartes.records.annotate import annotate, comments_by_position, stray_comments
from tapis_cartes.records.clocks import Clocks, TimeControl
from tapis_cartes.records.codec import record_id, score_from_pb
from tapis_cartes.records.replay import replay_record
from tapis_cartes.records.score import named_seats, score_sheet
from tapis_cartes.referee.engine import Match, find_game, make_rules
from tapis_cartes.referee.engine.actions import PLAY, action_str
from tapis_cartes.referee.engine.cards import card_str, mask_str
from tapis_cartes.referee.errors import terminal_text
from tapis_cartes.v1 import record_pb2 as pb

__all__ = ["fact_text", "non_default_options", "render_record", "terminal_text"]


def fact_text(value: object, yes: str = "yes", no: str = "no") -> str:
    """A view's public fact (`View.public`) as text: the referee's `Fact.value` (with
    "true"/"false"), the replay page's facts; "" for None."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return yes if value else no
    if isinstance(value, tuple | list):
        return ", ".join(
            fact_text(v, yes, no) if not isinstance(v, tuple) else " ".join(map(str, v))
            for v in value
        )
    return str(value)


def non_default_options(rec: pb.GameRecord) -> list[str]:
    """The record's options that differ from its ruleset's defaults, as `key=value`."""
    defaults = make_rules(rec.rules.game, rec.rules.ruleset, {}, rec.rules.players)
    dv = defaults.option_values()
    out = []
    for o in rec.rules.options:
        value = getattr(o, o.WhichOneof("value") or "string_value")
        if o.key != "players" and dv.get(o.key) != value:
            out.append(f"{o.key}={str(value).lower() if isinstance(value, bool) else value}")
    return out


def render_record(
    rec: pb.GameRecord,
    record_bytes: bytes | None = None,
    annotations: pb.Annotations | None = None,
    match: Match | None = None,
) -> str:
    """The whole match as text; with `annotations`, forced actions are marked `(forced)` and
    comments follow their action after `#`. `match`: the record's replay when the caller
    verified it (records/verify.py `verified_match`); else it is replayed here, its score
    lines, scores and outcome compared with the replay's (`RecordError` when they differ)."""
    if match is None:
        match = replay_record(rec)  # first: every field checked against its game
    spec = find_game(rec.rules.game)
    names = [terminal_text(s.name) for s in rec.seats]
    width = max(len(n) for n in names)
    order = match.order
    lines: list[str] = []
    title = spec.title + ("" if rec.rules.ruleset == "standard" else f" ({rec.rules.ruleset})")
    lines.append(f"{title}: {', '.join(names)}")
    if record_bytes is not None:
        lines.append(f"record {record_id(record_bytes)}")
    opts = non_default_options(rec)
    lines.append("options: " + (", ".join(opts) if opts else "defaults"))
    clocks = None
    if rec.rules.HasField("time_control"):
        control = TimeControl.from_pb(rec.rules.time_control)
        clocks = Clocks(control, rec.rules.players)
        lines.append(f"clocks: {control.describe()}")
    if rec.provenance.source:
        p = rec.provenance
        ref = f" {terminal_text(p.reference)}" if p.reference else ""
        lines.append(f"source: {terminal_text(p.source)}{ref}")
    units = spec.units
    comments_at = comments_by_position(annotations)
    # Which actions were forced: the replay's, never the envelope's say (its annotations are
    # outside the signature: anyone may mark any action forced). Their comments are shown.
    annotated = annotations is not None and len(annotations.actions) > 0
    forced_at = (
        {(a.hand, a.action) for a in annotate(rec).actions if a.forced} if annotated else set()
    )
    for h, hand in enumerate(rec.hands):
        result = match.results[h] if h < len(match.results) else None
        engine_hand = result.hand if result else match.hand
        lines.append("")
        lines.append(f"Hand {hand.number}, dealer {names[hand.dealer]}")
        if engine_hand is not None:
            lines.extend("  " + named_seats(d, names) for d in engine_hand.describe())
        for s, m in enumerate(hand.deal.hands):
            lines.append(f"  {names[s].ljust(width)}  {mask_str(m, order)}")
        if hand.deal.HasField("retourne"):
            lines.append(f"  retourne {card_str(hand.deal.retourne)}")
        if hand.deal.talon:
            lines.append(f"  talon {' '.join(card_str(c) for c in hand.deal.talon)}")
        tricks = engine_hand.tricks if engine_hand is not None else []
        # Score lines are shown where the rules made them: after the action they follow.
        by_action: dict[int, list[pb.ScoreLine]] = {}
        for line in hand.lines:
            by_action.setdefault(line.after_action, []).append(line)

        def score_lines(at: int, by_action: dict[int, list[pb.ScoreLine]] = by_action) -> None:
            for line in by_action.pop(at, []):
                delta = score_from_pb(units, line.delta)
                parts = (
                    f"{v:+d} {unit_word(u, v)}" for u, v in zip(units, delta, strict=True) if v
                )
                amount = " ".join(parts) or "0"
                note = f" ({named_seats(line.note, names)})" if line.note else ""
                lines.append(f"      {names[line.seat]}: {line.kind} {amount}{note} [{line.rule}]")

        score_lines(0)
        t = 0
        in_trick = 0
        pending: list[str] = []
        comments: list[str] = []
        timeouts = set(hand.timeouts)
        for index, (seat, action) in enumerate(zip(hand.seats, hand.actions, strict=True), 1):
            said_here = comments_at.get((h + 1, index), ())
            forced = " (forced)" if (h + 1, index) in forced_at else ""
            if clocks is not None and index <= len(hand.elapsed_ms):
                forced += _clock(clocks, seat, hand.elapsed_ms[index - 1], index in timeouts)
            if action & 7 != PLAY:
                if pending and index == len(hand.actions):  # (a resignation ends the trick)
                    lines.append(f"  {t + 1:>2}. {'  '.join(pending)} (unfinished)")
                    lines.extend(comments)
                    pending, comments = [], []
                said = "".join(f"  # {terminal_text(c)}" for c in said_here)
                lines.append(f"  {names[seat]}: {action_str(action)}{forced}{said}")
                score_lines(index)
                continue
            played = f"{names[seat]} {card_str(action >> 3)}"
            pending.append(played + forced)
            comments.extend(f"      # {played}: {terminal_text(c)}" for c in said_here)
            in_trick += 1
            if t < len(tricks) and in_trick == len(tricks[t].cards):
                winner = names[tricks[t].winner]
                plays = "  ".join(p.ljust(width + 4) for p in pending)
                lines.append(f"  {t + 1:>2}. {plays} -> {winner}")
                t += 1
                in_trick = 0
                pending = []
                lines.extend(comments)
                comments = []
            if not pending:
                score_lines(index)
        if pending:
            lines.append(f"  {t + 1:>2}. {'  '.join(pending)} (unfinished)")
            lines.extend(comments)
        for at in sorted(by_action):
            score_lines(at)
    if rec.outcome.rule:
        lines.append(f"{named_seats(rec.outcome.reason, names)} [{rec.outcome.rule}]")
    stray = stray_comments(rec, comments_at)
    if stray:
        lines.append("")
        lines.append(
            "Comments on positions the record does not have (its annotations are unsigned):"
        )
        lines.extend(f"  hand {h}, action {a}  # {terminal_text(c)}" for h, a, c in stray)
    lines.append("")
    lines.append(score_sheet(rec))
    return "\n".join(lines)


def _clock(clocks: Clocks, seat: int, elapsed: int, timeout: bool) -> str:
    """An action's clock for a person: " (12.3 s, 4:47 left)", " (out of time)"."""
    clocks.spend(seat, elapsed)
    left = clocks.left(seat)
    parts = [f"{elapsed / 1000:.1f} s"]
    if left is not None:
        parts.append(f"{left // 60_000}:{left // 1000 % 60:02d} left")
    if timeout:
        parts.append("out of time")
    return f" ({', '.join(parts)})"


def unit_word(unit: str, value: int) -> str:
    """A unit as said of `value` of it: "jetons", but "1 jeton" (every unit's name is its
    plural in "s")."""
    return unit[:-1] if abs(value) == 1 and unit.endswith("s") else unit
