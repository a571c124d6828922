"""One replay of a record, told to a visitor (python-chess's `chess.pgn` visitors are the model).

`replay(rec, visitor)` drives the engine through a decoded record and calls the visitor's
hooks on the way; verify, annotate, score, rescore, show and the transcript export are each a
visitor. In order:

1. every field of the record checked against its game (records/strict.py: nothing out of its
   game's range reaches the engine), the rules, the seats, the start; the revealed seed
   against its commitment; then `begin_record(rec, match)`;
2. per hand: the deal the seed gives, the hand's number, the deal the pack gives (when the
   record has the pack); the deal started, then `begin_hand`; the actions, each told to
   `visit_action` before and `end_action` after it is applied, only to a visitor that defines
   them (the others replay a hand's actions at once, `Match.step_many`: the fast path of
   verify); the hand's end (a hand may stop before its end only as the record's last); then
   `end_hand`;
3. `end_record()`; what `replay` returns is `visitor.result()`.

A visitor with `replays = False` is walked through the record's hands and actions with the
same hooks once the fields are checked, without the engine (the transcript export, which
must write out a record whose actions the rules refuse).

Under `changes` (options changed: rescore), the record is replayed with the recorded deals
and actions under its rules so changed: no seed, number, pack or hand-end check (they belong
to the record's own rules) and the replay stops where the match now ends.

Every fault is a `RecordError` with its stable code and position (docs/verify.md), handed to
`visitor.handle_error(error, cause)` (`cause`: the engine's exception behind it, if any). The
strict `BaseVisitor` raises it: the replay stops at the first fault. A `LenientVisitor` keeps
it and the replay goes on where it can: past a seed, number or pack that is not the one
expected; not past a refused deal or action, nor a fault of the fields, after which the
engine cannot follow the record.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import ClassVar, Generic, TypeVar

from mypy_extensions import mypyc_attr

from tapis_cartes.records.codec import score_from_pb, start_from_pb
from tapis_cartes.records.dealing import ALGORITHM, commitment
from tapis_cartes.records.strict import check_fields, check_rules_fields, check_start
from tapis_cartes.referee.engine import (
    Deal,
    IllegalAction,
    InvalidAction,
    Match,
    RecordError,
    Rules,
    RulesError,
    ScoreLine,
    Start,
    TapisError,
    card_str,
    find_game,
    make_rules,
    mask_str,
    new_match,
)
from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.referee.engine.shuffle import first_dealer, shuffled_pack
from tapis_cartes.referee.engine.wire import HandFields, fields_below
from tapis_cartes.v1 import record_pb2 as pb

__all__ = [
    "BaseVisitor",
    "LenientVisitor",
    "MatchVisitor",
    "compare_record",
    "match_for_record",
    "replay",
    "replay_record",
]

T = TypeVar("T")


@mypyc_attr(allow_interpreted_subclasses=True)  # each command's visitor is plain Python
class BaseVisitor(Generic[T]):
    """What a replay tells, hook by hook; every hook does nothing by default. Strict: the first
    fault (`handle_error`) is raised. `self.rec`, `self.match` and `self.units` are set before
    `begin_record` (`self.match` once the fields are checked: a fault of the fields is handled
    without it)."""

    replays: ClassVar[bool] = True  # False: walked through the record without the engine
    # True: only the fields the engine reads are checked before the replay (`check_fields`,
    # `engine_only`); the others are the visitor's: verify compares the record with its
    # rebuild at the end, a re-score quotes them as the record has them.
    engine_fields_only: ClassVar[bool] = False

    rec: pb.GameRecord
    match: Match
    units: tuple[str, ...]
    fields: list[HandFields]  # the fields the engine reads of each hand (`hand_fields`)

    def begin_record(self) -> None:
        """Every field is checked, the match made (no hand started)."""

    def begin_hand(self, h: int, hand: pb.HandRecord) -> None:
        """Hand `h` (1-based) is dealt and started: `self.match.hand` is its engine hand."""

    def visit_action(self, h: int, a: int, seat: int, action: int) -> None:
        """Action `a` (1-based) of hand `h`, before it is applied."""

    def end_action(self, h: int, a: int, seat: int, action: int) -> None:
        """Action `a` of hand `h`, once it is applied."""

    def end_hand(self, h: int, hand: pb.HandRecord) -> None:
        """Hand `h`'s recorded actions are all applied."""

    def end_record(self) -> None:
        """Every hand is replayed."""

    def handle_error(self, error: RecordError, cause: TapisError | None) -> None:
        """A fault of the record, at its position; `cause` is the engine's exception behind it
        (a refused deal or action; the `RulesError` of changed options), if any."""
        raise error

    def result(self) -> T:
        """What `replay` returns."""
        raise NotImplementedError


