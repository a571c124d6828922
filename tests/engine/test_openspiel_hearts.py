"""Dame de Pique against OpenSpiel's Hearts, an independent implementation of the same rules.

`scripts/openspiel_hearts.py` bridges the encodings (cards, seats, pass directions). Two
directions, thousands of random hands each, every exchange direction:

- OpenSpiel plays (uniformly random legal actions, seeded); our engine replays the hand and
  must offer exactly OpenSpiel's legal cards before every play, accept every action and score
  exactly OpenSpiel's points per seat (moon hands included).
- Our engine plays (random legal actions, seeded `random.Random`); OpenSpiel replays the hand
  with `apply_action_with_legality_check`, must accept every action and compute the same
  points.

The whole module is skipped when `pyspiel` (the `open-spiel` package) is not installed.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

pyspiel = pytest.importorskip("pyspiel")

from referee.engine.actions import PASS, PLAY, encode  # noqa: E402
from referee.engine.base import Deal, HandResult, Match, Rules, Start  # noqa: E402
from referee.engine.cards import iter_cards  # noqa: E402
from referee.engine.dame_de_pique import DamePiqueHand  # noqa: E402
from referee.engine.registry import make_rules, new_match  # noqa: E402
from scripts import openspiel_hearts as osh  # noqa: E402

HANDS = 5000  # per direction; 1250 of each exchange direction (left, right, across, none)
TOTAL = osh.TOTAL_POINTS


@pytest.fixture(scope="module")
def game() -> Any:
    return osh.load_game()


@pytest.fixture(scope="module")
def rules() -> Rules:
    return make_rules("dame-de-pique")


def hand_number(i: int) -> int:
    """Hand numbers 1..4 in turn, so the four exchange directions occur equally often."""
    return 1 + i % 4


def start(rules: Rules, m: int, hands: list[int]) -> Match:
    """A match whose first (and only) hand is number `m`, dealt `hands`. The dealer does not
    matter for a single hand (the 2C holder leads), so any seat will do."""
    match = new_match(rules, Start(hand_number=m), log_events=False)
    match.start_hand((m + 3) % 4, Deal(tuple(hands)))
    return match


def legal_cards(match: Match, seat: int) -> int:
    """Our legal cards for `seat` as a mask, from the public `legal_actions`; also checks it
    agrees with the hand's own `legal_play_mask`."""
    mask = 0
    for action in match.legal_actions(seat):
        assert action & 7 == PLAY, action
        mask |= 1 << (action >> 3)
    hand = match.hand
    assert isinstance(hand, DamePiqueHand)
    assert hand.legal_play_mask(seat) == mask
    return mask


def points_of(result: HandResult) -> list[int]:
    """Each seat's points in the hand, from its score lines (one line per seat)."""
    points = [0] * 4
    seats = []
    for line in result.lines:
        seats.append(line.seat)
        points[line.seat] += line.delta[0]
    assert sorted(seats) == [0, 1, 2, 3], result.lines
    return points


def is_moon(points: list[int]) -> bool:
    return sum(points) == 3 * TOTAL


def check_kinds(result: HandResult, points: list[int]) -> None:
    """Moon hands score `volte` lines (DP.VOLTE), the others `penalty` lines (DP.SCORE)."""
    moon = is_moon(points)
    assert sum(points) in (TOTAL, 3 * TOTAL), points
    for line in result.lines:
        assert (line.kind, line.rule) == (
            ("volte", "DP.VOLTE") if moon else ("penalty", "DP.SCORE")
        ), line


# --- OpenSpiel plays, Tapis replays ---------------------------------------------------------


