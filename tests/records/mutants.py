"""Structured mutations of signed records: the tests of strict records and
`scripts/fuzz_records.py` (the one copy of the machinery, under tests/ since it exists to test).

- `corpus()`: records of every game and ruleset: the golden records of tests/data and
  matches played in this process by random legal actions, dealt from a seed as the referee
  deals (records/dealing.py) and made into records by `build_record`: finished, resigned, and
  stopped in the middle of a hand.
- `mutate(record_bytes, rng)`: one mutation, as (what, mutant bytes). Field mutations change
  the decoded record: every scalar of every message (to 0, 1, -1 or the largest value, 2^32-1,
  2^34, 2^53, 2^63, 2^64-1 or a random value, as the field's type holds it), repeated fields
  grown, shrunk, swapped or an element duplicated, texts long, units the game does not keep,
  bytes changed, options changed with the digest made to match. Encoding mutations keep the
  content and change the bytes: a field written twice, split or unpacked, fields out of order,
  over-long varints and lengths, a default written out, a 32-bit field's varint 2^34 wider,
  unknown fields.
- `oracle(original, mutant)`: why an accepted mutant is what a genuine replay gives, found
  without the verifier: the same bytes; the same record but for its free fields (names,
  provenance, an unfinished match's reason), within their bounds; the same bytes again after
  export to a transcript and import (the import replays one action at a time and builds the
  record anew), the packs recomputed from the seed; or the original stopped earlier in its
  last hand. None when no reason holds.
- `verify_in_subprocess(frames, key_pem, ...)`: each frame verified by `verify_frame` in a
  child process whose address space is limited (`RLIMIT_AS`); a crash of the child is a
  result too (and the child starts again after it), and so is its peak memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError, Message

from tapis_cartes.records.codec import (
    MAX_NAME,
    MAX_TEXT,
    Provenance,
    build_record,
    canonical_bytes,
    read_envelopes,
)
from tapis_cartes.records.dealing import ALGORITHM, commitment, first_dealer, shuffled_pack
from tapis_cartes.records.export import record_to_transcript
from tapis_cartes.records.transcript import record_of
from tapis_cartes.referee.engine import (
    TapisError,
    make_rules,
    new_match,
)
from tapis_cartes.referee.engine.actions import RESIGN, encode
from tapis_cartes.v1 import record_pb2 as pb
from tests.records.replaying import rebuilt, rules_of

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"

# Every game and ruleset, with options that keep a match short, and a number of players.
SETUPS: tuple[tuple[str, str, dict[str, Any], int], ...] = (
    ("dame-de-pique", "standard", {"end_threshold": 26}, 4),
    ("napoleon", "standard", {"deals": 2}, 4),
    ("napoleon", "standard", {"deals": 2, "short_deck": True, "scoring": "stakes"}, 3),
    ("napoleon", "standard", {"deals": 1}, 7),
    ("imperiale", "academie", {"target_fiches": 1}, 2),
    ("imperiale", "academie", {"target_fiches": 1}, 3),
    ("imperiale", "moderne", {"target_fiches": 1}, 2),
    ("triomphe", "individuelle", {"target": 2}, 2),
    ("triomphe", "individuelle", {"target": 2, "regime": "plaisant"}, 4),
    ("triomphe", "equipe", {"target": 2}, 4),
    ("triomphe", "equipe", {"target": 1}, 6),
    ("triomphe", "as-qui-pille", {"target": 2}, 3),
)
NAMES = ("Ann", "Bob", "Cat", "Dan", "Eve", "Fay", "Gus", "Hal", "Ivy", "Jo")
ENDS = ("finished", "resigned", "stopped")


def play_record(
    game: str, ruleset: str, options: dict[str, Any], players: int, seed: int, end: str
) -> pb.GameRecord:
    """A match of random legal actions, dealt from a seed as the referee deals, as a record
    (`build_record`): played to its end (`finished`), resigned by a seat in its second hand or
    first (`resigned`), or stopped in the middle of a hand (`stopped`)."""
    rng = random.Random(seed)
    rules = make_rules(game, ruleset, options, players)
    match = new_match(rules, log_events=False)
    secret = hashlib.sha256(f"mutants-{seed}".encode()).digest()
    decks: list[list[int]] = []
    steps = 0
    stop_at = rng.randrange(5, 40)
    while not match.finished:
        dealer = match.expected_dealer()
        if dealer is None:
            dealer = first_dealer(secret, match.first_dealers())
        deck = shuffled_pack(secret, match.hand_number, match.pack)
        decks.append(deck)
        match.start_hand(dealer, match.deal_deck(dealer, deck))
        hand = match.hand
        assert hand is not None
        while not match.finished and not hand.over:
            steps += 1
            to_act = match.to_act()
            seat = to_act[rng.randrange(len(to_act))]
            if end == "resigned" and steps == stop_at:
                match.step(seat, encode(RESIGN))
                break
            if end == "stopped" and steps == stop_at:
                break
            match.step(seat, rng.choice(match.legal_actions(seat)))
        if end == "stopped" and steps == stop_at:
            break
    return build_record(
        match,
        NAMES[:players],
        Provenance("corpus", f"mutants-{seed}", "2026-01-01T00:00:00+00:00"),
        decks,
        pb.DealSource(algorithm=ALGORITHM, commitment=commitment(secret), seed=secret),
    )


def corpus(matches: int = 1) -> list[tuple[str, bytes]]:
    """(label, record bytes) of the golden records and of `matches` matches of every setup
    per end."""
    out = []
    for path in sorted(DATA.glob("*.tapis")):
        (env,) = read_envelopes(path)
        out.append((path.stem, env.record))
    for i, (game, ruleset, options, players) in enumerate(SETUPS):
        for j, end in enumerate(ENDS):
            for k in range(matches):
                rec = play_record(game, ruleset, options, players, 1000 * i + 10 * j + k, end)
                suffix = f"/{k + 1}" if k else ""
                out.append((f"{game}/{ruleset}/{players}p/{end}{suffix}", canonical_bytes(rec)))
    return out


# --- the wire form: a record as protobuf fields, to write the same content other ways ------


@dataclass
class Wire:
    """One field as written: number, wire type, value (an int for a varint, the bytes of a
    fixed64, of a string or of a packed field, or the fields of a message), and the extra
    continuation bytes of its varint or length (0: minimal, as Tapis writes it)."""

    number: int
    kind: int
    value: Any
    pad: int = 0


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def _varint(n: int, pad: int = 0) -> bytes:
    assert isinstance(n, int) and n >= 0, n
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b | 0x80 if pad else b)
            break
    for i in range(pad):  # non-minimal: zero groups after the value
        out.append(0x80 if i < pad - 1 else 0)
    return bytes(out)


def parse_wire(data: bytes, message: Any = pb.GameRecord.DESCRIPTOR) -> list[Wire]:
    """The fields of a message's bytes, messages parsed too (by the schema)."""
    out = []
    pos = 0
    while pos < len(data):
        tag, pos = _read_varint(data, pos)
        number, kind = tag >> 3, tag & 7
        if kind == 0:
            value, pos = _read_varint(data, pos)
        elif kind == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif kind == 5:
            value, pos = data[pos : pos + 4], pos + 4
        elif kind == 2:
            size, pos = _read_varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
            fd = message.fields_by_number.get(number)
            if fd is not None and fd.message_type is not None:
                value = parse_wire(value, fd.message_type)
        else:
            raise ValueError(f"wire type {kind}")
        out.append(Wire(number, kind, value))
    return out


