"""`Match.refusal` (referee/engine/base.py): a pure question beside `step`, for every game ×
ruleset. At random states of random legal play: `refusal` is None exactly when `step`
accepts; otherwise `step` raises an exception of the same type with the same code, rule,
message, reason and legal set (the seat's legal actions at that moment); neither `refusal`
nor a refused `step` changes anything, the hand's cursor included."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tapis_cartes.referee.engine import Deal, Match, make_rules, new_match
from tapis_cartes.referee.engine.actions import (
    ABANDON,
    BID,
    PASS,
    PILLE,
    PILLE_HIDDEN,
    PILLE_STOP,
    PLAY,
    RESIGN,
    VOLE,
    action_error,
    encode,
    pass_action,
)
from tapis_cartes.referee.engine.cards import iter_cards, mask_of
from tapis_cartes.referee.engine.errors import IllegalAction, InvalidAction, NotYourTurn, TapisError
from tests.engine.playing import Config, Played, config_id, configurations, rules_of

MALFORMED = [
    -1,
    -8,
    7,  # kind 7
    15,
    encode(PLAY, 52),
    encode(PLAY, 2**34),
    encode(PASS, 0),  # a hidden pass: what the others see, never an action
    encode(PASS, 2**18),
    encode(BID, 8),
    encode(VOLE, 2),
    encode(ABANDON, 3),
    encode(PILLE, PILLE_HIDDEN),
    encode(PILLE, 52),
    encode(RESIGN, 1),
    2**53,
    2**64 - 1,
    2**200,
]


def fingerprint(m: Match) -> tuple[Any, ...]:
    """Everything a refusal must leave as it was: the match, the hand and every view."""
    hand = m.hand
    seats = range(m.players)
    views = () if hand is None else tuple(m.view(s) for s in (None, *seats))
    legal = tuple(tuple(m.legal_actions(s)) for s in seats)
    return (*quick_fingerprint(m), legal, views)


def quick_fingerprint(m: Match) -> tuple[Any, ...]:
    """The part of `fingerprint` cheap enough to take around every call."""
    hand = m.hand
    hand_state: tuple[Any, ...] = ()
    if hand is not None:
        hand_state = (
            hand.phase,
            hand.number,
            hand.over,
            hand.cursor,
            tuple(hand.held),
            tuple(hand.actions),
            tuple(hand.action_seats),
            tuple(hand.lines),
            len(hand.tricks),
        )
    return (
        m.finished,
        m.winners,
        m.resigned,
        tuple(m.scores),
        len(m.results),
        m.to_act(),
        hand_state,
    )


def candidates(m: Match, seat: int, rng: random.Random) -> list[int]:
    """Actions of every kind for `seat`: the cards it holds and others, passes of cards held
    or not, every bid, vole, abandon and pille payload, a resignation, malformed ints."""
    held = m.hand.held[seat] if m.hand is not None and 0 <= seat < m.players else 0
    cards = set(iter_cards(held)) | set(rng.sample(range(52), 6))
    out = [encode(PLAY, c) for c in sorted(cards)]
    own = list(iter_cards(held))
    if len(own) >= 3:
        out.append(pass_action(mask_of(rng.sample(own, 3))))
    out += [pass_action(mask_of(rng.sample(range(52), 3))) for _ in range(2)]
    out += [encode(BID, b) for b in range(8)]
    out += [encode(VOLE, v) for v in range(2)] + [encode(ABANDON, a) for a in range(3)]
    out += [encode(PILLE, c) for c in rng.sample(range(52), 3)] + [encode(PILLE, PILLE_STOP)]
    out += [encode(PILLE, c) for c in list(cards)[:4]]
    out += [encode(RESIGN), *MALFORMED]
    return out


def check_state(played: Played, rng: random.Random, stats: Counter[str]) -> None:
    """Every candidate action of every seat (and of seats that do not exist) at this state."""
    m = played.match
    whole = fingerprint(m)
    before = quick_fingerprint(m)
    accepted: list[tuple[int, int]] = []
    for seat in (*range(m.players), -1, m.players, 2**64):
        legal = m.legal_actions(seat)
        for action in [*legal, *candidates(m, seat, rng)]:
            refusal = m.refusal(seat, action)
            assert quick_fingerprint(m) == before, (seat, action)
            if action_error(action) is None and action & 7 == RESIGN:
                may_resign = not m.finished and 0 <= seat < m.players and m.hand is not None
                assert (refusal is None) == may_resign, (seat, action, refusal)
            else:
                assert (refusal is None) == (action in legal), (seat, action, refusal)
            if refusal is None:
                accepted.append((seat, action))
                continue
            stats[type(refusal).__name__] += 1
            assert isinstance(refusal, InvalidAction | IllegalAction)
            with pytest.raises(TapisError) as info:
                m.step(seat, action)
            error = info.value
            assert type(error) is type(refusal)
            assert str(error) == str(refusal)
            if isinstance(refusal, IllegalAction):
                assert isinstance(error, IllegalAction)
                stats[refusal.code] += 1
                got = (error.code, error.rule, error.message, error.reason, error.legal)
                want = (refusal.code, refusal.rule, refusal.message, refusal.reason, refusal.legal)
                assert got == want
                assert refusal.legal == tuple(legal), (seat, action, refusal)
                if isinstance(refusal, NotYourTurn):
                    assert seat not in m.to_act()
            assert quick_fingerprint(m) == before, (seat, action)
    assert fingerprint(m) == whole
    # `step` accepts what `refusal` accepts: a few of them, each on a copy by replay.
    for seat, action in rng.sample(accepted, min(4, len(accepted))):
        copy = played.copy()
        assert fingerprint(copy) == whole
        copy.step(seat, action)
        stats["accepted"] += 1


@pytest.mark.parametrize("config", configurations(), ids=config_id)
def test_refusal_is_what_step_raises_and_changes_nothing(config: Config) -> None:
    rules = rules_of(config)
    rng = random.Random(config_id(config))
    stats: Counter[str] = Counter()
    for _ in range(3):
        played = Played(rules)
        check_state(played, rng, stats)  # before the first hand: nothing but refusals
        # Random legal play to random depths (between hands and past the end included),
        # sampling about eight states on the way.
        depth = rng.randrange(40, 400)
        for i in range(depth):
            if played.match.finished:
                break
            if i % max(1, depth // 8) == 0:
                check_state(played, rng, stats)
            played.random_step(rng)
        check_state(played, rng, stats)
    assert stats["accepted"] and stats["InvalidAction"] and stats["not-your-turn"]
    assert stats["bad-seat"] and stats["no-hand"]


def test_every_refusal_code_of_a_game_is_reached() -> None:
    """The random states above reach the refusals of every phase: collected over all the
    configurations of each game, these codes all appear."""
    expected = {
        "dame-de-pique": {
            "exchange-first",
            "no-exchange",
            "wrong-action",
            "not-held",
            "must-follow",
            "lead-two-of-clubs",
        },
        "napoleon": {"bidding-first", "bidding-over", "wrong-action", "bid-too-low", "must-follow"},
        "imperiale": {"wrong-action", "not-held", "must-follow"},
        "triomphe": {
            "wrong-action",
            "not-held",
            "no-vole-decision",
            "no-pillage",
            "abandon-two-sides",
        },
    }
    for game, codes in expected.items():
        seen: set[str] = set()
        for config in configurations():
            if config[0] != game:
                continue
            rng = random.Random(config_id(config))
            played = Played(rules_of(config))
            phase = None
            for i in range(120):
                m = played.match
                if m.finished:
                    break
                played.random_step(rng)
                # Every third state, and each first state of a phase.
                now = m.hand.phase if m.hand is not None else None
                if (i % 3 == 0 or now != phase) and m.to_act():
                    _collect(m, rng, seen)
                phase = now
        assert codes <= seen, (game, sorted(codes - seen))


def _collect(m: Match, rng: random.Random, seen: set[str]) -> None:
    for seat in range(m.players):
        for action in candidates(m, seat, rng):
            refusal = m.refusal(seat, action)
            if isinstance(refusal, IllegalAction):
                seen.add(refusal.code)


def test_a_resignation_goes_through_the_same_question() -> None:
    m = new_match(make_rules("hearts"))
    resign = encode(RESIGN)
    refusal = m.refusal(0, resign)
    assert isinstance(refusal, IllegalAction) and refusal.code == "no-hand"
    m.start_hand(0, m.deal_deck(0, list(range(52))))
    assert m.refusal(0, resign) is None
    bad = m.refusal(4, resign)
    assert isinstance(bad, IllegalAction) and bad.code == "bad-seat" and bad.legal == ()
    m.step(2, resign)
    assert m.finished and m.resigned == 2
    over = m.refusal(1, resign)
    assert isinstance(over, IllegalAction) and over.code == "match-over" and over.legal == ()


def test_a_phase_refusal_carries_the_legal_set() -> None:
    """A card during the exchange: the refusal lists the passes the seat may make (the
    referee no longer has to fill them in)."""
    m = new_match(make_rules("hearts"))
    m.start_hand(0, m.deal_deck(0, list(range(52))))
    seat = 1
    card = next(iter_cards(m.hand.held[seat])) if m.hand else 0
    refusal = m.refusal(seat, encode(PLAY, card))
    assert isinstance(refusal, IllegalAction) and refusal.code == "exchange-first"
    assert refusal.legal == tuple(m.legal_actions(seat)) and len(refusal.legal) == 286
    assert refusal.message.endswith("; legal: 286 actions")


def test_refusal_before_a_deal_and_between_hands() -> None:
    m = new_match(make_rules("nap", options={"players": 3, "deals": 2}))
    refusal = m.refusal(0, encode(BID, 1))
    assert isinstance(refusal, IllegalAction) and refusal.code == "no-hand"
    deck = list(range(52))
    m.start_hand(0, m.deal_deck(0, deck))
    for seat in (1, 2, 0):
        m.step(seat, encode(BID, 0))  # everybody passes: thrown in
    assert m.hand is not None and m.hand.over and not m.finished
    refusal = m.refusal(1, encode(BID, 1))
    assert isinstance(refusal, IllegalAction) and refusal.code == "no-hand"
    assert m.refusal(1, encode(RESIGN)) is None


def _hand_in_play(seed: int) -> tuple[Played, list[int], list[int], Callable[[], Match]]:
    """A Hearts hand 30 random actions in (in its card play): the play, the hand's seats and
    actions so far, and a maker of a new match at the start of that hand."""
    rules = make_rules("hearts")
    rng = random.Random(seed)
    played = Played(rules)
    played.deal(rng)
    for _ in range(30):
        played.random_step(rng)
    hand = played.match.hand
    assert hand is not None
    dealer, deal = played.ops[0][1], played.ops[0][2]
    assert isinstance(deal, Deal)

    def fresh() -> Match:
        m = new_match(rules, log_events=False)
        m.start_hand(dealer, deal)
        return m

    return played, list(hand.action_seats), list(hand.actions), fresh


def test_step_many_refuses_what_refusal_says_at_the_first_fault() -> None:
    """A replay stops at the first action `refusal` refuses, with that refusal."""
    played, seats, actions, fresh = _hand_in_play(5)
    bad = encode(PLAY, 2**34)  # the card id of the hostile record
    again = fresh()
    (turn,) = played.match.to_act()  # in the card play: the hostile card reaches its run
    with pytest.raises(InvalidAction) as info:
        again.step_many([*seats, turn], [*actions, bad])
    assert str(info.value).startswith(f"{bad} is not an action")
    assert again.hand is not None and again.hand.actions == actions


def test_a_list_step_many_gave_a_hand_is_never_changed() -> None:
    """A hand keeps a list of actions it applied whole as its own (not a copy): what it
    adds afterwards (an action stepped, a resignation, in the hand or once it is over) goes
    to a copy, and the caller's list stays as it was."""
    played, seats, actions, fresh = _hand_in_play(11)
    given = list(actions)
    again = fresh()
    again.step_many(seats, given)
    hand = again.hand
    assert hand is not None and hand.actions is given  # kept, not copied
    (turn,) = played.match.to_act()
    action = played.match.legal_actions(turn)[0]
    again.step(turn, action)
    assert given == actions and hand.actions == [*actions, action]
    # A whole hand, then a resignation once it is over: kept with that hand, not in the list.
    played, seats, actions, fresh = _hand_in_play(12)
    while played.match.hand is not None and not played.match.hand.over:
        played.random_step(random.Random(len(played.ops)))
    whole = played.match.results[-1]
    given = list(whole.actions)
    again = fresh()
    again.step_many(bytes(whole.action_seats), given)
    assert again.results[-1].actions is given
    again.step(0, encode(RESIGN))
    assert given == whole.actions and again.results[-1].actions == [*given, encode(RESIGN)]
    assert list(again.results[-1].action_seats) == [*whole.action_seats, 0]


@pytest.mark.parametrize("seat", [300, -1, 2**64])
def test_step_many_with_a_seat_no_byte_holds_is_stepped_one_by_one(seat: int) -> None:
    """The runs read a hand's seats as bytes: seats that are not all 0..255 are stepped one
    by one instead, and the one that is no seat is refused as `step` refuses it, after the
    actions before it."""
    _, seats, actions, fresh = _hand_in_play(7)
    again, alone = fresh(), fresh()
    with pytest.raises(IllegalAction) as info:
        again.step_many([*seats, seat], [*actions, actions[-1]])
    for s, a in zip(seats, actions, strict=True):
        alone.step(s, a)
    with pytest.raises(IllegalAction) as one:
        alone.step(seat, actions[-1])
    assert (info.value.code, info.value.message) == (one.value.code, one.value.message)
    assert info.value.code == "bad-seat"
    assert again.hand is not None and again.hand.actions == actions