@mypyc_attr(allow_interpreted_subclasses=True)
class MatchVisitor(BaseVisitor[Match]):
    """The replayed match; with `check`, the record's score lines, scores and outcome are
    compared with the replay's (`compare_record`) at the end."""

    def __init__(self, check: bool = True) -> None:
        self.check = check

    def end_record(self) -> None:
        if self.check:
            compare_record(self.rec, self.match, self.units)

    def result(self) -> Match:
        return self.match


@mypyc_attr(allow_interpreted_subclasses=True)
class LenientVisitor(BaseVisitor[Match | None]):
    """A replay that keeps every fault (`errors`, in the order met) instead of stopping at the
    first, and goes on where it can: the comparison of score lines and scores goes on hand
    after hand. The match as far as it was replayed (None when the fields do not hold)."""

    def __init__(self, check: bool = True) -> None:
        self.check = check
        self.errors: list[RecordError] = []

    def result(self) -> Match | None:
        return getattr(self, "match", None)

    def handle_error(self, error: RecordError, cause: TapisError | None) -> None:
        self.errors.append(error)

    def end_record(self) -> None:
        if not self.check:
            return
        results = self.match.results
        for h, (hand, result) in enumerate(zip(self.rec.hands, results, strict=False), 1):
            try:
                _compare_hand(self.units, hand, result.lines, result.scores_after, h)
            except RecordError as exc:
                self.errors.append(exc)
        try:
            _compare_outcome(self.match, self.units, self.rec.outcome)
        except RecordError as exc:
            self.errors.append(exc)


def replay(
    rec: pb.GameRecord,
    visitor: BaseVisitor[T],
    changes: Mapping[str, Option] | None = None,
    hands: list[HandFields] | None = None,
    record_bytes: bytes = b"",
) -> T:
    """Drive the engine through `rec` and tell `visitor` (see the module's docstring); with
    `changes`, under the record's options changed by them. `hands`: the fields of its hands
    the engine reads, when the caller read them from the record's bytes (`record_bytes`, by
    `decode_apart`; `rec` may then be decoded without its hands, for a visitor not told
    them). Returns `visitor.result()`."""
    seed: bytes | None = None
    visitor.rec = rec
    head = _head(record_bytes, hands)
    try:
        match, units, hands, start = _checked_match(
            rec, type(visitor).engine_fields_only, hands, head, changes is None
        )
    except RecordError as exc:
        visitor.handle_error(exc, None)
        return visitor.result()  # a lenient visitor: nothing can be replayed
    visitor.match, visitor.units, visitor.fields = match, units, hands
    if changes is not None:
        try:
            rules = _changed_rules(match.rules, tuple((k, type(v), v) for k, v in changes.items()))
            match = visitor.match = new_match(rules, start, log_events=False)
        except RulesError as exc:
            visitor.handle_error(RecordError("options", str(exc)), exc)
            return visitor.result()
    elif visitor.replays:
        try:
            seed = _checked_seed(rec)
        except RecordError as exc:
            visitor.handle_error(exc, None)
    visitor.begin_record()
    if not visitor.replays:
        _walk(rec, visitor)
    elif _replay_hands(rec, hands, match, visitor, seed, changes is None):
        return visitor.result()
    visitor.end_record()
    return visitor.result()


_DEAL_SOURCE = pb.GameRecord.DESCRIPTOR.fields_by_name["deal_source"].number