def encode_wire(fields: Sequence[Wire]) -> bytes:
    parts = []
    for f in fields:
        parts.append(_varint(f.number << 3 | f.kind))
        if f.kind == 0:
            parts.append(_varint(f.value, f.pad))
        elif f.kind == 2:
            body = encode_wire(f.value) if isinstance(f.value, list) else f.value
            parts.append(_varint(len(body), f.pad) + body)
        else:
            parts.append(f.value)
    return b"".join(parts)


def _messages(fields: list[Wire], message: Any) -> Iterator[tuple[list[Wire], Any]]:
    """Every message of a parsed record (its field list and descriptor), the record first."""
    yield fields, message
    for f in fields:
        if isinstance(f.value, list):
            yield from _messages(f.value, message.fields_by_number[f.number].message_type)


def _packed_values(f: Wire, fd: Any) -> list[bytes]:
    """The elements of a packed field, each as its bytes."""
    data = f.value
    out = []
    pos = 0
    while pos < len(data):
        if fd.type == fd.TYPE_FIXED64:
            out.append(data[pos : pos + 8])
            pos += 8
        else:
            _, end = _read_varint(data, pos)
            out.append(data[pos:end])
            pos = end
    return out


_ENCODINGS = (
    "pad-varint",
    "pad-length",
    "repeat-scalar",
    "split-packed",
    "unpack",
    "reorder",
    "explicit-default",
    "unknown-field",
    "wide-varint",
    "split-message",
)


