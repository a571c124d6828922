"""Bridge between Tapis' Dame de Pique (Hearts) conventions and OpenSpiel's Hearts.

OpenSpiel's ``hearts`` game (``open_spiel/games/hearts/hearts.{h,cc}``) is used as
an independent reference to cross-check our engine (tests/engine/test_openspiel_hearts.py,
scripts/bench_verify.py; it needs ``open-spiel``, of the ``dev`` extra, so it stays with the
tests and out of the installed package).  This module
translates our encodings into OpenSpiel actions and back, replays a recorded hand inside
OpenSpiel, and generates random reference hands; ``python scripts/openspiel_hearts.py``
runs its self-check.

Encodings (OpenSpiel side, from ``hearts.h`` / ``hearts.cc``):

* Cards and play/pass actions: ``card = rank * 4 + suit`` with suits
  ``kClubs=0, kDiamonds=1, kHearts=2, kSpades=3`` and rank 0 = two .. 12 = ace
  (``inline int Card(Suit suit, int rank) { return rank * kNumSuits + suit; }``).
  Ours: ``card = suit * 13 + rank`` with S=0, H=1, D=2, C=3, so the OpenSpiel
  suit is ``3 - our_suit``.  Examples: 2C = 0, 2S = 3, QS = 43, AS = 51.
* First chance node: pass direction, outcomes ``kNoPass=0, kLeft=1, kAcross=2,
  kRight=3`` (``enum class PassDir``), each with probability 1/4.
* Deal: 52 chance actions, each a card id; the i-th dealt card goes to player
  ``i % 4`` (``holder_[card] = num_cards_dealt_ % kNumPlayers``).
* Passes: player nodes, player 0 picks 3 cards one at a time, then player 1,
  2, 3 (``if (passed_cards_[p].size() % kNumCardsInPass == 0) ++current_player_``)
  regardless of direction; then each card passed by ``p`` goes to
  ``(p + pass_dir) % 4``.  Skipped entirely when the direction is ``kNoPass``.
* Play: the 2C holder leads; the next player is ``(current + 1) % 4``; the trick
  winner leads the next trick.

Seats: OpenSpiel players are N=0, E=1, S=2, W=3; play goes 0 -> 1 -> 2 -> 3 and
LEFT gives to ``p + 1``, RIGHT (=3) to ``p + 3 = p - 1``, ACROSS to ``p + 2``.
That is exactly our convention (seat ``s`` passes left to ``s + 1`` and ``s + 1``
plays after ``s``), so OpenSpiel player == our seat (identity mapping).
"""

from __future__ import annotations

import random
from typing import Any, TypedDict

import pyspiel

NUM_SEATS = 4
NUM_CARDS = 52
CARDS_PER_SUIT = 13
PASS_SIZE = 3
TOTAL_POINTS = 26  # kTotalPositivePoints: 13 hearts + QS.

# OpenSpiel PassDir outcomes of the first chance node.
OS_NO_PASS = 0
OS_LEFT = 1
OS_ACROSS = 2
OS_RIGHT = 3

# Our hand number m (1-based): (m - 1) % 4 -> 0 left, 1 right, 2 across, 3 no pass.
_DIRECTION_BY_CYCLE = (OS_LEFT, OS_RIGHT, OS_ACROSS, OS_NO_PASS)


def _card_to_action(card: int) -> int:
    suit, rank = divmod(card, CARDS_PER_SUIT)
    return rank * NUM_SEATS + (3 - suit)


_CARD_TO_ACTION: tuple[int, ...] = tuple(_card_to_action(c) for c in range(NUM_CARDS))
_ACTION_TO_CARD: tuple[int, ...] = tuple(sorted(range(NUM_CARDS), key=lambda c: _CARD_TO_ACTION[c]))


class RandomHand(TypedDict):
    """A hand played with uniformly random legal actions inside OpenSpiel."""

    hand_number: int
    hands: list[int]  # Dealt hands (before passing), our card-id masks per seat.
    passes: list[int] | None  # 3-card mask given by each seat; None if no pass.
    plays: list[tuple[int, int]]  # (seat, card) in play order.
    legal: list[int]  # Legal-card mask offered to the player before each play.
    points: list[int]  # OpenSpiel's penalty points per our seat.


