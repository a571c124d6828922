"""The one replay of a record (records/replay.py): the hooks a visitor is told, strict and
lenient visitors, and a walk without the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from tapis_cartes.records.codec import decode_record, read_envelopes
from tapis_cartes.records.replay import (
    BaseVisitor,
    LenientVisitor,
    MatchVisitor,
    replay,
    replay_record,
)
from tapis_cartes.referee.engine import IllegalAction, RecordError, RulesError, TapisError
from tapis_cartes.v1 import record_pb2 as pb

DATA = Path(__file__).resolve().parents[1] / "data"


def record(name: str) -> pb.GameRecord:
    return decode_record(read_envelopes(DATA / f"{name}.tapis")[0].record)


class Calls(BaseVisitor[list[str]]):
    """Every hook called, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def begin_record(self) -> None:
        self.calls.append("begin")

    def begin_hand(self, h: int, hand: pb.HandRecord) -> None:
        if self.replays:  # the hand is dealt, no action applied yet
            assert self.match.hand is not None and not self.match.hand.actions
        self.calls.append(f"hand {h}")

    def end_hand(self, h: int, hand: pb.HandRecord) -> None:
        self.calls.append(f"end {h}")

    def end_record(self) -> None:
        self.calls.append("end")

    def result(self) -> list[str]:
        return self.calls


class ActionCalls(Calls):
    def visit_action(self, h: int, a: int, seat: int, action: int) -> None:
        self.calls.append(f"{h}.{a}")


@pytest.mark.parametrize("name", ["dame-de-pique-dp1", "napoleon-n1", "triomphe-tr2"])
def test_hooks_in_order(name: str) -> None:
    rec = record(name)
    hands = [f"hand {h}" for h in range(1, len(rec.hands) + 1)]
    calls = replay(rec, Calls())
    assert calls == ["begin", *(c for h in hands for c in (h, "end" + h[4:])), "end"]
    each = replay(rec, ActionCalls())
    assert len(each) == len(calls) + sum(len(h.actions) for h in rec.hands)
    assert each[2] == "1.1"


def tampered() -> pb.GameRecord:
    """A record whose first hand's first score line and final scores are wrong."""
    rec = record("dame-de-pique-dp1")
    rec.hands[0].lines[0].delta.points += 1
    rec.outcome.scores[0].points += 1
    return rec


def test_strict_stops_at_the_first_fault_lenient_collects() -> None:
    with pytest.raises(RecordError) as strict:
        replay(tampered(), MatchVisitor())
    assert strict.value.code == "score-lines" and strict.value.hand == 1
    lenient = LenientVisitor()
    match = replay(tampered(), lenient)
    assert match.results  # the replay went on
    assert [(e.code, e.hand) for e in lenient.errors] == [("score-lines", 1), ("outcome", None)]
    clean = LenientVisitor()
    replay(record("dame-de-pique-dp1"), clean)
    assert clean.errors == []


def test_lenient_goes_past_a_wrong_hand_number_not_past_a_refused_action() -> None:
    rec = record("dame-de-pique-dp1")
    rec.hands[0].actions[5] = rec.hands[0].actions[4]  # a card played twice
    lenient = LenientVisitor()
    replay(rec, lenient)
    assert [e.code[:7] for e in lenient.errors] == ["action:"]
    assert lenient.errors[0].hand == 1 and lenient.errors[0].action == 6
    with pytest.raises(RecordError) as strict:
        replay_record(rec)
    assert strict.value.code == lenient.errors[0].code


def test_fields_are_checked_before_any_hook() -> None:
    rec = record("napoleon-n1")
    rec.rules.digest = "0" * 64
    calls = Calls()
    with pytest.raises(RecordError, match="digest"):
        replay(rec, calls)
    assert calls.calls == []


class Walk(Calls):
    replays = False

    def visit_action(self, h: int, a: int, seat: int, action: int) -> None:
        self.calls.append(f"{h}.{a}")


def test_a_walk_follows_the_record_without_the_engine() -> None:
    rec = record("dame-de-pique-dp1")
    rec.hands[0].actions[5] = rec.hands[0].actions[4]  # the engine would refuse it
    calls = replay(rec, Walk())
    assert calls[-1] == "end" and len(calls) == 4 + len(rec.hands) * 2 - 2 + sum(
        len(h.actions) for h in rec.hands
    )


def test_changed_options_refusal_reaches_the_visitor_with_its_cause() -> None:
    seen: list[tuple[str, type[TapisError] | None]] = []

    class Keep(LenientVisitor):
        def handle_error(self, error: RecordError, cause: TapisError | None) -> None:
            seen.append((error.code, None if cause is None else type(cause)))

    replay(record("dame-de-pique-dp1"), Keep(check=False), {"no_such_option": 1})
    assert seen == [("options", RulesError)]
    seen.clear()
    rec = record("dame-de-pique-dp1")
    rec.hands[0].actions[5] = rec.hands[0].actions[4]
    replay(rec, Keep(check=False), {"end_threshold": 50})
    assert seen == [(seen[0][0], IllegalAction)] and seen[0][0].startswith("action:")
