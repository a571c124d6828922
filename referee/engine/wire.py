"""A record's bytes read and written directly, in native code, where protobuf's objects cost
more than the work (records/verify.py, the re-score).

Reading: each hand's number, dealer, deal, seats and actions (`read_hands`), the fields the
engine reads, taken only where they are in their one canonical encoding (protobuf's
deterministic serialization), so that the values are exactly those a decoder gives; nothing
is decoded into protobuf objects. A hand that is not so is not read (None), and the caller
reads it through the decoder (records/strict.py `hand_fields`). Writing: the fields after a
record's hands, its outcome and provenance (`record_tail`), as `build_record` sets them. The
field numbers are the `.proto`'s (record.proto, `GameRecord`, `HandRecord`, `Deal`,
`Outcome`, `Provenance`; tests hold them to the descriptors and the bytes to protobuf's).

The wire format's rules used (protobuf encoding guide): a field is a varint key (number << 3
| wire type), then a varint (type 0), 8 bytes little-endian (type 1) or a varint length and
that many bytes (type 2); a canonical varint has no high zero byte; proto3 leaves out a
scalar equal to 0 or an empty string, writes repeated scalars packed (one type-2 field) and
fields in number order; an `optional` scalar is written whenever it is set.
"""

from __future__ import annotations

from typing import Final, cast

from mypy_extensions import i64

from tapis_cartes.referee.engine.actions import (
    PASS,
    PILLE,
    PILLE_STOP,
    PLAY,
    check_action,
    first_out_of_range,
    pass_cards,
)
from tapis_cartes.referee.engine.base import Deal, HandResult, ScoreLine
from tapis_cartes.referee.engine.cards import card_str, distinct_mask, iter_cards
from tapis_cartes.referee.engine.errors import InvalidAction, RecordError

__all__ = [
    "HANDS",
    "MAX_HANDS",
    "HandFields",
    "check_envelope_size",
    "check_hand",
    "check_record_size",
    "fields_below",
    "hand_scores",
    "hand_spans",
    "hands_hold",
    "read_hand",
    "read_hands",
    "record_tail",
]

HANDS: Final = 6  # GameRecord.hands
_HAND_KEY: Final = HANDS << 3 | 2
# HandRecord: number 1, dealer 2 (varints), deal 3 (a Deal), seats 4 (bytes), actions 5
# (packed varints); then lines 6 and scores_after 7 (read by the decoder, compared by verify).
# Deal: hands 1 (packed fixed64), retourne 2 (optional varint), talon 3, deck 4 (bytes).


class _Reader:
    """A position in `data`, never past `end`; `bad` once something is not canonical.
    (Native 64-bit ints: no int object is made per byte.)"""

    def __init__(self, data: bytes, pos: i64, end: i64) -> None:
        self.data = data
        self.pos: i64 = pos
        self.end: i64 = end
        self.bad = False

    def varint(self) -> i64:
        """The canonical varint at the position (no high zero byte), below 2**63 (nothing a
        hand holds is larger: a larger one is told as none); -1 and `bad` when there is
        none."""
        data = self.data
        pos = self.pos
        end = self.end
        value: i64 = 0
        shift: i64 = 0
        while pos < end and shift < 63:
            b: i64 = data[pos]
            pos += 1
            if b < 0x80:
                if b == 0 and shift > 0:
                    break  # a high zero byte: not the canonical form
                self.pos = pos
                return value | b << shift
            value |= (b & 0x7F) << shift
            shift += 7
        self.bad = True
        return -1

    def key(self, want: int) -> bool:
        """Whether the next field has key `want` (read past it if so)."""
        if self.pos >= self.end or self.data[self.pos] != want:  # keys here are one byte
            return False
        self.pos += 1
        return True

    def length(self) -> int:
        """A length-delimited field's length, its bytes within `end`; -1 and `bad` if not."""
        n = self.varint()
        if n < 0 or n > self.end - self.pos:
            self.bad = True
            return -1
        return n


# The most a record holds (`check_record_size`): its bytes are at most 64 MiB, but a field can
# be one or two bytes long, and each decoded is an object of a hundred bytes or more.
MAX_HANDS: Final = 10_000  # hands (a match the referee plays stops at `--max-hands`, below)
MAX_HAND_FIELDS: Final = 1000  # fields of one hand (its score lines, a few dozen at most)
MAX_PART_FIELDS: Final = 256  # fields of any other part (rules and options, outcome, ...)
# GameRecord's fields by number (record.proto), to name a part.
_PARTS: Final = (
    "",
    "format_version",
    "rules",
    "seats",
    "start",
    "deal_source",
    "hands",
    "outcome",
    "provenance",
)


