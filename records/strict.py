"""Strict records: nothing in a record is taken as it comes (docs/verify.md).

Three checks around the one replay of a record (records/replay.py):

- `decode_canonical`: the record bytes are exactly the canonical (deterministic)
  serialization of what they decode to: no unknown field, and no field repeated, out of order
  or not minimally encoded, so that one match has one record id. The record is serialized
  only to compare: stored bytes are never replaced.
- `check_rules_fields`, `check_start` and `check_fields`: every field against its game before
  the engine sees it. Texts are bounded; rules and options are named as Tapis names them; the
  seats, their teams, the start; scores only in the game's units; per hand its number, the
  dealer, the deal (every card of the game's pack: hands, retourne, talon and pack), the seats
  and actions (well-formed and in the game's range), the score lines; the outcome's winners,
  resignation and scores. Each loop runs over the record's own fields and no value from the
  record reaches a shift, an allocation or a loop bound before it is checked, so time and
  memory stay bounded by the record's size.
- `check_content`: after the replay, the record must be byte for byte what `build_record`
  makes of the replayed match with the record's own free fields (the seat names, the
  provenance, the packs, the deal source, and an unfinished match's reason); else the first
  field that differs is named.

Each fault is a `RecordError` with a stable code and its position (hand, action; 1-based).
"""

from __future__ import annotations

import contextlib
import functools
import operator
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from google.protobuf.message import Message

from tapis_cartes.records.clocks import check_timing, record_timing
from tapis_cartes.records.codec import (
    MAX_NAME,
    MAX_TEXT,
    SCORE_LIMIT,
    Provenance,
    build_record,
    canonical_bytes,
    decode_record,
    record_head,
    record_tail_of,
    unit_fields,
    unknown_field_path,
    where_bytes_differ,
)
from tapis_cartes.referee.engine import (
    GAMES,
    Match,
    RecordError,
    RulesError,
    find_game,
)
from tapis_cartes.referee.engine.actions import (
    ABANDON,
    ABANDON_WORDS,
    BID,
    BID_WORDS,
    PILLE,
    PILLE_STOP,
    PLAY,
    RESIGN,
    VOLE,
    VOLE_WORDS,
    encode,
    pass_choices,
)
from tapis_cartes.referee.engine.cards import iter_cards
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.referee.engine.wire import (
    HandFields,
    check_hand,
    check_record_size,
    hands_hold,
    read_hands,
)
from tapis_cartes.referee.errors import control_character, quoted
from tapis_cartes.v1 import record_pb2 as pb

__all__ = [
    "SEED_SIZE",
    "actions_in_range",
    "bound_key",
    "check_content",
    "check_fields",
    "check_played_at",
    "check_rules_fields",
    "check_seat_name",
    "check_start",
    "content_holds",
    "decode_apart",
    "decode_canonical",
    "first_difference",
    "hand_fields",
    "played_at_key",
    "rebuild_record",
]


SEED_SIZE = 32  # bytes of a deal seed and of its commitment (SHA-256)
_UNITS = tuple(pb.Score.DESCRIPTOR.fields_by_name)  # every unit a Score message can hold


# --- the encoding ---------------------------------------------------------------------------


def decode_canonical(record_bytes: bytes) -> pb.GameRecord:
    """The record the bytes decode to (`decode_record`), once they are its canonical
    serialization: `RecordError` `record-unknown-field` or `record-noncanonical` otherwise."""
    rec = decode_record(record_bytes)
    rec.DiscardUnknownFields()
    if rec.SerializeToString(deterministic=True) == record_bytes:
        return rec
    kept = decode_record(record_bytes)  # unknown fields kept, in the order protobuf keeps them
    if kept.SerializeToString(deterministic=True) != rec.SerializeToString(deterministic=True):
        where = unknown_field_path(record_bytes, pb.GameRecord.DESCRIPTOR)
        raise RecordError(
            "record-unknown-field",
            "the record has a field this Tapis does not know" + (f": {where}" if where else ""),
        )
    canonical = rec.SerializeToString(deterministic=True)
    raise RecordError(
        "record-noncanonical",
        "the record bytes are not the canonical encoding of the record they decode to "
        "(a field repeated, out of order or not minimally encoded): they differ from it at "
        + where_bytes_differ(record_bytes, canonical, pb.GameRecord.DESCRIPTOR),
    )


