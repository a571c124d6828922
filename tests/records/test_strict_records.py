"""Strict records (docs/verify.md): every field checked against its game before the replay,
in memory bounded by the record's size; one canonical encoding; nothing taken as it comes.
Records of every game and ruleset are mutated field by field and re-encoded, re-signed with a
valid key, and verified in a child process whose memory is limited: never a crash, never the
`internal` code, and no accepted mutant that a genuine replay would not give (an oracle that
does not ask the verifier). Then `archive add` of hostile files and with trusted keys, and
hostile transcripts."""

from __future__ import annotations

import json
import random
import re
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tapis_cartes.records import archive as archive_module
from tapis_cartes.records.annotate import annotate
from tapis_cartes.records.archive import add as archive_add
from tapis_cartes.records.archive import add_files, iter_envelopes, open_archive, query_records
from tapis_cartes.records.codec import (
    MAX_NAME,
    decode_record,
    encode_varint,
    envelope,
    write_envelopes,
    write_frames,
)
from tapis_cartes.records.export import envelopes_from_json, envelopes_to_json, record_to_transcript
from tapis_cartes.records.signing import key_id, public_pem, sign
from tapis_cartes.records.strict import actions_in_range, first_difference
from tapis_cartes.records.transcript import import_transcript, load_transcript
from tapis_cartes.records.verify import verify_frame, verify_record
from tapis_cartes.referee.engine import (
    InvalidAction,
    RecordError,
    TranscriptError,
    make_rules,
    new_match,
)
from tapis_cartes.referee.engine.actions import (
    PASS,
    PILLE,
    PILLE_STOP,
    PLAY,
    check_action,
    encode,
    first_out_of_range,
    in_range,
    pass_cards,
)
from tapis_cartes.referee.engine.cards import iter_cards
from tapis_cartes.referee.engine.wire import hand_spans
from tapis_cartes.v1 import record_pb2 as pb
from tests.commands import DATA
from tests.commands import tapis as run_tapis
from tests.records.mutants import (
    MEMORY_LIMIT,
    Wire,
    corpus,
    encode_wire,
    encoding_mutation,
    mutants,
    oracle,
    parse_wire,
    verify_in_subprocess,
)

MUTANTS = 400  # mutants in the suite; scripts/fuzz_records.py runs as many as asked


@pytest.fixture(scope="module")
def records() -> list[tuple[str, bytes]]:
    return corpus()


