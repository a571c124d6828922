"""Verify's quick content check (records/strict.py `content_holds`, referee/engine/wire.py):
a record's hands read from its bytes against the replay. It must never accept a record whose
rebuild differs (the mutants of every game and ruleset, their encodings too), must decide for
every genuine untimed record, and knows the `.proto`'s field numbers."""

from __future__ import annotations

from collections import Counter

import pytest

from tapis_cartes.records.archive.shards import _rescored
from tapis_cartes.records.codec import canonical_bytes, decode_record, record_id
from tapis_cartes.records.replay import BaseVisitor, replay
from tapis_cartes.records.rescore import Rescored, rescore_record
from tapis_cartes.records.strict import content_holds, hand_fields, rebuild_record
from tapis_cartes.referee.engine import RecordError, ScoreLine
from tapis_cartes.referee.engine.base import HandResult
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.referee.engine.wire import (
    HANDS,
    HandFields,
    fields_below,
    hand_spans,
    read_hand,
    read_hands,
    record_tail,
)
from tapis_cartes.referee.engine.wire import hand_scores as wire_hand_scores
from tapis_cartes.v1 import record_pb2 as pb
from tests.records.mutants import corpus, mutants

MUTANTS = 600


class _Replayed(BaseVisitor["_Replayed"]):
    """The replay of a record, its fields checked as verify checks them."""

    engine_fields_only = True

    def result(self) -> _Replayed:
        return self


@pytest.fixture(scope="module")
def records() -> list[tuple[str, bytes]]:
    return corpus()


def replayed(data: bytes) -> _Replayed | None:
    try:
        return replay(decode_record(data), _Replayed(), hands=read_hands(data))
    except RecordError:
        return None


def test_the_field_numbers_are_the_protos() -> None:
    hand = pb.HandRecord.DESCRIPTOR.fields_by_name
    deal = pb.Deal.DESCRIPTOR.fields_by_name
    assert pb.GameRecord.DESCRIPTOR.fields_by_name["hands"].number == HANDS
    assert [hand[n].number for n in ("number", "dealer", "deal", "seats", "actions")] == [
        1,
        2,
        3,
        4,
        5,
    ]
    # After the actions, only the score lines and scores (compared as bytes), then clocks.
    assert sorted(f.number for f in pb.HandRecord.DESCRIPTOR.fields) == list(range(1, 10))
    assert [hand[n].number for n in ("lines", "scores_after")] == [6, 7]
    assert [deal[n].number for n in ("hands", "retourne", "talon", "deck")] == [1, 2, 3, 4]
    assert deal["retourne"].has_presence and not hand["number"].has_presence


def test_the_quick_check_agrees_with_the_rebuild(records: list[tuple[str, bytes]]) -> None:
    """Accepted by the quick check: the rebuild gives the same bytes (never the other way
    round); every genuine untimed record with no hand in progress is accepted."""
    accepted: Counter[bool] = Counter()
    originals = {d for _, d in records}
    for data in [*originals, *[m for *_, m in mutants(records, MUTANTS, seed=7)]]:
        r = replayed(data)
        if r is None or not content_holds(r.rec, r.match, r.units, data, r.fields):
            continue
        accepted[data in originals] += 1
        assert canonical_bytes(rebuild_record(decode_record(data), r.match)) == data
    assert accepted[False] > 0, accepted  # mutants of free fields, or of nothing
    for label, data in records:
        r = replayed(data)
        assert r is not None
        rec = decode_record(data)
        in_progress = len(rec.hands) > len(r.match.results)
        timed = rec.rules.HasField("time_control")
        quick = content_holds(r.rec, r.match, r.units, data, r.fields)
        assert quick == (not timed and not in_progress), label


def _values(fields: HandFields) -> tuple[object, ...]:
    return (
        fields.number,
        fields.dealer,
        fields.masks,
        fields.retourne,
        fields.talon,
        fields.deck,
        fields.seats,
        fields.actions,
    )