def load_game() -> Any:
    """Load OpenSpiel Hearts with every parameter set to match our default rules."""
    return pyspiel.load_game(
        "hearts",
        {
            # First chance node offers all four directions (we pick it per hand
            # number); False would force "No Pass".  Default True.
            "pass_cards": True,
            # On trick 1 a player void in clubs may not discard a heart or the QS
            # unless he holds only such cards.  Default True.
            "no_pts_on_first_trick": True,
            # The 2C holder must lead the 2C (not any club).  Default False.
            "can_lead_any_club": False,
            # No -10 for taking the jack of diamonds.  Default False.
            "jd_bonus": False,
            # No -5 for taking no trick at all.  Default False.
            "avoid_all_tricks_bonus": False,
            # Hearts cannot be led until a heart has been played on an earlier
            # trick (unless the leader holds only hearts).  Default True.
            "must_break_hearts": True,
            # Playing the QS does not break hearts.  Default True -> overridden.
            "qs_breaks_hearts": False,
            # A leader holding only QS + hearts (unbroken) must lead the QS;
            # True would let him lead a heart instead.  Default False.
            "can_lead_hearts_instead_of_qs": False,
        },
    )


def card_to_action(card: int) -> int:
    """Our card id (suit*13+rank, SHDC) -> OpenSpiel's (rank*4 + suit, CDHS)."""
    return _CARD_TO_ACTION[card]


def action_to_card(action: int) -> int:
    """Inverse of :func:`card_to_action` (for play, pass and deal actions)."""
    return _ACTION_TO_CARD[action]


def pass_direction_action(hand_number: int) -> int:
    """OpenSpiel's first chance outcome for our (1-based) hand number."""
    if hand_number < 1:
        raise ValueError(f"hand_number must be >= 1, got {hand_number}")
    return _DIRECTION_BY_CYCLE[(hand_number - 1) % 4]


def seat_to_player(seat: int) -> int:
    """OpenSpiel player for our seat: identity (both clockwise, LEFT = +1)."""
    return seat


def player_to_seat(player: int) -> int:
    """Our seat for an OpenSpiel player: identity (see :func:`seat_to_player`)."""
    return player


def mask_to_cards(mask: int) -> list[int]:
    """Our card ids in a 52-bit mask, ascending."""
    return [c for c in range(NUM_CARDS) if mask >> c & 1]


def actions_to_mask(actions: list[int]) -> int:
    """Our-encoded card mask of a list of OpenSpiel card actions."""
    mask = 0
    for a in actions:
        mask |= 1 << _ACTION_TO_CARD[a]
    return mask


def deal_actions(hands: list[int]) -> list[int]:
    """Return the 52 deal chance actions giving ``hands[s]`` to seat ``s``.

    OpenSpiel gives the i-th dealt card to player ``i % 4``, so the cards of the
    four hands are interleaved: P0, P1, P2, P3, P0, ...
    """
    if len(hands) != NUM_SEATS:
        raise ValueError("need exactly four hands")
    per_player: list[list[int]] = [[] for _ in range(NUM_SEATS)]
    for seat, mask in enumerate(hands):
        cards = mask_to_cards(mask)
        if len(cards) != CARDS_PER_SUIT:
            raise ValueError(f"seat {seat} holds {len(cards)} cards, expected 13")
        per_player[seat_to_player(seat)] = [_CARD_TO_ACTION[c] for c in cards]
    if (hands[0] | hands[1] | hands[2] | hands[3]) != (1 << NUM_CARDS) - 1:
        raise ValueError("hands do not form a partition of the deck")
    return [per_player[p][k] for k in range(CARDS_PER_SUIT) for p in range(NUM_SEATS)]


def points_from_state(state: Any) -> list[int]:
    """Penalty points per our seat read from a terminal OpenSpiel state.

    ``HeartsState::Returns()`` is ``kTotalPositivePoints - points_[p]`` i.e.
    ``26 - points``, where ``points_`` already includes the moon adjustment
    (``ComputeScore``: shooter ``-26`` -> 0, each opponent ``+26``).  With
    ``jd_bonus`` and ``avoid_all_tricks_bonus`` off, points are therefore
    ``26 - return`` in 0..26.
    """
    if not state.is_terminal():
        raise ValueError("state is not terminal")
    returns = state.returns()
    points = [0] * NUM_SEATS
    for player in range(NUM_SEATS):
        points[player_to_seat(player)] = TOTAL_POINTS - round(returns[player])
    return points


