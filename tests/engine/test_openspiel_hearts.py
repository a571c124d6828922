"""Dame de Pique against OpenSpiel's Hearts, an independent implementation of the same rules.

`tests/engine/openspiel_hearts.py` bridges the encodings (cards, seats, pass directions). Two
directions, thousands of random hands each, every exchange direction:

- OpenSpiel plays (uniformly random legal actions, seeded); our engine replays the hand and
  must offer exactly OpenSpiel's legal cards before every play, accept every action and score
  exactly OpenSpiel's points per seat (moon hands included).
- Our engine plays (random legal actions, seeded `random.Random`); OpenSpiel replays the hand
  with `apply_action_with_legality_check`, must accept every action and compute the same
  points.
- Constructed deals, played in lockstep with OpenSpiel (legal sets compared before every
  play): the rare case random deals never reach (a seat void in clubs holding only point
  cards on the first trick) and the rare leads with hearts unbroken (only hearts, or only
  hearts and QS, left).

Each sample must reach the rare legal-set branches it is there for (see `situations`).

The whole module is skipped when `pyspiel` (the `open-spiel` package) is not installed.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

pyspiel = pytest.importorskip("pyspiel")

from tapis_cartes.referee.engine.actions import PASS, PLAY, encode, pass_action, pass_cards  # noqa: E402
from tapis_cartes.referee.engine.base import Deal, HandResult, Match, Rules, Start  # noqa: E402
from tapis_cartes.referee.engine.cards import iter_cards, parse_card  # noqa: E402
from tapis_cartes.referee.engine.dame_de_pique import DamePiqueHand  # noqa: E402
from tapis_cartes.referee.engine.registry import make_rules, new_match  # noqa: E402
from tests.engine import openspiel_hearts as osh  # noqa: E402

HANDS = 5000  # per direction; 1250 of each exchange direction (left, right, across, none)
# The option sets both implementations share: ours, OpenSpiel's parameters (on top of the
# bridge's `load_game`), and the hands per direction.
CONFIGS: dict[str, tuple[dict[str, Any], dict[str, Any], int]] = {
    "default": ({}, {}, HANDS),
    "qs-breaks-hearts": ({"qs_breaks_hearts": True}, {"qs_breaks_hearts": True}, 1500),
}
TOTAL = osh.TOTAL_POINTS
# Written out here (not imported from the engine): `situations` classifies positions
# independently of both implementations.
HEARTS = 0x1FFF << 13
CLUBS = 0x1FFF << 39
QUEEN_SPADES = 10
POINT_CARDS = HEARTS | 1 << QUEEN_SPADES


@pytest.fixture(scope="module")
def game() -> Any:
    return osh.load_game()


@pytest.fixture(scope="module")
def rules() -> Rules:
    return make_rules("dame-de-pique")


@pytest.fixture(scope="module", params=list(CONFIGS))
def config(request: pytest.FixtureRequest, game: Any) -> tuple[str, Any, Rules, int]:
    """(name, OpenSpiel game, our rules, hands) for each shared option set."""
    ours, theirs, count = CONFIGS[request.param]
    params = {**game.get_parameters(), **theirs}
    return (
        request.param,
        pyspiel.load_game("hearts", params),
        make_rules("dame-de-pique", options=ours),
        count,
    )


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


def situations(ref: osh.RandomHand) -> Counter[str]:
    """The rare positions a hand went through, worked out from the hand itself (not from
    either engine): which special branches of the legal set were exercised."""
    held = list(ref["hands"])
    passes = ref["passes"]
    if passes is not None:
        offset = osh.pass_direction_action(ref["hand_number"])  # left 1, across 2, right 3
        for s in range(4):
            held[s] &= ~passes[s]
        for s in range(4):
            held[(s + offset) % 4] |= passes[s]
    seen: Counter[str] = Counter()
    played = 0  # cards played on completed tricks
    for k, (seat, card) in enumerate(ref["plays"]):
        hand = held[seat]
        if k % 4 == 0:
            broken = bool(played & HEARTS)
            if k and not broken and not hand & ~HEARTS:
                seen["lead, hearts unbroken, only hearts held"] += 1
            elif k and not broken and not hand & ~POINT_CARDS:
                seen["lead, hearts unbroken, only hearts and QS held"] += 1
        elif k < 4 and not hand & CLUBS:
            if not hand & ~POINT_CARDS:
                seen["first trick, void in clubs, only points held"] += 1
            elif hand & POINT_CARDS:
                seen["first trick, void in clubs, points held"] += 1
        held[seat] = hand ^ 1 << card
        if k % 4 == 3:
            played |= sum(1 << c for _, c in ref["plays"][k - 3 : k + 1])
    return seen


# --- OpenSpiel plays, Tapis replays ---------------------------------------------------------


def test_openspiel_hands_replay_in_tapis(config: tuple[str, Any, Rules, int]) -> None:
    name, game, rules, count = config
    rng = random.Random(20240601)
    moons = 0
    directions: set[int] = set()
    seen: Counter[str] = Counter()
    for i in range(count):
        m = hand_number(i)
        ref = osh.random_hand(rng, m, game)
        seen += situations(ref)
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
                action = pass_action(passes[seat])
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
    if name != "default":
        return
    # The rare branches of the legal set were reached (the seeded sample has 100+, 10+, 200+).
    for what in (
        "lead, hearts unbroken, only hearts held",
        "lead, hearts unbroken, only hearts and QS held",
        "first trick, void in clubs, points held",
    ):
        assert seen[what] > 0, f"never reached: {what}; {dict(seen)}"


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
            passes[seat] = pass_cards(action)
            match.step(seat, action)
    plays: list[tuple[int, int]] = []
    while match.to_act():
        (seat,) = match.to_act()
        action = rng.choice(match.legal_actions(seat))
        plays.append((seat, action >> 3))
        match.step(seat, action)
    assert len(plays) == 52 and len(match.results) == 1
    return list(deal.hands), passes, plays, match.results[0]


def test_tapis_hands_replay_in_openspiel(config: tuple[str, Any, Rules, int]) -> None:
    _, game, rules, count = config
    rng = random.Random(1789)
    moons = 0
    for i in range(count):
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


# --- constructed deals, played in lockstep ---------------------------------------------------


def hand_mask(text: str) -> int:
    mask = 0
    for t in text.split():
        mask |= 1 << parse_card(t)
    return mask


def deal_around(rng: random.Random, fixed: dict[int, int]) -> list[int]:
    """A random deal in which each seat of `fixed` holds (at least) those cards."""
    rest = [c for c in range(52) if not any(m >> c & 1 for m in fixed.values())]
    rng.shuffle(rest)
    hands = []
    for seat in range(4):
        mask = fixed.get(seat, 0)
        for _ in range(13 - mask.bit_count()):
            mask |= 1 << rest.pop()
        hands.append(mask)
    assert not rest and sum(hands) == (1 << 52) - 1
    return hands


def lockstep(game: Any, rules: Rules, hands: list[int], rng: random.Random) -> osh.RandomHand:
    """Play a no-exchange hand (number 4) with random legal cards in both engines at once,
    checking the legal sets before every play and the points at the end."""
    m = 4
    state = game.new_initial_state()
    state.apply_action(osh.pass_direction_action(m))
    for a in osh.deal_actions(hands):
        state.apply_action(a)
    match = start(rules, m, hands)
    plays: list[tuple[int, int]] = []
    legal_sets: list[int] = []
    while not state.is_terminal():
        seat = osh.player_to_seat(state.current_player())
        assert match.to_act() == (seat,)
        ours = legal_cards(match, seat)
        theirs = osh.actions_to_mask(state.legal_actions())
        assert ours == theirs, (
            f"play {len(plays) + 1}, seat {seat}: ours {sorted(iter_cards(ours))} != "
            f"OpenSpiel {sorted(iter_cards(theirs))}; hands={hands} plays={plays}"
        )
        legal_sets.append(ours)
        card = rng.choice(list(iter_cards(ours)))
        plays.append((seat, card))
        state.apply_action_with_legality_check(osh.card_to_action(card))
        match.step(seat, encode(PLAY, card))
    assert match.to_act() == () and len(match.results) == 1
    points = points_of(match.results[0])
    assert points == osh.points_from_state(state), (hands, plays)
    check_kinds(match.results[0], points)
    return osh.RandomHand(
        hand_number=m, hands=hands, passes=None, plays=plays, legal=legal_sets, points=points
    )


ONLY_POINTS = "2H 3H 4H 5H 6H 7H 8H 9H 10H JH QH KH QS"  # 12 hearts and QS, no club


@pytest.mark.parametrize(
    ("fixed", "target"),
    [
        # A seat void in clubs holding only point cards: on the first trick it may play any
        # card of its hand, a heart or QS included (DP.FIRST-TRICK).
        ({1: ONLY_POINTS}, "first trick, void in clubs, only points held"),
        (
            {0: "2C 3C 4C 5C 6C 7C 8C 9C 10C JC QC KC AC", 1: ONLY_POINTS},
            "first trick, void in clubs, only points held",
        ),
        (
            {2: "2H 3H 4H 5H 6H 7H 8H 9H 10H JH QH KH AH"},
            "first trick, void in clubs, only points held",
        ),
        # Hearts and QS with two spades: leads with hearts unbroken and only hearts (and
        # QS) left (DP.HEARTS: QS must be led, else a heart may be).
        (
            {3: "AS KS 2H 3H 4H 5H 6H 7H 8H 9H 10H JH QS"},
            "lead, hearts unbroken, only hearts and QS held",
        ),
        (
            {3: "AS KS QS 2H 3H 4H 5H 6H 7H 8H 9H 10H JH"},
            "lead, hearts unbroken, only hearts held",
        ),
    ],
    ids=["points-only", "points-only-all-clubs-opposite", "all-hearts", "hearts-qs", "hearts"],
)
def test_constructed_deals_in_lockstep(
    game: Any, rules: Rules, fixed: dict[int, str], target: str
) -> None:
    masks = {seat: hand_mask(text) for seat, text in fixed.items()}
    rng = random.Random(repr(sorted(fixed.items())))
    reached = 0
    for _ in range(100):
        hand = lockstep(game, rules, deal_around(rng, masks), rng)
        reached += situations(hand)[target]
        # Play k of the first trick is by the 2C holder's k-th follower: when void in clubs
        # with only point cards, it may play any card it holds.
        leader = hand["plays"][0][0]
        for k in range(1, 4):
            held = hand["hands"][(leader + k) % 4]
            if not held & CLUBS and not held & ~POINT_CARDS:
                assert hand["legal"][k] == held
    assert reached > 0, f"never reached: {target}"


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