def test_the_hands_read_are_the_decoders(records: list[tuple[str, bytes]]) -> None:
    """Wherever the hands are read from the bytes (`read_hands`), their values are exactly
    what the protobuf decoder gives (`hand_fields` of the decoded record): for the genuine
    records and for every mutant the decoder accepts."""
    read = 0
    for data in [*(d for _, d in records), *(m for *_, m in mutants(records, MUTANTS, seed=5))]:
        try:
            rec = decode_record(data)
        except RecordError:
            continue
        hands = read_hands(data)
        if hands is None:
            continue
        read += 1
        assert [_values(f) for f in hands] == [_values(f) for f in hand_fields(rec)]
    assert read > len(records)


def test_a_hand_is_read_to_its_score_lines(records: list[tuple[str, bytes]]) -> None:
    label, data = next((lb, d) for lb, d in records if lb.startswith("imperiale"))
    rec = decode_record(data)
    hands = read_hands(data)
    assert hands is not None and len(hands) == len(rec.hands)
    for fields, hand in zip(hands, rec.hands, strict=True):
        # What follows the actions is the hand's score lines and scores, nothing else.
        rest = pb.HandRecord(lines=hand.lines, scores_after=hand.scores_after)
        assert data[fields.lines_at : fields.end] == rest.SerializeToString(deterministic=True)
        assert data[fields.key_at] == HANDS << 3 | 2, label


def _hand_bytes(**fields: object) -> bytes:
    return pb.HandRecord(**fields).SerializeToString(deterministic=True)  # type: ignore[arg-type]


def test_what_is_not_the_canonical_encoding_is_not_read(records: list[tuple[str, bytes]]) -> None:
    data = next(d for lb, d in records if lb == "dame-de-pique/standard/4p/finished")
    hand = decode_record(data).hands[0]
    genuine = hand.SerializeToString(deterministic=True)
    assert genuine[:2] == bytes([1 << 3, 1])  # hand number 1, first
    assert read_hand(genuine, 0, len(genuine)) is not None
    # A field of the engine's written again after the score lines (the decoder merges it).
    again = genuine + _hand_bytes(actions=[8])
    assert pb.HandRecord.FromString(again).actions[-1] == 8
    assert read_hand(again, 0, len(again)) is None
    # A uint32 field holding more than 32 bits (the decoder keeps the low ones).
    big = bytes([1 << 3]) + _varint(1 << 32 | 1) + genuine[2:]
    assert read_hand(big, 0, len(big)) is None
    # A zero written (proto3 leaves it out); a hand cut short.
    zero = bytes([1 << 3, 0]) + genuine[2:]
    assert read_hand(zero, 0, len(zero)) is None
    cut = genuine[:-1]
    assert read_hand(cut, 0, len(cut)) is None


def test_a_varint_not_in_its_shortest_form_is_refused(records: list[tuple[str, bytes]]) -> None:
    """The same values with a padded varint (an action as two bytes, the last 0): the bytes
    decode to the same record, but are not its canonical encoding."""
    data = next(d for lb, d in records if lb == "dame-de-pique/standard/4p/finished")
    rec = decode_record(data)
    hand = rec.hands[0]
    before = pb.HandRecord(number=hand.number, dealer=hand.dealer, deal=hand.deal, seats=hand.seats)
    after = pb.HandRecord(lines=hand.lines, scores_after=hand.scores_after)
    body = b"".join(_varint(a) for a in hand.actions[:-1]) + _varint(hand.actions[-1], pad=True)
    raw = (
        before.SerializeToString(deterministic=True)
        + bytes([5 << 3 | 2])
        + _varint(len(body))
        + body
        + after.SerializeToString(deterministic=True)
    )
    assert pb.HandRecord.FromString(raw) == hand
    assert read_hand(raw, 0, len(raw)) is None
    genuine = hand.SerializeToString(deterministic=True)
    assert read_hand(genuine, 0, len(genuine)) is not None


def _varint(n: int, pad: bool = False) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    if pad:
        out += bytes([n | 0x80, 0])
    else:
        out.append(n)
    return bytes(out)


