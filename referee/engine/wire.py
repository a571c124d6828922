"""A record's hands compared with a replay straight from the record's bytes, in native code.

`records/verify.py` must know that a record is byte for byte what `build_record` makes of its
replay. Building that second record and serializing it costs more than the replay; instead,
the record's own bytes are read here, field by field, and each hand is held to the one
canonical encoding (protobuf's deterministic serialization of `HandRecord`) of what the
replay holds: its number, dealer, deal, seats and actions. Nothing is decoded into objects;
a hand that is not exactly so is only said to be so (-1), and the caller then rebuilds the
record the long way for the fault (records/strict.py). The field numbers are the `.proto`'s
(record.proto, `GameRecord`, `HandRecord`, `Deal`; a test holds them to the descriptors).

The wire format's rules used (protobuf encoding guide): a field is a varint key (number << 3
| wire type), then a varint (type 0), 8 bytes little-endian (type 1) or a varint length and
that many bytes (type 2); a canonical varint has no high zero byte; proto3 leaves out a
scalar equal to 0 or an empty string, writes repeated scalars packed (one type-2 field) and
fields in number order; an `optional` scalar is written whenever it is set.
"""

from __future__ import annotations

from typing import Final

from mypy_extensions import i64

__all__ = ["HANDS", "hand_prefix", "hand_spans"]

HANDS: Final = 6  # GameRecord.hands
_HAND_KEY: Final = HANDS << 3 | 2
# HandRecord: number 1, dealer 2 (varints), deal 3 (a Deal), seats 4 (bytes), actions 5
# (packed varints); then lines 6 and scores_after 7, compared by the caller.
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

    def same_varint(self, key: int, value: int) -> bool:
        """A varint field equal to `value`, written if and only if `value` is not 0."""
        if value == 0:
            return not self.key(key)
        return self.key(key) and self.varint() == value

    def same_bytes(self, key: int, value: bytes) -> bool:
        """A bytes field equal to `value`, written if and only if `value` is not empty."""
        if not value:
            return not self.key(key)
        if not self.key(key) or self.length() != len(value):
            return False
        pos = self.pos
        self.pos = pos + len(value)
        return self.data[pos : self.pos] == value


def hand_spans(data: bytes) -> list[int]:
    """Where a record's hands are: [start of the first hand's key, end of the last hand,
    then each hand's bytes as start, end, ...], read from the record's top-level fields; []
    when the record has no hands, when its hands are not one run of fields, or when a field
    is not well formed."""
    r = _Reader(data, 0, len(data))
    spans: list[int] = []
    first = -1
    last = -1
    while r.pos < r.end:
        at = r.pos
        key = r.varint()
        kind = key & 7
        if key < 0:
            return []
        if kind == 0:
            r.varint()
        elif kind == 1:
            r.pos += 8
        elif kind == 2:
            n = r.length()
            if n >= 0 and key == _HAND_KEY:
                if first < 0:
                    first = at
                elif last != at:
                    return []  # another field between two hands
                spans.append(r.pos)
                spans.append(r.pos + n)
                last = r.pos + n
            r.pos += n
        elif kind == 5:
            r.pos += 4
        else:
            return []
        if r.bad or r.pos > r.end:
            return []
    if first < 0:
        return []
    return [first, last, *spans]


def hand_prefix(
    data: bytes,
    start: int,
    end: int,
    number: int,
    dealer: int,
    masks: tuple[int, ...],
    retourne: int,
    talon: bytes,
    seats: bytes,
    actions: list[int],
) -> int:
    """Whether `data[start:end]`, a `HandRecord`, begins with the canonical encoding of this
    number, dealer, deal (each seat's cards as a mask, the retourne or -1, the talon; any
    pack, a free field) and these seats and actions: the position after them (where the
    score lines begin), or -1 when it does not."""
    r = _Reader(data, start, end)
    if not (r.same_varint(1 << 3, number) and r.same_varint(2 << 3, dealer)):
        return -1
    if not r.key(3 << 3 | 2):
        return -1
    n = r.length()
    if n < 0:
        return -1
    after_deal = r.pos + n
    deal = _Reader(data, r.pos, after_deal)
    if masks:
        if not deal.key(1 << 3 | 2) or deal.length() != 8 * len(masks):
            return -1
        pos = deal.pos
        for mask in masks:
            value = 0
            for k in range(8):
                value |= data[pos + k] << (8 * k)
            if value != mask:
                return -1
            pos += 8
        deal.pos = pos
    elif deal.key(1 << 3 | 2):
        return -1
    if retourne >= 0:
        if not deal.key(2 << 3) or deal.varint() != retourne:
            return -1
    elif deal.key(2 << 3):
        return -1
    if not deal.same_bytes(3 << 3 | 2, talon):
        return -1
    if deal.key(4 << 3 | 2):  # the pack: the record's own, any (checked apart)
        m = deal.length()
        if m <= 0:
            return -1
        deal.pos += m
    if deal.bad or deal.pos != after_deal:
        return -1
    r.pos = after_deal
    if not r.same_bytes(4 << 3 | 2, seats):
        return -1
    if actions:
        if not r.key(5 << 3 | 2):
            return -1
        n = r.length()
        if n < 0:
            return -1
        packed = _Reader(data, r.pos, r.pos + n)
        for action in actions:
            if packed.varint() != action:
                return -1
        if packed.pos != packed.end:
            return -1
        r.pos = packed.end
    elif r.key(5 << 3 | 2):
        return -1
    if r.bad:
        return -1
    return r.pos