def check_record_size(data: bytes) -> None:
    """`RecordError` (`record-size`) when the record of `data` has more hands, or a part of
    it more values, than a record holds (`MAX_HANDS` ...): found before anything is decoded,
    so that a small record made of many tiny fields costs no more than its bytes. The fields
    are read as a decoder reads them (`_loose_key`): an encoding Tapis never writes (a long
    varint, a group) is counted all the same, not a way past the count. The check stops
    where the bytes are not well formed: the decoder stops there too."""
    r = _Reader(data, 0, len(data))
    hands: i64 = 0
    others: i64 = 0
    while r.pos < r.end:
        key = _loose_key(r)
        if key < 0:
            return
        if key == _HAND_KEY:
            n = _any_varint(r)
            if n < 0 or n > r.end - r.pos:
                return
            hands += 1
            if hands > MAX_HANDS:
                raise RecordError(
                    "record-size",
                    f"the record has more than {MAX_HANDS} hands, the most a record holds",
                )
            if _count_values(_Reader(data, r.pos, r.pos + n), _HAND_PACKED, MAX_HAND_FIELDS) > (
                MAX_HAND_FIELDS
            ):
                raise RecordError("record-size", f"more than {MAX_HAND_FIELDS} values", hand=hands)
            r.pos += n
            continue
        others += 1
        if key & 7 == 2:
            n = _any_varint(r)
            if n < 0 or n > r.end - r.pos:
                return
            if _count_values(_Reader(data, r.pos, r.pos + n), 0, MAX_PART_FIELDS) > (
                MAX_PART_FIELDS
            ):
                number = key >> 3
                name = _PARTS[number] if number < len(_PARTS) else f"field {number}"
                raise RecordError("record-size", f"{name}: more than {MAX_PART_FIELDS} fields")
            r.pos += n
        elif not _loose_skip(r, key, 0):
            return
        if others > MAX_PART_FIELDS:
            raise RecordError(
                "record-size", f"the record has more than {MAX_PART_FIELDS} fields besides hands"
            )


# RecordEnvelope: record 1 (bytes), annotations 4 (Annotations: actions 1, each an
# ActionAnnotation whose legal actions, 3, are packed varints).
_ENVELOPE_RECORD: Final = 1 << 3 | 2
_ENVELOPE_NOTES: Final = 4 << 3 | 2
_NOTE_KEY: Final = 1 << 3 | 2
_NOTE_PACKED: Final = 1 << 3  # ActionAnnotation.legal
# HandRecord's packed varints, counted value by value: actions 5, elapsed_ms 8, timeouts 9.
_HAND_PACKED: Final = 1 << 5 | 1 << 8 | 1 << 9


def check_envelope_size(data: bytes) -> None:
    """`RecordError` (`record-size`) when the envelope of `data` holds more annotations than
    Tapis makes: one per action of its record at most, each of at most `MAX_HAND_FIELDS`
    values (its legal actions counted one by one). The annotations are outside the
    signature: anyone can add them to a genuine record, so they are bounded, before anything
    is decoded, by the record they annotate. Read as `check_record_size` reads."""
    r = _Reader(data, 0, len(data))
    record = _Reader(data, 0, 0)  # the last record field, as a decoder keeps it
    part = _next_part(r, _ENVELOPE_RECORD)
    while part is not None:
        record = part
        part = _next_part(r, _ENVELOPE_RECORD)
    r.pos = 0
    part = _next_part(r, _ENVELOPE_NOTES)
    if part is None:
        return
    most = _actions_in(record)
    # Comments, score lines and the other fields of all the annotations (each a value a
    # reader makes an object of, from 2 bytes: an empty comment), the packed legal actions
    # apart: past this, a 14 MB file of empty comments took a reader to 1 GB.
    most_fields = NOTE_FIELDS_PER_ACTION * most + NOTE_FIELDS
    notes: i64 = 0
    fields: i64 = 0
    while part is not None:
        note = _next_part(part, _NOTE_KEY)
        while note is not None:
            notes += 1
            if notes > most:
                raise RecordError(
                    "record-size",
                    f"the envelope holds more annotations than its record has actions ({most}):"
                    " Tapis makes one per action",
                )
            start = note.pos
            if _count_values(note, _NOTE_PACKED, MAX_HAND_FIELDS) > MAX_HAND_FIELDS:
                raise RecordError(
                    "record-size", f"annotation {notes}: more than {MAX_HAND_FIELDS} values"
                )
            note.pos = start
            fields += _count_values(note, 0, MAX_HAND_FIELDS)
            if fields > most_fields:
                raise RecordError(
                    "record-size",
                    f"the annotations hold more than {most_fields} comments, score lines and"
                    f" other fields ({NOTE_FIELDS_PER_ACTION} an action of the record, and"
                    f" {NOTE_FIELDS}): Tapis makes far fewer",
                )
            note.pos = start
            longest = _longest_part(note, _NOTE_PACKED)
            if longest > MAX_NOTE_PART:
                raise RecordError(
                    "record-size",
                    f"annotation {notes}: a comment or score line of {longest} bytes (a comment"
                    f" holds at most {MAX_COMMENT} characters)",
                )
            note = _next_part(part, _NOTE_KEY)
        part = _next_part(r, _ENVELOPE_NOTES)