# --- every field against its game -----------------------------------------------------------


def _text(value: str, where: str, limit: int = MAX_TEXT, hand: int | None = None) -> None:
    if len(value) > limit:
        raise RecordError(
            "text-length",
            f"{where} has {len(value)} characters (at most {limit}): {quoted(value)}",
            hand=hand,
        )


# `provenance.played_at`: empty (not known) or an RFC 3339 date-time (record.proto), as the
# referee writes it. Its groups: the date, the hours and minutes, the seconds, the fraction,
# the offset. The archive's `--since`/`--until` compare instants (`played_at_key`): SQLite's
# `julianday` reads no leap second and no offset past 14:59, which RFC 3339 allows.
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)"
)


def _played_at(text: str) -> tuple[datetime, int, str] | None:
    """An RFC 3339 date-time's instant to the second (a leap second's 60 read as 59, with
    its offset), its seconds and its fraction's first 9 digits (to the nanosecond: RFC 3339
    bounds none); None when `text` is none."""
    m = _RFC3339.fullmatch(text)
    if m is None or int(m[3]) > 60:
        return None
    offset = "+00:00" if m[5] in ("Z", "z") else m[5]
    try:
        when = datetime.fromisoformat(f"{m[1]}T{m[2]}:{min(int(m[3]), 59):02d}{offset}")
    except ValueError:  # no such day or time
        return None
    return when, int(m[3]), (m[4] or "")[:9]


def played_at_key(text: str) -> str | None:
    """The instant of an RFC 3339 date-time as text that sorts as instants do: in UTC, its
    fraction to the nanosecond ("2026-03-01T09:00:00.123000000Z"; a leap second stays 60,
    after 59 and before the next minute); None when `text` is none (empty included). The
    archive compares its `--since`/`--until` bounds with it (`bound_key`)."""
    read = _played_at(text)
    if read is None:
        return None
    when, seconds, fraction = read
    try:
        utc = when.astimezone(UTC)
    except OverflowError:  # an offset past the first or last day Python dates hold
        return "0000" if when.year == 1 else "9999-12-31T24"
    return f"{utc:%Y-%m-%dT%H:%M}:{seconds:02d}.{fraction:0<9}Z"


def bound_key(when: datetime) -> str:
    """`played_at_key` of an instant in UTC (naive: taken as UTC)."""
    return f"{when:%Y-%m-%dT%H:%M:%S}.{when.microsecond:06d}000Z"


def check_played_at(text: str) -> None:
    """`RecordError` `provenance` when `text` is neither empty nor an RFC 3339 date-time (its
    form by `_RFC3339`, its day and time by Python's calendar; a leap second's 60 taken)."""
    if not text or _played_at(text) is not None:
        return
    raise RecordError(
        "provenance",
        f"provenance.played_at is neither empty nor an RFC 3339 date-time "
        f"(2026-03-01T20:15:00Z, 2026-03-01T21:15:00+01:00): {quoted(text)}",
    )


def check_seat_name(name: str, seat: int) -> None:
    """`RecordError` `text-length` for a name longer than `MAX_NAME`, `seat-name` for one no
    referee or transcript gives a seat: empty, or holding a control character (referee.proto,
    "Bounds"; the referee names a seat given no name `seat N`, a transcript names every
    player)."""
    if len(name) > MAX_NAME:  # the place is made into text only for a fault
        _text(name, f"seats[{seat}].name", MAX_NAME)
    if not name:
        raise RecordError("seat-name", f"seats[{seat}].name is empty")
    control = control_character(name)
    if control is not None:
        raise RecordError(
            "seat-name", f"seats[{seat}].name {quoted(name)} holds a control character ({control})"
        )


