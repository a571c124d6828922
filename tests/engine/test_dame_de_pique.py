"""Dame de Pique (RULES.md section 4): example DP-1, the micro-cases DP-4, one scripted deal
per rule and per option, refusals with their rule ids, and random-playout invariants under
every option set."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest

from tapis_cartes.records.verify import replay_record
from tapis_cartes.referee.engine.actions import PLAY, encode, pass_action
from tapis_cartes.referee.engine.base import Deal, Start
from tapis_cartes.referee.engine.cards import FULL_DECK, SUIT_MASK, iter_cards
from tapis_cartes.referee.engine.dame_de_pique import (
    DamePiqueHand,
    DamePiqueMatch,
    lead_mask,
    legal_play,
)
from tapis_cartes.referee.engine.errors import DealError, IllegalAction, NotYourTurn
from tapis_cartes.referee.engine.registry import make_rules, new_match
from tests.cards import mask, play
from tests.engine.playing import assert_record_round_trips

EXAMPLE = Path(__file__).resolve().parents[2] / "records" / "examples" / "dame-de-pique.json"


def give(text: str) -> int:
    return pass_action(mask(text))


def match_of(start: Start | None = None, **options: Any) -> DamePiqueMatch:
    m = new_match(make_rules("dame-de-pique", options=options), start)
    assert isinstance(m, DamePiqueMatch)
    return m


def current(m: DamePiqueMatch) -> DamePiqueHand:
    assert isinstance(m.hand, DamePiqueHand)
    return m.hand


def legal_cards_of(m: DamePiqueMatch, seat: int) -> int:
    return sum(1 << (a >> 3) for a in m.legal_actions(seat))


# Seats by suit: 0 spades, 1 hearts, 2 diamonds, 3 clubs. Clubs (seat 3) lead every trick
# and win them all; hearts can only be discarded.
BY_SUIT = Deal(tuple(SUIT_MASK))


def play_out(m: DamePiqueMatch, choose: Any = min) -> None:
    """Finish the hand, each seat playing `choose` of its legal actions."""
    while m.to_act():
        seat = m.to_act()[0]
        m.step(seat, choose(m.legal_actions(seat)))


# --- DP-1 ---------------------------------------------------------------------------------


def test_example_dp1_scores_and_legal_sets() -> None:
    doc = json.loads(EXAMPLE.read_text())
    hand = doc["hands"][0]
    m = match_of()
    m.start_hand(hand["dealer"], Deal(tuple(mask(" ".join(h)) for h in hand["deal"]["hands"])))
    checks = {
        # (action index): (seat, expected legal set)
        7: (1, mask("2D 3D 5D 7D QD 3S 4S JS AS")),  # E void in clubs: no heart on trick 1
        8: (3, mask("9C KC 10D KD 2S 7S 8S")),  # W may not lead hearts (unbroken)
        12: (2, mask("3C 4C 10C AC 4D 6D AD 10S KS")),  # S holds 7H 8H, may not lead them
        16: (3, mask("KC 10D KD 7S 8S 3H 9H 10H JH QH")),  # after E's 6H: hearts broken
    }
    for i, entry in enumerate(hand["actions"]):
        seat = entry["seat"]
        if i in checks:
            want_seat, want = checks[i]
            assert seat == want_seat
            assert legal_cards_of(m, seat) == want, i
        action = give(" ".join(entry["pass"])) if "pass" in entry else play(entry["play"])
        m.step(seat, action)
    assert [s[0] for s in m.scores] == [8, 0, 14, 4]
    assert not m.finished
    assert [t.winner for t in m.results[0].tricks] == [3, 2, 3, 0, 2, 3, 2, 3, 0, 2, 3, 3, 3]


# --- DP-4 micro-cases ---------------------------------------------------------------------

UNBROKEN = lead_mask(False)
UNBROKEN_QS = lead_mask(True)
CLUBS = 3


@pytest.mark.parametrize(
    ("case", "hand", "led", "first", "broken", "lead_unbroken", "expected"),
    [
        ("a", "QS AH 5H 3D", CLUBS, True, False, UNBROKEN, "3D"),
        ("b", "QS 2H 9H", CLUBS, True, False, UNBROKEN, "QS 2H 9H"),
        ("c", "QS 4H KH", -1, False, False, UNBROKEN, "QS"),
        ("c-variant", "QS 4H KH", -1, False, False, UNBROKEN_QS, "QS 4H KH"),
        ("d", "2H 7H", -1, False, False, UNBROKEN, "2H 7H"),
        ("e", "5C 6H", -1, False, False, UNBROKEN, "5C"),
        ("e-variant", "5C 6H", -1, False, True, UNBROKEN, "5C 6H"),
        ("f", "2C 3C AS 4D", -1, True, False, UNBROKEN, "2C"),
        ("follow", "3C 9C AH QS", CLUBS, False, False, UNBROKEN, "3C 9C"),
        ("void", "AH QS 2D", CLUBS, False, False, UNBROKEN, "AH QS 2D"),
    ],
)
def test_dp4_micro_cases(
    case: str,
    hand: str,
    led: int,
    first: bool,
    broken: bool,
    lead_unbroken: int,
    expected: str,
) -> None:
    assert legal_play(mask(hand), led, first, broken, lead_unbroken) == mask(expected), case


def test_qs_breaks_hearts_option_in_play() -> None:
    # Seat 0 holds all spades; the clubs seat wins each club trick. On trick 2 the queen is
    # discarded, nothing else of value: with the option, hearts open on trick 3.
    deal = Deal(
        (
            mask("2S 3S 4S 5S 6S 7S 8S 9S 10S JS QS KS AS"),
            mask("2D 3D 4D 5D 6D 7D 8D 9D 10D JD QD KD AD"),
            mask("3C 5C 7C 9C JC KC AC 2H 4H 6H 8H 10H QH"),
            mask("2C 4C 6C 8C 10C QC 3H 5H 7H 9H JH KH AH"),
        )
    )
    for option in (False, True):
        m = match_of(Start(hand_number=4), qs_breaks_hearts=option)
        m.start_hand(3, deal)
        for seat, card in ((3, "2C"), (0, "2S"), (1, "2D"), (2, "AC")):
            m.step(seat, play(card))
        assert current(m).turn == 2  # AC won
        for seat, card in ((2, "3C"), (3, "QC"), (0, "QS"), (1, "3D")):
            m.step(seat, play(card))
        assert current(m).turn == 3  # QC won, with the queen of spades in it
        hearts_leadable = bool(legal_cards_of(m, 3) & SUIT_MASK[1])
        assert hearts_leadable is option


def test_hearts_broken_by_discarded_only() -> None:
    # Seat 1 holds only hearts after trick 1 and must lead them: with `discarded`, a heart led
    # (or followed to a heart lead) does not break hearts; a heart discarded does.
    deal = Deal(
        (
            mask("2S 3S 4S 5S 6S 7S 8S 9S 10S JS QS KS AS"),
            mask("AC 2H 3H 4H 5H 6H 7H 8H 9H 10H JH QH KH"),
            mask("2D 3D 4D 5D 6D 7D 8D 9D 10D JD QD KD AD"),
            mask("2C 3C 4C 5C 6C 7C 8C 9C 10C JC QC KC AH"),
        )
    )
    results = {}
    for mode in ("played", "discarded"):
        m = match_of(Start(hand_number=4), hearts_broken_by=mode)
        m.start_hand(3, deal)
        for seat, card in ((3, "2C"), (0, "2S"), (1, "AC"), (2, "2D")):
            m.step(seat, play(card))
        assert current(m).turn == 1  # AC won; seat 1 holds only hearts
        assert legal_cards_of(m, 1) == mask("2H 3H 4H 5H 6H 7H 8H 9H 10H JH QH KH")
        for seat, card in ((1, "2H"), (2, "3D"), (3, "AH"), (0, "3S")):
            m.step(seat, play(card))
        # Seat 3's AH won, followed to a heart lead: no discard of a heart yet.
        results[mode] = current(m).hearts_broken
    assert results == {"played": True, "discarded": False}


# --- exchange, first trick ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "offset"), [(1, 1), (2, 3), (3, 2), (4, 0), (5, 1), (8, 0), (10, 3)]
)
def test_exchange_cycle_by_hand_number(number: int, offset: int) -> None:
    m = match_of(Start(hand_number=number))
    m.start_hand(0, BY_SUIT)
    hand = current(m)
    if offset == 0:
        assert hand.phase.value == "play"
        with pytest.raises(IllegalAction) as exc:
            m.step(0, give("2S 3S 4S"))
        assert exc.value.rule == "DP.PASS"
        return
    assert m.to_act() == (0, 1, 2, 3)
    gifts = ["2S 3S 4S", "2H 3H 4H", "2D 3D 4D", "3C 4C 5C"]
    for seat in (2, 0, 3, 1):  # any order
        m.step(seat, give(gifts[seat]))
    for seat in range(4):
        giver = (seat - offset) % 4
        assert hand.held[seat] & mask(gifts[giver]) == mask(gifts[giver])
        assert not hand.held[seat] & mask(gifts[seat])
        assert hand.held[seat].bit_count() == 13


def test_exchange_refusals() -> None:
    m = match_of()
    m.start_hand(0, BY_SUIT)
    with pytest.raises(IllegalAction) as exc:
        m.step(0, give("2H 3S 4S"))
    assert (exc.value.code, exc.value.rule) == ("not-held", "DP.PASS")
    assert "does not hold 2H" in exc.value.message
    with pytest.raises(IllegalAction) as exc:
        m.step(3, play("2C"))
    assert (exc.value.code, exc.value.rule) == ("exchange-first", "DP.PASS")
    m.step(0, give("2S 3S 4S"))
    with pytest.raises(NotYourTurn) as exc2:
        m.step(0, give("5S 6S 7S"))
    assert exc2.value.rule == "DP.PASS"


def test_first_trick_rules_and_refusals() -> None:
    m = match_of(Start(hand_number=4))
    m.start_hand(0, BY_SUIT)
    assert m.to_act() == (3,)  # the 2C holder leads
    with pytest.raises(IllegalAction) as exc:
        m.step(3, play("3C"))
    assert (exc.value.code, exc.value.rule) == ("lead-two-of-clubs", "DP.FIRST-TRICK")
    assert "legal: 2C" in exc.value.message
    with pytest.raises(NotYourTurn):
        m.step(0, play("2S"))
    m.step(3, play("2C"))
    # Seat 0, void in clubs, holds spades: QS refused on the first trick.
    with pytest.raises(IllegalAction) as exc:
        m.step(0, play("QS"))
    assert (exc.value.code, exc.value.rule) == ("no-points-first-trick", "DP.FIRST-TRICK")
    m.step(0, play("AS"))
    # Seat 1 holds only hearts: any heart is allowed on the first trick.
    assert legal_cards_of(m, 1) == SUIT_MASK[1]
    m.step(1, play("KH"))
    m.step(2, play("2D"))
    assert current(m).hearts_broken  # a heart played on trick 1 breaks hearts


def test_must_follow_refusal() -> None:
    m = match_of(Start(hand_number=4))
    deal = Deal(
        (
            mask("2S 3S 4S 5S 6S 7S 8S 9S 10S JS QS KS 3C"),
            mask("2H 3H 4H 5H 6H 7H 8H 9H 10H JH QH KH AS"),
            mask("2D 3D 4D 5D 6D 7D 8D 9D 10D JD QD KD AH"),
            mask("2C AD 4C 5C 6C 7C 8C 9C 10C JC QC KC AC"),
        )
    )
    m.start_hand(3, deal)
    m.step(3, play("2C"))
    with pytest.raises(IllegalAction) as exc:
        m.step(0, play("2S"))
    assert (exc.value.code, exc.value.rule) == ("must-follow", "DP.FOLLOW")
    assert exc.value.legal == (play("3C"),)
    with pytest.raises(IllegalAction) as exc:
        m.step(0, play("2H"))
    assert (exc.value.code, exc.value.rule) == ("not-held", "DP.FOLLOW")


# --- scoring ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "expected"), [("add_to_others", [26, 26, 26, 0]), ("subtract_self", [0, 0, 0, -26])]
)
def test_volte(mode: str, expected: list[int]) -> None:
    m = match_of(Start(hand_number=4), moon_mode=mode)
    m.start_hand(0, BY_SUIT)
    play_out(m)  # clubs win every trick: seat 3 takes all 13 hearts and QS
    assert [s[0] for s in m.scores] == expected
    lines = m.results[0].lines
    assert {line.rule for line in lines} == {"DP.VOLTE"}
    assert sum(line.delta[0] for line in lines) == sum(expected)


def test_ordinary_scores_sum_to_26_and_lines_cite_dp_score() -> None:
    m = match_of()
    rng = random.Random(7)
    deck = list(range(52))
    rng.shuffle(deck)
    m.start_hand(0, m.deal_deck(0, deck))
    play_out(m, lambda legal: rng.choice(legal))
    lines = m.results[0].lines
    assert [line.seat for line in lines] == [0, 1, 2, 3]
    if {line.rule for line in lines} == {"DP.SCORE"}:
        assert sum(line.delta[0] for line in lines) == 26


# --- match end, rotation, deals -----------------------------------------------------------


def test_match_ends_at_threshold_inclusive_with_shared_victory() -> None:
    start = Start(hand_number=4, scores=((74,), (10,), (10,), (50,)))
    m = match_of(start)
    m.start_hand(0, BY_SUIT)
    play_out(m)  # volte by seat 3: others +26 -> seat 0 reaches exactly 100
    assert [s[0] for s in m.scores] == [100, 36, 36, 50]
    assert m.finished
    assert m.winners == (1, 2)  # the lowest total, shared
    with pytest.raises(IllegalAction):
        m.start_hand(1, BY_SUIT)


def test_end_threshold_option() -> None:
    m = match_of(Start(hand_number=4), end_threshold=26)
    m.start_hand(0, BY_SUIT)
    play_out(m)
    assert m.finished and m.winners == (3,)
    m2 = match_of(Start(hand_number=4), end_threshold=27)
    m2.start_hand(0, BY_SUIT)
    play_out(m2)
    assert not m2.finished


@pytest.mark.parametrize(("rotation", "step"), [("clockwise", 1), ("counterclockwise", -1)])
def test_dealer_rotation(rotation: str, step: int) -> None:
    m = match_of(Start(hand_number=4), dealer_rotation=rotation)
    m.start_hand(2, BY_SUIT)
    play_out(m)
    assert m.expected_dealer() == (2 + step) % 4
    with pytest.raises(DealError) as exc:
        m.start_hand((2 - step) % 4, BY_SUIT)
    assert (exc.value.code, exc.value.rule) == ("dealer-rotation", "DP.DEAL")
    m.start_hand((2 + step) % 4, BY_SUIT)


def test_deal_from_deck_one_at_a_time_from_the_dealers_left() -> None:
    m = match_of()
    deal = m.deal_deck(1, list(range(52)))
    assert deal.hands[2] >> 0 & 1  # first card to the seat after the dealer
    assert deal.hands[3] >> 1 & 1
    assert deal.hands[1] >> 3 & 1
    assert all(h.bit_count() == 13 for h in deal.hands)
    with pytest.raises(DealError) as exc:
        m.deal_deck(1, [*range(51), 0])
    assert exc.value.code == "duplicate-card"


def test_deal_checks() -> None:
    m = match_of()
    bad = Deal((mask("2S 3S"), *SUIT_MASK[1:]))
    with pytest.raises(DealError) as exc:
        m.start_hand(0, bad)
    assert exc.value.rule == "DP.DEAL" and "seat 0 has 2 cards" in exc.value.message
    dup = Deal((SUIT_MASK[0], SUIT_MASK[0], SUIT_MASK[2], SUIT_MASK[3]))
    with pytest.raises(DealError) as exc:
        m.start_hand(0, dup)
    assert exc.value.code == "duplicate-card"
    with pytest.raises(DealError):
        m.start_hand(0, Deal(SUIT_MASK, retourne=0))


def test_resign_ends_the_match() -> None:
    m = match_of(Start(scores=((10,), (20,), (5,), (30,))))
    m.start_hand(0, BY_SUIT)
    m.step(1, encode(6))
    assert m.finished and m.resigned == 1 and m.winners == (2,)
    assert m.results[-1].actions[-1] == encode(6)


# --- random playouts under every option set -----------------------------------------------

OPTION_SETS = [
    dict(zip(keys, values, strict=True))
    for keys in [
        (
            "qs_breaks_hearts",
            "qs_counts_as_heart_for_lead",
            "moon_mode",
            "hearts_broken_by",
            "dealer_rotation",
        )
    ]
    for values in itertools.product(
        (False, True),
        (False, True),
        ("add_to_others", "subtract_self"),
        ("played", "discarded"),
        ("clockwise", "counterclockwise"),
    )
]


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: "-".join(map(str, o.values())))
def test_random_playouts_invariants(options: dict[str, Any]) -> None:
    rng = random.Random(json.dumps(options, sort_keys=True))
    rules = make_rules("dame-de-pique", options=options | {"end_threshold": 60})
    m = new_match(rules)
    dealer = rng.randrange(4)
    while not m.finished:
        deck = list(range(52))
        rng.shuffle(deck)
        expected = m.expected_dealer()
        dealer = dealer if expected is None else expected
        m.start_hand(dealer, m.deal_deck(dealer, deck))
        played = 0
        while m.to_act():
            for seat in range(4):
                legal = m.legal_actions(seat)
                assert legal == sorted(legal)
                assert bool(legal) == (seat in m.to_act())
            seat = rng.choice(m.to_act())
            action = rng.choice(m.legal_actions(seat))
            if action & 7 == PLAY:
                assert not played >> (action >> 3) & 1  # each card played once
                played |= 1 << (action >> 3)
            m.apply(seat, action)
        assert played == FULL_DECK
        result = m.results[-1]
        taken = sum(line.delta[0] for line in result.lines)
        assert taken in (26, 78, -26)
    # Replay equals live play; record -> bytes -> record identical.
    again, _ = assert_record_round_trips(m, "dame-de-pique playout")
    replayed = replay_record(again)  # checks every line, score and the outcome
    assert replayed.scores == m.scores
    assert replayed.winners == m.winners
    assert [list(iter_cards(r.deal.hands[0])) for r in replayed.results] == [
        list(iter_cards(r.deal.hands[0])) for r in m.results
    ]


@pytest.mark.parametrize("seed", range(20))
def test_the_pass_choices_are_every_three_cards_of_the_hand(seed: int) -> None:
    rng = random.Random(seed)
    m = new_match(make_rules("hearts"))
    m.start_hand(0, m.deal_deck(0, rng.sample(range(52), 52)))
    hand = m.hand
    assert hand is not None
    for seat in range(4):
        cards = list(iter_cards(hand.held[seat]))
        expected = sorted(
            pass_action((1 << a) | (1 << b) | (1 << c))
            for a, b, c in itertools.combinations(cards, 3)
        )
        assert hand.legal_actions(seat) == expected and len(expected) == 286
        action = rng.choice(expected)
        m.step(seat, action)  # each is accepted
        if seat < 3:  # then the seat waits for the others' passes
            assert hand.legal_actions(seat) == []