# The most fields of all the annotations of an envelope, legal actions apart: so many an action
# of its record, and so many more (Tapis's annotations hold 3 to 6 an action, and the comments
# people add).
NOTE_FIELDS_PER_ACTION: Final = 16
NOTE_FIELDS: Final = 100_000

# The most characters of one comment of an annotation (`tapis record annotate --comment`), and
# the most bytes of one of its comments or score lines: 4 a character at most in UTF-8 (a score
# line Tapis makes is far less). An annotation's comment of 60 MB took a reader to 400 MB.
MAX_COMMENT: Final = 1000
MAX_NOTE_PART: Final = 4 * MAX_COMMENT


def _longest_part(r: _Reader, packed: i64) -> i64:
    """The length of the longest length-delimited field from the reader's position to its
    end, but those of the numbers in the bit mask `packed` (their values are counted), as far
    as the bytes are well formed."""
    longest: i64 = 0
    while r.pos < r.end:
        key = _loose_key(r)
        if key < 0:
            break
        number = key >> 3
        if key & 7 == 2:
            n = _any_varint(r)
            if n < 0 or n > r.end - r.pos:
                break
            if not (number < 63 and packed >> number & 1) and n > longest:
                longest = n
            r.pos += n
        elif not _loose_skip(r, key, 0):
            break
    return longest


def _next_part(r: _Reader, want: i64) -> _Reader | None:
    """The bytes of the next field of key `want` (length-delimited) from the reader's
    position, the fields before it skipped and the reader left past it; None at the end, or
    where the bytes are not well formed (a decoder stops there too)."""
    while r.pos < r.end:
        key = _loose_key(r)
        if key < 0:
            return None
        if key != want:
            if not _loose_skip(r, key, 0):
                return None
            continue
        n = _any_varint(r)
        if n < 0 or n > r.end - r.pos:
            return None
        part = _Reader(r.data, r.pos, r.pos + n)
        r.pos += n
        return part
    return None


def _actions_in(r: _Reader) -> i64:
    """The actions of the record read by `r`: its hands' `actions` values, packed or not, as
    far as its bytes are well formed."""
    count: i64 = 0
    hand = _next_part(r, _HAND_KEY)
    while hand is not None:
        while hand.pos < hand.end:
            inner = _loose_key(hand)
            if inner < 0:
                break
            if inner == _ACTIONS_KEY:
                size = _any_varint(hand)
                if size < 0 or size > hand.end - hand.pos:
                    break
                count += _varints_in(hand.data, hand.pos, hand.pos + size)
                hand.pos += size
            else:
                if inner == _ACTION_KEY:
                    count += 1
                if not _loose_skip(hand, inner, 0):
                    break
        hand = _next_part(r, _HAND_KEY)
    return count


_ACTIONS_KEY: Final = 5 << 3 | 2  # HandRecord.actions, packed
_ACTION_KEY: Final = 5 << 3  # one action, not packed (a decoder takes both)


def _count_values(r: _Reader, packed: i64, most: i64) -> i64:
    """The values from the reader's position to its end, counted up to `most` + 1 (where the
    count stops), or as far as they are well formed: a field is one, except that a field
    whose number is in the bit mask `packed`, written packed, is as many as its varints.
    Those are first counted by their bytes (a varint is one at least): only a count past
    `most` so is counted again, exactly (a hand's actions and times, a few hundred bytes,
    are never read twice)."""
    start = r.pos
    count = _count_upto(r, packed, most, False)
    if count > most and packed:
        r.pos = start
        count = _count_upto(r, packed, most, True)
    return count


def _count_upto(r: _Reader, packed: i64, most: i64, exact: bool) -> i64:
    """`_count_values`, the packed fields counted by their bytes, or `exact`ly."""
    count: i64 = 0
    while r.pos < r.end and count <= most:
        key = _loose_key(r)
        if key < 0:
            break
        number = key >> 3
        if key & 7 == 2 and number < 63 and packed >> number & 1:
            n = _any_varint(r)
            if n < 0 or n > r.end - r.pos:
                break
            count += _varints_in(r.data, r.pos, r.pos + n) if exact else n
            r.pos += n
        else:
            if not _loose_skip(r, key, 0):
                break
            count += 1
    return count


def _varints_in(data: bytes, start: i64, end: i64) -> i64:
    """The varints of `data[start:end]`, packed: each ends with its one byte below 0x80."""
    count: i64 = 0
    i = start
    while i < end:
        b: i64 = data[i]
        if b < 0x80:
            count += 1
        i += 1
    return count


# Groups nest at most this deep in what a decoder takes (protobuf's default recursion limit).
_MAX_DEPTH: Final = 100


