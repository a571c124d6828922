"""The engine's typed events of cards that change hands or are shown (base.py): emitted where
the rule applies, each seat's copy leaving out what it may not see (`visible_to`), and none
built when the match does not log events (replay)."""

from __future__ import annotations

import random

import pytest

from tapis_cartes.referee.engine import new_match
from tapis_cartes.referee.engine.actions import PASS, PILLE, PILLE_STOP, PLAY, pass_cards
from tapis_cartes.referee.engine.base import (
    CardsPassed,
    CardsShown,
    CardsTaken,
    Event,
    HandsChanged,
    Match,
)
from tests.engine.playing import Config, config_id, configurations, deal_next, rules_of

CONFIGS = [*configurations(), ("triomphe", "as-qui-pille", 4, {"target": 9})]


def _check_action(m: Match, seat: int, action: int, events: list[Event]) -> None:
    """The card events of one action against the hands before and after it."""
    hand = m.hand
    assert hand is not None
    passed = [e for e in events if isinstance(e, CardsPassed)]
    taken = [e for e in events if isinstance(e, CardsTaken)]
    changed = [e for e in events if isinstance(e, HandsChanged)]
    if changed:
        # The hands after the change, as held.
        assert action & 7 != PLAY and len(changed) == 1
        assert changed[0].hands == tuple(hand.held)
    if passed:
        # DP.PASS: the exchange completes with the last pass, all transfers at once.
        assert action & 7 == PASS and len(passed) == m.players and changed
        for e in passed:
            assert e.count == e.cards.bit_count() == 3 and e.to_seat != e.seat
            assert hand.held[e.to_seat] >> (e.cards & -e.cards).bit_length() - 1 & 1
            for viewer in (None, *range(m.players)):
                copy = e.visible_to(viewer)
                assert copy.count == 3 and (copy.seat, copy.to_seat) == (e.seat, e.to_seat)
                assert copy.cards == (e.cards if viewer in (e.seat, e.to_seat) else 0)
        assert next(e for e in passed if e.seat == seat).cards == pass_cards(action)
    if taken:
        # TRI.PILLE: the face-up trump taken, a card discarded face down.
        (e,) = taken
        assert action & 7 == PILLE and action >> 3 != PILLE_STOP
        assert e.seat == seat and e.discarded == action >> 3
        assert e.took // 13 == hand.trump
        for viewer in (None, *range(m.players)):
            assert e.visible_to(viewer).discarded == (e.discarded if viewer == seat else -1)
        # A hand changes unless the card taken is the one discarded.
        assert bool(changed) == (e.took != e.discarded)


def _check_shown(m: Match, events: list[Event]) -> None:
    hand = m.hand
    assert hand is not None
    deal = hand.deal
    for e in events:
        if isinstance(e, CardsShown):
            # Cards of the seat's dealt hand (or its taking), else of the talon turned.
            assert e.cards and e.why and e.rule
            mine = deal.hands[e.seat] | hand.held[e.seat]
            assert e.cards & ~mine == 0 or (e.why == "turned" and e.cards.bit_count() == 1)
            assert e.visible_to(None) == e


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_card_events_in_random_play(config: Config) -> None:
    rng = random.Random(config_id(config))
    m = new_match(rules_of(config))
    for _ in range(4):
        if m.finished:
            break
        before = len(m.results)
        deal_next(m, rng)
        hand = m.hand
        assert hand is not None
        _check_shown(m, list(hand.events))
        while m.to_act() and len(m.results) == before:
            seat = rng.choice(m.to_act())
            action = rng.choice(m.legal_actions(seat))
            for viewer in (None, *range(m.players)):
                # The facts that are cards are facts of the view (View.cards).
                view = m.view(viewer)
                assert view is not None and set(view.cards) <= set(view.public)
            held = list(hand.held)
            events = m.apply(seat, action)
            if not hand.over:
                # The hands change other than by a card exactly when the engine says so.
                moved = action & 7 != PLAY and held != list(hand.held)
                assert moved == any(isinstance(e, HandsChanged) for e in events)
                _check_action(m, seat, action, events)
            _check_shown(m, events)


def test_no_card_events_without_logging() -> None:
    """Replay (`log_events = False`) builds no event objects, these included."""
    for config in CONFIGS:
        rng = random.Random(config_id(config))
        m = new_match(rules_of(config), log_events=False)
        for _ in range(3):
            if m.finished:
                break
            deal_next(m, rng)
            hand = m.hand
            assert hand is not None
            while to_act := m.to_act():
                seat = rng.choice(to_act)
                m.step(seat, rng.choice(m.legal_actions(seat)))
            assert hand.events == []


def test_hands_changed_shows_each_seat_its_own() -> None:
    e = HandsChanged((1, 2, 4, 8))
    assert [e.visible_to(s) for s in range(4)] == [1, 2, 4, 8]
    assert e.visible_to(None) is None