def _head(record_bytes: bytes, hands: list[HandFields] | None) -> bytes:
    """The bytes of a record that alone hold its format version, rules, seats and start (the
    fields before its deal source and hands), when its hands were read from `record_bytes`
    (their fields then in number order around the hands: wire.py `hand_spans`); else b""."""
    if not record_bytes or not hands or hands[0].key_at <= 0:
        return b""
    end = fields_below(record_bytes, hands[0].key_at, _DEAL_SOURCE)
    return record_bytes[:end] if end > 0 else b""


def _told_hands(visitor: BaseVisitor[T]) -> bool:
    """Whether `visitor` is told each hand (`begin_hand`, `end_hand`)."""
    kind = type(visitor)
    return (
        kind.begin_hand is not BaseVisitor.begin_hand or kind.end_hand is not BaseVisitor.end_hand
    )


def _per_action(visitor: BaseVisitor[T]) -> bool:
    """Whether `visitor` is told each action (else a hand's actions are replayed at once)."""
    kind = type(visitor)
    return (
        kind.visit_action is not BaseVisitor.visit_action
        or kind.end_action is not BaseVisitor.end_action
    )


def _walk(rec: pb.GameRecord, visitor: BaseVisitor[T]) -> None:
    for h, hand in enumerate(rec.hands, 1):
        visitor.begin_hand(h, hand)
        for a, (seat, action) in enumerate(zip(hand.seats, hand.actions, strict=True), 1):
            visitor.visit_action(h, a, seat, action)
            visitor.end_action(h, a, seat, action)
        visitor.end_hand(h, hand)


def _replay_hands(
    rec: pb.GameRecord,
    hands: list[HandFields],
    match: Match,
    visitor: BaseVisitor[T],
    seed: bytes | None,
    as_recorded: bool,
) -> bool:
    """Replay every hand (`hands`: the fields of each, as `check_fields` checked them); True
    when a fault stopped the replay (a lenient visitor)."""
    per_action = _per_action(visitor)
    # The decoded hands, only for a visitor told them (a list in one call of C).
    told = _told_hands(visitor)
    decoded = rec.hands[:] if told else []
    last = len(hands)
    for h, fields in enumerate(hands, 1):
        if not as_recorded and match.finished:
            break  # under changed options the match may end sooner
        try:
            if as_recorded:
                deal = _recorded_deal(rec, match, seed, fields, h, visitor)
            else:
                deal = fields.deal()
            match.start_hand(fields.dealer, deal)
        except IllegalAction as exc:
            code = f"deal:{exc.code}"
            visitor.handle_error(RecordError(code, f"{exc.reason} [{exc.rule}]", hand=h), exc)
            return True
        seats = fields.seats
        actions = fields.actions
        if len(seats) != len(actions):
            message = f"{len(actions)} actions but {len(seats)} seats"
            visitor.handle_error(RecordError("actions", message, hand=h), None)
            return True
        current = match.hand
        assert current is not None
        if told:
            visitor.begin_hand(h, decoded[h - 1])
        try:
            if per_action:
                for a, (seat, action) in enumerate(zip(seats, actions, strict=True), 1):
                    visitor.visit_action(h, a, seat, action)
                    match.step(seat, action)
                    visitor.end_action(h, a, seat, action)
            else:
                match.step_many(seats, actions)
        except IllegalAction as exc:
            if not as_recorded and (current.over or match.finished):
                # Under changed options the hand, or the match, may end before the hand's
                # recorded actions do (a target reached by a declaration, a contract decided):
                # the rest of them are not played, as they would not have been.
                if told:
                    visitor.end_hand(h, decoded[h - 1])
                continue
            position = len(current.actions) + 1
            error = RecordError(
                f"action:{exc.code}", f"{exc.message} [{exc.rule}]", hand=h, action=position
            )
            visitor.handle_error(error, exc)
            return True
        except InvalidAction as exc:
            position = len(current.actions) + 1
            error = RecordError("action:invalid", str(exc), hand=h, action=position)
            visitor.handle_error(error, exc)
            return True
        if as_recorded and not current.over and not match.finished and h != last:
            error = RecordError("hand-unfinished", "the hand stops before its end", hand=h)
            visitor.handle_error(error, None)
            return True
        if told:
            visitor.end_hand(h, decoded[h - 1])
    return False