def _any_varint(r: _Reader) -> i64:
    """The varint at the position in any encoding a decoder takes (at most 10 bytes, high
    zero bytes allowed): its value, the position past it; -1, the position kept, when there
    is none (the end reached, or 10 bytes without an end) or when it is above 2**63 - 1 (no
    key or length a decoder takes)."""
    data = r.data
    pos = r.pos
    end = r.end
    value: i64 = 0
    shift: i64 = 0
    big = False
    while pos < end and shift < 70:
        b: i64 = data[pos]
        pos += 1
        if shift < 63:
            value |= (b & 0x7F) << shift
        elif b & 0x7F:
            big = True
        if b < 0x80:
            if big:
                return -1
            r.pos = pos
            return value
        shift += 7
    return -1


def _loose_key(r: _Reader) -> i64:
    """A field's key as a decoder reads it (`_any_varint`); -1 when it is none a decoder
    takes: field number 0, above 2**29 - 1, or an end of group where no group is open."""
    key = _any_varint(r)
    if key < 8 or key > 0xFFFFFFFF or key & 7 == 4:
        return -1
    return key


def _loose_skip(r: _Reader, key: i64, depth: i64) -> bool:
    """Past the value of a field of `key`, read as a decoder reads it: any varint encoding,
    a group (wire type 3, which Tapis never writes) skipped to its end; False when it is not
    well formed (a decoder stops there too)."""
    kind = key & 7
    if kind == 0:
        return _any_varint(r) != -1 or _past_big_varint(r)
    if kind == 1:
        r.pos += 8
        return r.pos <= r.end
    if kind == 5:
        r.pos += 4
        return r.pos <= r.end
    if kind == 2:
        n = _any_varint(r)
        if n < 0 or n > r.end - r.pos:
            return False
        r.pos += n
        return True
    if kind != 3 or depth >= _MAX_DEPTH:
        return False
    while r.pos < r.end:
        inner = _any_varint(r)
        if inner < 8 or inner > 0xFFFFFFFF:
            return False
        if inner & 7 == 4:
            return inner >> 3 == key >> 3  # the group's own end
        if not _loose_skip(r, inner, depth + 1):
            return False
    return False


def _past_big_varint(r: _Reader) -> bool:
    """Past a varint value above 2**63 - 1 (a uint64 a decoder takes, which `_any_varint`
    tells as none); False when there is no varint at all."""
    pos = r.pos
    end = min(r.end, pos + 10)
    while pos < end:
        b: i64 = r.data[pos]
        pos += 1
        if b < 0x80:
            r.pos = pos
            return True
    return False


def hand_spans(data: bytes) -> list[int]:
    """Where a record's hands are: for each, the position of its key, then the start and end
    of its bytes, read from the record's top-level fields; [] when the record has no hands,
    when its hands are not one run of fields, when a field is not well formed, or when the
    fields are not in number order around the hands (every field before them numbered below
    `HANDS`, every one after them above). So the bytes before the first hand (the head)
    alone hold every field numbered below `HANDS`: its rules, seats, start and deal source
    (the callers key what they check of them by those bytes)."""
    r = _Reader(data, 0, len(data))
    spans: list[int] = []
    while r.pos < r.end:
        at = r.pos
        key = r.varint()
        if key == _HAND_KEY:
            n = r.length()
            if n < 0:
                return []
            if spans and spans[-1] != at:
                return []  # another field between two hands
            spans += [at, r.pos, r.pos + n]
            r.pos += n
        else:
            # Fields in number order around the hands: below them before, above after.
            in_order = key >> 3 < HANDS if not spans else key >> 3 > HANDS
            if key < 0 or not in_order or not _skip(r, key & 7):
                return []
    return spans


def fields_below(data: bytes, end: int, number: int) -> int:
    """Where the top-level fields of `data[:end]` numbered `number` or above begin, when they
    all follow every field numbered below it (so `data[:at]` alone holds those): `end` when
    there is none; -1 when the fields are not in that order or one is not well formed."""
    r = _Reader(data, 0, end)
    at: i64 = -1
    while r.pos < r.end:
        pos = r.pos
        key = r.varint()
        if key < 0:
            return -1
        if key >> 3 >= number:
            if at < 0:
                at = pos
        elif at >= 0:
            return -1  # a field below `number` after one at or above it
        if not _skip(r, key & 7):
            return -1
    return end if at < 0 else at