def _absent(fs: list[Wire], desc: Any) -> list[Any]:
    """The scalar fields a message leaves out (protobuf writes no default value)."""
    present = {w.number for w in fs}
    return [
        d
        for d in desc.fields
        if d.number not in present
        and not d.is_repeated
        and d.message_type is None
        and d.containing_oneof is None
    ]


def _fits(kind: str, fs: list[Wire], i: int, fd: Any, desc: Any) -> bool:
    """Whether field `i` of a message can take the encoding mutation `kind`."""
    f = fs[i]
    packed = (
        fd is not None
        and fd.is_repeated
        and fd.message_type is None
        and fd.type != fd.TYPE_STRING
        and f.kind == 2
    )
    if kind == "pad-varint":
        return f.kind == 0
    if kind == "explicit-default":
        return i == 0 and bool(_absent(fs, desc))
    if kind == "pad-length":
        return f.kind == 2
    if kind == "repeat-scalar":
        return fd is not None and not fd.is_repeated and not isinstance(f.value, list)
    if kind in ("split-packed", "unpack"):
        return packed and len(_packed_values(f, fd)) >= 2
    if kind == "reorder":
        return i + 1 < len(fs) and fs[i + 1].number != f.number
    if kind == "wide-varint":
        return f.kind == 0 and fd is not None and fd.type == fd.TYPE_UINT32
    if kind == "split-message":
        return isinstance(f.value, list) and len(f.value) >= 2 and not fd.is_repeated
    return i == 0  # one place per message: explicit-default (if it has one), unknown-field