def check_rules_fields(rules: pb.Rules) -> tuple[tuple[str, str, Option], ...]:
    """The options of a record's rules as (key, the value's field, value), once the game and
    ruleset are names Tapis knows and the options are each listed once, sorted by key, known
    to the ruleset and with a value (`RecordError` `rules`, `bad-options` or `text-length`).
    The rules themselves (values, players, digest) are checked by building them."""
    game = rules.game
    spec = GAMES.get(game)
    if spec is None:
        canonical = None
        if len(game) <= MAX_TEXT:
            with contextlib.suppress(RulesError):
                canonical = find_game(game).name
        if canonical is not None:
            raise RecordError("rules", f"game {game!r} is not a canonical game name ({canonical})")
        raise RecordError("rules", f"unknown game {quoted(game)}")
    model = spec.rulesets.get(rules.ruleset)
    if model is None:
        allowed = ", ".join(spec.rulesets)
        raise RecordError(
            "rules",
            f"unknown ruleset {quoted(rules.ruleset)} for {spec.name}; allowed: {allowed}",
        )
    out: list[tuple[str, str, Option]] = []
    previous = ""
    for i, o in enumerate(rules.options):
        where = f"rules.options[{i}]"
        key = o.key
        if key not in model.model_fields:
            raise RecordError(
                "rules", f"{where}: unknown option {quoted(key)} for {spec.name} ({rules.ruleset})"
            )
        if out and key <= previous:
            raise RecordError(
                "rules",
                f"{where}: option {key!r} after {previous!r}: options are listed once each, "
                "sorted by key",
            )
        which = o.WhichOneof("value")
        if which is None:
            raise RecordError("bad-options", f"option {key!r} has no value")
        value = getattr(o, which)
        if which == "string_value":
            _text(value, f"{where}.string_value")
        out.append((key, which, value))
        previous = key
    return tuple(out)


@functools.cache
def _other_units(units: tuple[str, ...]) -> tuple[str, ...]:
    """The units a game with `units` does not keep."""
    return tuple(u for u in _UNITS if u not in units)


def _score(score: pb.Score, units: tuple[str, ...], where: str, hand: int | None = None) -> None:
    """A score sets only the game's units (`score-unit`)."""
    for unit in _other_units(units):
        value = getattr(score, unit)
        if value:
            raise RecordError(
                "score-unit",
                f"{where}.{unit} is {value}: this game keeps its scores in {', '.join(units)} only",
                hand=hand,
            )


def check_start(start: pb.Start, units: tuple[str, ...], players: int) -> None:
    """The start: a first hand number from 1, one score per seat in the game's units, each
    below `SCORE_LIMIT` in magnitude (`start`, `score-unit`)."""
    if start.hand_number < 1:
        raise RecordError("start", "start.hand_number is 0: hands are numbered from 1")
    if len(start.scores) != players:
        raise RecordError(
            "start", f"{len(start.scores)} start scores for {players} seats: one per seat"
        )
    for s, score in enumerate(start.scores):
        where = f"start.scores[{s}]"
        _score(score, units, where)
        for unit in units:
            value = getattr(score, unit)
            if not -SCORE_LIMIT < value < SCORE_LIMIT:
                raise RecordError(
                    "start", f"{where}.{unit} is {value}: a start score is below 2**53"
                )


@functools.lru_cache(maxsize=16)
def actions_in_range(pack: int) -> frozenset[int]:
    """Every action in the range of a game played with `pack`, enumerated: the well-formed
    actions (`check_action`) whose cards are all of the pack (plays, pillages and passes of
    three of its cards; bids, vole and abandon answers, a pillage's stop, a resignation);
    22,219 actions for 52 cards. A hand's actions are checked one by one (`in_range`, in
    the compiled engine): this set is the range written out, for tests and tools."""
    cards = list(iter_cards(pack))
    out = {encode(PLAY, c) for c in cards} | {encode(PILLE, c) for c in cards}
    out.update(pass_choices(pack))
    out.update(encode(BID, b) for b in range(len(BID_WORDS)))
    out.update(encode(VOLE, v) for v in range(len(VOLE_WORDS)))
    out.update(encode(ABANDON, a) for a in range(len(ABANDON_WORDS)))
    out.update((encode(PILLE, PILLE_STOP), encode(RESIGN)))
    return frozenset(out)


def _hand_scores(hand: pb.HandRecord, players: int, units: tuple[str, ...], h: int) -> None:
    """The units of a hand's score lines and scores after it."""
    # The units a score may not hold (the seats and actions of the score lines are compared
    # with the rules' own lines after the replay: `score-lines`).
    foreign, none = _foreign_units(units)
    for line in hand.lines:
        if foreign(line.delta) != none:
            _line_fault(hand, units, h)
    after = hand.scores_after
    if after:
        if len(after) != players:
            raise RecordError(
                "scores", f"{len(after)} scores after the hand for {players} seats", hand=h
            )
        for score in after:
            if foreign(score) != none:
                for s, each in enumerate(after):
                    _score(each, units, f"hands[{h - 1}].scores_after[{s}]", h)


