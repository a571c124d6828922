"""Napoléon (RULES.md section 5): worked examples, scripted deals per rule and per option,
refusals, and random-playout invariants for every option set and player count."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from tapis_cartes.referee.engine.actions import BID, BID_WORDS, PLAY, VOLE, encode, pass_action
from tapis_cartes.referee.engine.base import Deal, HandResult, Note, ScoreLine, Start, TrickWon
from tapis_cartes.referee.engine.cards import SUIT_MASK, card_str, iter_cards, parse_card
from tapis_cartes.referee.engine.errors import (
    DealError,
    IllegalAction,
    InvalidAction,
    NotYourTurn,
    RulesError,
)
from tapis_cartes.referee.engine.napoleon import NapoleonHand, NapoleonMatch, pack_of
from tapis_cartes.referee.engine.options import NapoleonOptions
from tapis_cartes.referee.engine.registry import find_game, make_rules, new_match
from tests.cards import deal_of, mask, play
from tests.engine.playing import assert_replay_equals_live, one_to_act

VALUES = {"two": 2, "three": 3, "misere": 3, "four": 4, "nap": 5, "wellington": 10, "blucher": 20}
GOALS = {"two": 2, "three": 3, "misere": 0, "four": 4, "nap": 5, "wellington": 5, "blucher": 5}


# --- helpers ------------------------------------------------------------------------------


def bid(word: str) -> int:
    return encode(BID, BID_WORDS.index(word))


def match_of(options: dict[str, Any] | None = None, start: Start | None = None) -> NapoleonMatch:
    m = new_match(make_rules("nap", options=options or {}), start)
    assert isinstance(m, NapoleonMatch)
    return m


def run(m: NapoleonMatch, script: Sequence[tuple[int, int]]) -> list[Any]:
    events: list[Any] = []
    for seat, action in script:
        events += m.apply(seat, action)
    return events


def play_lowest(m: NapoleonMatch) -> None:
    """Finish the current hand, every seat playing its lowest legal action."""
    while m.to_act():
        (seat,) = m.to_act()
        m.apply(seat, m.legal_actions(seat)[0])


def line_keys(lines: Sequence[ScoreLine]) -> list[tuple[int, str, tuple[int, ...], str]]:
    return [(x.seat, x.kind, x.delta, x.rule) for x in lines]


def totals(m: NapoleonMatch) -> list[int]:
    return [s[0] for s in m.scores]


# --- example N-1 (RULES.md 5.3) -----------------------------------------------------------

# Seats A, B, C, D = 0, 1, 2, 3; D (3) deals, so A bids and would lead first.
N1_DEAL = deal_of("QS 7D 8D KH 3C", "JS AH QH 10D 5C", "2S AD KD 9H AC", "AS KS 9S 4H 2C")
N1_PLAY = [
    (3, "KS"), (0, "QS"), (1, "JS"), (2, "2S"),
    (3, "AS"), (0, "7D"), (1, "10D"), (2, "AD"),
    (3, "9S"), (0, "8D"), (1, "QH"), (2, "KD"),
    (3, "4H"), (0, "KH"), (1, "AH"), (2, "9H"),
    (1, "5C"), (2, "AC"), (3, "2C"), (0, "3C"),
]  # fmt: skip


def n1_script(d_bid: str = "three") -> list[tuple[int, int]]:
    bids = [(0, bid("two")), (1, bid("pass")), (2, bid("pass")), (3, bid(d_bid))]
    return bids + [(s, play(c)) for s, c in N1_PLAY]


def test_example_n1_trois_made() -> None:
    m = match_of()
    m.start_hand(3, N1_DEAL)
    events = run(m, n1_script())
    winners = [e.winner for e in events if isinstance(e, TrickWon)]
    assert winners == [3, 3, 3, 1, 2]
    notes = {e.kind: e for e in events if isinstance(e, Note)}
    assert notes["contract"].seat == 3 and "three" in notes["contract"].text
    assert notes["trump"].text == "trump is spades"
    result = m.results[-1]
    assert line_keys(result.lines) == [(3, "contract-made", (3,), "NAP.SCORE")]
    assert totals(m) == [0, 0, 0, 3]
    assert m.view(None) is not None
    view = m.view(0)
    assert view is not None
    assert view.public["tricks_won"] == (0, 1, 1, 3)
    assert view.public["contract"] == "three" and view.public["declarer"] == 3
    assert view.public["bids"] == ((0, "two"), (1, "pass"), (2, "pass"), (3, "three"))
    assert view.trump == 0 and view.phase == "over"


def test_example_n1_view_during_play() -> None:
    m = match_of()
    m.start_hand(3, N1_DEAL)
    run(m, n1_script()[:6])  # bids, then D KS and A QS
    view = m.view(1)
    assert view is not None
    assert view.phase == "play" and view.to_act == (1,)
    assert view.trick == ((3, parse_card("KS")), (0, parse_card("QS")))
    assert view.legal == (play("JS"),)  # NAP.FOLLOW: B holds one spade
    assert view.hand == mask("JS AH QH 10D 5C")
    assert m.view(0) is not None and m.view(0).legal == ()  # type: ignore[union-attr]


# --- N-6: bidding micro-cases -------------------------------------------------------------

BEFORE = {
    "none": [],
    "three": ["three"],
    "misere": ["misere"],
    "four": ["four"],
    "nap": ["nap"],
    "wellington": ["nap", "wellington"],
    "blucher": ["nap", "wellington", "blucher"],
}


def bidding_after(highest: str) -> NapoleonMatch:
    """Five players, seat 4 deals; seats 0.. bid the words that make `highest` the highest
    bid; the next seat is to speak."""
    m = match_of({"players": 5})
    m.start_hand(4, Deal(tuple(0x1F << (5 * s) for s in range(5))))  # cards 5s .. 5s+4
    run(m, [(s, bid(w)) for s, w in enumerate(BEFORE[highest])])
    return m


N6 = [
    ("none", "two", True),
    ("three", "misere", True),
    ("misere", "three", False),
    ("four", "nap", True),
    ("four", "wellington", False),
    ("nap", "wellington", True),
    ("nap", "blucher", False),
    ("wellington", "blucher", True),
    *(("blucher", w, False) for w in BID_WORDS[1:]),
    ("blucher", "pass", True),
]


@pytest.mark.parametrize(("highest", "attempt", "legal"), N6)
def test_n6_bidding(highest: str, attempt: str, legal: bool) -> None:
    m = bidding_after(highest)
    (seat,) = m.to_act()
    assert (bid(attempt) in m.legal_actions(seat)) is legal
    if legal:
        m.apply(seat, bid(attempt))
        assert isinstance(m.hand, NapoleonHand)
        assert m.hand.bids[-1] == (seat, BID_WORDS.index(attempt))
        return
    with pytest.raises(IllegalAction) as exc:
        m.apply(seat, bid(attempt))
    assert exc.value.rule == "NAP.BID"
    assert exc.value.legal == tuple(m.legal_actions(seat))
    assert attempt in exc.value.message
    expected_code = {
        ("four", "wellington"): "wellington-needs-nap",
        ("nap", "blucher"): "blucher-needs-wellington",
    }.get((highest, attempt), "bid-too-low")
    assert exc.value.code == expected_code


def test_legal_bids_sorted_from_each_highest() -> None:
    assert bidding_after("none").legal_actions(0) == [
        bid(w) for w in ("pass", "two", "three", "misere", "four", "nap")
    ]
    assert bidding_after("misere").legal_actions(1) == [bid(w) for w in ("pass", "four", "nap")]
    assert bidding_after("nap").legal_actions(1) == [bid("pass"), bid("wellington")]
    assert bidding_after("blucher").legal_actions(3) == [bid("pass")]


def test_everyone_speaks_once_even_after_blucher() -> None:
    m = bidding_after("blucher")
    run(m, [(3, bid("pass")), (4, bid("pass"))])
    hand = m.hand
    assert isinstance(hand, NapoleonHand)
    assert hand.phase.value == "play" and hand.declarer == 2 and m.to_act() == (2,)


# --- NAP.TRUMP: Misère with and without trump ----------------------------------------------

# Three players, seat 2 deals; seat 0 bids Misère and leads 2H. On trick 2 seat 0, void in
# clubs, discards 3H: with no trump AC wins; with hearts trump (first_card) 3H wins.
MISERE_DEAL = deal_of("2H 3H 4H 5H 2S", "AH KC QC JC 10C", "KH AC 9C 8C 7C")
MISERE_BIDS = [(0, bid("misere")), (1, bid("pass")), (2, bid("pass"))]
MISERE_T12 = [(0, "2H"), (1, "AH"), (2, "KH"), (1, "KC"), (2, "AC"), (0, "3H")]


def test_misere_without_trump_is_made() -> None:
    m = match_of({"players": 3})
    m.start_hand(2, MISERE_DEAL)
    rest = [(2, "9C"), (0, "4H"), (1, "QC"), (1, "JC"), (2, "8C"), (0, "5H")]
    rest += [(1, "10C"), (2, "7C"), (0, "2S")]
    events = run(m, MISERE_BIDS + [(s, play(c)) for s, c in MISERE_T12 + rest])
    assert [e.winner for e in events if isinstance(e, TrickWon)] == [1, 2, 1, 1, 1]
    assert any(isinstance(e, Note) and e.text == "misere is played without trump" for e in events)
    view = m.view(0)
    assert view is not None and view.trump == -1
    assert line_keys(m.results[-1].lines) == [(0, "contract-made", (3,), "NAP.SCORE")]
    assert totals(m) == [3, 0, 0]


def test_misere_first_card_trump_changes_trick_two() -> None:
    m = match_of({"players": 3, "misere_trump": "first_card"})
    m.start_hand(2, MISERE_DEAL)
    events = run(m, MISERE_BIDS + [(s, play(c)) for s, c in MISERE_T12])
    assert [e.winner for e in events if isinstance(e, TrickWon)] == [1, 0]
    assert m.view(0).trump == 1  # type: ignore[union-attr]
    play_lowest(m)
    assert line_keys(m.results[-1].lines) == [
        (1, "contract-failed", (3,), "NAP.SCORE"),
        (2, "contract-failed", (3,), "NAP.SCORE"),
    ]
    assert totals(m) == [0, 3, 3]


def test_misere_first_card_stops_when_decided() -> None:
    m = match_of({"players": 3, "misere_trump": "first_card", "stop_when_decided": True})
    m.start_hand(2, MISERE_DEAL)
    events = run(m, MISERE_BIDS + [(s, play(c)) for s, c in MISERE_T12])
    assert m.hand is not None and m.hand.over and len(m.results) == 1
    assert any(isinstance(e, Note) and e.kind == "decided" for e in events)
    assert totals(m) == [0, 3, 3]


# --- all pass: thrown in, redealt --------------------------------------------------------

ANY4 = deal_of("2S 3S 4S 5S 6S", "2H 3H 4H 5H 6H", "2D 3D 4D 5D 6D", "2C 3C 4C 5C 6C")
ALL_PASS = [(1, bid("pass")), (2, bid("pass")), (3, bid("pass")), (0, bid("pass"))]


def test_all_pass_redeal_by_next_dealer() -> None:
    m = match_of()
    m.start_hand(0, ANY4)
    events = run(m, ALL_PASS)
    assert [(e.kind, e.seat) for e in events if isinstance(e, Note)] == [("thrown-in", 0)]
    assert m.results[-1].lines == [] and totals(m) == [0, 0, 0, 0]
    assert m.to_act() == () and not m.finished
    assert m.expected_dealer() == 1
    with pytest.raises(DealError) as exc:
        m.start_hand(0, ANY4)
    assert exc.value.rule == "NAP.DECK" and exc.value.code == "dealer-rotation"
    m.start_hand(1, ANY4)
    assert m.hand_number == 2 and m.to_act() == (2,)


def test_all_pass_redeal_by_same_dealer() -> None:
    m = match_of({"allpass_redeal_same_dealer": True})
    m.start_hand(0, ANY4)
    run(m, ALL_PASS)
    assert m.expected_dealer() == 0
    with pytest.raises(DealError):
        m.start_hand(1, ANY4)
    m.start_hand(0, ANY4)
    run(m, [(1, bid("two")), (2, bid("pass")), (3, bid("pass")), (0, bid("pass"))])
    play_lowest(m)
    assert m.expected_dealer() == 1  # a played deal passes the deal on


def test_thrown_in_deal_counts_toward_deals() -> None:
    m = match_of({"deals": 2})
    for dealer in (0, 1):
        m.start_hand(dealer, ANY4)
        run(m, [((dealer + 1 + i) % 4, bid("pass")) for i in range(4)])
    assert m.finished and m.winners == (0, 1, 2, 3)
    assert m.end_reason == "2 deals played"


# --- NAP.SCORE: stakes, failed contracts -------------------------------------------------


def test_stakes_made() -> None:
    m = match_of({"scoring": "stakes"})
    m.start_hand(3, N1_DEAL)
    run(m, n1_script())
    assert line_keys(m.results[-1].lines) == [
        (3, "contract-made", (9,), "NAP.SCORE"),
        (0, "contract-made", (-3,), "NAP.SCORE"),
        (1, "contract-made", (-3,), "NAP.SCORE"),
        (2, "contract-made", (-3,), "NAP.SCORE"),
    ]
    assert totals(m) == [-3, -3, -3, 9]


def test_stakes_failed() -> None:
    m = match_of({"scoring": "stakes"})
    m.start_hand(3, N1_DEAL)
    run(m, n1_script("four"))  # D takes 3 tricks of the 4 bid
    assert line_keys(m.results[-1].lines) == [
        (3, "contract-failed", (-12,), "NAP.SCORE"),
        (0, "contract-failed", (4,), "NAP.SCORE"),
        (1, "contract-failed", (4,), "NAP.SCORE"),
        (2, "contract-failed", (4,), "NAP.SCORE"),
    ]
    assert totals(m) == [4, 4, 4, -12]


def test_seed_points_failed() -> None:
    m = match_of()
    m.start_hand(3, N1_DEAL)
    run(m, n1_script("four"))
    assert [x.seat for x in m.results[-1].lines] == [0, 1, 2]
    assert totals(m) == [4, 4, 4, 0]
    assert "four failed: seat 3 took 3 tricks" in m.results[-1].lines[0].note


STRONG = "AS KS QS JS 10S"


@pytest.mark.parametrize(
    ("bids", "declarer", "hands", "expected"),
    [
        # seat 2 holds the five top spades: Blücher made, 20 points.
        (["nap", "wellington", "blucher"], 2, ("2H 3H 4H 5H 6H", "2D 3D 4D 5D 6D", STRONG),
         [0, 0, 20]),
        # seat 1 bids Wellington with a weak hand: each opponent scores 10.
        (["nap", "wellington", "pass"], 1, (STRONG, "2S 2H 3H 4H 5H", "2D 3D 4D 5D 6D"),
         [10, 0, 10]),
        # Nap made by the strong hand.
        (["nap", "pass", "pass"], 0, (STRONG, "2D 3D 4D 5D 6D", "2H 3H 4H 5H 6H"), [5, 0, 0]),
    ],
)  # fmt: skip
def test_high_contract_values(
    bids: list[str], declarer: int, hands: tuple[str, str, str], expected: list[int]
) -> None:
    m = match_of({"players": 3})
    m.start_hand(2, deal_of(*hands))
    run(m, [(s, bid(w)) for s, w in enumerate(bids)])
    hand = m.hand
    assert isinstance(hand, NapoleonHand) and hand.declarer == declarer
    play_lowest(m)
    assert totals(m) == expected
    assert all(x.rule == "NAP.SCORE" for x in m.results[-1].lines)


# --- stop_when_decided --------------------------------------------------------------------


def test_stop_when_decided_same_score_as_play_out() -> None:
    full = match_of()
    full.start_hand(3, N1_DEAL)
    run(full, n1_script())
    short = match_of({"stop_when_decided": True})
    short.start_hand(3, N1_DEAL)
    script = n1_script()
    events = run(short, script[:16])  # bids and three tricks: D has its three
    assert short.hand is not None and short.hand.over
    assert len(short.results[-1].tricks) == 3
    assert [e.kind for e in events if isinstance(e, Note)][-1] == "decided"
    assert line_keys(short.results[-1].lines) == line_keys(full.results[-1].lines)
    assert short.scores == full.scores
    with pytest.raises(IllegalAction) as exc:
        short.apply(*script[16])
    assert exc.value.code == "no-hand"


def test_stop_when_decided_failed_early() -> None:
    m = match_of({"stop_when_decided": True})
    m.start_hand(3, N1_DEAL)
    script = n1_script("nap")
    run(m, script[:16])
    hand = m.hand
    assert hand is not None and not hand.over  # D has 3 tricks, 2 to play
    run(m, script[16:20])  # trick 4 goes to B: D can no longer take all five
    assert hand.over and len(hand.tricks) == 4 and totals(m) == [5, 5, 5, 0]


# --- NAP.DECK: packs, deals, short deck ----------------------------------------------------


def test_short_deck_three_players() -> None:
    m = match_of({"players": 3, "short_deck": True})
    pack = pack_of(3, True)
    assert pack.bit_count() == 24
    assert min(c % 13 for c in iter_cards(pack)) == parse_card("9S")
    deck = list(iter_cards(pack))
    random.Random(3).shuffle(deck)
    deal = m.deal_deck(1, deck)
    assert deal.hands[2] & 1 << deck[0] and deal.hands[0] & 1 << deck[1]  # seat after dealer
    assert all(h.bit_count() == 5 for h in deal.hands)
    m.start_hand(1, deal)
    fresh = match_of({"players": 3, "short_deck": True})
    with pytest.raises(DealError) as exc:
        fresh.start_hand(2, deal_of("8S AS KS QS JS", "AH KH QH JH 10H", "AD KD QD JD 10D"))
    assert exc.value.rule == "NAP.DECK" and exc.value.code == "card-not-in-pack"
    assert "8S" in exc.value.message and "24-card short pack (9 and up)" in exc.value.message


def test_short_deck_seven_players() -> None:
    m = match_of({"players": 7, "short_deck": True})
    pack = pack_of(7, True)
    assert pack.bit_count() == 40
    assert pack & mask("5S 5H 5D 5C") and not pack & mask("4S 4H 4D 4C")
    ids = list(iter_cards(pack))
    hands = [" ".join(card_str(c) for c in ids[5 * s : 5 * s + 5]) for s in range(7)]
    m.start_hand(0, deal_of(*hands))
    bad = [*hands[:6], "4C 5C 6C 7C 8C"]
    m2 = match_of({"players": 7, "short_deck": True})
    with pytest.raises(DealError) as exc:
        m2.start_hand(0, deal_of(*bad))
    assert exc.value.rule == "NAP.DECK" and "4C" in exc.value.message
    assert "40-card short pack (5 and up)" in exc.value.message
    with pytest.raises(DealError) as exc:
        m2.deal_deck(0, list(range(52)))
    assert exc.value.code == "card-not-in-pack"


def test_deal_deck_needs_the_whole_pack() -> None:
    m = match_of()
    with pytest.raises(DealError) as exc:
        m.deal_deck(0, list(range(51)))
    assert exc.value.code == "deck-size" and exc.value.rule == "NAP.DECK"
    with pytest.raises(DealError) as exc:
        m.deal_deck(0, [*range(51), 0])
    assert exc.value.code == "duplicate-card" and "2S" in exc.value.message
    deal = m.deal_deck(3, list(range(52)))
    # One card at a time from seat 0 (after dealer 3): seat 0 gets cards 0, 4, 8, 12, 16.
    assert deal.hands[0] == sum(1 << c for c in (0, 4, 8, 12, 16))
    assert deal.hands[3] == sum(1 << c for c in (3, 7, 11, 15, 19))


def test_deal_checks() -> None:
    m = match_of()
    with pytest.raises(DealError) as exc:
        m.start_hand(0, Deal(ANY4.hands, retourne=parse_card("AS")))
    assert exc.value.code == "deal-shape"
    with pytest.raises(DealError) as exc:
        m.start_hand(0, Deal(ANY4.hands[:3]))
    assert exc.value.code == "deal-hands"
    with pytest.raises(DealError) as exc:
        m.start_hand(0, deal_of("2S 3S 4S 5S", "2H 3H 4H 5H 6H", "2D 3D 4D 5D 6D", "AS"))
    assert exc.value.code == "hand-size" and exc.value.rule == "NAP.DECK"
    with pytest.raises(DealError) as exc:
        m.start_hand(0, deal_of("2S 3S 4S 5S 6S", "2S 3H 4H 5H 6H", "2D 3D 4D 5D 6D", "AC"))
    assert exc.value.code == "duplicate-card"


# --- NAP.END: a fixed number of deals --------------------------------------------------------


def test_match_ends_after_deals_with_shared_victory() -> None:
    m = match_of({"players": 3, "deals": 2})
    weak = ("2H 3H 4H 5H 6H", "2D 3D 4D 5D 6D")
    # Hand 1, seat 0 deals: seat 1 holds the top spades and makes Deux.
    m.start_hand(0, deal_of(weak[0], STRONG, weak[1]))
    run(m, [(1, bid("two")), (2, bid("pass")), (0, bid("pass"))])
    play_lowest(m)
    assert not m.finished and totals(m) == [0, 2, 0]
    # Hand 2, seat 1 deals: seat 2 makes Deux.
    m.start_hand(1, deal_of(weak[0], weak[1], STRONG))
    events = run(m, [(2, bid("two")), (0, bid("pass")), (1, bid("pass"))])
    while m.to_act():
        (seat,) = m.to_act()
        events += m.apply(seat, m.legal_actions(seat)[0])
    assert m.finished and m.winners == (1, 2) and totals(m) == [0, 2, 2]
    assert events[-1].winners == (1, 2)  # MatchOver
    with pytest.raises(IllegalAction) as exc:
        m.start_hand(2, ANY4)
    assert exc.value.code == "match-over" and exc.value.rule == "NAP.END"


def test_match_end_counts_from_the_start_hand_number() -> None:
    m = match_of(start=Start(hand_number=7, scores=((1,), (0,), (0,), (0,))))
    assert m.deals == 8
    m.start_hand(0, ANY4)
    run(m, ALL_PASS)
    assert not m.finished
    m.start_hand(1, ANY4)
    run(m, [(2, bid("pass")), (3, bid("pass")), (0, bid("pass")), (1, bid("pass"))])
    assert m.finished and m.winners == (0,)
    with pytest.raises(RulesError) as exc:
        match_of(start=Start(hand_number=9))
    assert exc.value.key == "deals"


# --- refusals -----------------------------------------------------------------------------


def started_n1(options: dict[str, Any] | None = None) -> NapoleonMatch:
    m = match_of(options)
    m.start_hand(3, N1_DEAL)
    return m


def test_bid_out_of_turn() -> None:
    m = started_n1()
    with pytest.raises(NotYourTurn) as exc:
        m.apply(1, bid("two"))
    assert exc.value.rule == "NAP.BID" and "waiting for seat 0" in exc.value.message


def test_play_during_bidding_and_bid_during_play() -> None:
    m = started_n1()
    with pytest.raises(IllegalAction) as exc:
        m.apply(0, play("QS"))
    assert exc.value.code == "bidding-first" and exc.value.rule == "NAP.BID"
    assert "bid phase" in exc.value.message
    run(m, n1_script()[:4])
    with pytest.raises(IllegalAction) as exc:
        m.apply(3, bid("four"))
    assert exc.value.code == "bidding-over" and exc.value.rule == "NAP.BID"


def test_first_lead_by_the_declarer_only() -> None:
    m = started_n1()
    run(m, n1_script()[:4])
    with pytest.raises(NotYourTurn) as exc:
        m.apply(0, play("QS"))
    assert exc.value.rule == "NAP.TRUMP"


def test_must_follow_and_not_held() -> None:
    m = started_n1()
    run(m, n1_script()[:5])  # D leads KS
    with pytest.raises(IllegalAction) as exc:
        m.apply(0, play("7D"))
    assert exc.value.code == "must-follow" and exc.value.rule == "NAP.FOLLOW"
    assert "must follow spades" in exc.value.message and exc.value.legal == (play("QS"),)
    assert "QS" in exc.value.message.split("legal:")[1]
    with pytest.raises(IllegalAction) as exc:
        m.apply(0, play("AH"))
    assert exc.value.code == "not-held" and exc.value.rule == "NAP.FOLLOW"
    with pytest.raises(NotYourTurn) as exc:
        m.apply(1, play("JS"))
    assert exc.value.rule == "NAP.FOLLOW"
    # No duty to trump or to beat: void in spades... B follows JS under QS, fine.
    run(m, [(0, play("QS")), (1, play("JS"))])


def test_discard_when_void_is_free() -> None:
    m = started_n1()
    run(m, n1_script()[:8])  # bids and trick 1; D leads AS (trump)
    run(m, [(3, play("AS"))])
    # A is void in spades: any card, no duty to trump.
    assert m.legal_actions(0) == sorted(play(c) for c in ("7D", "8D", "KH", "3C"))


def test_other_action_kinds_and_bad_payloads() -> None:
    m = started_n1()
    with pytest.raises(IllegalAction) as exc:
        m.apply(0, pass_action(mask("QS 7D 8D")))
    assert exc.value.code == "wrong-action"
    with pytest.raises(IllegalAction) as exc:
        m.apply(0, encode(VOLE, 1))
    assert exc.value.code == "wrong-action"
    with pytest.raises(InvalidAction):
        m.apply(0, encode(BID, 8))
    with pytest.raises(InvalidAction):
        m.apply(0, encode(PLAY, 60))


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"players": 2}, "players"),
        ({"players": 11}, "players"),
        ({"players": True}, "players"),
        ({"deals": 0}, "deals"),
        ({"deals": "8"}, "deals"),
        ({"misere_trump": "always"}, "misere_trump"),
        ({"scoring": "chips"}, "scoring"),
        ({"short_deck": "yes"}, "short_deck"),
        ({"target_score": 50}, "target_score"),
    ],
)
def test_bad_options(options: dict[str, Any], key: str) -> None:
    with pytest.raises(RulesError) as exc:
        make_rules("napoleon", options=options)
    assert exc.value.key == key
    assert key in str(exc.value)


def test_rules_registry_and_effective_deals() -> None:
    spec = find_game("nap")
    assert spec.name == "napoleon" and spec.seed == "004" and spec.fixed_players is None
    assert spec.title == "Napoléon" and spec.units == ("points",)
    rules = make_rules("nap")
    assert rules.players == 4 and rules.option_values()["deals"] == 8
    assert rules.digest == make_rules("napoleon", options={"deals": 8}).digest
    assert rules.digest != make_rules("napoleon", options={"deals": 9}).digest
    five = make_rules("nap", players=5)
    assert five.players == 5 and five.option_values()["deals"] == 10
    opts = five.options
    assert isinstance(opts, NapoleonOptions) and opts.effective_deals == 10
    with pytest.raises(RulesError):
        make_rules("nap", options={"players": 4}, players=5)


# --- random playouts ----------------------------------------------------------------------

OPTION_SETS: list[dict[str, Any]] = [
    {},
    {"short_deck": True},
    {"misere_trump": "first_card"},
    {"allpass_redeal_same_dealer": True},
    {"scoring": "stakes"},
    {"stop_when_decided": True},
    {"deals": 3},
    {
        "short_deck": True,
        "misere_trump": "first_card",
        "allpass_redeal_same_dealer": True,
        "scoring": "stakes",
        "stop_when_decided": True,
    },
]


def reference_winner(plays: Sequence[tuple[int, int]], trump: int) -> int:
    """RULES.md 0.4, written independently of the engine."""
    led = plays[0][1] // 13
    trumps = [(c % 13, s) for s, c in plays if c // 13 == trump]
    if trumps:
        return max(trumps)[1]
    return max((c % 13, s) for s, c in plays if c // 13 == led)[1]


def check_hand(result: HandResult, opts: NapoleonOptions, n: int) -> None:
    hand = result.hand
    assert isinstance(hand, NapoleonHand)
    dealt = result.deal.hands
    seen = 0
    moves = zip(result.action_seats, result.actions, strict=True)
    plays = [(s, a >> 3) for s, a in moves if a & 7 == PLAY]
    for s, c in plays:
        assert not seen >> c & 1, f"{card_str(c)} played twice"
        assert dealt[s] >> c & 1, f"seat {s} played {card_str(c)} it was not dealt"
        seen |= 1 << c
    if hand.thrown_in:
        assert plays == [] and result.lines == []
        return
    contract = BID_WORDS[hand.contract]
    trump = plays[0][1] // 13
    if contract == "misere" and opts.misere_trump == "none":
        trump = -1
    won = [0] * n
    for i, trick in enumerate(hand.tricks):
        chunk = plays[i * n : (i + 1) * n]
        assert list(zip(trick.seats, trick.cards, strict=True)) == chunk
        winner = reference_winner(chunk, trump)
        assert trick.winner == winner
        if i + 1 < len(hand.tricks):
            assert hand.tricks[i + 1].seats[0] == winner
        won[winner] += 1
    d = hand.declarer
    goal = GOALS[contract]
    made = won[d] == 0 if contract == "misere" else won[d] >= goal
    played = len(hand.tricks)
    if played < 5:
        assert opts.stop_when_decided
        left = 5 - played
        decided = won[d] > 0 if contract == "misere" else won[d] >= goal or won[d] + left < goal
        assert decided
    v = VALUES[contract]
    deltas = {x.seat: x.delta[0] for x in result.lines}
    assert len(deltas) == len(result.lines)
    assert all(x.rule == "NAP.SCORE" for x in result.lines)
    assert {x.kind for x in result.lines} == {"contract-made" if made else "contract-failed"}
    others = [s for s in range(n) if s != d]
    if opts.scoring == "stakes":
        sign = 1 if made else -1
        assert deltas == {d: sign * v * (n - 1), **{s: -sign * v for s in others}}
        assert sum(deltas.values()) == 0
    elif made:
        assert deltas == {d: v}
    else:
        assert deltas == {s: v for s in others}


def random_match(
    options: dict[str, Any], n: int, rng: random.Random
) -> tuple[NapoleonMatch, list[tuple[int, Deal]], list[tuple[int, int]]]:
    m = match_of({**options, "players": n})
    pack = list(iter_cards(m.pack))
    deals: list[tuple[int, Deal]] = []
    actions: list[tuple[int, int]] = []
    while not m.finished:
        dealer = m.expected_dealer()
        if dealer is None:
            dealer = rng.randrange(n)
        else:
            # RULES.md 7: the seat after the dealer, or the same one after a thrown-in deal
            # with allpass_redeal_same_dealer.
            prev = m.results[-1]
            assert isinstance(prev.hand, NapoleonHand)
            same = prev.hand.thrown_in and m.opts.allpass_redeal_same_dealer
            assert dealer == (prev.dealer if same else (prev.dealer + 1) % n)
        rng.shuffle(pack)
        deal = m.deal_deck(dealer, pack)
        deals.append((dealer, deal))
        m.start_hand(dealer, deal)
        while m.to_act():
            seat, legal, view = one_to_act(m)
            if legal[0] & 7 == BID:
                # Pass often, so that thrown-in deals happen too.
                action = legal[0] if rng.random() < 0.55 else rng.choice(legal)
            else:
                # NAP.FOLLOW: the cards of the led suit if any, else the whole hand.
                assert all(a & 7 == PLAY for a in legal)
                held = view.hand
                led = view.trick[0][1] // 13 if view.trick else -1
                follow = held & SUIT_MASK[led] if led >= 0 else 0
                assert sum(1 << (a >> 3) for a in legal) == (follow or held)
                action = rng.choice(legal)
            m.apply(seat, action)
            actions.append((seat, action))
        check_hand(m.results[-1], m.opts, n)
    return m, deals, actions


@pytest.mark.parametrize("n", range(3, 11))
@pytest.mark.parametrize("index", range(len(OPTION_SETS)))
def test_random_playouts(index: int, n: int) -> None:
    options = OPTION_SETS[index]
    rng = random.Random(f"nap-{index}-{n}")
    for _ in range(2):
        m, deals, actions = random_match(options, n, rng)
        deals_expected = options.get("deals", 2 * n)
        assert len(m.results) == deals_expected
        assert m.results[-1].number == deals_expected
        best = max(totals(m))
        assert m.winners == tuple(s for s in range(n) if totals(m)[s] == best)
        if options.get("scoring") == "stakes":
            assert sum(totals(m)) == 0
        else:
            assert min(totals(m)) >= 0
        assert [(r.dealer, r.deal) for r in m.results] == deals
        # Replay the recorded (seat, action) list: live, then the fast path without events.
        assert m.finished
        assert_replay_equals_live(m, deals, actions)