class HandFields:
    """The fields of a recorded hand the engine reads: its number, dealer, deal (each seat's
    cards as a mask, the retourne or -1, the talon, the pack), seats and actions; and, when
    read from a record's bytes, where its key is, where its score lines begin and where it
    ends (else -1); and, so read, the cards of its card plays from `plays_from` on
    (`plain_cards`: every action from there is a card play, kind 0 and a card id 0..51), so
    that only the actions before are ranged one by one (`check_hand`). Else `plays_from` is
    the number of actions: each is ranged."""

    def __init__(
        self,
        number: int,
        dealer: int,
        masks: tuple[int, ...],
        retourne: int,
        talon: bytes,
        deck: bytes,
        seats: bytes,
        actions: list[int],
        lines_at: int = -1,
        end: int = -1,
        plays_from: int = -1,
        plain_cards: int = 0,
    ) -> None:
        self.number = number
        self.dealer = dealer
        self.masks = masks
        self.retourne = retourne
        self.talon = talon
        self.deck = deck
        self.seats = seats
        self.actions = actions
        self.lines_at = lines_at
        self.end = end
        self.key_at = -1
        self.plays_from = len(actions) if plays_from < 0 else plays_from
        self.plain_cards = plain_cards

    def deal(self) -> Deal:
        """The engine's deal of the hand."""
        return Deal(self.masks, self.retourne, tuple(self.talon))


_U32: Final = 0xFFFFFFFF  # the largest value of a uint32 field (HandRecord.number, dealer ...)


# --- a hand's fields against its game ---------------------------------------------------------

_PACK_BYTES: dict[int, bytes] = {}  # a pack's cards, one a byte (a few packs: every game's)


def check_hand(fields: HandFields, number: int, players: int, pack: int, h: int) -> None:
    """`RecordError` at the first fault of the fields of hand `h` (1-based) the engine reads,
    against its game (`players` seats, the cards of `pack`): its number (`number`, expected),
    dealer, deal, seats and actions, before any of it is replayed (records/strict.py
    `check_fields`: nothing out of its game's range reaches the engine). The happy path
    builds no text: a message is made for a fault."""
    if fields.number != number:
        raise RecordError("hand-number", f"numbered {fields.number}, expected {number}", hand=h)
    if fields.dealer >= players:
        raise RecordError(
            "deal:bad-dealer",
            f"hands[{h - 1}].dealer: dealer {fields.dealer} is not a seat (0..{players - 1})",
            hand=h,
        )
    _check_deal(fields, players, pack, h)
    seats = fields.seats
    actions = fields.actions
    n = len(actions)
    if len(seats) != n:
        raise RecordError("actions", f"{n} actions but {len(seats)} seats", hand=h)
    a = _first_not_seat(seats, players)
    if a >= 0:
        raise RecordError(
            "action:bad-seat", f"seat {seats[a]} does not exist", hand=h, action=a + 1
        )
    # The actions before `plays_from` one by one; those after, card plays all, by their
    # cards at once (and one by one only when one is not of the pack, to find it).
    a = first_out_of_range(actions, pack, fields.plays_from)
    if a < 0 and fields.plain_cards & ~pack:
        a = first_out_of_range(actions, pack)
    if a >= 0:
        _check_action(actions[a], pack, h, a + 1)
        raise AssertionError(f"action {actions[a]} is out of range")  # _check_action raised


def _first_not_seat(seats: bytes, players: int) -> i64:
    """The index of the first byte of `seats` that is no seat of `players`, or -1 (native
    ints: no int object per seat)."""
    limit: i64 = players
    i: i64 = 0
    n: i64 = len(seats)
    while i < n:
        if seats[i] >= limit:
            return i
        i += 1
    return -1


def _check_deal(hand: HandFields, players: int, pack: int, h: int) -> None:
    masks = hand.masks
    if len(masks) != players:
        raise RecordError(
            "deal:deal-hands",
            f"{_deal_at(h)}.hands: {len(masks)} hands for {players} seats",
            hand=h,
        )
    dealt = 0
    for m in masks:
        dealt |= m
    if dealt & ~pack:
        s, m = next((s, m) for s, m in enumerate(masks) if m & ~pack)
        raise RecordError(
            "deal:card-not-in-pack",
            f"{_deal_at(h)}.hands[{s}]: {card_str(next(iter_cards(m & ~pack)))} is not in "
            "this game's pack",
            hand=h,
        )
    retourne = hand.retourne
    if retourne >= 0 and not (retourne < 52 and pack >> retourne & 1):
        raise RecordError(
            "deal:card-not-in-pack",
            f"{_deal_at(h)}.retourne: {card_str(retourne)} is not in this game's pack",
            hand=h,
        )
    talon = hand.talon
    if talon:
        _cards_in_pack(talon, pack, "talon", h)
    deck = hand.deck
    if deck:
        mask = distinct_mask(deck)  # -1: a card twice, or no card
        if mask < 0 or mask & ~pack:  # which fault, looked for only when there is one
            _cards_in_pack(deck, pack, "deck", h)
            raise RecordError(
                "deal:duplicate-card", f"{_deal_at(h)}.deck: a card appears twice", hand=h
            )
        if mask != pack:  # distinct cards of the pack: as many as the pack's only when all
            raise RecordError(
                "deal:deck-size",
                f"{_deal_at(h)}.deck: {len(deck)} cards; the pack has {pack.bit_count()}",
                hand=h,
            )