@functools.cache
def _foreign_units(
    units: tuple[str, ...],
) -> tuple[Callable[[pb.Score], tuple[int, ...]], tuple[int, ...]]:
    """A function from a score to its values in the units a game with `units` does not keep
    (`operator.attrgetter`: one C call; given two names at least, it gives a tuple), and
    those values when none is set."""
    others = _other_units(units)
    if not others:
        return (lambda score: ()), ()
    names = (*others, *others[:1])
    return operator.attrgetter(*names), (0,) * len(names)


def _line_fault(hand: pb.HandRecord, units: tuple[str, ...], h: int) -> None:
    """`score-unit` for the first score line of a hand in a unit the game does not keep."""
    for i, line in enumerate(hand.lines):
        _score(line.delta, units, f"hands[{h - 1}].lines[{i}].delta", h)


def decode_apart(record_bytes: bytes) -> tuple[pb.GameRecord, list[HandFields] | None]:
    """The record of `record_bytes` and its hands' fields, read from the bytes where they
    hold them canonically (`read_hands`): the record is then decoded without its hands (no
    protobuf object per hand; decode the bytes whole for them). Else the record decoded whole
    and None. `RecordError` when the bytes are no record (`decode_record`); a record decoded
    apart may still fail to decode whole (its hands' score lines are not read)."""
    check_record_size(record_bytes)  # (before any hand is read)
    hands = read_hands(record_bytes)
    if hands is None:
        return decode_record(record_bytes), None
    return decode_record(record_bytes[: hands[0].key_at] + record_bytes[hands[-1].end :]), hands


def hand_fields(rec: pb.GameRecord) -> list[HandFields]:
    """The fields the engine reads of each hand of `rec`, from the decoded record (read from
    the record's bytes instead: `decode_apart`)."""
    return [_fields_of(hand) for hand in rec.hands[:]]  # a slice: a list in one call of C


def _fields_of(hand: pb.HandRecord) -> HandFields:
    deal = hand.deal
    retourne = deal.retourne if deal.HasField("retourne") else -1
    # Slices of repeated fields: a list in one call of C.
    masks = tuple(deal.hands[:])
    return HandFields(
        hand.number,
        hand.dealer,
        masks,
        retourne,
        deal.talon,
        deal.deck,
        hand.seats,
        hand.actions[:],
    )


def check_fields(
    rec: pb.GameRecord,
    match: Match,
    units: tuple[str, ...],
    engine_only: bool = False,
    hands: list[HandFields] | None = None,
    seats_known: bool = False,
) -> list[HandFields]:
    """Every field of a record against its game (`match`: a new match of its rules), before
    any of it is replayed; `RecordError` at the first fault. The rules and start are checked
    already (`check_rules_fields`, `check_start`). `hands`: the fields of its hands the engine
    reads (`hand_fields`, made here if not given), returned for the replay to take.

    `engine_only`: only the fields the engine reads are checked. Those it never reads (the
    seats' teams, the score lines' and scores' units, the scores after each hand, the
    outcome's winners, resignation and scores, and an untimed record's clocks: none) are left
    to whoever needs them: verify compares the record with its rebuild (`check_content`),
    which makes them afresh, never copies them, and where it finds a fault runs the full
    checks first, for the same code (records/verify.py); a re-score quotes them as they are.
    `seats_known`: the seats are known to hold (with `engine_only`: the names; the same seats
    were checked before, records/replay.py `_HEADS_CHECKED`)."""
    players = match.players
    pack = match.pack
    teams = None if engine_only else [match.team_of(s) for s in range(players)]
    for s, seat in enumerate(() if seats_known and engine_only else rec.seats[:]):
        check_seat_name(seat.name, s)
        if teams is not None and seat.team != teams[s]:
            raise RecordError(
                "seat-team",
                f"seats[{s}].team is {seat.team}; "
                + (
                    f"the rules put seat {s} in team {teams[s]}"
                    if any(teams)
                    else "this game has no teams (0)"
                ),
            )
    if rec.HasField("deal_source"):  # absent: every field empty, nothing to check
        source = rec.deal_source
        _text(source.algorithm, "deal_source.algorithm")
        for name in ("commitment", "seed"):
            value = getattr(source, name)
            if value and len(value) != SEED_SIZE:
                raise RecordError(
                    "commitment", f"deal_source.{name} has {len(value)} bytes, not {SEED_SIZE}"
                )
    first = rec.start.hand_number
    if hands is None:
        hands = hand_fields(rec)
    scored = None if engine_only else rec.hands[:]
    for h, fields in enumerate(hands, 1):
        check_hand(fields, first + h - 1, players, pack, h)
        if scored is not None:
            _hand_scores(scored[h - 1], players, units, h)
    out = rec.outcome
    if not engine_only:
        _outcome(out, players, units)
    _text(out.reason, "outcome.reason")
    p = rec.provenance
    _text(p.source, "provenance.source")
    _text(p.reference, "provenance.reference")
    _text(p.played_at, "provenance.played_at")
    check_played_at(p.played_at)
    if not engine_only or rec.rules.HasField("time_control"):
        check_timing(rec, players)
    return hands