def test_hand_spans_refuse_what_is_not_a_run_of_hands(records: list[tuple[str, bytes]]) -> None:
    data = next(d for lb, d in records if lb == "triomphe/equipe/4p/finished")
    spans = hand_spans(data)
    assert spans and len(spans) == 3 * len(decode_record(data).hands)
    assert hand_spans(b"") == []
    assert hand_spans(data[:-1]) == []  # cut short
    # A field between two hands: a format version after the first.
    first_end = spans[2]
    assert hand_spans(data[:first_end] + b"\x08\x01" + data[first_end:]) == []
    # Fields out of number order around the hands: the head is then not every field below
    # the hands. A format version after the last hand, a provenance (field 8) before the first.
    assert hand_spans(data + b"\x08\x01") == []
    assert hand_spans(b"\x42\x00" + data) == []
    assert hand_spans(data + b"\x42\x00") == spans  # after the hands, above them: read


def test_the_fields_below_a_number_are_found_only_in_order(
    records: list[tuple[str, bytes]],
) -> None:
    """`fields_below`: where a record's deal source begins in its head (the bytes before that
    hold its format version, rules, seats and start alone); -1 when the fields are out of
    order there."""
    seeded = 0
    for _, data in records:
        rec = decode_record(data)
        hands = read_hands(data)
        if hands is None:
            continue
        head = hands[0].key_at
        at = fields_below(data, head, 5)
        # What comes before `at` decodes to the record's fields 1 to 4, nothing else.
        before = pb.GameRecord.FromString(data[:at])
        assert before.rules == rec.rules and before.start == rec.start
        assert list(before.seats) == list(rec.seats) and not before.HasField("deal_source")
        if rec.HasField("deal_source"):
            seeded += 1
            assert (
                at < head and pb.GameRecord.FromString(data[at:head]).deal_source == rec.deal_source
            )
            # A format version after the deal source: out of order.
            assert fields_below(data[:head] + b"\x08\x01", head + 2, 5) == -1
        else:
            assert at == head
    assert seeded > 0


@pytest.mark.parametrize(
    ("finished", "winners", "scores", "units", "reason", "resigned", "rule", "provenance"),
    [
        (True, (0, 2), [(13,), (-26,), (0,), (2**53 - 1,)], ("points",), "", -1, "", ("", "", "")),
        (False, (), [], ("points",), "", -1, "", ("", "", "")),
        (
            True,
            (1,),
            [(3, -4), (0, 0), (-(2**53) + 1, 1)],
            ("imperiales", "jetons"),
            "le siège 0 a abandonné",
            0,
            "CLOCK.FORFEIT",
            ("transcript", "partie n°7.json", "2026-11-24"),
        ),
    ],
)
def test_the_tail_written_natively_is_protobufs(
    finished: bool,
    winners: tuple[int, ...],
    scores: list[tuple[int, ...]],
    units: tuple[str, ...],
    reason: str,
    resigned: int,
    rule: str,
    provenance: tuple[str, str, str],
) -> None:
    """`record_tail`: the bytes protobuf's deterministic serialization gives for the same
    outcome and provenance (set field by field, as `build_record` sets them)."""
    rec = pb.GameRecord()
    out = rec.outcome
    out.finished = finished
    out.winners.extend(winners)
    for score in scores:
        s = out.scores.add()
        for unit, value in zip(units, score, strict=True):
            setattr(s, unit, value)
    out.reason = reason
    if resigned >= 0:
        out.resigned = resigned
    out.rule = rule
    p = rec.provenance
    p.source, p.reference, p.played_at = provenance
    fields = tuple(pb.Score.DESCRIPTOR.fields_by_name[u].number for u in units)
    written = record_tail(finished, winners, scores, fields, reason, resigned, rule, *provenance)
    assert written == rec.SerializeToString(deterministic=True)
    assert pb.GameRecord.FromString(written) == rec


def _pb_hand_scores(result: HandResult, units: tuple[str, ...]) -> bytes:
    """A hand's score lines and scores after it as protobuf serializes them."""
    hand = pb.HandRecord()
    for seat, kind, delta, rule, note, at in result.lines:
        line = hand.lines.add(seat=seat, kind=kind, rule=rule, note=note, after_action=at)
        line.delta.SetInParent()  # present even when every value is 0
        for unit, value in zip(units, delta, strict=True):
            setattr(line.delta, unit, value)
    for score in result.scores_after:
        hand.scores_after.add(**dict(zip(units, score, strict=True)))
    return hand.SerializeToString(deterministic=True)