def _recorded_deal(
    rec: pb.GameRecord,
    match: Match,
    seed: bytes | None,
    hand: HandFields,
    h: int,
    visitor: BaseVisitor[T],
) -> Deal:
    """The deal of a recorded hand, once checked: the deal the seed gives, the hand's
    number, the deal the pack gives (`IllegalAction` when the engine refuses the pack)."""
    if seed is not None:
        try:
            _check_seeded_deal(rec, match, seed, hand, h)
        except RecordError as exc:
            visitor.handle_error(exc, None)
    if hand.number != match.hand_number:
        message = f"numbered {hand.number}, expected {match.hand_number}"
        visitor.handle_error(RecordError("hand-number", message, hand=h), None)
    deal = hand.deal()
    if hand.deck:
        dealt = match.deal_deck(hand.dealer, list(hand.deck))
        if dealt != deal:
            error = RecordError(
                "deal", f"the deal is not what the pack gives: {_deal_apart(deal, dealt)}", hand=h
            )
            visitor.handle_error(error, None)
    return deal


def _deal_apart(deal: Deal, dealt: Deal) -> str:
    """Where a recorded deal is not the one its pack gives (`dealt`): the first seat whose
    cards differ, which of them, else the retourne, else the talon."""
    for seat, (held, given) in enumerate(zip(deal.hands, dealt.hands, strict=False)):
        if held != given:
            return (
                f"seat {seat} holds {mask_str(held & ~given) or 'no card'} where the pack gives "
                f"it {mask_str(given & ~held) or 'no card'}"
            )
    if deal.retourne != dealt.retourne:
        shown = [card_str(c) if c >= 0 else "none" for c in (deal.retourne, dealt.retourne)]
        return f"the retourne is {shown[0]} where the pack gives {shown[1]}"
    return "its talon is not the pack's"


# --- the record's rules, start and seed --------------------------------------------------


@functools.lru_cache(maxsize=256)
def _checked_rules(
    game: str, ruleset: str, players: int, options: tuple[tuple[str, str, Option], ...], digest: str
) -> Rules:
    """The rules a record names, checked once per distinct rules (they are immutable).
    `options`: (key, which value field, value), so that the cache never takes `True` for `1`."""
    try:
        spec = find_game(game)
        given = {key: value for key, _, value in options}
        given.pop("players", None)
        rules = make_rules(spec.name, ruleset or None, given, players)
    except RulesError as exc:
        raise RecordError("rules", f"the rules do not hold: {exc}") from None
    if spec.name != game:
        raise RecordError("rules", f"game {quoted(game)} is not a canonical game name")
    effective = sorted(rules.option_values().items())
    if list(options) != [(k, _VALUE_FIELD[type(v)], v) for k, v in effective]:
        raise RecordError("rules", "the options listed are not the effective options")
    if digest != rules.digest:
        raise RecordError("rules-digest", "the rules digest does not match the rules")
    return rules


_VALUE_FIELD = {bool: "bool_value", int: "int_value", str: "string_value"}  # of an Option


def match_for_record(rec: pb.GameRecord) -> tuple[Match, tuple[str, ...]]:
    """A new engine match for a record's checked rules and start, and the game's units, once
    every field of the record is checked against its game (records/strict.py: nothing out of
    its game's range reaches the engine); `RecordError` when they do not hold. Every command
    that reads a record's content goes through here first. The rules and the start are
    checked once per distinct value (keyed by their canonical bytes), not once per record."""
    match, units, _, _ = _checked_match(rec)
    return match, units