def _outcome(out: pb.Outcome, players: int, units: tuple[str, ...]) -> None:
    winners = list(out.winners)
    if winners != sorted(set(winners)) or (winners and winners[-1] >= players):
        raise RecordError(
            "outcome",
            f"outcome.winners {quoted(winners)}: seats (0..{players - 1}), ascending, once each",
        )
    if out.HasField("resigned") and out.resigned >= players:
        raise RecordError("outcome", f"outcome.resigned: seat {out.resigned} does not exist")
    if len(out.scores) != players:
        raise RecordError("outcome", f"{len(out.scores)} final scores for {players} seats")
    foreign, none = _foreign_units(units)
    for s, score in enumerate(out.scores):
        if foreign(score) != none:
            _score(score, units, f"outcome.scores[{s}]")


# --- the content: exactly what a replay gives -----------------------------------------------


def _free_fields(rec: pb.GameRecord) -> tuple[list[str], Provenance, pb.DealSource | None]:
    """A record's seat names, provenance and deal source: what its rebuild takes from it."""
    p = rec.provenance
    names = [s.name for s in rec.seats[:]]
    return names, Provenance(p.source, p.reference, p.played_at), _deal_source(rec)


def _deal_source(rec: pb.GameRecord) -> pb.DealSource | None:
    if not rec.HasField("deal_source"):
        return None
    # Field by field, never a copy: an unknown field of the record is never rebuilt.
    d = rec.deal_source
    return pb.DealSource(algorithm=d.algorithm, commitment=d.commitment, seed=d.seed)


def rebuild_record(rec: pb.GameRecord, match: Match) -> pb.GameRecord:
    """What `build_record` makes of `match` (the replay of `rec`) with the record's own free
    fields: its seat names, provenance, packs and deal source, its clocks (checked by
    `check_timing`) and, for a match not finished, its reason."""
    names, provenance, source = _free_fields(rec)
    built = build_record(
        match,
        names,
        provenance,
        [h.deal.deck or None for h in rec.hands[:]],
        source,
        record_timing(rec),
    )
    if not match.finished:
        built.outcome.reason = rec.outcome.reason  # why a stopped match stopped: free text
    return built


_HEADS: set[bytes] = set()  # heads of records found to be what `build_record` writes
_HEADS_KEPT = 4096  # at most (then forgotten all at once)


def content_holds(
    rec: pb.GameRecord,
    match: Match,
    units: tuple[str, ...],
    record_bytes: bytes,
    hands: list[HandFields],
) -> bool:
    """The quick way to what `check_content` checks: True only when `record_bytes` are
    exactly what `rebuild_record` makes of `match` (the replay of `rec`, decoded from them;
    `units`: its game's; `hands`: its hands' fields, as `decode_apart` read them); False when
    they are not, or when this cannot tell (a timed record, a hand in progress, hands not read
    from the bytes). The rebuild is not made: the record's bytes before its hands and after
    them are compared with `record_head`'s and `record_tail_of`'s; each hand's number,
    dealer, deal, seats and actions, read from the bytes in their canonical encoding, with
    the replay's, and the bytes after them with its score lines and scores (`hand_scores`)."""
    results = match.results
    if (
        rec.rules.HasField("time_control")
        or not results
        or len(hands) != len(results)
        or hands[0].lines_at < 0  # not read from the bytes (`decode_apart`: all or none)
    ):
        return False
    # The head: fields 1 to 5, which alone make the match (its rules and start), the seats'
    # names and the deal source; so a head found to be what `build_record` writes holds
    # for any record it begins (`_HEADS`: those found).
    head = record_bytes[: hands[0].key_at]
    if head not in _HEADS:
        names = [seat.name for seat in rec.seats[:]]
        if record_head(match, names, _deal_source(rec)) != head:
            return False
        if len(_HEADS) >= _HEADS_KEPT:
            _HEADS.clear()
        _HEADS.add(head)
    p = rec.provenance
    provenance = Provenance(p.source, p.reference, p.played_at)
    reason = None if match.finished else rec.outcome.reason
    tail = record_tail_of(match, units, provenance, reason)
    if not (hands[-1].end == len(record_bytes) - len(tail) and record_bytes.endswith(tail)):
        return False
    return hands_hold(record_bytes, hands, results, unit_fields(units), True) == len(results)


