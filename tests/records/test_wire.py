"""Verify's quick content check (records/strict.py `content_holds`, referee/engine/wire.py):
a record's hands read from its bytes against the replay. It must never accept a record whose
rebuild differs (the mutants of every game and ruleset, their encodings too), must decide for
every genuine untimed record, and knows the `.proto`'s field numbers."""

from __future__ import annotations

from collections import Counter

import pytest

from tapis_cartes.records.codec import canonical_bytes, decode_record
from tapis_cartes.records.replay import BaseVisitor, replay
from tapis_cartes.records.strict import content_holds, rebuild_record
from tapis_cartes.referee.engine import Match, RecordError
from tapis_cartes.referee.engine.wire import HANDS, hand_prefix, hand_spans
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
        return replay(decode_record(data), _Replayed())
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
        if r is None or not content_holds(r.rec, r.match, r.units, data):
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
        quick = content_holds(r.rec, r.match, r.units, data)
        assert quick == (not timed and not in_progress), label


def _hand_at(match: Match, data: bytes, i: int, seats: bytes | None = None) -> int:
    """`hand_prefix` of hand i of `data` against the replay's hand i."""
    spans = hand_spans(data)
    result = match.results[i]
    deal = result.deal
    return hand_prefix(
        data,
        spans[2 + 2 * i],
        spans[3 + 2 * i],
        result.number,
        result.dealer,
        deal.hands,
        deal.retourne,
        bytes(deal.talon),
        bytes(result.action_seats) if seats is None else seats,
        result.actions,
    )


def test_a_hand_is_read_to_its_score_lines(records: list[tuple[str, bytes]]) -> None:
    label, data = next((lb, d) for lb, d in records if lb.startswith("imperiale"))
    r = replayed(data)
    assert r is not None
    rec = decode_record(data)
    spans = hand_spans(data)
    assert len(spans) == 2 + 2 * len(rec.hands)
    for i, hand in enumerate(rec.hands):
        at = _hand_at(r.match, data, i)
        # What follows the actions is the hand's score lines and scores, nothing else.
        rest = pb.HandRecord(lines=hand.lines, scores_after=hand.scores_after)
        assert data[at : spans[3 + 2 * i]] == rest.SerializeToString(deterministic=True), label
    seats = bytes(r.match.results[0].action_seats)
    assert _hand_at(r.match, data, 0, seats[:-1] + bytes([seats[-1] ^ 1])) == -1


def test_a_varint_not_in_its_shortest_form_is_refused(records: list[tuple[str, bytes]]) -> None:
    """The same values with a padded varint (an action as two bytes, the last 0): the bytes
    decode to the same record, but are not its canonical encoding."""
    data = next(d for lb, d in records if lb == "dame-de-pique/standard/4p/finished")
    r = replayed(data)
    assert r is not None
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
    result = r.match.results[0]
    deal = result.deal
    args = (result.number, result.dealer, deal.hands, deal.retourne, bytes(deal.talon))
    rest = (bytes(result.action_seats), result.actions)
    assert hand_prefix(raw, 0, len(raw), *args, *rest) == -1
    genuine = hand.SerializeToString(deterministic=True)
    assert hand_prefix(genuine, 0, len(genuine), *args, *rest) > 0


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
    assert spans and len(spans) == 2 + 2 * len(decode_record(data).hands)
    assert hand_spans(b"") == []
    assert hand_spans(data[:-1]) == []  # cut short
    # A field between two hands: a format version after the first.
    first_end = spans[3]
    assert hand_spans(data[:first_end] + b"\x08\x01" + data[first_end:]) == []