def _checked_match(
    rec: pb.GameRecord,
    engine_only: bool = False,
    hands: list[HandFields] | None = None,
    head: bytes = b"",
    fresh: bool = True,
) -> tuple[Match, tuple[str, ...], list[HandFields], Start]:
    """`match_for_record`, the fields of each hand the engine reads (`check_fields`,
    `engine_only`; `hands`: as `decode_apart` read them, else `hand_fields`) and its start.
    `head`: the bytes that alone hold the record's format version, rules, seats and start
    (`_head`): the rules, seats and start found to hold for a head are not checked again for
    a record it begins (`_HEADS_CHECKED`). Not `fresh`: the match is only read (its rules,
    players and pack), never played, and may be one made for an earlier record."""
    known = _HEADS_CHECKED.get(head) if head and engine_only else None
    blank: Match | None = None
    if known is not None:
        rules, units, start, blank = known
    else:
        rules, units = _record_rules(rec.rules.SerializeToString(deterministic=True))
        if len(rec.seats) != rules.players:
            raise RecordError("seats", f"{len(rec.seats)} seats for {rules.players} players")
        start_bytes = rec.start.SerializeToString(deterministic=True)
        start = _record_start(start_bytes, units, rules.players)
    if blank is not None and not fresh:
        match = blank
    else:
        try:
            match = new_match(rules, start, log_events=False)
        except RulesError as exc:
            raise RecordError("start", f"the start scores do not hold: {exc}") from None
    checked = check_fields(rec, match, units, engine_only, hands, known is not None)
    if head and engine_only and (known is None or (blank is None and not fresh)):
        if len(_HEADS_CHECKED) >= _HEADS_KEPT:
            _HEADS_CHECKED.clear()
        _HEADS_CHECKED[head] = (rules, units, start, None if fresh else match)
    return match, units, checked, start


# The heads of records (`_head`) whose rules, seats and start were found to hold (with
# `check_fields`' checks of the seats with `engine_only`), with the rules, units and start
# they give, and a match of them never played (once a caller that does not play it asked:
# such callers get that one). A head makes them alone. At most `_HEADS_KEPT`, then
# forgotten all at once.
_HEADS_CHECKED: dict[bytes, tuple[Rules, tuple[str, ...], Start, Match | None]] = {}
_HEADS_KEPT = 4096


@functools.lru_cache(maxsize=256)
def _record_rules(rules_bytes: bytes) -> tuple[Rules, tuple[str, ...]]:
    """The checked rules of a record's `Rules` message (its canonical bytes) and the game's
    units; `RecordError` when they do not hold."""
    r = pb.Rules.FromString(rules_bytes)
    options = check_rules_fields(r)
    rules = _checked_rules(r.game, r.ruleset, r.players, options, r.digest)
    return rules, find_game(rules.game).units


@functools.lru_cache(maxsize=256)
def _record_start(start_bytes: bytes, units: tuple[str, ...], players: int) -> Start:
    """The engine's `Start` of a record's `Start` message (its canonical bytes), once its
    fields are checked (`check_start`)."""
    start = pb.Start.FromString(start_bytes)
    check_start(start, units, players)
    return start_from_pb(units, start)


@functools.lru_cache(maxsize=64)
def _changed_rules(rules: Rules, changes: tuple[tuple[str, type, Option], ...]) -> Rules:
    """`rules.with_changes(changes)`, made once per distinct rules (a record's checked rules:
    frozen) and changes (each value with its type, so that the cache never takes `True` for
    `1`)."""
    return rules.with_changes({key: value for key, _, value in changes})


def _checked_seed(rec: pb.GameRecord) -> bytes | None:
    """The revealed seed of a refereed record, once it matches its commitment."""
    source = rec.deal_source
    if not source.algorithm and not source.seed and not source.commitment:
        return None
    if source.algorithm != ALGORITHM:
        raise RecordError("deal-algorithm", f"unknown deal algorithm {quoted(source.algorithm)}")
    if commitment(source.seed) != source.commitment:
        raise RecordError("commitment", "the revealed seed does not match the commitment")
    return source.seed


def _check_seeded_deal(
    rec: pb.GameRecord, match: Match, seed: bytes, hand: HandFields, h: int
) -> None:
    """Every deal of a refereed record comes from the seed (records/dealing.py)."""
    if (
        h == 1
        and rec.start.hand_number <= 1
        and hand.dealer != first_dealer(seed, match.first_dealers())
    ):
        raise RecordError("deal-seed", "the first dealer is not the one the seed draws", hand=h)
    if list(hand.deck) != shuffled_pack(seed, hand.number, match.pack):
        raise RecordError("deal-seed", "the pack is not the one the seed gives", hand=h)