def test_the_score_lines_written_natively_are_protobufs(records: list[tuple[str, bytes]]) -> None:
    """`hand_scores`: the bytes protobuf gives for every hand of the corpus (every game, one
    unit or two), and for lines and scores at the edges of their fields: a seat and an
    action 0 (left out) or large, negative deltas, zero deltas, texts not ASCII."""
    checked = 0
    for label, data in records:
        rec = decode_record(data)
        replay_of = replayed(data)
        if replay_of is None or rec.rules.HasField("time_control"):
            continue
        if not replay_of.match.results:
            continue  # a match stopped in its first hand
        units = replay_of.units
        fields = tuple(pb.Score.DESCRIPTOR.fields_by_name[u].number for u in units)
        for result in replay_of.match.results:
            assert wire_hand_scores(result, fields) == _pb_hand_scores(result, units), label
            checked += 1
        result = replay_of.match.results[-1]
        zero = (0,) * len(units)
        edge = (-(2**53) + 1, *((2**53 - 1,) * (len(units) - 1)))
        result.lines = [
            ScoreLine(0, "penalty", zero, "DP.SCORE", "", 0),
            ScoreLine(255, "volte", edge, "RÈGLE", "le siège 3 a tout pris ♠", 2**32 - 1),
        ]
        result.scores_after = (zero, edge)
        assert wire_hand_scores(result, fields) == _pb_hand_scores(result, units), label
    assert checked > 50  # the hands of every game and ruleset


def _rescore_of_decoded(data: bytes, changes: dict[str, Option]) -> Rescored:
    """The re-score of a stored record decoded whole, hand by hand through protobuf (under
    its id: the archive's re-score checks the stored record against it first)."""
    rid = record_id(data)
    try:
        rec = decode_record(data)
    except RecordError as exc:
        rule = f"record:{exc.code}"
        return Rescored(rid, "not-replayable", rule, str(exc), [], None, [], None, None)
    return rescore_record(rid, rec, changes)


@pytest.mark.parametrize("changes", [{}, {"moon_mode": "subtract_self"}, {"end_threshold": 50}])
def test_a_rescore_from_the_bytes_is_the_decoded_records(
    records: list[tuple[str, bytes]], changes: dict[str, Option]
) -> None:
    """The archive's re-score reads the hands from the stored bytes and decodes the record
    without them, comparing each hand's score lines by their bytes: its report is the one of
    the record decoded whole, for every genuine record and mutant (score lines changed or
    no longer decoding, hands cut, ...)."""
    outcomes: Counter[str] = Counter()
    for data in [*(d for _, d in records), *(m for *_, m in mutants(records, MUTANTS, seed=9))]:
        stored = pb.RecordEnvelope(record=data).SerializeToString()
        got = _rescored(record_id(data), stored, changes)
        assert got == _rescore_of_decoded(data, changes), data.hex()
        outcomes[f"{got.status} {got.first_diff is not None}"] += 1
    assert outcomes["ok False"] and outcomes["not-replayable False"], outcomes
    if changes:
        assert outcomes["ok True"], outcomes  # some records' lines differ


def test_score_lines_that_no_longer_decode_make_a_record_not_replayable(
    records: list[tuple[str, bytes]],
) -> None:
    """The hands' fields read, the record decoded without its hands: a score line whose bytes
    no longer decode still makes the record not replayable (`record:decode`)."""
    label, data = next((lb, d) for lb, d in records if lb.startswith("dame"))
    hands = read_hands(data)
    assert hands is not None
    at = hands[0].lines_at
    # The first line's seat field made a field of wire type 7 (there is none).
    body = data[at + 2 :]
    line = pb.ScoreLine.FromString(data[at + 2 : at + 2 + data[at + 1]])
    assert line.rule, label
    broken = data[: at + 2] + bytes([1 << 3 | 7]) + body[1:]
    with pytest.raises(RecordError):
        decode_record(broken)
    assert read_hands(broken) is not None  # the hands' engine fields still read
    stored = pb.RecordEnvelope(record=broken).SerializeToString()
    got = _rescored(record_id(broken), stored, {})
    assert (got.status, got.rule) == ("not-replayable", "record:decode")
    # Under the id of the record it was made from: another record than its id names.
    got = _rescored(record_id(data), stored, {})
    assert (got.status, got.rule) == ("not-replayable", "record:id")