def replay(
    hands: list[int],
    passes: list[int] | None,
    plays: list[tuple[int, int]],
    hand_number: int,
    game: Any | None = None,
) -> list[int]:
    """Replay a hand in OpenSpiel and return each of our seats' penalty points.

    ``hands[s]`` are the dealt (pre-pass) masks, ``passes[s]`` the 3-card mask
    given by seat ``s`` (``None`` on a no-pass hand) and ``plays`` the 52
    ``(seat, card)`` pairs in order.  Every action goes through
    ``apply_action_with_legality_check``, so an illegal pass or play raises
    ``pyspiel.SpielError``.  Points come from OpenSpiel's returns:
    ``points = 26 - return`` (see :func:`points_from_state`), so 0..26 per seat,
    26 for each opponent of a moon shooter and 0 for the shooter.
    """
    state = (game or load_game()).new_initial_state()
    direction = pass_direction_action(hand_number)
    state.apply_action_with_legality_check(direction)
    for action in deal_actions(hands):
        state.apply_action_with_legality_check(action)
    if direction == OS_NO_PASS:
        if passes is not None:
            raise ValueError("passes given on a no-pass hand")
    else:
        if passes is None or len(passes) != NUM_SEATS:
            raise ValueError("four passes required on a passing hand")
        for player in range(NUM_SEATS):  # OpenSpiel collects passes from 0 to 3.
            for card in mask_to_cards(passes[player_to_seat(player)]):
                state.apply_action_with_legality_check(_CARD_TO_ACTION[card])
    for seat, card in plays:
        if state.current_player() != seat_to_player(seat):
            raise ValueError(f"seat {seat} played but OpenSpiel expects {state.current_player()}")
        state.apply_action_with_legality_check(_CARD_TO_ACTION[card])
    return points_from_state(state)


def random_hand(rng: random.Random, hand_number: int, game: Any | None = None) -> RandomHand:
    """Play one hand with uniformly random legal actions inside OpenSpiel.

    The deal is uniform (each deal chance outcome drawn uniformly), each pass
    card is drawn uniformly among the passer's remaining cards, and each play is
    drawn uniformly among OpenSpiel's legal actions.
    """
    state = (game or load_game()).new_initial_state()
    direction = pass_direction_action(hand_number)
    state.apply_action(direction)

    hands = [0] * NUM_SEATS
    for i in range(NUM_CARDS):
        action = rng.choice(state.legal_actions())
        hands[player_to_seat(i % NUM_SEATS)] |= 1 << _ACTION_TO_CARD[action]
        state.apply_action(action)

    passes: list[int] | None = None
    if direction != OS_NO_PASS:
        passes = [0] * NUM_SEATS
        for _ in range(NUM_SEATS * PASS_SIZE):
            seat = player_to_seat(state.current_player())
            action = rng.choice(state.legal_actions())
            passes[seat] |= 1 << _ACTION_TO_CARD[action]
            state.apply_action(action)

    plays: list[tuple[int, int]] = []
    legal: list[int] = []
    while not state.is_terminal():
        seat = player_to_seat(state.current_player())
        actions = state.legal_actions()
        legal.append(actions_to_mask(actions))
        action = rng.choice(actions)
        plays.append((seat, _ACTION_TO_CARD[action]))
        state.apply_action(action)

    return RandomHand(
        hand_number=hand_number,
        hands=hands,
        passes=passes,
        plays=plays,
        legal=legal,
        points=points_from_state(state),
    )


def self_check(num_hands: int = 200, bench_hands: int = 2000, seed: int = 1) -> None:
    """Round-trip random hands through :func:`replay` and time it."""
    import time

    game = load_game()
    assert all(action_to_card(card_to_action(c)) == c for c in range(NUM_CARDS))
    rng = random.Random(seed)
    records = [random_hand(rng, hand_number=i + 1, game=game) for i in range(bench_hands)]
    moons = 0
    for rec in records[:num_hands]:
        points = replay(rec["hands"], rec["passes"], rec["plays"], rec["hand_number"], game)
        assert points == rec["points"], (points, rec["points"])
    for rec in records:
        total = sum(rec["points"])
        assert total in (TOTAL_POINTS, 3 * TOTAL_POINTS), rec["points"]
        moons += total == 3 * TOTAL_POINTS
    start = time.perf_counter()
    for rec in records:
        replay(rec["hands"], rec["passes"], rec["plays"], rec["hand_number"], game)
    elapsed = time.perf_counter() - start
    print(
        f"{num_hands} replays match; {bench_hands} point sums ok ({moons} moons); "
        f"replay: {bench_hands / elapsed:.0f} hands/s "
        f"({1e6 * elapsed / bench_hands:.0f} us/hand)"
    )