def encoding_mutation(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """The same record written another way (or with an unknown field): (what, bytes)."""
    fields = parse_wire(data)
    messages = [(fs, d) for fs, d in _messages(fields, pb.GameRecord.DESCRIPTOR) if fs]
    kind = rng.choice(_ENCODINGS)
    candidates = [
        (fs, d, i)
        for fs, d in messages
        for i in range(len(fs))
        if _fits(kind, fs, i, d.fields_by_number.get(fs[i].number), d)
    ]
    if not candidates:
        return f"encoding:{kind} (no field for it)", data
    fs, desc, i = rng.choice(candidates)
    f = fs[i]
    fd = desc.fields_by_number.get(f.number)
    if kind == "pad-varint":
        f.pad = rng.randint(1, 3)
    elif kind == "pad-length":
        f.pad = rng.randint(1, 2)
    elif kind == "repeat-scalar":  # an earlier value, which the later one replaces
        if f.kind == 0:
            fs.insert(i, Wire(f.number, 0, rng.choice([0, 1, 2**34, f.value + 1])))
        else:
            fs.insert(i, Wire(f.number, f.kind, b"\x01" * len(f.value) if f.kind != 2 else b"x"))
    elif kind == "split-packed":
        elements = _packed_values(f, fd)
        cut = rng.randrange(1, len(elements))
        fs[i : i + 1] = [
            Wire(f.number, 2, b"".join(elements[:cut])),
            Wire(f.number, 2, b"".join(elements[cut:])),
        ]
    elif kind == "unpack":
        wt = 1 if fd.type == fd.TYPE_FIXED64 else 0
        fs[i : i + 1] = [
            Wire(f.number, wt, e if wt == 1 else _read_varint(e, 0)[0])
            for e in _packed_values(f, fd)
        ]
    elif kind == "reorder":
        fs[i], fs[i + 1] = fs[i + 1], f
    elif kind == "explicit-default":  # a field left out written with its default value
        d = rng.choice(_absent(fs, desc))
        wt = 2 if d.type in (d.TYPE_STRING, d.TYPE_BYTES) else 0
        at = next((j for j, w in enumerate(fs) if w.number > d.number), len(fs))
        fs.insert(at, Wire(d.number, wt, b"" if wt == 2 else 0))
    elif kind == "unknown-field":
        number = rng.choice([15, 99, 1000, 536870911])
        fs.insert(rng.randrange(len(fs) + 1), Wire(number, 0, rng.choice([0, 1, 2**63])))
    elif kind == "wide-varint":  # the same 32-bit value, read from a wider varint
        f.value += rng.choice([2**32, 2**34, 2**40])
    elif kind == "split-message":  # a message in two parts, which protobuf merges
        cut = rng.randrange(1, len(f.value))
        fs[i : i + 1] = [Wire(f.number, 2, f.value[:cut]), Wire(f.number, 2, f.value[cut:])]
    return f"encoding:{kind}", encode_wire(fields)


# --- field mutations -------------------------------------------------------------------------

_EDGES = (0, 1, -1, 2**31 - 1, 2**32 - 1, 2**32, 2**34, 2**53, 2**63 - 1, 2**63, 2**64 - 1)
_TEXTS = ("", "x", "é" * (MAX_NAME + 1), "a" * (MAX_TEXT + 1), "b" * 100_000, "hearts", "DP.SCORE")


def _fit(fd: Any, value: int) -> int | bool:
    """`value` as the field's type holds it (a varint is cut to its width when read)."""
    if fd.type == fd.TYPE_BOOL:
        return bool(value & 1)
    if fd.type == fd.TYPE_UINT32:
        return value & 0xFFFFFFFF
    if fd.type in (fd.TYPE_UINT64, fd.TYPE_FIXED64):
        return value & 0xFFFFFFFFFFFFFFFF
    if fd.type == fd.TYPE_SINT64:
        return (value + 2**63) % 2**64 - 2**63
    if fd.type == fd.TYPE_ENUM:  # an open enum: any int32
        return (value + 2**31) % 2**32 - 2**31
    raise AssertionError(fd.type)


def _number(rng: random.Random) -> int:
    pick = rng.random()
    if pick < 0.6:
        return rng.choice(_EDGES)
    if pick < 0.85:
        return rng.randrange(0, 64)  # cards, seats, small numbers: values in and near range
    return rng.randrange(2**64)


def _sites(msg: Message, path: str) -> Iterator[tuple[str, Message, Any]]:
    """(path, message, field) of every field of every message of a record."""
    for fd in msg.DESCRIPTOR.fields:
        name = f"{path}{fd.name}"
        yield name, msg, fd
        if fd.message_type is None:
            continue
        if fd.is_repeated:
            for i, sub in enumerate(getattr(msg, fd.name)):
                yield from _sites(sub, f"{name}[{i}].")
        elif msg.HasField(fd.name):
            yield from _sites(getattr(msg, fd.name), f"{name}.")


def _digest(rules: pb.Rules) -> str:
    """The digest of a record's rules as written (the canonical JSON of RULES: game, ruleset,
    players, options), computed here, as a forger would."""
    options = {o.key: getattr(o, o.WhichOneof("value") or "string_value") for o in rules.options}
    doc = {
        "game": rules.game,
        "ruleset": rules.ruleset,
        "players": rules.players,
        "options": options,
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _mutate_repeated(items: Any, fd: Any, rng: random.Random) -> str:
    n = len(items)
    what = rng.choice(["grow", "shrink", "swap", "duplicate", "clear"])
    if what == "grow" or n == 0:
        if fd.message_type is not None:
            new = items.add()
            if n and rng.random() < 0.7:
                new.CopyFrom(items[rng.randrange(n)])
        else:
            items.append(
                items[rng.randrange(n)] if n and rng.random() < 0.5 else _fit(fd, _number(rng))
            )
        return "grow"
    if what == "shrink":
        del items[rng.randrange(n)]
    elif what == "swap" and n >= 2:
        i, j = rng.sample(range(n), 2)
        if fd.message_type is not None:
            a, b = type(items[i])(), type(items[j])()
            a.CopyFrom(items[i])
            b.CopyFrom(items[j])
            items[i].CopyFrom(b)
            items[j].CopyFrom(a)
        else:
            items[i], items[j] = items[j], items[i]
    elif what == "duplicate":
        i = rng.randrange(n)
        if fd.message_type is not None:
            items.add().CopyFrom(items[i])
        else:
            items.append(items[i])
    elif what == "clear":
        del items[:]
    return what


def _mutate_bytes(value: bytes, rng: random.Random) -> bytes:
    b = bytearray(value)
    what = rng.random()
    if b and what < 0.5:
        b[rng.randrange(len(b))] = rng.choice(
            [0, 1, 31, 32, 35, 36, 51, 52, 62, 63, 255, rng.randrange(256)]
        )
    elif b and what < 0.65:
        del b[rng.randrange(len(b))]
    elif what < 0.8:
        b.insert(rng.randrange(len(b) + 1), rng.randrange(256))
    elif b and what < 0.9:
        i, j = rng.randrange(len(b)), rng.randrange(len(b))
        b[i], b[j] = b[j], b[i]
    else:
        b = bytearray(rng.randbytes(rng.choice([0, 1, 31, 32, 33, 64, 4096])))
    return bytes(b)


_FIELD_KINDS = (  # (kind, weight)
    ("number", 30),
    ("repeated", 18),
    ("element", 16),
    ("bytes", 10),
    ("text", 8),
    ("unit", 8),
    ("clear", 6),
    ("rules", 4),
)


def field_mutation(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One field of the decoded record changed (and, for a change of the rules, most often
    the digest made to match): (what, the record's canonical bytes)."""
    rec = pb.GameRecord.FromString(data)
    sites = list(_sites(rec, ""))
    kind = rng.choices([k for k, _ in _FIELD_KINDS], [w for _, w in _FIELD_KINDS])[0]
    numeric = {"number", "element"}

    def scalar(fd: Any) -> bool:
        return fd.message_type is None and fd.type not in (fd.TYPE_STRING, fd.TYPE_BYTES)

    pools: dict[str, list[tuple[str, Message, Any]]] = {
        "number": [t for t in sites if not t[2].is_repeated and scalar(t[2])],
        "repeated": [t for t in sites if t[2].is_repeated],
        "element": [
            t for t in sites if t[2].is_repeated and scalar(t[2]) and len(getattr(t[1], t[2].name))
        ],
        "bytes": [t for t in sites if t[2].type == t[2].TYPE_BYTES],
        "text": [t for t in sites if t[2].type == t[2].TYPE_STRING],
        "clear": [
            t
            for t in sites
            if not t[2].is_repeated
            and (t[2].message_type or t[2].has_presence)
            and t[1].HasField(t[2].name)
        ],
        "rules": [
            t
            for t in sites
            if t[0].startswith("rules.")
            and not t[2].is_repeated
            and (scalar(t[2]) or t[2].type == t[2].TYPE_STRING)
        ],
    }
    what = ""
    if kind == "unit":  # a unit the game may not keep, in any score
        scores = [
            (p, score)
            for p, m, f in sites
            if f.message_type is pb.Score.DESCRIPTOR
            for score in (getattr(m, f.name) if f.is_repeated else [getattr(m, f.name)])
        ]
        where, score = rng.choice(scores)
        unit = rng.choice(["points", "imperiales", "jetons"])
        setattr(score, unit, rng.choice([1, -1, 5, 2**62]))
        what = f"unit {where}.{unit}"
        path = where
    else:
        path, msg, fd = rng.choice(pools[kind] or pools["number"])
        if kind == "rules":
            kind = "text" if fd.type == fd.TYPE_STRING else "number"
        if kind in numeric and fd.is_repeated:
            items = getattr(msg, fd.name)
            i = rng.randrange(len(items))
            items[i] = _fit(fd, _number(rng))
            what = f"set {path}[{i}]"
        elif kind == "repeated":
            what = f"{_mutate_repeated(getattr(msg, fd.name), fd, rng)} {path}"
        elif kind == "clear":
            msg.ClearField(fd.name)
            what = f"clear {path}"
        elif fd.type == fd.TYPE_STRING:
            setattr(msg, fd.name, rng.choice(_TEXTS))
            what = f"text {path}"
        elif fd.type == fd.TYPE_BYTES:
            setattr(msg, fd.name, _mutate_bytes(getattr(msg, fd.name), rng))
            what = f"bytes {path}"
        else:
            setattr(msg, fd.name, _fit(fd, _number(rng)))
            what = f"set {path}"
    if path.startswith("rules") and rng.random() < 0.7:
        rec.rules.digest = _digest(rec.rules)
        what += " (digest fixed)"
    return f"field:{what}", rec.SerializeToString(deterministic=True)


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One structured mutation of a record's bytes (one in five of the field mutations is two
    or three at once): (what, mutant bytes)."""
    if rng.random() < 0.25:
        return encoding_mutation(data, rng)
    whats = []
    for _ in range(1 if rng.random() < 0.8 else rng.randint(2, 3)):
        what, data = field_mutation(data, rng)
        whats.append(what)
    return " + ".join(whats), data


# --- the oracle: what a genuine replay would give ---------------------------------------------


def _canonical(data: bytes) -> pb.GameRecord | None:
    try:
        rec = pb.GameRecord.FromString(data)
    except DecodeError:
        return None
    clean = pb.GameRecord()
    clean.CopyFrom(rec)
    clean.DiscardUnknownFields()
    return rec if clean.SerializeToString(deterministic=True) == data else None


def _free_fields_bounded(rec: pb.GameRecord) -> bool:
    p = rec.provenance
    return all(len(s.name) <= MAX_NAME for s in rec.seats) and all(
        len(t) <= MAX_TEXT for t in (p.source, p.reference, p.played_at, rec.outcome.reason)
    )


def _without_free_fields(rec: pb.GameRecord) -> bytes:
    out = pb.GameRecord()
    out.CopyFrom(rec)
    for seat in out.seats:
        seat.name = ""
    out.provenance.Clear()
    if not out.outcome.finished:
        out.outcome.reason = ""
    return out.SerializeToString(deterministic=True)


def _seed_gives_packs(rec: pb.GameRecord) -> bool:
    """Every pack of a refereed record is the one its seed gives (tapis_cartes.records.dealing)."""
    source = rec.deal_source
    if not rec.HasField("deal_source"):
        return True
    if source.algorithm != ALGORITHM or commitment(source.seed) != source.commitment:
        return False
    try:
        match = new_match(rules_of(rec.rules))
    except TapisError:
        return False
    dealers = match.first_dealers()
    if (
        rec.start.hand_number <= 1
        and rec.hands
        and rec.hands[0].dealer != first_dealer(source.seed, dealers)
    ):
        return False
    pack = match.pack
    return all(list(h.deal.deck) == shuffled_pack(source.seed, h.number, pack) for h in rec.hands)


def _reimported(rec: pb.GameRecord) -> bytes | None:
    """The record exported to a transcript and imported again, with the record's provenance,
    deal source and (unfinished) reason: the bytes a genuine replay gives; None when the
    transcript does not import."""
    try:
        doc = record_to_transcript(rec)
        again = record_of(json.loads(json.dumps(doc)), rec.provenance.reference)
    except (TapisError, ValueError):
        return None
    again.provenance.CopyFrom(rec.provenance)
    if rec.HasField("deal_source"):
        again.deal_source.CopyFrom(rec.deal_source)
    if not again.outcome.finished:
        again.outcome.reason = rec.outcome.reason
    return canonical_bytes(again)


def _replayed(rec: pb.GameRecord) -> bytes | None:
    """The record its rules, deals and actions make when played again one action at a time
    through the engine's public interface (`replaying.rebuilt`); the way for a match stopped
    in the middle of a hand, which no transcript holds. None when the engine refuses it."""
    try:
        return rebuilt(rec)
    except (TapisError, ValueError):
        return None


def _stopped_earlier(original: pb.GameRecord, mutant: pb.GameRecord) -> bool:
    """The mutant is the original (a stopped match) stopped earlier in its last hand: the same
    but for the last hand's actions and seats, a prefix of the original's."""
    if original.outcome.finished or not original.hands or not mutant.hands:
        return False
    a, b = original.hands[-1], mutant.hands[-1]
    n = len(b.actions)
    if len(b.seats) != n or n > len(a.actions) or b.seats != a.seats[:n]:
        return False
    if list(b.actions) != list(a.actions[:n]) or b.lines or b.scores_after:
        return False
    cut = pb.GameRecord()
    cut.CopyFrom(original)
    del cut.hands[-1].actions[n:]
    cut.hands[-1].seats = cut.hands[-1].seats[:n]
    return _without_free_fields(cut) == _without_free_fields(mutant) and _free_fields_bounded(
        mutant
    )


def oracle(original: bytes, mutant: bytes) -> str | None:
    """Why `mutant` (accepted by the verifier) is what a genuine replay gives, found without
    the verifier; None when nothing says so (`original`: a genuine record)."""
    if mutant == original:
        return "same bytes"
    m = _canonical(mutant)
    if m is None:
        return None
    o = pb.GameRecord.FromString(original)
    if _without_free_fields(m) == _without_free_fields(o) and _free_fields_bounded(m):
        return "free fields only"
    if not _free_fields_bounded(m) or not _seed_gives_packs(m):
        return None
    if _reimported(m) == mutant:
        return "transcript round trip"
    if _stopped_earlier(o, m):
        return "stopped earlier"
    if not m.outcome.finished and _replayed(m) == mutant:
        return "played again, stopped as recorded"
    return None


# --- verifying in a child process with bounded memory ----------------------------------------

MEMORY_LIMIT = 1 << 30  # the child's address space: 1 GiB

_CHILD = """
import json, resource, sys
limit = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from tapis_cartes.records.codec import iter_frames
from tapis_cartes.records.signing import load_public_key
from tapis_cartes.records.verify import verify_frame
key = load_public_key(sys.argv[2])
frames = list(iter_frames(open(sys.argv[1], "rb").read()))
for i, frame in enumerate(frames[int(sys.argv[4]):], int(sys.argv[4])):
    r = verify_frame(frame, [key], "mutant", i + 1)
    print(json.dumps({"i": i, "code": r.error.code if r.error else None,
                      "message": str(r.error)[:300] if r.error else None}), flush=True)
# The peak of this program's own memory: VmHWM (Linux's `ru_maxrss` keeps, across the exec,
# the peak of the parent it was forked from: a test process of 267 MB once failed the bound).
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
peak = int(hwm[0].split()[1]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"peak_kb": peak}), flush=True)
"""


@dataclass
class ChildResults:
    """What the child processes said: per frame its code (None: valid; "crash" when the
    child died on it), its message, and the peak memory of the children (KiB)."""

    codes: list[str | None] = field(default_factory=list)
    messages: list[str | None] = field(default_factory=list)
    crashes: list[tuple[int, str]] = field(default_factory=list)  # (frame, how the child died)
    peak_kb: int = 0


def verify_in_subprocess(
    path: Path, count: int, key_path: Path, limit: int = MEMORY_LIMIT, timeout: float = 600
) -> ChildResults:
    """Verify the `count` records of the record file `path` (each signed by the key of
    `key_path`) in a child process limited to `limit` bytes of address space; a child that
    dies is replaced, starting after the record it died on."""
    out = ChildResults(codes=[None] * count, messages=[None] * count)
    start = 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    while start < count:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path), str(key_path), str(limit), str(start)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=ROOT,
        )
        done = start
        for line in proc.stdout.splitlines():
            doc = json.loads(line)
            if "peak_kb" in doc:
                out.peak_kb = max(out.peak_kb, doc["peak_kb"])
                continue
            out.codes[doc["i"]] = doc["code"]
            out.messages[doc["i"]] = doc["message"]
            done = doc["i"] + 1
        if done >= count and proc.returncode == 0:
            break
        # the child died on record `done`: a crash, then go on after it
        how = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        out.codes[done] = "crash"
        out.messages[done] = how[:300]
        out.crashes.append((done, how[:300]))
        out.peak_kb = max(out.peak_kb, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        start = done + 1
    return out


def mutants(
    records: Sequence[tuple[str, bytes]], n: int, seed: int
) -> Iterator[tuple[int, str, str, bytes]]:
    """`n` mutants: (index of the original in `records`, its label, what, mutant bytes); a
    mutation that happens to change nothing (a value set to the one it had) is drawn again."""
    rng = random.Random(seed)
    for _ in range(n):
        k = rng.randrange(len(records))
        label, data = records[k]
        for _ in range(20):
            what, bytes_ = mutate(data, rng)
            if bytes_ != data:
                break
        yield k, label, what, bytes_


Reason = Callable[[bytes, bytes], str | None]