def test_openspiel_hands_replay_in_tapis(game: Any, rules: Rules) -> None:
    rng = random.Random(20240601)
    moons = 0
    directions: set[int] = set()
    for i in range(HANDS):
        m = hand_number(i)
        ref = osh.random_hand(rng, m, game)
        ctx = f"hand {i} (number {m}): {ref}"
        directions.add(osh.pass_direction_action(m))
        match = start(rules, m, ref["hands"])
        passes = ref["passes"]
        if passes is None:
            assert osh.pass_direction_action(m) == osh.OS_NO_PASS
        else:
            assert len(passes) == 4
            for seat in range(4):
                assert seat in match.to_act(), ctx
                action = encode(PASS, passes[seat])
                assert action in match.legal_actions(seat), ctx
                match.step(seat, action)
        assert len(ref["plays"]) == 52 and len(ref["legal"]) == 52, ctx
        for k, ((seat, card), os_legal) in enumerate(zip(ref["plays"], ref["legal"], strict=True)):
            assert match.to_act() == (seat,), f"play {k + 1}: {ctx}"
            ours = legal_cards(match, seat)
            assert ours == os_legal, (
                f"play {k + 1}, seat {seat}: ours {sorted(iter_cards(ours))} != "
                f"OpenSpiel {sorted(iter_cards(os_legal))}; {ctx}"
            )
            match.step(seat, encode(PLAY, card))
        assert match.to_act() == () and len(match.results) == 1, ctx
        result = match.results[0]
        points = points_of(result)
        assert points == ref["points"], ctx
        assert result.scores_after == tuple((p,) for p in points), ctx
        assert [s[0] for s in match.scores] == points, ctx
        check_kinds(result, points)
        moons += is_moon(points)
    assert directions == {osh.OS_LEFT, osh.OS_RIGHT, osh.OS_ACROSS, osh.OS_NO_PASS}
    assert moons > 0, "no moon hand in the sample: change the seed or the sample size"


# --- Tapis plays, OpenSpiel replays ---------------------------------------------------------


def play_random_hand(
    rules: Rules, rng: random.Random, m: int
) -> tuple[list[int], list[int] | None, list[tuple[int, int]], HandResult]:
    """One hand of random legal actions in our engine: the dealt hands, the passes (None on a
    no-pass hand), the plays and the result."""
    deck = list(range(52))
    rng.shuffle(deck)
    dealer = rng.randrange(4)
    match = new_match(rules, Start(hand_number=m), log_events=False)
    deal = match.deal_deck(dealer, deck)
    match.start_hand(dealer, deal)
    passes: list[int] | None = None
    if m % 4 != 0:
        passes = [0, 0, 0, 0]
        order = [0, 1, 2, 3]
        rng.shuffle(order)  # the exchange is simultaneous: any order
        for seat in order:
            action = rng.choice(match.legal_actions(seat))
            assert action & 7 == PASS
            passes[seat] = action >> 3
            match.step(seat, action)
    plays: list[tuple[int, int]] = []
    while match.to_act():
        (seat,) = match.to_act()
        action = rng.choice(match.legal_actions(seat))
        plays.append((seat, action >> 3))
        match.step(seat, action)
    assert len(plays) == 52 and len(match.results) == 1
    return list(deal.hands), passes, plays, match.results[0]


def test_tapis_hands_replay_in_openspiel(game: Any, rules: Rules) -> None:
    rng = random.Random(1789)
    moons = 0
    for i in range(HANDS):
        m = hand_number(i)
        hands, passes, plays, result = play_random_hand(rules, rng, m)
        points = points_of(result)
        check_kinds(result, points)
        ctx = f"hand {i} (number {m}): hands={hands} passes={passes} plays={plays}"
        try:
            os_points = osh.replay(hands, passes, plays, m, game)
        except pyspiel.SpielError as exc:  # an action OpenSpiel finds illegal
            pytest.fail(f"OpenSpiel refused an action: {exc}; {ctx}")
        assert os_points == points, ctx
        moons += is_moon(points)
    assert moons > 0, "no moon hand in the sample: change the seed or the sample size"


# --- the bridge itself ----------------------------------------------------------------------


def test_bridge_encodings() -> None:
    assert [osh.action_to_card(osh.card_to_action(c)) for c in range(52)] == list(range(52))
    # OpenSpiel: rank * 4 + suit, suits C D H S; ours: suit * 13 + rank, suits S H D C.
    assert osh.card_to_action(3 * 13 + 0) == 0  # 2C
    assert osh.card_to_action(0 * 13 + 0) == 3  # 2S
    assert osh.card_to_action(0 * 13 + 10) == 43  # QS
    assert osh.card_to_action(0 * 13 + 12) == 51  # AS
    # Our hand numbers 1, 2, 3, 4 pass left, right, across, none; then again from 5.
    got = [osh.pass_direction_action(m) for m in range(1, 9)]
    cycle = [osh.OS_LEFT, osh.OS_RIGHT, osh.OS_ACROSS, osh.OS_NO_PASS]
    assert got == cycle * 2