def check_content(
    rec: pb.GameRecord,
    match: Match,
    record_bytes: bytes,
    explain: Callable[[], None] = lambda: None,
) -> None:
    """`RecordError` `record-content` unless `record_bytes` (canonical, decoding to `rec`)
    are exactly what `build_record` makes of `match`, the replay of `rec`, with the record's
    own free fields: its seat names, provenance, packs and deal source, and, for a match not
    finished, its reason. The message names the first field that differs. Where they differ,
    `explain()` is called first: it may raise a more precise error (the score lines, ...)."""
    built = rebuild_record(rec, match)
    if canonical_bytes(built) == record_bytes:
        return
    explain()
    found = first_difference(rec, built)
    if found is None:  # the same message, other bytes: decode_canonical let it through
        raise RecordError("record-noncanonical", "the record bytes are not canonical")
    path, got, want = found
    hand, action = _position(path)
    raise RecordError(
        "record-content",
        f"{path} is {got}; a replay of the record's deals and actions gives {want}",
        hand=hand,
        action=action,
    )


_MISSING = "absent"


def _shown(value: Any) -> str:
    if isinstance(value, Message):
        return "a message" if value.ByteSize() else "an empty message"
    return quoted(value)


def first_difference(got: Message, want: Message, path: str = "") -> tuple[str, str, str] | None:
    """The first field, in field-number order and depth first, where two messages of one
    type differ: (its path, e.g. `hands[2].scores_after[1].jetons`, the value in `got` and
    in `want`, for a person); None when they are equal."""
    if got == want:
        return None
    fields: list[Any] = list(got.DESCRIPTOR.fields)  # upb's or the pure descriptor type
    for field in sorted(fields, key=lambda f: f.number):
        name = path + field.name
        a, b = getattr(got, field.name), getattr(want, field.name)
        is_message = field.message_type is not None
        if field.is_repeated:
            for i in range(max(len(a), len(b))):
                at = f"{name}[{i}]"
                if i >= len(a):
                    return at, _MISSING, _shown(b[i])
                if i >= len(b):
                    return at, _shown(a[i]), _MISSING
                if is_message:
                    found = first_difference(a[i], b[i], at + ".")
                    if found is not None:
                        return found
                elif a[i] != b[i]:
                    return at, _shown(a[i]), _shown(b[i])
            continue
        if isinstance(a, bytes) and a != b and not field.has_presence:
            # cards or seats, one a byte: the first byte that differs
            n = min(len(a), len(b))
            i = next((i for i in range(n) if a[i] != b[i]), n)
            return (
                f"{name}[{i}]",
                str(a[i]) if i < len(a) else _MISSING,
                str(b[i]) if i < len(b) else _MISSING,
            )
        if field.has_presence:
            has_a, has_b = got.HasField(field.name), want.HasField(field.name)
            if has_a != has_b:
                return (
                    name,
                    _shown(a) if has_a else _MISSING,
                    _shown(b) if has_b else _MISSING,
                )
        if is_message:
            found = first_difference(a, b, name + ".")
            if found is not None:
                return found
        elif a != b:
            return name, _shown(a), _shown(b)
    return None


_PLACE = re.compile(r"hands\[(\d+)\](?:\.(?:actions|seats)\[(\d+)\])?")


def _position(path: str) -> tuple[int | None, int | None]:
    """The hand and action (1-based) a field path points into, if any."""
    m = _PLACE.match(path)
    if m is None:
        return None, None
    return int(m.group(1)) + 1, (int(m.group(2)) + 1 if m.group(2) is not None else None)