@pytest.fixture(scope="module")
def key_file(signing_key: Ed25519PrivateKey, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "referee.pub"
    path.write_text(public_pem(signing_key.public_key()))
    return path


def frames_of(key: Ed25519PrivateKey, datas: list[bytes]) -> list[bytes]:
    return [sign(d, key).SerializeToString(deterministic=True) for d in datas]


def verified(
    tmp_path: Path, key: Ed25519PrivateKey, key_file: Path, datas: list[bytes]
) -> list[str | None]:
    """The code of each record (signed with `key`) verified in a memory-limited child."""
    path = tmp_path / "mutants.tapis"
    write_frames(path, frames_of(key, datas))
    got = verify_in_subprocess(path, len(datas), key_file)
    assert not got.crashes, got.crashes
    return got.codes


def changed(data: bytes, change: Callable[[pb.GameRecord], None]) -> bytes:
    rec = pb.GameRecord.FromString(data)
    change(rec)
    return rec.SerializeToString(deterministic=True)


def by_label(records: list[tuple[str, bytes]], prefix: str) -> bytes:
    return next(data for label, data in records if label.startswith(prefix))


# --- every record Tapis writes verifies ------------------------------------------------------


def test_every_record_tapis_writes_verifies(
    records: list[tuple[str, bytes]], signing_key: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """The golden records, and matches of every game and ruleset (finished, resigned,
    stopped in a hand, dealt from a seed); and each after export to JSON and back, export to
    a transcript and import (a match whose hands are all over), annotation, signing and a
    pass through an archive."""
    labels = {label.split("/")[0] for label, _ in records}
    assert labels >= {"dame-de-pique", "napoleon", "imperiale", "triomphe"}
    assert {p.stem for p in DATA.glob("*.tapis")} <= labels  # the golden records are in
    envs = []
    for label, data in records:
        assert verify_record(data) == len(decode_record(data).hands), label
        env = sign(data, signing_key)
        comments = [(1, 1, "a comment")] if decode_record(data).hands[0].actions else []
        env.annotations.CopyFrom(annotate(decode_record(data), comments))
        envs.append(env)
        assert verify_frame(
            env.SerializeToString(deterministic=True), [signing_key.public_key()]
        ).ok
        rec = decode_record(data)
        if all(h.scores_after for h in rec.hands):  # every hand over: a transcript holds it
            again = decode_record(
                import_transcript(record_to_transcript(rec), rec.provenance.reference)
            )
            again.provenance.CopyFrom(rec.provenance)
            if rec.HasField("deal_source"):
                again.deal_source.CopyFrom(rec.deal_source)
            assert again.SerializeToString(deterministic=True) == data, label
    back = envelopes_from_json(envelopes_to_json(envs))
    assert [e.SerializeToString(deterministic=True) for e in back] == [
        e.SerializeToString(deterministic=True) for e in envs
    ]
    write_envelopes(tmp_path / "all.tapis", envs)
    db = open_archive(tmp_path / "a.db")
    try:
        report = add_files(db, [tmp_path / "all.tapis"], keys=[signing_key.public_key()])
        assert (report.added, report.refused, report.untrusted) == (len(envs), [], [])
        exported = list(iter_envelopes(db, archive_module.Selection()))
    finally:
        db.close()
    for frame in exported:
        assert verify_frame(frame, [signing_key.public_key()]).ok


# --- named hostile records: the faults of the issue and their codes ------------------------

_DP = "dame-de-pique/"
_IMP = "imperiale/academie/3p/finished"


def _card_play(rec: pb.GameRecord, card: int, at: int = 20) -> None:
    rec.hands[0].actions[at] = encode(PLAY, card)


CASES: list[tuple[str, str, Callable[[pb.GameRecord], None], str, int | None, int | None]] = [
    ("a card id of 2^34", _DP, lambda r: _card_play(r, 2**34), "action:invalid", 1, 21),
    ("an action payload of 2^53", _DP, lambda r: r.hands[0].actions.__setitem__(20, 2**53),
     "action:invalid", 1, 21),
    ("a card of another pack", "triomphe/individuelle/2p/finished",
     lambda r: _card_play(r, 0, 3), "action:invalid", 1, 4),
    ("a card of another pack, late in the card play", "triomphe/individuelle/2p/finished",
     lambda r: _card_play(r, 0, 7), "action:invalid", 1, 8),
    ("a retourne of 2^32-1", _IMP, lambda r: setattr(r.hands[0].deal, "retourne", 2**32 - 1),
     "deal:card-not-in-pack", 1, None),
    ("a mask beyond the pack", _DP,
     lambda r: r.hands[0].deal.hands.__setitem__(0, r.hands[0].deal.hands[0] | 1 << 60),
     "deal:card-not-in-pack", 1, None),
    ("a talon card of 200", _IMP, lambda r: setattr(r.hands[0].deal, "talon", b"\xc8"),
     "deal:card-not-in-pack", 1, None),
    ("a deck of 2^8 cards", _DP, lambda r: setattr(r.hands[0].deal, "deck", bytes(256)),
     "deal:duplicate-card", 1, None),
    ("a seat byte of 255", _DP,
     lambda r: setattr(r.hands[0], "seats", b"\xff" + r.hands[0].seats[1:]),
     "action:bad-seat", 1, 1),
    ("a dealer of 2^32-1", _DP, lambda r: setattr(r.hands[0], "dealer", 2**32 - 1),
     "deal:bad-dealer", 1, None),
    ("a team in Dame de Pique", _DP, lambda r: setattr(r.seats[0], "team", 1), "seat-team",
     None, None),
    ("jetons in a Dame de Pique score", _DP,
     lambda r: setattr(r.hands[0].scores_after[0], "jetons", 3), "score-unit", 1, None),
    ("points in an Imperiale start", _IMP, lambda r: setattr(r.start.scores[0], "points", 1),
     "score-unit", None, None),
    ("a name of 65 characters", _DP, lambda r: setattr(r.seats[1], "name", "n" * (MAX_NAME + 1)),
     "text-length", None, None),
    ("an empty name", _DP, lambda r: setattr(r.seats[2], "name", ""), "seat-name", None, None),
    ("a name holding an escape", _DP, lambda r: setattr(r.seats[0], "name", "\x1b[2J"),
     "seat-name", None, None),
    ("a name holding a bidirectional control", "napoleon/standard/4p/finished",
     lambda r: setattr(r.seats[3], "name", "abc\u202edef"), "seat-name", None, None),
    ("a megabyte of provenance", _DP, lambda r: setattr(r.provenance, "reference", "r" * 2**20),
     "text-length", None, None),
    ("a date played that is none", _DP, lambda r: setattr(r.provenance, "played_at", "yesterday"),
     "provenance", None, None),
    ("a date played without its offset", _DP,
     lambda r: setattr(r.provenance, "played_at", "2026-03-01T10:00:00"), "provenance", None, None),
    ("a date played on February 30", _DP,
     lambda r: setattr(r.provenance, "played_at", "2026-02-30T10:00:00Z"), "provenance", None,
     None),
    ("a date played at second 61 (a leap second is 60)", _DP,
     lambda r: setattr(r.provenance, "played_at", "2026-06-30T23:59:61Z"), "provenance", None,
     None),
    ("a start at hand 0", _DP, lambda r: setattr(r.start, "hand_number", 0), "start", None, None),
    ("an option twice", _DP, lambda r: r.rules.options.append(r.rules.options[-1]), "rules",
     None, None),
    ("the reason of a finished match", _DP, lambda r: setattr(r.outcome, "reason", "I won"),
     "record-content", None, None),
    ("score lines in a hand still in progress", "dame-de-pique/standard/4p/stopped",
     lambda r: r.hands[-1].lines.add(seat=0, kind="penalty", rule="DP.SCORE"),
     "record-content", 1, None),
    ("no provenance", _DP, lambda r: r.ClearField("provenance"), "record-content", None, None),
    ("10,001 hands", _DP, lambda r: [r.hands.add() for _ in range(10_001)], "record-size",
     None, None),
    ("1001 score lines in a hand", _DP, lambda r: [r.hands[0].lines.add() for _ in range(1001)],
     "record-size", 1, None),
    ("1001 actions in a hand", _DP, lambda r: r.hands[0].actions.extend([0] * 1001),
     "record-size", 1, None),
    ("257 options", _DP, lambda r: [r.rules.options.add() for _ in range(257)], "record-size",
     None, None),
]  # fmt: skip
# Faults an earlier verifier already found (by the replay): kept with the others in the child.
KIN: list[tuple[str, str, Callable[[pb.GameRecord], None], str, int | None, int | None]] = [
    ("winners twice", _DP, lambda r: r.outcome.winners.extend(list(r.outcome.winners)),
     "outcome", None, None),
    ("a start score of 2^62", "triomphe/equipe/4p/finished",
     lambda r: setattr(r.start.scores[0], "points", 2**62), "start", None, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "label", "change", "code", "hand", "action"), CASES, ids=[c[0] for c in CASES]
)
def test_named_hostile_record(
    records: list[tuple[str, bytes]],
    name: str,
    label: str,
    change: Callable[[pb.GameRecord], None],
    code: str,
    hand: int | None,
    action: int | None,
) -> None:
    """Each fault of the issue, and its kin, found with its code and position (in this
    process: every value the engine could not take is stopped before it)."""
    data = changed(by_label(records, label), change)
    with pytest.raises(RecordError) as exc:
        verify_record(data)
    err = exc.value
    assert (err.code, err.hand, err.action) == (code, hand, action), str(err)
    assert len(str(err)) < 400


def test_named_hostile_records_in_bounded_memory(
    records: list[tuple[str, bytes]], signing_key: Ed25519PrivateKey, key_file: Path, tmp_path: Path
) -> None:
    """The same records, re-signed, verified in a child limited to 1 GiB: a card id of 2^34
    or a retourne of 2^32-1 once made the verifier allocate gigabytes and die."""
    cases = CASES + KIN
    datas = [changed(by_label(records, label), change) for _, label, change, *_ in cases]
    assert verified(tmp_path, signing_key, key_file, datas) == [code for *_, code, _, _ in cases]


def test_a_small_record_of_many_tiny_fields_is_refused_in_bounded_memory(
    records: list[tuple[str, bytes]], signing_key: Ed25519PrivateKey, key_file: Path, tmp_path: Path
) -> None:
    """Six megabytes of empty hands (two bytes each), or of empty score lines in one hand,
    re-signed: each field decoded is an object of a hundred bytes or more, and such a record
    once took gigabytes. Refused (`record-size`) in a child limited to 1 GiB."""
    data = by_label(records, _DP)
    key_at, start, end = hand_spans(data)[:3]  # hand 1: its key, then its bytes
    hand = data[start:end] + b"\x32\x00" * 3_000_000  # (lines: field 6 of a hand too)
    many_lines = data[:key_at] + b"\x32" + encode_varint(len(hand)) + hand + data[end:]
    assert verified(
        tmp_path, signing_key, key_file, [data + b"\x32\x00" * 3_000_000, many_lines]
    ) == ["record-size", "record-size"]


def test_no_encoding_goes_past_the_size_check(
    records: list[tuple[str, bytes]], signing_key: Ed25519PrivateKey, key_file: Path, tmp_path: Path
) -> None:
    """A decoder takes encodings Tapis never writes: a key in a long varint, a group, a uint64
    of ten bytes, actions not packed. Put first, each once stopped the size check (which left
    what it could not read to the decoder), and the empty hands after it were all decoded: 567
    MB for ten megabytes. Refused (`record-size`) in a child limited to 1 GiB."""
    data = by_label(records, _DP)
    hands = b"\x32\x00" * 3_000_000
    firsts = [
        b"\xb2\x80\x00\x00",  # an empty hand, its key in three bytes
        b"\x7b\x08\x01\x7c",  # a group of field 15 (wire types 3 and 4), not a field of records
        b"\x78" + b"\xff" * 9 + b"\x01",  # field 15 = 2^64 - 1
    ]
    unpacked = b"\x28\x01" * 1001  # a hand of 1001 actions, one field each
    assert (
        verified(
            tmp_path,
            signing_key,
            key_file,
            [f + data + hands for f in firsts]
            + [data + b"\x32" + encode_varint(len(unpacked)) + unpacked],
        )
        == ["record-size"] * 4
    )


def test_the_first_difference_is_named(records: list[tuple[str, bytes]]) -> None:
    data = by_label(records, "imperiale/academie/2p/finished")
    rec = decode_record(data)
    other = decode_record(data)
    other.hands[1].scores_after[1].jetons += 1
    assert first_difference(other, rec) == (
        "hands[1].scores_after[1].jetons",
        str(other.hands[1].scores_after[1].jetons),
        str(rec.hands[1].scores_after[1].jetons),
    )
    other = decode_record(data)
    seats = other.hands[0].seats
    other.hands[0].seats = seats[:3] + bytes([seats[3] ^ 1]) + seats[4:]
    assert first_difference(other, rec) is not None
    assert first_difference(other, rec)[0] == "hands[0].seats[3]"  # type: ignore[index]
    assert first_difference(rec, decode_record(data)) is None


@pytest.mark.parametrize(("game", "players"), [("dame-de-pique", 4), ("triomphe", 2),
                                              ("imperiale", 3), ("napoleon", 3)])  # fmt: skip
def test_the_range_of_a_pack_is_check_action_and_the_pack(game: str, players: int) -> None:
    """The set a hand's actions are checked against in one operation holds exactly the
    actions `check_action` takes whose cards are of the game's pack."""
    options = {"short_deck": True} if game == "napoleon" else {}
    pack = new_match(make_rules(game, options=options, players=players)).pack
    valid = actions_in_range(pack)
    rng = random.Random(players)
    samples = [*valid, *(rng.randrange(1 << 22) for _ in range(20_000)), 2**34 << 3, 2**53]
    for action in samples:
        try:
            check_action(action)
            cards = (
                [action >> 3]
                if action & 7 in (PLAY, PILLE) and action >> 3 != PILLE_STOP
                else list(iter_cards(pass_cards(action)))
                if action & 7 == PASS
                else []
            )
            ok = all(pack >> c & 1 for c in cards)
        except InvalidAction:
            ok = False
        assert (action in valid) == ok, action
        assert in_range(action, pack) == ok, action
    assert first_out_of_range([*samples[:3], -1, 2**53], pack) == 3


# --- one encoding ---------------------------------------------------------------------------


def test_every_other_encoding_of_a_record_is_refused(records: list[tuple[str, bytes]]) -> None:
    """The same content written another way (a field twice, split, unpacked, out of order,
    over-long, a default written out, a 32-bit value in a wider varint): refused as not
    canonical; an unknown field: refused as unknown. One match, one record id."""
    for label, data in records:  # the wire form of the mutations writes a record back as it was
        assert encode_wire(parse_wire(data)) == data, label
    rng = random.Random(7)
    seen: Counter[str] = Counter()
    for _ in range(300):
        label, data = rng.choice(records)
        what, mutant = encoding_mutation(data, rng)
        if mutant == data:
            continue
        try:
            same = pb.GameRecord.FromString(mutant) == pb.GameRecord.FromString(data)
        except Exception:
            same = False
        with pytest.raises(RecordError) as exc:
            verify_record(mutant)
        code = exc.value.code
        seen[what] += 1
        if what == "encoding:unknown-field":
            assert code == "record-unknown-field", (label, what, str(exc.value))
            # the message names the field: its number, and the message it is not part of
            assert re.search(r": (\w+(\[\d+\])?\.)*field \d+ \(not in \w+\)$", str(exc.value))
        elif same:
            assert code == "record-noncanonical", (label, what, str(exc.value))
            # ... and where the bytes part from the canonical ones (`data`: the same record):
            # the innermost field that differs, at or past the first byte that does
            found = re.search(r"they differ from it at byte ([\d,]+), in \w+", str(exc.value))
            assert found, (what, str(exc.value))
            first = next(
                i for i, (a, b) in enumerate(zip(mutant, data + b"\0", strict=False)) if a != b
            )
            assert first <= int(found[1].replace(",", "")) < len(mutant), (what, str(exc.value))
    kinds = {w.split(":")[1] for w in seen}
    assert {"pad-varint", "repeat-scalar", "split-packed", "unpack", "reorder"} <= kinds, seen
    assert {"wide-varint", "split-message", "unknown-field", "pad-length"} <= kinds, seen


def test_a_card_id_of_2_34_in_a_32_bit_varint_is_not_canonical(
    records: list[tuple[str, bytes]],
) -> None:
    """A retourne written as the varint 2^34 + 5 decodes to 5 (protobuf keeps 32 bits): the
    same record, not its canonical bytes."""
    data = by_label(records, _IMP)
    fields = parse_wire(data)
    hand = next(f for f in fields if f.number == 6).value
    deal = next(f for f in hand if f.number == 3).value
    retourne = next(f for f in deal if f.number == 2)
    retourne.value += 2**34
    with pytest.raises(RecordError) as exc:
        verify_record(encode_wire(fields))
    assert exc.value.code == "record-noncanonical"
    fields = parse_wire(data)
    fields.append(Wire(99, 0, 1))
    with pytest.raises(RecordError) as exc:
        verify_record(encode_wire(fields))
    assert exc.value.code == "record-unknown-field"


def test_an_unknown_field_in_any_message_is_refused(records: list[tuple[str, bytes]]) -> None:
    """Verify checks the encoding only when a record fails (a record that passes is the
    bytes of its rebuild): an unknown field in a free field's message (the deal source, the
    provenance, a seat) or a replayed one (a hand, its deal, the rules) is still refused as
    unknown, not copied into the rebuild."""
    data = next(d for _, d in records if decode_record(d).HasField("deal_source"))
    assert verify_record(data)
    # (the path of field numbers down to the message; 5 deal source, 8 provenance, 3 a
    # seat, 6 a hand, 6/3 its deal, 2 the rules, 7 the outcome)
    for path in ((5,), (8,), (3,), (6,), (6, 3), (2,), (7,)):
        fields = parse_wire(data)
        where = fields
        for number in path:
            where = next(f for f in where if f.number == number).value
        where.append(Wire(99, 0, 1))
        with pytest.raises(RecordError) as exc:
            verify_record(encode_wire(fields))
        assert exc.value.code == "record-unknown-field", path


# --- mutants: never a crash, bounded memory, nothing accepted that a replay would not give ---


def test_mutants_are_refused_or_genuine(
    records: list[tuple[str, bytes]], signing_key: Ed25519PrivateKey, key_file: Path, tmp_path: Path
) -> None:
    """A few hundred structured mutations of records of every game and ruleset, re-signed,
    verified in a child limited to 1 GiB of address space: no crash, no `internal`, memory
    bounded; each accepted mutant is one the oracle finds genuine without the verifier."""
    batch = list(mutants(records, MUTANTS, seed=2026))
    path = tmp_path / "mutants.tapis"
    write_frames(path, frames_of(signing_key, [m for *_, m in batch]))
    got = verify_in_subprocess(path, len(batch), key_file)
    assert not got.crashes, got.crashes
    assert got.peak_kb * 1024 < MEMORY_LIMIT // 4, got.peak_kb
    codes = Counter(got.codes)
    assert "internal" not in codes, [
        (what, msg) for (_, _, what, _), c, msg in zip(batch, got.codes, got.messages, strict=True)
        if c == "internal"
    ]  # fmt: skip
    disagree = []
    reasons: Counter[str | None] = Counter()
    for (k, label, what, mutant), code in zip(batch, got.codes, strict=True):
        if code is None:
            why = oracle(records[k][1], mutant)
            reasons[why] += 1
            if why is None:
                disagree.append((label, what))
    assert not disagree, disagree
    # The mutants reach every layer: encodings, field checks, the replay, the content.
    assert {"record-noncanonical", "score-unit", "action:invalid", "outcome"} <= set(codes), codes
    assert {"deal:card-not-in-pack", "score-lines", "text-length", "rules"} <= set(codes), codes
    assert codes[None] > 0 and reasons["same bytes"] < codes[None], reasons


# --- archive add ----------------------------------------------------------------------------


def tapis(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The command line, in a child limited to 1 GiB."""
    return run_tapis(*args, memory_limit=MEMORY_LIMIT)


def count(db: Path) -> int:
    d = open_archive(db, create=False)
    try:
        return len(query_records(d, archive_module.Selection()))
    finally:
        d.close()


def test_archive_add_takes_the_good_records_of_a_hostile_file(
    records: list[tuple[str, bytes]], signing_key: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """Good records mixed with hostile ones (a card id of 2^34, a retourne of 2^32-1, a team
    in Dame de Pique, a non-canonical encoding), all validly signed: exactly the good ones go
    in, the others are each refused with their code."""
    good = [data for _, data in records[:8]]
    hostile = [
        changed(by_label(records, _DP), lambda r: _card_play(r, 2**34)),
        changed(by_label(records, _IMP), lambda r: setattr(r.hands[0].deal, "retourne", 2**32 - 1)),
        changed(by_label(records, _DP), lambda r: setattr(r.seats[0], "team", 1)),
        encode_wire([*parse_wire(good[0]), Wire(7, 2, [])]),  # the outcome twice
    ]  # fmt: skip
    mixed = [good[0], hostile[0], good[1], hostile[1], *good[2:5], hostile[2], hostile[3]]
    mixed += good[5:]
    path = tmp_path / "mixed.tapis"
    write_frames(path, frames_of(signing_key, mixed))
    db = tmp_path / "a.db"
    done = tapis("archive", "add", db, path)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[0] == f"{len(good)} added, 0 duplicates, 4 refused"
    for index, code in ((2, "action:invalid"), (4, "deal:card-not-in-pack"), (8, "seat-team"),
                        (9, "record-noncanonical")):  # fmt: skip
        assert f"{path} (record {index}): refused:" in done.stderr
        assert f"({code})" in done.stderr
    assert count(db) == len(good)
    assert len(done.stderr) < 4000


def test_archive_add_with_trusted_keys(
    records: list[tuple[str, bytes]], signing_key: Ed25519PrivateKey, key_file: Path, tmp_path: Path
) -> None:
    """`--key`/`--trusted-keys`: only records signed by one of the keys go in; the unsigned
    ones and those of another key are counted apart; a signature that claims a trusted key
    and does not hold is refused."""
    other = Ed25519PrivateKey.generate()
    datas = [data for _, data in records[:6]]
    forged = envelope(datas[4], other.sign(datas[4]), key_id(signing_key.public_key()))
    envs = [
        sign(datas[0], signing_key),
        sign(datas[1], other),
        envelope(datas[2]),
        sign(datas[3], signing_key),
        forged,
        sign(datas[5], signing_key),
    ]
    path = tmp_path / "signed.tapis"
    write_envelopes(path, envs)
    db = tmp_path / "a.db"
    done = tapis("archive", "add", db, path, "--key", key_file)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[0] == (
        "3 added, 0 duplicates, 1 refused, 2 not signed by a trusted key"
    )
    assert f"{path} (record 2): not signed by a trusted key:" in done.stderr
    assert f"{path} (record 3): not signed by a trusted key:" in done.stderr
    assert f"{path} (record 5): refused:" in done.stderr and "signature-invalid" in done.stderr
    assert count(db) == 3
    # A trusted-keys file naming both keys: the other key's record goes in too.
    trusted = tmp_path / "trusted.txt"
    trusted.write_text(
        f"# Club\n{public_pem(signing_key.public_key())}# Visitor\n{public_pem(other.public_key())}"
    )
    done = tapis("archive", "add", db, path, "--trusted-keys", trusted)
    assert done.stdout.splitlines()[0] == (
        "1 added, 3 duplicates, 1 refused, 1 not signed by a trusted key"
    )
    # Without keys nothing is said of signatures; a bad key file is exit status 2.
    done = tapis("archive", "add", tmp_path / "b.db", path)
    assert done.stdout.splitlines()[0] == "6 added, 0 duplicates, 0 refused"
    done = tapis("archive", "add", tmp_path / "c.db", path, "--key", tmp_path / "none.pem")
    assert done.returncode == 2 and "none.pem" in done.stderr


def test_archive_add_survives_a_failure_of_the_verifier(
    records: list[tuple[str, bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever happens on one record, even the verifier failing, the others go in."""
    datas = [data for _, data in records[:5]]
    write_envelopes(tmp_path / "f.tapis", [envelope(d) for d in datas])
    real = archive_add.verify_frame

    def flaky(frame: bytes, *args: object) -> object:
        if pb.RecordEnvelope.FromString(frame).record == datas[2]:
            raise MemoryError("the verifier broke")
        return real(frame, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(archive_add, "verify_frame", flaky)
    db = open_archive(tmp_path / "a.db")
    try:
        report = add_files(db, [tmp_path / "f.tapis"])
    finally:
        db.close()
    assert report.added == 4
    ((_, index, error),) = report.refused
    assert index == 3 and "internal" in error and "MemoryError" in error


# --- hostile transcripts and records at the command line -----------------------------------


def _transcript(change: Callable[[dict[str, object]], None]) -> dict[str, object]:
    doc = json.loads((DATA / "napoleon-n1.json").read_text())
    change(doc)
    return doc


BIG = "Q" * 1_000_000
HOSTILE = [
    ("a name of a megabyte", lambda d: d["players"].__setitem__(0, BIG), "players[0]"),
    ("a name of 65 characters", lambda d: d["players"].__setitem__(0, "n" * 65), "players[0]"),
    ("a name with a line break", lambda d: d["players"].__setitem__(1, "a\nb"), "players[1]"),
    ("a name with an escape", lambda d: d["players"].__setitem__(1, "a\x1b[31mb"), "players[1]"),
    ("a name with a bidi override", lambda d: d["players"].__setitem__(2, "Eve\u202eevE"),
     "players[2]"),
    ("a name with the line separator", lambda d: d["players"].__setitem__(3, "a\u2028b"),
     "players[3]"),
    ("a card of a megabyte", lambda d: d["hands"][0]["deal"]["hands"][0].__setitem__(0, BIG),
     "hands[0].deal.hands[0][0]"),
    ("a card that is a list", lambda d: d["hands"][0]["deal"]["hands"][0].__setitem__(
        0, list(range(100_000))), "hand 1, deal.hands[0][0]"),
    ("a key of a megabyte", lambda d: d.__setitem__(BIG, 1), "transcript"),
    ("a game of a megabyte", lambda d: d.__setitem__("game", BIG), "game"),
    ("a game that is a list", lambda d: d.__setitem__("game", list(range(100_000))), "game"),
    ("an option that is a list", lambda d: d.__setitem__("options", {"deals": [1] * 100_000}),
     "options.deals"),
    ("an option of 2^70", lambda d: d.__setitem__("options", {"deals": 2**70}), "options.deals"),
    ("a start at hand 2^40", lambda d: d.__setitem__("start", {"hand_number": 2**40}),
     "start.hand_number"),
    ("a start score of 2^60", lambda d: d.__setitem__(
        "start", {"scores": [{"points": 2**60}] * 4}), "start.scores[0].points"),
    ("a bid that is a list", lambda d: d["hands"][0]["actions"][0].__setitem__(
        "bid", list(range(100_000))), "hand 1, action 1 (seat 0)"),
    ("an action key of a megabyte", lambda d: d["hands"][0]["actions"][0].__setitem__(BIG, 1),
     "hands[0].actions[0]"),
    ("a pass of a thousand cards", lambda d: d["hands"][0]["actions"].__setitem__(
        0, {"seat": 0, "pass": ["QS"] * 1000}), "hand 1, action 1 (seat 0)"),
    ("a dealer that is a list", lambda d: d["hands"][0].__setitem__(
        "dealer", list(range(100_000))), "hand 1, dealer"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "change", "place"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_transcript_is_a_clear_error(
    name: str, change: Callable[[dict[str, object]], None], place: str, tmp_path: Path
) -> None:
    """A clear error that names the place and quotes at most a short prefix: never a
    traceback, never a megabyte echoed."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_transcript(change)))
    with pytest.raises(TranscriptError) as exc:
        import_transcript(load_transcript(path), "t.json")
    message = str(exc.value)
    assert message.startswith(place + ":"), message
    assert len(message) < 300, message


@pytest.mark.parametrize(
    ("start", "message"),
    [
        ({"hand_number": 1_000_001}, "start.hand_number: 1000001 is out of range (1..1000000)"),
        ({"hand_number": 2**31}, "start.hand_number: 2147483648 is out of range (1..1000000)"),
        (
            {"scores": [{"points": 10**6 + 1}] * 4},
            "start.scores[0].points: 1000001 is out of range (-1000000..1000000)",
        ),
    ],
)
def test_a_transcript_start_has_the_engines_bounds(
    start: dict[str, object], message: str, tmp_path: Path
) -> None:
    """The bounds of a start are the engine's (the referee's too), said once, at the field."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_transcript(lambda d: d.__setitem__("start", start))))
    with pytest.raises(TranscriptError) as exc:
        import_transcript(load_transcript(path), "t.json")
    assert str(exc.value) == message


def test_a_transcript_name_is_text_a_terminal_shows(tmp_path: Path) -> None:
    """A name holding a control character or a character that shows nothing, or showing
    nothing, is refused with the character named (the referee's rule for names); names in any
    script, with accents or emoji, import as they are."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_transcript(lambda d: d["players"].__setitem__(2, "Eve\u202eevE"))))
    with pytest.raises(TranscriptError, match=r"^players\[2\]: .*control character \(U\+202E\)"):
        import_transcript(load_transcript(path), "t.json")
    for name, words in [
        ("Ann\u200b", "a name that holds a character that shows nothing (U+200B)"),
        ("\ufe0f", "a name that holds a character that shows nothing (U+FE0F)"),
        ("\u3164", "a name that shows nothing (U+3164)"),
        ("  ", "a name that shows nothing (U+0020 U+0020)"),
        ("", 'expected a player\'s name, got ""'),
        (7, "expected a player's name, got 7"),
        ("A" * 300, "a name of 300 characters (at most 64)"),
    ]:
        path.write_text(json.dumps(_transcript(lambda d, n=name: d["players"].__setitem__(1, n))))
        with pytest.raises(TranscriptError) as exc:
            import_transcript(load_transcript(path), "t.json")
        assert str(exc.value) == f"players[1]: {words}", str(exc.value)
    names = ["Åsa Ødegård", "Ямщик", "中文名", "Ann 🂡"]
    path.write_text(json.dumps(_transcript(lambda d: d.__setitem__("players", names))))
    record = decode_record(import_transcript(load_transcript(path), "t.json"))
    assert [s.name for s in record.seats] == names


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deep"),
        ('{"format": ' + "9" * 10_000 + "}", "more than 4300 digits"),
    ],
    ids=["deep nesting", "a number of 10,000 digits"],
)
def test_hostile_transcript_files(text: str, words: str, tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(text)
    done = tapis("record", "import", path, "-o", tmp_path / "out.tapis")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and words in done.stderr, done.stderr
    assert len(done.stderr) < 400


def test_records_commands_never_quote_a_megabyte(
    records: list[tuple[str, bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record whose game, option or names are a megabyte of text: verify, show, score and
    export say what is wrong in a few lines, without a traceback (here, clients/cli.py's `main`)."""
    from tapis_cartes.clients.cli import main

    data = by_label(records, _DP)
    for change in (
        lambda r: setattr(r.rules, "game", BIG),
        lambda r: setattr(r.rules.options[0], "key", BIG),
        lambda r: setattr(r.rules.options[-1], "string_value", BIG),
        lambda r: setattr(r.seats[0], "name", BIG),
        lambda r: setattr(r.deal_source, "algorithm", BIG),
    ):
        path = tmp_path / "r.tapis"
        write_envelopes(path, [envelope(changed(data, change))])
        for command in (["verify"], ["show"], ["score"], ["export", "--format", "transcript"]):
            status = main(["record", *command, str(path)])
            out, err = capsys.readouterr()
            assert status == 1, (command, err[:300])
            assert len(out) + len(err) < 1000, (command, err[:300])


def test_a_date_played_may_give_its_fraction_of_a_second_to_any_digit() -> None:
    """RFC 3339 bounds no fraction of a second (`"." 1*DIGIT`): ten digits were refused,
    where nine passed. The archive orders by the first nine (to the nanosecond)."""
    from tapis_cartes.records.strict import check_played_at, played_at_key

    for text in ("2026-01-01T00:00:00.123456789Z", "2026-01-01T00:00:00.1234567891234Z"):
        check_played_at(text)
        assert played_at_key(text) == "2026-01-01T00:00:00.123456789Z"
    with pytest.raises(RecordError):
        check_played_at("2026-01-01T00:00:00.Z")