def _deal_at(h: int) -> str:
    """Where hand `h`'s deal is in a record (a fault's message: made only for one)."""
    return f"hands[{h - 1}].deal"


def _cards_in_pack(cards: bytes, pack: int, field: str, h: int) -> None:
    """Cards one a byte (the deal's talon or deck, `field`): all of the game's pack
    (`deal:card-not-in-pack`); checked in one pass of C (`bytes.translate`), the culprit
    looked for only when there is one."""
    in_pack = _PACK_BYTES.get(pack)
    if in_pack is None:
        in_pack = _PACK_BYTES[pack] = bytes(iter_cards(pack))
    if cards.translate(None, in_pack):
        bad = next(c for c in cards if not (c < 52 and pack >> c & 1))
        raise RecordError(
            "deal:card-not-in-pack",
            f"{_deal_at(h)}.{field}: {card_str(bad)} is not in this game's pack",
            hand=h,
        )


def _check_action(action: int, pack: int, h: int, a: int) -> None:
    """One action well-formed and in the game's range (`action:invalid`)."""
    try:
        check_action(action)
    except InvalidAction as exc:
        raise RecordError("action:invalid", str(exc), hand=h, action=a) from None
    kind, payload = action & 7, action >> 3
    if kind == PLAY or (kind == PILLE and payload != PILLE_STOP):
        cards = [payload]
    elif kind == PASS:
        cards = list(iter_cards(pass_cards(action)))
    else:
        return
    for c in cards:  # below 52 (check_action)
        if not pack >> c & 1:
            raise RecordError(
                "action:invalid",
                f"action {action}: {card_str(c)} is not in this game's pack",
                hand=h,
                action=a,
            )


def read_hands(data: bytes) -> list[HandFields] | None:
    """Every hand of a record, read from its bytes (`read_hand`); None unless the record's
    hands are one run of fields (`hand_spans`) and each is read."""
    spans = hand_spans(data)
    if not spans:
        return None
    hands: list[HandFields] = []
    for i in range(0, len(spans), 3):
        hand = read_hand(data, spans[i + 1], spans[i + 2])
        if hand is None:
            return None
        hand.key_at = spans[i]
        hands.append(hand)
    return hands


# The int objects of the actions below `_BOXED_LIMIT` (every card play), made once: compiled
# code keeps an int unboxed and would make an object of it for each action put in a list.
_BOXED_LIMIT: Final = 4096
_BOXED: Final[list[object]] = list(range(_BOXED_LIMIT))