# --- the record against its replay -------------------------------------------------------


def replay_record(rec: pb.GameRecord, check: bool = True) -> Match:
    """Replay a decoded record through the engine (strict: `RecordError` at the first fault).
    Every field is checked against its game first (records/strict.py). With `check`, then
    compare every score line, score and the outcome with what the record says
    (`compare_record`); the replay itself always checks every deal and action."""
    return replay(rec, MatchVisitor(check))


def compare_record(rec: pb.GameRecord, match: Match, units: tuple[str, ...]) -> None:
    """The record's score lines and scores after each hand, then its outcome, against its
    replay `match`; `RecordError` (`score-lines`, `scores`, `outcome`) at the first
    difference, with its position."""
    for h, (hand, result) in enumerate(zip(rec.hands, match.results, strict=False), 1):
        _compare_hand(units, hand, result.lines, result.scores_after, h)
    _compare_outcome(match, units, rec.outcome)


def _compare_hand(
    units: tuple[str, ...],
    hand: pb.HandRecord,
    lines: list[ScoreLine],
    scores_after: tuple[tuple[int, ...], ...],
    h: int,
) -> None:
    _compare_lines(units, lines, hand.lines, h)
    after = tuple(score_from_pb(units, s) for s in hand.scores_after)
    if after != scores_after:
        raise RecordError(
            "scores",
            f"scores after the hand are {after}, the rules give {scores_after}",
            hand=h,
        )


def _compare_lines(
    units: tuple[str, ...], lines: list[ScoreLine], recorded: Sequence[pb.ScoreLine], h: int
) -> None:
    rec_lines = list(recorded)
    for i, line in enumerate(lines):
        if i >= len(rec_lines):
            raise RecordError("score-lines", f"score line {i + 1} is missing", hand=h)
        r = rec_lines[i]
        got = (r.seat, r.kind, score_from_pb(units, r.delta), r.rule, r.note, r.after_action)
        want = (line.seat, line.kind, line.delta, line.rule, line.note, line.at)
        if got != want:
            shown = (r.seat, quoted(r.kind), got[2], quoted(r.rule))
            said = f"score line {i + 1} is ({', '.join(map(str, shown))})"
            # Its note and the action it follows, when they differ: said too (a line whose
            # four first fields hold was said "is X, the rules give X").
            apart = [
                f"its {name} is {quoted(g) if isinstance(g, str) else g}, the rules give "
                f"{quoted(w) if isinstance(w, str) else w}"
                for name, g, w in (
                    ("note", r.note, line.note),
                    ("after_action", r.after_action, line.at),
                )
                if g != w
            ]
            if got[:4] == want[:4]:
                said += " as the rules give, but " + " and ".join(apart)
            else:
                said += (
                    f", the rules give ({line.seat}, {line.kind!r}, {line.delta}, "
                    f"{line.rule!r})" + "".join(f"; {a}" for a in apart)
                )
            raise RecordError("score-lines", said, hand=h, action=line.at or None)
    if len(rec_lines) > len(lines):
        raise RecordError(
            "score-lines", f"{len(rec_lines) - len(lines)} score lines too many", hand=h
        )


def _compare_outcome(match: Match, units: tuple[str, ...], out: pb.Outcome) -> None:
    scores = tuple(score_from_pb(units, s) for s in out.scores)
    if scores != tuple(match.scores):
        raise RecordError(
            "outcome", f"final scores are {scores}, the rules give {tuple(match.scores)}"
        )
    if out.finished != match.finished:
        raise RecordError(
            "outcome",
            f"the record says finished={out.finished}, the rules say {match.finished}",
        )
    if tuple(out.winners) != match.winners:
        raise RecordError(
            "outcome", f"winners are {list(out.winners)}, the rules give {list(match.winners)}"
        )
    resigned = out.resigned if out.HasField("resigned") else None
    if resigned != match.resigned:
        raise RecordError("outcome", "the resignation does not match the actions")
