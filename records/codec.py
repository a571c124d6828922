"""Records: from a played match to canonical bytes, envelopes, record files, and back.

- `build_record(match, names, ...)` turns a finished (or stopped) engine match into a
  `GameRecord`; `canonical_bytes(record)` serializes it once, deterministically.
- An envelope (`RecordEnvelope`) keeps those bytes as they are, with the signature and key id;
  the record id is the SHA-256 of the bytes. Nothing re-serializes a record to check it.
- A record file: the 16-byte magic `TAPIS-RECORDS/1\\n`, then envelopes, each preceded by its
  length as a varint. `read_envelopes` and `write_envelopes` (atomic: a temporary file then a
  rename, so a failed write never leaves half a file).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import operator
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, TypeVar

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

from tapis_cartes.records.clocks import (
    FORFEIT,
    FORFEIT_RULE,
    Timing,
    forfeit_reason,
    iter_hand_timing,
)
from tapis_cartes.referee.engine import Deal, Match, RecordError, Rules, Start, find_game
from tapis_cartes.referee.engine.base import HandResult
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.referee.engine.wire import check_envelope_size, check_record_size, record_tail
from tapis_cartes.referee.engine.wire import hand_scores as wire_hand_scores
from tapis_cartes.referee.errors import OutputError, RecordFileError
from tapis_cartes.v1 import record_pb2 as pb

T = TypeVar("T")

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_NAME",
    "MAX_TEXT",
    "SCORE_LIMIT",
    "RecordFileError",
    "atomic_write",
    "build_record",
    "canonical_bytes",
    "deal_from_pb",
    "decode_record",
    "encode_varint",
    "envelope",
    "file_chunks",
    "file_name",
    "hand_scores",
    "no_records",
    "open_record_file",
    "put_frames",
    "read_envelopes",
    "read_frames",
    "record_head",
    "record_id",
    "record_tail_of",
    "rules_to_pb",
    "score_from_pb",
    "score_getter",
    "score_to_pb",
    "start_from_pb",
    "unit_fields",
    "writable",
    "write_envelopes",
    "write_frames",
]

FORMAT_VERSION = 1
MAGIC = b"TAPIS-RECORDS/1\n"
MAX_ENVELOPE = 64 << 20  # a record larger than 64 MiB is not a record
# The one bound on a seat's (player's) name, in characters: a record, a transcript and the
# referee refuse a longer one.
MAX_NAME = 64
# The bound, in characters, on every other text of a record (provenance, the outcome's
# reason, a score line's kind, rule and note, an option's string value).
MAX_TEXT = 256
# A start score is below this in magnitude (as an action is below 2**53): any client holds it
# exactly, and no match can add enough to it to overflow a record's 64-bit score.
SCORE_LIMIT = 1 << 53


# --- scores -------------------------------------------------------------------------------


def score_to_pb(units: Sequence[str], score: Sequence[int]) -> pb.Score:
    return pb.Score(**dict(zip(units, score, strict=True)))


@functools.cache
def score_getter(units: tuple[str, ...]) -> Callable[[pb.Score], tuple[int, ...]]:
    """A function from a `Score` message to its tuple of ints in the order of `units`
    (made once per units: a re-score asks for it for each record)."""
    if len(units) == 1:
        one = operator.attrgetter(units[0])
        return lambda score: (one(score),)
    return operator.attrgetter(*units)


def score_from_pb(units: Sequence[str], score: pb.Score) -> tuple[int, ...]:
    return score_getter(tuple(units))(score)


def rules_to_pb(rules: Rules) -> pb.Rules:
    """The record form of rules: game, ruleset, players, every option, digest."""
    return pb.Rules(
        game=rules.game,
        ruleset=rules.ruleset,
        players=rules.players,
        options=_options_to_pb(rules),
        digest=rules.digest,
    )


def _options_to_pb(rules: Rules) -> list[pb.Option]:
    out = []
    for key, value in sorted(rules.option_values().items()):
        if isinstance(value, bool):
            out.append(pb.Option(key=key, bool_value=value))
        elif isinstance(value, int):
            out.append(pb.Option(key=key, int_value=value))
        else:
            assert isinstance(value, str), (key, value)
            out.append(pb.Option(key=key, string_value=value))
    return out


def options_from_pb(options: Iterable[pb.Option]) -> dict[str, Option]:
    out: dict[str, Option] = {}
    for o in options:
        which = o.WhichOneof("value")
        if which is None:
            raise RecordError("bad-options", f"option {o.key!r} has no value")
        out[o.key] = getattr(o, which)
    return out


# --- building -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Provenance:
    source: str = "transcript"
    reference: str = ""
    played_at: str = ""


def build_record(
    match: Match,
    names: Sequence[str],
    provenance: Provenance,
    decks: Sequence[Sequence[int] | None] = (),
    deal_source: pb.DealSource | None = None,
    timing: Timing | None = None,
) -> pb.GameRecord:
    """The `GameRecord` of `match` as played so far. `decks[i]`, when given, is the pack
    from which hand i was dealt (kept so the record shows it). `timing`, for a timed match:
    its time control, each action's elapsed time and the actions made on time
    (records/clocks.py); a seat that lost on time is said in the outcome (CLOCK.FORFEIT).

    `verify` builds the record of every match it replays to compare it with the stored
    bytes, so the messages are filled in place, field by field (upb: several times quicker
    than building each message from keywords and copying it in); the bytes are the same."""
    units = find_game(match.rules.game).units
    rec = pb.GameRecord()
    rec.MergeFromString(record_head(match, names, deal_source))
    if timing is not None:
        rec.rules.time_control.CopyFrom(timing.control.to_pb())
    hands = rec.hands
    for i, result in enumerate(match.results):
        hand = hands.add()
        hand.number = result.number
        hand.dealer = result.dealer
        _deal_to_pb(result.deal, decks[i] if i < len(decks) else None, hand.deal)
        hand.seats = bytes(result.action_seats)
        hand.actions.extend(result.actions)
        hand.MergeFromString(hand_scores(result, units))
    live = match.hand
    if live is not None and not live.over:
        # A hand in progress (a stopped table): its deal and actions so far, no scores yet.
        i = len(match.results)
        hand = hands.add()
        hand.number = live.number
        hand.dealer = live.dealer
        _deal_to_pb(live.deal, decks[i] if i < len(decks) else None, hand.deal)
        hand.seats = bytes(live.action_seats)
        hand.actions.extend(live.actions)
    if timing is not None:
        sizes = [len(h.actions) for h in hands]
        for hand, (elapsed, timeouts) in zip(hands, iter_hand_timing(timing, sizes), strict=True):
            hand.elapsed_ms.extend(elapsed)
            hand.timeouts.extend(timeouts)
    # A seat that lost on time: the record's last action was made on time, as a forfeit.
    forfeit = (
        timing is not None
        and timing.control.policy == FORFEIT
        and sum(len(h.actions) for h in hands) - 1 in timing.timeouts
    )
    rec.MergeFromString(record_tail_of(match, units, provenance, forfeit=forfeit))
    return rec


def record_head(match: Match, names: Sequence[str], deal_source: pb.DealSource | None) -> bytes:
    """The bytes `build_record` writes before a match's hands: the format version, the rules
    (untimed), the seats (`names`), the start and the deal source."""
    # Each part serialized once per distinct value (a corpus's records share their rules and
    # seats; a match's start is its own), the deal source apart: fields written in number
    # order, so the parts joined are the message's bytes.
    teams = tuple([match.team_of(s) for s in range(len(names))])
    rules = match.rules
    head = _head_fields(rules, tuple(names), teams) + _start_field(
        match.first_hand_number, match.start_scores, find_game(rules.game).units
    )
    if deal_source is None:
        return head
    source = pb.GameRecord()
    source.deal_source.CopyFrom(deal_source)
    return head + source.SerializeToString(deterministic=True)


def record_tail_of(
    match: Match,
    units: tuple[str, ...],
    provenance: Provenance,
    reason: str | None = None,
    forfeit: bool = False,
) -> bytes:
    """The bytes `build_record` writes after a match's hands: its outcome (scores in `units`,
    the game's) and `provenance`, written natively (referee/engine/wire.py `record_tail`);
    with the head (`record_head`) and each hand's bytes between, an untimed record's (fields
    are written in number order). `reason`: the outcome's reason, when a record gives it (why
    a stopped match stopped); `forfeit`: the last action was made on time as a forfeit
    (CLOCK.FORFEIT), said by the outcome of a match a seat resigned."""
    resigned = match.resigned
    reason = match.end_reason if reason is None else reason
    rule = ""
    if resigned is not None and forfeit:
        reason, rule = forfeit_reason(resigned), FORFEIT_RULE
    return record_tail(
        match.finished,
        match.winners,
        match.scores,
        unit_fields(units),
        reason,
        -1 if resigned is None else resigned,
        rule,
        provenance.source,
        provenance.reference,
        provenance.played_at,
    )


def hand_scores(result: HandResult, units: tuple[str, ...]) -> bytes:
    """A hand's score lines and scores after it as fields of its `HandRecord` (what follows
    its actions in an untimed record), written natively (referee/engine/wire.py
    `hand_scores`): merged into the hand in one call (the same message)."""
    return wire_hand_scores(result, unit_fields(units))


@functools.lru_cache(maxsize=1024)
def _head_fields(rules: Rules, names: tuple[str, ...], teams: tuple[int, ...]) -> bytes:
    """The bytes of a `GameRecord` holding only the format version, the rules and the seats
    (names, teams)."""
    rec = pb.GameRecord()
    rec.format_version = FORMAT_VERSION
    rec.rules.CopyFrom(_rules_pb(rules))
    for name, team in zip(names, teams, strict=True):
        seat = rec.seats.add()
        seat.name = name
        seat.team = team
    return rec.SerializeToString(deterministic=True)


@functools.lru_cache(maxsize=8192)
def _start_field(
    first_hand_number: int, start_scores: tuple[tuple[int, ...], ...], units: tuple[str, ...]
) -> bytes:
    """The bytes of a `GameRecord` holding only its start."""
    fill = _score_filler(units)
    rec = pb.GameRecord()
    start = rec.start
    start.hand_number = first_hand_number
    for score in start_scores:
        fill(start.scores.add(), score)
    return rec.SerializeToString(deterministic=True)


@functools.lru_cache(maxsize=256)
def _rules_pb(rules: Rules) -> pb.Rules:
    """`rules_to_pb`, made once per distinct rules (they are immutable): copied, never
    changed."""
    return rules_to_pb(rules)


@functools.cache
def unit_fields(units: tuple[str, ...]) -> tuple[int, ...]:
    """The field number of each unit in a `Score` (for wire.py's writers; once per units)."""
    return tuple(pb.Score.DESCRIPTOR.fields_by_name[unit].number for unit in units)


@functools.cache
def _score_filler(units: tuple[str, ...]) -> Callable[[pb.Score, Sequence[int]], None]:
    """A function that sets a `Score` message (present, even when every value is 0) to a
    score in the order of `units`."""
    if units == ("points",):

        def fill(msg: pb.Score, score: Sequence[int]) -> None:
            msg.points = score[0]

        return fill

    def fill_all(msg: pb.Score, score: Sequence[int]) -> None:
        for unit, value in zip(units, score, strict=True):
            setattr(msg, unit, value)

    return fill_all


def _deal_to_pb(deal: Deal, deck: Sequence[int] | None, out: pb.Deal) -> None:
    out.hands.extend(deal.hands)
    if deal.retourne >= 0:
        out.retourne = deal.retourne
    out.talon = bytes(deal.talon)
    if deck is not None:
        out.deck = bytes(deck)


def deal_from_pb(deal: pb.Deal) -> Deal:
    return Deal(
        tuple(deal.hands[:]),  # a slice: one call of C
        deal.retourne if deal.HasField("retourne") else -1,
        tuple(deal.talon),
    )


def start_from_pb(units: Sequence[str], start: pb.Start) -> Start:
    scores = tuple(score_from_pb(units, s) for s in start.scores) if start.scores else None
    return Start(start.hand_number or 1, scores)


# --- bytes and envelopes ------------------------------------------------------------------


def canonical_bytes(record: pb.GameRecord) -> bytes:
    """Serialize once, deterministically. Only ever called when a record is made."""
    return record.SerializeToString(deterministic=True)


def record_id(record_bytes: bytes) -> str:
    """The record id: lowercase hex SHA-256 of the stored record bytes."""
    return hashlib.sha256(record_bytes).hexdigest()


def envelope(record_bytes: bytes, signature: bytes = b"", key_id: str = "") -> pb.RecordEnvelope:
    return pb.RecordEnvelope(record=record_bytes, signature=signature, key_id=key_id)


def decode_record(record_bytes: bytes) -> pb.GameRecord:
    """Parse the record bytes of an envelope; `RecordError` if they are not a record (or
    hold more than a record holds: `check_record_size`, before anything is decoded)."""
    check_record_size(record_bytes)
    try:
        rec = pb.GameRecord.FromString(record_bytes)
    except DecodeError as exc:
        raise RecordError("decode", f"the record bytes do not decode: {exc}") from None
    if not record_bytes:  # (an empty frame of a file, an envelope without its record)
        raise RecordError("format-version", "the envelope holds no record: its bytes are empty")
    if rec.format_version != FORMAT_VERSION:
        raise RecordError(
            "format-version",
            f"record format version {rec.format_version} is not supported "
            f"(this Tapis reads {FORMAT_VERSION})",
        )
    return rec


# --- files --------------------------------------------------------------------------------


def encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


# --- where bytes are not as Tapis writes them (for messages) ---------------------------------


def varint_at(data: bytes, pos: int, end: int) -> tuple[int, int] | None:
    """The varint at `pos` (any encoding a decoder takes) and the position past it; None
    when it does not end before `end`."""
    value = shift = 0
    while pos < end and shift < 70:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    return None


def _wire_fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(number, wire type, field start, value start, value end) of each field of
    `data[start:end]`, as far as they are well formed (a group stops the walk)."""
    pos = start
    while pos < end:
        key = varint_at(data, pos, end)
        if key is None:
            return
        number, kind = key[0] >> 3, key[0] & 7
        begin = key[1]
        if kind == 0:
            value = varint_at(data, begin, end)
            if value is None:
                return
            stop = value[1]
        elif kind in (1, 5):
            stop = begin + (8 if kind == 1 else 4)
        elif kind == 2:
            length = varint_at(data, begin, end)
            if length is None:
                return
            begin, stop = length[1], length[1] + length[0]
        else:
            return
        if stop > end:
            return
        yield number, kind, pos, begin, stop
        pos = stop


def _path_name(field: FieldDescriptor, count: int) -> str:
    """A message field as a path names it: `hands[2]` (counted from 0 among the fields of its
    number) when it repeats, else its name."""
    return f"{field.name}[{count}]" if field.is_repeated else field.name


def unknown_field_path(data: bytes, message: Descriptor, start: int = 0, end: int = -1) -> str:
    """The path (`hands[2].deal.field 99 (not in Deal)`) of the first field of a message's
    bytes that its descriptor does not know; "" when there is none, as far as the bytes are
    well formed."""
    end = len(data) if end < 0 else end
    seen: dict[int, int] = {}
    for number, kind, _, begin, stop in _wire_fields(data, start, end):
        count = seen[number] = seen.get(number, -1) + 1
        field = message.fields_by_number.get(number)
        if field is None:
            return f"field {number} (not in {message.name})"
        if field.message_type is not None and kind == 2:
            inner = unknown_field_path(data, field.message_type, begin, stop)
            if inner:
                return f"{_path_name(field, count)}.{inner}"
    return ""


def where_bytes_differ(data: bytes, canonical: bytes, message: Descriptor) -> str:
    """Where a message's bytes first part from its canonical encoding, for a message saying
    they are not canonical: "byte N, in PATH", PATH the innermost field that differs
    (`hands[0].deal.hands`; a length that changed with the content it counts is passed
    through to the content)."""
    offset, path = _apart(data, canonical, message, (0, len(data)), (0, len(canonical)))
    return f"byte {offset:,}" + (f", in {path}" if path else "")


def _first_apart(a: bytes, b: bytes) -> int:
    """The first index where `a` and `b` differ (the shorter one's length when one is the
    start of the other)."""
    n = min(len(a), len(b))
    start = 0
    while start < n and a[start : start + 4096] == b[start : start + 4096]:
        start += 4096  # equal blocks passed over at C speed (a field may be megabytes)
    return next((i for i in range(start, n) if a[i] != b[i]), n)


def _apart(
    data: bytes,
    canonical: bytes,
    message: Descriptor,
    span: tuple[int, int],
    canonical_span: tuple[int, int],
) -> tuple[int, str]:
    """`where_bytes_differ` within a message's bytes: (offset in `data`, path)."""
    ours = list(_wire_fields(data, *span))
    theirs = list(_wire_fields(canonical, *canonical_span))
    seen: dict[int, int] = {}
    for i, (number, kind, at, begin, stop) in enumerate(ours):
        count = seen[number] = seen.get(number, -1) + 1
        other = theirs[i] if i < len(theirs) else None
        if other is not None and data[at:stop] == canonical[other[2] : other[4]]:
            continue
        field = message.fields_by_number.get(number)
        if field is None:
            return at, f"field {number} (not in {message.name})"
        name = _path_name(field, count) if field.message_type else field.name
        if other is None:
            return at, name
        if field.message_type is not None and kind == 2 and other[0] == number and other[1] == 2:
            offset, inner = _apart(
                data, canonical, field.message_type, (begin, stop), (other[3], other[4])
            )
            if inner:
                return offset, f"{name}.{inner}"
            head = _first_apart(data[at:begin], canonical[other[2] : other[3]])
            return (at + head if head < begin - at else offset), name
        return at + _first_apart(data[at:stop], canonical[other[2] : other[4]]), name
    return (span[1] if len(theirs) > len(ours) else span[0]), ""


def iter_frames(data: bytes, name: str = "input") -> Iterator[bytes]:
    """The envelope bytes of a record file's content; `RecordFileError` if it is not one."""
    return read_frames(io.BytesIO(data), len(data), name)


def read_frames(f: BinaryIO, total: int | None, name: str = "input") -> Iterator[bytes]:
    """The envelope bytes of a record file read from `f` as a stream (`total`: its size in
    bytes from where `f` is; None when unknown, a pipe: read to its end), so a file of any size
    is read in constant memory, one record (at most 64 MiB) at a time; `RecordFileError` when
    it is not a record file, after the frames before the damage. (A stream that gives fewer
    bytes than asked, a pipe read unbuffered, is read again until it gives none.)"""
    if _read_exactly(f, len(MAGIC)) != MAGIC:
        raise RecordFileError(
            "not-a-record-file",
            f"{name} is not a Tapis record file (it does not start with {MAGIC!r})",
        )
    pos = len(MAGIC)
    index = 0
    while total is None or pos < total:
        index += 1
        size = 0
        shift = 0
        while True:
            b = f.read(1)
            if not b and total is None and shift == 0:
                return  # the end of a stream, between two records
            if not b:
                raise RecordFileError(
                    "truncated", f"{name}: record {index} has a truncated length prefix"
                )
            if shift > 63:
                raise RecordFileError(
                    "bad-envelope",
                    f"{name}: record {index}'s length prefix at byte {pos - 10} is longer than"
                    " a length is (10 bytes): the file is damaged from there",
                )
            pos += 1
            size |= (b[0] & 0x7F) << shift
            shift += 7
            if not b[0] & 0x80:
                break
        if size > MAX_ENVELOPE:
            raise RecordFileError(
                "truncated",
                f"{name}: record {index} claims {size} bytes, more than a record holds"
                f" ({MAX_ENVELOPE})",
            )
        if total is not None and pos + size > total:
            raise RecordFileError(
                "truncated", f"{name}: record {index} claims {size} bytes but {total - pos} remain"
            )
        frame = _read_exactly(f, size)
        if len(frame) != size:  # the file shrank while being read
            raise RecordFileError(
                "truncated",
                f"{name}: record {index} claims {size} bytes but {len(frame)} remain",
            )
        if size == MAGIC[0] and frame.startswith(MAGIC[1:]):  # its length prefix the "T"
            raise RecordFileError(
                "bad-envelope",
                f"{name}: a second file header ({MAGIC!r}) at byte {pos - 1}, where record "
                f"{index} would begin: record files joined end to end (`cat`?); give them "
                "as files of their own (every command takes several)",
            )
        pos += size
        yield frame


def _read_exactly(f: BinaryIO, size: int) -> bytes:
    """`size` bytes of `f`, fewer only at its end (a raw stream's `read` may give fewer)."""
    data = f.read(size)
    if len(data) == size or not data:
        return data
    parts = [data]
    size -= len(data)
    while size > 0 and (part := f.read(size)):
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def parse_envelope(frame: bytes, name: str, index: int) -> pb.RecordEnvelope:
    """The envelope of a frame (record `index` of `name`); `RecordFileError` (`bad-envelope`)
    when it does not parse, or when it holds more annotations than Tapis makes
    (`check_envelope_size`, before anything is decoded)."""
    try:
        check_envelope_size(frame)
    except RecordError as exc:
        raise RecordFileError("bad-envelope", f"{name}: record {index}: {exc.message}") from None
    try:
        env = pb.RecordEnvelope.FromString(frame)
    except DecodeError as exc:
        raise RecordFileError(
            "bad-envelope", f"{name}: record {index} is not a record envelope: {exc}"
        ) from None
    return env


# A POSIX path that `Path` leaves as it is: components neither empty nor ".", at most one
# leading slash.
_PLAIN_PATH = re.compile(r"/?(?!\.(?:/|\Z))[^/]+(?:/(?!\.(?:/|\Z))[^/]+)*\Z")


def file_name(path: str | Path) -> str:
    """A file as messages name it, `str(Path(path))`: a plain path string is that already
    (returned as it is, without building a `Path`: once a file of `verify DIR/*`)."""
    if isinstance(path, str) and os.name == "posix" and _PLAIN_PATH.match(path):
        return path
    return str(Path(path))


# A record file up to this size is read in one call: `verify DIR/*` reads a small file per
# record, and a buffered file costs several system calls more. A larger one is streamed.
_READ_WHOLE = 1 << 20
_READ_ONLY = os.O_RDONLY | getattr(os, "O_BINARY", 0)


def open_record_file(path: str | Path) -> tuple[BinaryIO, int | None]:
    """A file to read and its size in bytes: a regular file of at most `_READ_WHOLE` bytes
    read into memory at once, any other file read as a stream; the size None for a file that
    is not a regular one (a pipe, a FIFO, a terminal: its `st_size` is no size, 0 for a
    pipe, and it is read to its end). `OSError` when it cannot be opened."""
    fd = os.open(path, _READ_ONLY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return open(fd, "rb"), None  # the file owns fd from here: closed with it
        if st.st_size > _READ_WHOLE:
            return open(fd, "rb"), st.st_size
        data = _read_up_to(fd, st.st_size)
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return io.BytesIO(data), st.st_size


def read_at_most(path: str | Path, most: int) -> bytes | None:
    """The bytes of the file `path`; None when it holds more than `most`: a regular file
    known so by its size, before any is read (an export of 300 MB was read whole before it
    was refused), any other read no further than one byte past `most` (a device or a pipe
    without end, `/dev/zero`). `OSError` when it cannot be read."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISREG(st.st_mode) and st.st_size > most:
            return None
        data = f.read(most + 1)
    return None if len(data) > most else data


def _read_up_to(fd: int, size: int) -> bytes:
    """`size` bytes of `fd`, fewer only at its end (one `os.read` may give fewer)."""
    parts = []
    while size > 0 and (part := os.read(fd, size)):
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def file_chunks(
    path: str | Path, size: int, name: str | None = None, empty: bool = False
) -> Iterator[tuple[int, tuple[bytes, ...]]]:
    """The envelope frames of a record file in chunks of at most `size` frames, each with the
    index (1-based) of its first record: the tasks of `verify` and `archive add`. When the
    file cannot be read to its end, `RecordFileError` (`unreadable`, `not-a-record-file`,
    `truncated`) is raised after the chunks of the whole records before the damage; and
    (`no-records`) when it holds none, unless `empty`: a command given a file to read finds
    nothing in a file header alone, and a `verify` that passed it would vouch for nothing.
    `name`: the file as messages name it (default `str(Path(path))`)."""
    p = file_name(path) if name is None else name
    try:
        f, total = open_record_file(path)
    except OSError as exc:
        raise RecordFileError("unreadable", f"{p}: {exc.strerror or exc}") from None
    frames: list[bytes] = []
    first = 1
    try:
        for frame in read_frames(f, total, p):
            frames.append(frame)
            if len(frames) >= size:
                yield first, tuple(frames)
                first += len(frames)
                frames = []
    except RecordFileError:
        if frames:
            yield first, tuple(frames)
        raise
    except OSError as exc:
        raise RecordFileError("unreadable", f"{p}: {exc.strerror or exc}") from None
    finally:
        f.close()
    if frames:
        yield first, tuple(frames)
    elif first == 1 and not empty:
        raise no_records(p)


def no_records(name: str) -> RecordFileError:
    """The error of a record file that holds no record (its header alone)."""
    return RecordFileError("no-records", f"{name}: holds no records (a record file's header alone)")


def read_envelopes(path: str | Path) -> list[pb.RecordEnvelope]:
    """Every envelope of a record file; `RecordFileError` when the file is not one (read as
    a stream: a file that is no record file, even one without end, is refused at its
    start)."""
    name = file_name(path)
    return [
        parse_envelope(frame, name, index)
        for first, frames in file_chunks(path, 1000, name, empty=True)
        for index, frame in enumerate(frames, first)
    ]


def encode_file(envelopes: Iterable[pb.RecordEnvelope]) -> bytes:
    parts = [MAGIC]
    for env in envelopes:
        b = env.SerializeToString(deterministic=True)
        parts.append(encode_varint(len(b)))
        parts.append(b)
    return b"".join(parts)


def write_envelopes(path: str | Path, envelopes: Iterable[pb.RecordEnvelope]) -> int:
    """Write a record file (`atomic_write`: a temporary file in the same folder, then a
    rename); returns the number of records written."""
    return write_frames(path, (env.SerializeToString(deterministic=True) for env in envelopes))


def write_frames(path: str | Path, frames: Iterable[bytes]) -> int:
    """Write a record file of envelope bytes as they come (any number, in constant memory),
    atomically (`atomic_write`). Returns the number of records written."""

    return atomic_write(path, lambda f: put_frames(f, frames))


def put_frames(f: IO[bytes], frames: Iterable[bytes]) -> int:
    """Write a record file of envelope bytes to the open file `f`, as they come: the magic,
    then each frame after its length. Returns the number of records written."""
    f.write(MAGIC)
    count = 0
    for frame in frames:
        f.write(encode_varint(len(frame)))
        f.write(frame)
        count += 1
    return count


def writable(path: str | Path, inputs: Iterable[str | Path] = ()) -> Path:
    """`path`, once a file can be written there: `OutputError` naming it when its folder is
    missing or not a folder, when a folder (or anything but a file, a character device or a
    FIFO) is in its place, without permission, or when it is one of the command's `inputs`
    (a file of another kind: written, the input would be lost). Commands call it before
    their work, so that nothing is done (or said done) for an output that cannot be
    written."""
    p = Path(path)
    now = _output_target(p).now
    if now is not None and stat.S_ISREG(now.st_mode):
        for given in inputs:
            with contextlib.suppress(OSError):  # an input that is not there: its own error
                seen = os.stat(given)
                if (seen.st_dev, seen.st_ino) == (now.st_dev, now.st_ino):
                    raise OutputError(
                        f"{p}: it is the input {given} too: written, the input would be lost"
                        " (give another output)"
                    )
    return p


@dataclass(frozen=True)
class _Target:
    """Where writing an output path goes: `path` with its symlinks followed (the link stays
    a link, the file it names is written), what is there now (`None`: no file yet), and
    whether it is written in place (`direct`) rather than replaced."""

    path: Path
    now: os.stat_result | None
    direct: bool


def _output_target(p: Path) -> _Target:
    try:
        now: os.stat_result | None = os.stat(p)  # through symlinks
    except (FileNotFoundError, NotADirectoryError):  # no file yet (or no folder: below)
        now = None
    except OSError as exc:  # a symlink loop, a folder without permission, ...
        raise OutputError(f"{p}: cannot write: {exc.strerror or exc}") from None
    if now is not None and stat.S_ISDIR(now.st_mode):
        raise OutputError(f"{p}: cannot write: it is a folder")
    if now is not None and not stat.S_ISREG(now.st_mode):
        # A device (/dev/null, a terminal, /dev/stdout) or a FIFO (a pipe) is written in
        # place, as a shell's `>` does: a rename would put a file where it was. Anything else
        # (a block device, a socket) is refused.
        if not (stat.S_ISCHR(now.st_mode) or stat.S_ISFIFO(now.st_mode)):
            raise OutputError(f"{p}: cannot write: not a file, a character device or a FIFO")
        if not os.access(p, os.W_OK):
            raise OutputError(f"{p}: cannot write: permission denied")
        return _Target(p, now, direct=True)
    real = Path(os.path.realpath(p)) if p.is_symlink() else p
    if now is not None and not (real.is_file() and os.path.samestat(now, os.stat(real))):
        # A file reached by a name that does not lead to it (/proc/self/fd/N of a deleted
        # file): only the open file can be written, in place.
        return _Target(p, now, direct=True)
    folder = real.parent
    if not folder.exists():
        raise OutputError(f"{p}: cannot write: no folder {folder}")
    if not folder.is_dir():
        raise OutputError(f"{p}: cannot write: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK) or (now is not None and not os.access(p, os.W_OK)):
        raise OutputError(f"{p}: cannot write: permission denied")
    return _Target(real, now, direct=False)


def atomic_write(path: str | Path, fill: Callable[[BinaryIO], T]) -> T:
    """Write a file by `fill` into a temporary file in the same folder, flushed to disk,
    then renamed into place: an interrupted write leaves no file. A symlink is followed (the
    file it names is replaced, the link stays); a file replaced keeps its permissions; a
    character device or a FIFO is written in place (`writable`). Returns what `fill` does;
    `OutputError` naming the file when it cannot be written (`writable`, a full disk)."""
    p = Path(path)
    target = _output_target(p)
    if target.direct:
        return _write_in_place(p, fill)
    dest = target.path
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    except OSError as exc:
        raise OutputError(f"{p}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            result = fill(f)
            f.flush()
            os.fsync(f.fileno())
        if target.now is None:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # an ordinary file, not mkstemp's 0600
        else:  # the file replaced keeps its owner where allowed (root), and its permissions
            if (target.now.st_uid, target.now.st_gid) != (os.getuid(), os.getgid()):
                with contextlib.suppress(OSError):
                    os.chown(tmp, target.now.st_uid, target.now.st_gid)
            os.chmod(tmp, stat.S_IMODE(target.now.st_mode))  # a private file stays private
        os.replace(tmp, dest)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{p}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return result


def _write_in_place(p: Path, fill: Callable[[BinaryIO], T]) -> T:
    """Write a character device or a FIFO by `fill`, as it is, as a shell's `>` does: no
    temporary file (there is nothing to replace). A FIFO's opening waits for its reader."""
    try:
        # O_TRUNC: a device or a FIFO ignores it; an open file reached by /proc is emptied.
        with open(os.open(p, os.O_WRONLY | os.O_TRUNC | os.O_NOCTTY), "wb") as f:
            result = fill(f)
            f.flush()  # a full device (ENOSPC) says so here at the latest
    except OSError as exc:
        raise OutputError(f"{p}: cannot write: {exc.strerror or exc}") from None
    return result