def read_hand(data: bytes, start: int, end: int) -> HandFields | None:
    """The `HandRecord` at `data[start:end]` when its number, dealer, deal, seats and actions
    are the canonical encoding of their values (protobuf's deterministic serialization, each
    value in its field's type) and no later field repeats one of them: then these values are
    exactly the ones a protobuf decoder gives. None when not (the caller then reads the hand
    through the decoder)."""
    r = _Reader(data, start, end)
    number = _scalar(r, 1 << 3)
    dealer = _scalar(r, 2 << 3)
    if number < 0 or dealer < 0 or not r.key(3 << 3 | 2):
        return None
    n = r.length()
    if n < 0:
        return None
    after_deal = r.pos + n
    deal = _Reader(data, r.pos, after_deal)
    masks: list[int] = []
    if deal.key(1 << 3 | 2):
        m = deal.length()
        if m <= 0 or m % 8:
            return None
        pos = deal.pos
        for _ in range(m // 8):
            value = 0
            for k in range(8):
                value |= data[pos + k] << (8 * k)
            masks.append(value)
            pos += 8
        deal.pos = pos
    retourne: i64 = -1
    if deal.key(2 << 3):
        retourne = deal.varint()
        if retourne > _U32:
            return None
    talon = _bytes(deal, 3 << 3 | 2)
    deck = _bytes(deal, 4 << 3 | 2)
    if deal.bad or deal.pos != after_deal:
        return None
    r.pos = after_deal
    seats = _bytes(r, 4 << 3 | 2)
    actions: list[object] = []  # ints: those below `_BOXED_LIMIT` shared, not made anew
    plays_from: i64 = 0  # the actions from here on are card plays (kind 0, a card 0..51)
    cards: i64 = 0  # their cards
    if r.key(5 << 3 | 2):
        n = r.length()
        if n <= 0:
            return None
        # Packed varints, read here (an action is one byte or two: a card play is below
        # 416); a longer one by the reader.
        at: i64 = r.pos
        stop: i64 = at + n
        boxed = _BOXED
        count: i64 = 0
        while at < stop:
            action: i64 = data[at]
            if action < 0x80:
                at += 1
            else:
                high: i64 = data[at + 1] if at + 1 < stop else 0
                if 0 < high < 0x80:
                    action = (action & 0x7F) | high << 7
                    at += 2
                else:
                    packed = _Reader(data, at, stop)
                    action = packed.varint()
                    if action < 0:
                        return None
                    at = packed.pos
            count += 1
            if action < 416 and not action & 7:
                bit: i64 = 1
                bit <<= action >> 3
                cards |= bit
            else:
                plays_from = count
            if action < _BOXED_LIMIT:
                actions.append(boxed[action])
            else:
                actions.append(action)
        r.pos = stop
    lines_at = r.pos
    # The fields after them (score lines, scores, clocks, any other) are read by the
    # decoder: here only well formed, and none of fields 1 to 5 again.
    while r.pos < r.end:
        key = r.varint()
        if key >> 3 <= 5:
            return None
        if not _skip(r, key & 7):
            return None
    if r.bad or r.pos != r.end:
        return None
    return HandFields(
        number,
        dealer,
        tuple(masks),
        retourne,
        talon,
        deck,
        seats,
        cast(list[int], actions),
        lines_at,
        end,
        plays_from,
        cards,
    )


def _scalar(r: _Reader, key: int) -> i64:
    """A uint32 field written only when not 0 (proto3): its value, 0 when absent; -1 when
    not canonical or out of the type's range."""
    if not r.key(key):
        return 0
    value = r.varint()
    if value <= 0 or value > _U32:
        return -1
    return value


def _bytes(r: _Reader, key: int) -> bytes:
    """A bytes field written only when not empty: its value, b"" when absent (`bad` when
    written empty)."""
    if not r.key(key):
        return b""
    n = r.length()
    if n <= 0:
        r.bad = True
        return b""
    pos = r.pos
    r.pos = pos + n
    return r.data[pos : r.pos]


def _skip(r: _Reader, kind: i64) -> bool:
    """Past the value of a field of wire type `kind`; False when it is not well formed."""
    if kind == 0:
        r.varint()
    elif kind == 1:
        r.pos += 8
    elif kind == 2:
        n = r.length()
        if n >= 0:
            r.pos += n
    elif kind == 5:
        r.pos += 4
    else:
        return False
    return not r.bad and r.pos <= r.end


# --- writing: the fields after a record's hands ------------------------------------------------

_OUTCOME: Final = 7  # GameRecord.outcome
_PROVENANCE: Final = 8  # GameRecord.provenance


def _put_varint(out: bytearray, value: i64) -> None:
    """A varint (`value` not negative)."""
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def _put_text(out: bytearray, field: int, text: str) -> None:
    """A string field, written only when not empty (proto3)."""
    if text:
        data = text.encode()
        out.append(field << 3 | 2)
        _put_varint(out, len(data))
        out.extend(data)


def _put_message(out: bytearray, field: int, body: bytearray) -> None:
    out.append(field << 3 | 2)
    _put_varint(out, len(body))
    out.extend(body)


def _score_body(values: tuple[int, ...], fields: tuple[int, ...]) -> bytearray:
    """A `Score`'s bytes: each value not 0 in its field (`fields`: the field number of each
    value's unit; sint64, zigzag-encoded)."""
    body = bytearray()
    for k in range(len(fields)):
        v: i64 = values[k]
        if v:
            body.append(fields[k] << 3)
            _put_varint(body, v << 1 if v >= 0 else ((-v) << 1) - 1)
    return body


_LINES: Final = 6  # HandRecord.lines
_SCORES_AFTER: Final = 7  # HandRecord.scores_after


def hand_scores(result: HandResult, fields: tuple[int, ...]) -> bytes:
    """A hand's score lines and scores after it as fields of its `HandRecord` (what follows
    its actions in an untimed record), as `build_record` sets them (`fields`: as
    `_score_body`)."""
    lines, scores = _pieces(fields)
    parts = [_line_bytes(line, fields, lines) for line in result.lines]
    parts += [_score_bytes(score, fields, scores) for score in result.scores_after]
    return b"".join(parts)


# For each `fields`, a score line's field and a score's, by value (`_pieces`); at most
# `_KEPT` of each, then forgotten all at once. (The engine makes each line once per value and
# shares it, base.py `_LINES`: a line found is most often the very key, compared by identity.
# Module globals are looked up by name at each use: the callers look them up once and hand
# them down.)
_PIECES: dict[tuple[int, ...], tuple[dict[ScoreLine, bytes], dict[tuple[int, ...], bytes]]] = {}
_KEPT: Final = 1 << 16


def _pieces(
    fields: tuple[int, ...],
) -> tuple[dict[ScoreLine, bytes], dict[tuple[int, ...], bytes]]:
    """The bytes kept for `fields`: of score lines, and of scores."""
    kept = _PIECES.get(fields)
    if kept is None:
        kept = _PIECES[fields] = ({}, {})
    return kept


def _line_bytes(line: ScoreLine, fields: tuple[int, ...], kept: dict[ScoreLine, bytes]) -> bytes:
    """A score line as a `lines` field: seat 1, kind 2, delta 3 (a `Score`, present even when
    every value is 0), rule 4, note 5, after_action 6 (`kept`: `_pieces(fields)`'s lines)."""
    known = kept.get(line)
    if known is not None:
        return known
    seat, kind, delta, rule, note, at = line
    body = bytearray()
    if seat:
        body.append(1 << 3)
        _put_varint(body, seat)
    _put_text(body, 2, kind)
    _put_message(body, 3, _score_body(delta, fields))
    _put_text(body, 4, rule)
    _put_text(body, 5, note)
    if at:
        body.append(6 << 3)
        _put_varint(body, at)
    out = bytearray()
    _put_message(out, _LINES, body)
    piece = bytes(out)
    if len(kept) >= _KEPT:
        kept.clear()
    kept[line] = piece
    return piece


def _score_bytes(
    score: tuple[int, ...], fields: tuple[int, ...], kept: dict[tuple[int, ...], bytes]
) -> bytes:
    """A seat's score after a hand as a `scores_after` field (`kept`: `_pieces(fields)`'s
    scores)."""
    piece = kept.get(score)
    if piece is None:
        out = bytearray()
        _put_message(out, _SCORES_AFTER, _score_body(score, fields))
        piece = bytes(out)
        if len(kept) >= _KEPT:
            kept.clear()
        kept[score] = piece
    return piece


def hands_hold(
    data: bytes,
    hands: list[HandFields],
    results: list[HandResult],
    fields: tuple[int, ...],
    whole: bool,
) -> int:
    """How many of the first hands, read from `data` (`read_hands`), are in their bytes what
    the replay made of them (`results`): their score lines and scores after them exactly
    `hand_scores`' bytes (then they decode to those values; `fields`: as `_score_body`),
    and with `whole` their number, dealer, deal, seats and actions the replay's too."""
    n = min(len(hands), len(results))
    lines, scores = _pieces(fields)
    for i in range(n):
        hand = hands[i]
        result = results[i]
        if whole and not _same_fields(hand, result):
            return i
        # The bytes after its actions: its lines' and scores' fields, compared piece by
        # piece (nothing joined).
        at = hand.lines_at
        for line in result.lines:
            at = _after(data, at, _line_bytes(line, fields, lines))
        for score in result.scores_after:
            at = _after(data, at, _score_bytes(score, fields, scores))
        if at < 0 or at != hand.end:
            return i
    return n


def _after(data: bytes, at: int, piece: bytes) -> int:
    """Where `piece` ends when `data` holds it at `at`; -1 when not (or `at` is -1)."""
    end = at + len(piece)
    return end if at >= 0 and data[at:end] == piece else -1


def _same_fields(hand: HandFields, result: HandResult) -> bool:
    """Whether a hand's fields read are the ones the replay made: number, dealer, deal
    (masks, retourne, talon), seats and actions."""
    deal = result.deal
    if not (
        hand.number == result.number
        and hand.dealer == result.dealer
        and hand.retourne == deal.retourne
        and hand.masks == deal.hands
    ):
        return False
    talon = hand.talon
    if len(talon) != len(deal.talon):
        return False
    for k, card in enumerate(deal.talon):
        if talon[k] != card:
            return False
    return hand.seats == result.action_seats and hand.actions == result.actions


def record_tail(
    finished: bool,
    winners: tuple[int, ...],
    scores: list[tuple[int, ...]],
    fields: tuple[int, ...],
    reason: str,
    resigned: int,
    rule: str,
    source: str,
    reference: str,
    played_at: str,
) -> bytes:
    """The bytes of a `GameRecord` holding only its `Outcome` (finished, winners, each seat's
    score (`fields`: as `_score_body`), reason, resigned (-1: none), rule) and its
    `Provenance`: both written even when empty, as `build_record` sets them. (The encoding
    guide's rules, as for reading: fields in number order, scalars and strings left out when
    0 or empty, the winners packed, an `optional` scalar written whenever set.)"""
    outcome = bytearray()
    if finished:
        outcome += b"\x08\x01"
    if winners:
        packed = bytearray()
        for w in winners:
            _put_varint(packed, w)
        _put_message(outcome, 2, packed)
    for score in scores:
        _put_message(outcome, 3, _score_body(score, fields))
    _put_text(outcome, 4, reason)
    if resigned >= 0:
        outcome.append(5 << 3)
        _put_varint(outcome, resigned)
    _put_text(outcome, 6, rule)
    provenance = bytearray()
    _put_text(provenance, 1, source)
    _put_text(provenance, 2, reference)
    _put_text(provenance, 3, played_at)
    out = bytearray()
    _put_message(out, _OUTCOME, outcome)
    _put_message(out, _PROVENANCE, provenance)
    return bytes(out)
