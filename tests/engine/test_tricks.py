"""The shared trick code (referee/engine/tricks.py): the legal-set algorithms of RULES.md
1.1 (LEGAL_IMP000), 2.1 (LEGAL_IMP1725 and its options, 2.3 items 7-8) and 3.2 (forcée,
forçat, plaisant, with the test vectors V1-V8 and V8′), plain follow-suit, the trick winner
of 0.4 and the `Trick` class; worked examples 000-A and 001-B; and random-trick properties,
including agreement with a literal transcription of the RULES.md pseudocode."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tapis_cartes.referee.engine.cards import (
    CLUBS,
    DIAMONDS,
    HEARTS,
    R1,
    R2,
    R3,
    SPADES,
    RankOrder,
    card_str,
    deck_of_ranks,
    iter_cards,
    mask_of,
    mask_str,
    parse_card,
)
from tapis_cartes.referee.engine.tricks import (
    PlayedTrick,
    Regime,
    Trick,
    TrickRules,
    explain,
    legal_cards,
    winning_card,
)
from tests.cards import mask

NO_TRUMP = -1
PACK32 = deck_of_ranks(range(5, 13))  # 7 to A


def legal(
    regime: Regime,
    trick: str,
    hand: str,
    trump: int = HEARTS,
    order: RankOrder = R1,
    is_last: bool = False,
    **flags: bool,
) -> int:
    """The legal set of `hand` on a trick whose cards so far are `trick` (in order)."""
    cards = [parse_card(t) for t in trick.split()]
    led = cards[0] // 13 if cards else -1
    return legal_cards(
        TrickRules(regime, order, **flags), mask(hand), trump, led, mask_of(cards), is_last
    )


def show(m: int, order: RankOrder = R1) -> str:
    return mask_str(m, order)


# --- RULES.md 3.2: legal-set test vectors V1-V8, V8′ --------------------------------------

# (id, trick so far, hand, Forcée, Forçat, Plaisant not last, Plaisant last, I-1725, order)
# Trump ♥. None: no value in RULES.md ("—").
VECTORS: list[tuple[str, str, str, str, str, str, str, str | None, RankOrder]] = [
    ("V1", "K♠", "8♠ J♥ 7♦", "8♠", "J♥", "8♠", "J♥", "8♠", R1),
    ("V2", "K♠ J♥", "9♠ A♠ Q♥ 8♥", "9♠ A♠", "Q♥", "9♠ A♠", "Q♥", "9♠ A♠", R1),
    ("V3", "K♠ J♥", "Q♦ 8♥", "8♥", "Q♦ 8♥", "Q♦ 8♥", "Q♦ 8♥", "Q♦ 8♥", R1),
    ("V4", "9♥", "7♥ A♥ K♠", "A♥", "A♥", "7♥ A♥", "A♥", "A♥", R1),
    ("V5", "Q♦", "9♦ 7♥", "9♦", "7♥", "9♦", "7♥", "9♦", R1),
    ("V6", "Q♦ 7♥", "9♦ K♦", "9♦ K♦", "9♦ K♦", "9♦ K♦", "9♦ K♦", "9♦ K♦", R1),
    ("V7", "Q♦", "K♦ 9♦ 8♥", "K♦", "K♦", "K♦ 9♦", "K♦", "K♦", R1),
    ("V8", "A♠", "Q♠ 10♠", "Q♠", "Q♠", "Q♠ 10♠", "Q♠", "Q♠", R1),
    ("V8'", "A♠", "Q♠ 10♠", "Q♠ 10♠", "Q♠ 10♠", "Q♠ 10♠", "Q♠ 10♠", None, R2),
]

# (column name, regime, is_last, index of the expected set in a VECTORS row)
COLUMNS = [
    ("forcee", Regime.FORCEE, False, 3),
    ("forcat", Regime.FORCAT, False, 4),
    ("plaisant-not-last", Regime.PLAISANT, False, 5),
    ("plaisant-last", Regime.PLAISANT, True, 6),
    ("i1725", Regime.IMPERIALE_1725, False, 7),
]

VECTOR_CASES = [
    pytest.param(row[1], row[2], regime, is_last, row[index], row[8], id=f"{row[0]}-{name}")
    for row in VECTORS
    for name, regime, is_last, index in COLUMNS
    if row[index] is not None
]


@pytest.mark.parametrize(("trick", "hand", "regime", "is_last", "expected", "order"), VECTOR_CASES)
def test_legal_set_vectors(
    trick: str, hand: str, regime: Regime, is_last: bool, expected: str, order: RankOrder
) -> None:
    got = legal(regime, trick, hand, HEARTS, order, is_last)
    assert show(got, order) == show(mask(expected), order)
    if regime is not Regime.PLAISANT:
        # Only plaisant looks at whether the seat plays last.
        assert legal(regime, trick, hand, HEARTS, order, not is_last) == got


def test_vector_table_covers_every_column() -> None:
    assert len(VECTOR_CASES) == 9 * 5 - 1  # V8′ has no I-1725 value


# --- RULES.md 2.1 / 2.3 items 7-8: the IMPERIALE_1725 options, three players -----------------


# (option, trick, hand, legal by default, legal with the option)
IMPERIALE_1725_OPTIONS = [
    # undertrump_duty. K♠ led, J♥ ruffed; the third seat is void in ♠ and cannot overtrump.
    pytest.param("undertrump_duty", "K♠ J♥", "Q♦ 8♥", "Q♦ 8♥", "8♥", id="cannot-overtrump"),
    pytest.param(
        "undertrump_duty", "K♠ J♥", "Q♦ 9♦ 8♥ 7♥", "Q♦ 9♦ 8♥ 7♥", "8♥ 7♥", id="two-low-trumps"
    ),
    # Able to overtrump: must, either way.
    pytest.param("undertrump_duty", "K♠ J♥", "Q♦ Q♥ 8♥", "Q♥", "Q♥", id="can-overtrump"),
    # No trump at all: free either way.
    pytest.param("undertrump_duty", "K♠ J♥", "Q♦ 9♦", "Q♦ 9♦", "Q♦ 9♦", id="no-trump"),
    # Holding the led suit: follow, either way.
    pytest.param("undertrump_duty", "K♠ J♥", "9♠ 8♥", "9♠", "9♠", id="holds-led-suit"),
    # force_after_ruff. 10♠ led, J♥ ruffed; the third seat holds ♠ and could beat 10♠ with K♠.
    pytest.param("force_after_ruff", "10♠ J♥", "K♠ 9♠ 7♦", "K♠ 9♠", "K♠", id="ruffed-can-beat"),
    pytest.param(
        "force_after_ruff", "10♠ J♥", "A♠ 8♠ Q♥", "A♠ 8♠", "A♠", id="ruffed-r1-ace-beats-ten"
    ),
    # Nothing beats the best ♠ card: any ♠, either way.
    pytest.param(
        "force_after_ruff", "10♠ J♥", "9♠ 8♠ Q♥", "9♠ 8♠", "9♠ 8♠", id="ruffed-cannot-beat"
    ),
    # Not ruffed: must beat anyway (follow and force), either way.
    pytest.param("force_after_ruff", "10♠ 9♠", "K♠ 8♠", "K♠", "K♠", id="not-ruffed"),
    # The best led card is the second one (J♠ after 10♠), then a ruff.
    pytest.param(
        "force_after_ruff", "10♠ J♠ 7♥", "A♠ Q♠ 8♠", "A♠ Q♠ 8♠", "Q♠", id="beat-best-led-card"
    ),
]


@pytest.mark.parametrize(
    ("option", "trick", "hand", "default", "with_option"), IMPERIALE_1725_OPTIONS
)
def test_imperiale_1725_undertrump_duty_and_force_after_ruff(
    option: str, trick: str, hand: str, default: str, with_option: str
) -> None:
    got = legal(Regime.IMPERIALE_1725, trick, hand)
    assert show(got) == show(mask(default))
    got = legal(Regime.IMPERIALE_1725, trick, hand, **{option: True})
    assert show(got) == show(mask(with_option))


def test_imperiale_1725_must_overtrump_holding_no_led_card() -> None:
    # Ruffed, void in the led suit, can overtrump: the overtrumping cards only.
    assert legal(Regime.IMPERIALE_1725, "K♠ 10♥", "A♥ 9♥ 7♦") == mask("A♥")
    # Not ruffed, void: must trump, any trump.
    assert legal(Regime.IMPERIALE_1725, "K♠", "A♥ 9♥ 7♦") == mask("A♥ 9♥")
    # Trump led: above the best trump if possible, else any trump.
    assert legal(Regime.IMPERIALE_1725, "10♥ J♥", "A♥ Q♥ 7♦") == mask("Q♥")
    assert legal(Regime.IMPERIALE_1725, "10♥ K♥", "A♥ 7♥ 7♦") == mask("A♥ 7♥")


# --- RULES.md 1.3 and 2.4: the worked examples' legal sets --------------------------------

# (leader, leader's card, follower's card, follower's legal set or None for "any", winner)
Row = tuple[str, str, str, str | None, str]

EXAMPLE_000A_HANDS = {
    "E": "K♥ 9♥ 7♥ A♠ K♠ 10♠ 8♠ Q♦ 9♦ J♣ 10♣ 8♣",
    "D": "A♥ J♥ 8♥ Q♠ 7♠ K♦ J♦ 10♦ 8♦ A♣ 9♣ 7♣",
}
EXAMPLE_000A: list[Row] = [
    ("E", "K♠", "7♠", "Q♠ 7♠", "E"),
    ("E", "A♠", "Q♠", "Q♠", "D"),
    ("D", "A♥", "K♥", "K♥", "E"),
    ("E", "10♠", "8♥", "J♥ 8♥", "D"),
    ("D", "K♦", "9♦", "Q♦ 9♦", "D"),
    ("D", "J♦", "Q♦", "Q♦", "E"),
    ("E", "7♥", "J♥", "J♥", "D"),
    ("D", "10♦", "9♥", "9♥", "E"),
    ("E", "8♠", "7♣", None, "E"),
    ("E", "J♣", "9♣", "A♣ 9♣", "E"),
    ("E", "10♣", "A♣", "A♣", "D"),
    ("D", "8♦", "8♣", "8♣", "D"),
]

EXAMPLE_001B_HANDS = {
    "E": "K♥ Q♥ J♥ A♥ 7♥ K♠ Q♠ 10♠ K♣ Q♣ 8♣ 9♦",
    "D": "Q♦ J♦ A♦ 10♦ 8♦ 7♦ A♠ J♠ 9♠ 8♠ A♣ 9♥",
}
EXAMPLE_001B: list[Row] = [
    ("E", "K♠", "8♠", "A♠ J♠ 9♠ 8♠", "E"),
    ("E", "Q♠", "9♠", "A♠ J♠ 9♠", "E"),
    ("E", "10♠", "A♠", "A♠ J♠", "D"),
    ("D", "J♠", "8♣", None, "D"),
    ("D", "Q♦", "9♦", "9♦", "D"),
    ("D", "A♣", "Q♣", "K♣ Q♣", "E"),
    ("E", "K♣", "7♦", None, "E"),
    ("E", "K♥", "9♥", "9♥", "E"),
    ("E", "Q♥", "8♦", None, "E"),
    ("E", "J♥", "10♦", None, "E"),
    ("E", "A♥", "A♦", None, "E"),
    ("E", "7♥", "J♦", None, "E"),
]


def replay_two_player_example(
    hands_text: dict[str, str], rows: list[Row], trump: int, regime: Regime
) -> dict[str, int]:
    """Play the example trick by trick, checking each follower's legal set and each winner;
    return the tricks won per player."""
    rules = TrickRules(regime, R1)
    seat_of = {"E": 0, "D": 1}
    name_of = {0: "E", 1: "D"}
    hands = {p: mask(h) for p, h in hands_text.items()}
    assert hands["E"] & hands["D"] == 0
    won = {"E": 0, "D": 0}
    leader = "E"  # the premier en cartes leads trick 1
    for number, (lead_by, lead, follow, expected, winner) in enumerate(rows, 1):
        assert lead_by == leader, f"trick {number}: the winner of the last trick leads"
        follower = "D" if leader == "E" else "E"
        trick = Trick(trump)
        assert trick.legal(rules, hands[leader]) == hands[leader]  # the leader is free
        lead_card, follow_card = parse_card(lead), parse_card(follow)
        assert hands[leader] >> lead_card & 1
        trick.play(seat_of[leader], lead_card)
        hands[leader] &= ~(1 << lead_card)
        got = trick.legal(rules, hands[follower], is_last=True)
        want = hands[follower] if expected is None else mask(expected)
        assert show(got) == show(want), f"trick {number}"
        assert got >> follow_card & 1, f"trick {number}: the card played is legal"
        trick.play(seat_of[follower], follow_card)
        hands[follower] &= ~(1 << follow_card)
        assert name_of[trick.close(R1)] == winner, f"trick {number}"
        won[winner] += 1
        leader = winner
    assert hands == {"E": 0, "D": 0}
    return won


@pytest.mark.parametrize("regime", [Regime.FORCEE, Regime.IMPERIALE_1725])
def test_example_000a_follower_legal_sets(regime: Regime) -> None:
    # LEGAL_IMP000 is FORCEE for two players; IMPERIALE_1725 coincides with it too.
    won = replay_two_player_example(EXAMPLE_000A_HANDS, EXAMPLE_000A, HEARTS, regime)
    assert won == {"E": 6, "D": 6}


def test_example_000a_e_reaches_six_tricks_at_trick_ten() -> None:
    counts = {"E": 0, "D": 0}
    first_to_six = None
    for number, row in enumerate(EXAMPLE_000A, 1):
        counts[row[4]] += 1
        if first_to_six is None and 6 in counts.values():
            first_to_six = (number, row[4])
    assert first_to_six == (10, "E")


@pytest.mark.parametrize("regime", [Regime.IMPERIALE_1725, Regime.FORCEE])
def test_example_001b_legal_sets(regime: Regime) -> None:
    won = replay_two_player_example(EXAMPLE_001B_HANDS, EXAMPLE_001B, SPADES, regime)
    assert won == {"E": 9, "D": 3}


# --- plain follow suit (Dame de Pique, Napoléon) ------------------------------------------


def test_follow_regime() -> None:
    f = Regime.FOLLOW
    # Follow suit with any card of it: no duty to beat.
    assert legal(f, "5♠", "2♠ A♠ K♥", HEARTS, R3) == mask("2♠ A♠")
    # Void: any card, no duty to trump.
    assert legal(f, "5♠", "2♦ K♥ 3♣", HEARTS, R3) == mask("2♦ K♥ 3♣")
    # Somebody trumped: still only follow suit.
    assert legal(f, "5♠ 9♥", "2♠ A♥", HEARTS, R3) == mask("2♠")
    # Trump led: follow trump, any one.
    assert legal(f, "Q♥", "2♥ 3♥ A♠", HEARTS, R3) == mask("2♥ 3♥")
    # No trump.
    assert legal(f, "10♣", "2♣ Q♦", NO_TRUMP, R3) == mask("2♣")
    assert legal(f, "10♣", "A♦ Q♦", NO_TRUMP, R3) == mask("A♦ Q♦")
    # Leading: the whole hand.
    assert legal(f, "", "2♣ Q♦ A♥", NO_TRUMP, R3) == mask("2♣ Q♦ A♥")
    # Last to play or not: no difference.
    assert legal(f, "5♠", "2♠ K♥", HEARTS, R3, is_last=True) == mask("2♠")


@pytest.mark.parametrize("regime", list(Regime))
def test_leader_may_play_any_card(regime: Regime) -> None:
    hand = mask("8♠ J♥ 7♦ A♣")
    for trump in (NO_TRUMP, SPADES, HEARTS, DIAMONDS, CLUBS):
        for is_last in (False, True):
            rules = TrickRules(regime, R1)
            assert legal_cards(rules, hand, trump, -1, 0, is_last) == hand


@pytest.mark.parametrize("regime", list(Regime))
def test_empty_hand_has_no_legal_card(regime: Regime) -> None:
    assert legal(regime, "K♠", "") == 0


# --- RULES.md 0.4: the trick winner -------------------------------------------------------


@pytest.mark.parametrize(
    ("order", "trump", "cards", "winner"),
    [
        # A trump beats every card of the led suit; the highest trump wins.
        pytest.param(R1, HEARTS, "A♠ K♠ 7♥", "7♥", id="trump-beats"),
        pytest.param(R1, HEARTS, "A♠ 7♥ J♥", "J♥", id="highest-trump"),
        pytest.param(R1, HEARTS, "A♠ A♥ J♥", "J♥", id="r1-trump-jack-over-ace"),
        pytest.param(R3, HEARTS, "A♠ A♥ J♥", "A♥", id="r3-trump-ace-high"),
        pytest.param(R1, HEARTS, "9♥ 7♥ A♥", "A♥", id="trump-led"),
        # A card of any other suit can never win.
        pytest.param(R1, HEARTS, "7♠ A♦ K♣", "7♠", id="off-suit-never-wins"),
        pytest.param(R3, SPADES, "2♦ A♣ A♥", "2♦", id="off-suit-aces-lose"),
        # R1: the ace is below the jack and above the ten.
        pytest.param(R1, HEARTS, "A♠ J♠ 10♠", "J♠", id="r1-jack-beats-ace"),
        pytest.param(R1, HEARTS, "10♠ A♠ 9♠", "A♠", id="r1-ace-beats-ten"),
        pytest.param(R2, HEARTS, "A♠ J♠ 10♠", "A♠", id="r2-ace-high"),
        pytest.param(R1, HEARTS, "Q♣ K♣ A♣ J♣", "K♣", id="r1-king-high"),
        # No trump suit.
        pytest.param(R3, NO_TRUMP, "2♦ A♦ K♠", "A♦", id="no-trump"),
        pytest.param(R3, NO_TRUMP, "2♦ A♥ A♠ A♣", "2♦", id="no-trump-led-suit-only"),
        # A trump suit exists but nobody played one.
        pytest.param(R3, CLUBS, "3♦ 10♦ A♠", "10♦", id="no-trump-played"),
        pytest.param(R1, HEARTS, "6♠ 7♠", "7♠", id="r1-six-below-seven"),
    ],
)
def test_winning_card(order: RankOrder, trump: int, cards: str, winner: str) -> None:
    cs = [parse_card(t) for t in cards.split()]
    assert card_str(winning_card(order, trump, cs[0] // 13, mask_of(cs))) == card_str(
        parse_card(winner)
    )


# --- the Trick class ----------------------------------------------------------------------


def test_trick_play_and_close() -> None:
    t = Trick(HEARTS)
    assert (t.led, t.mask, t.winner, len(t)) == (-1, 0, -1, 0)
    t.play(2, parse_card("K♠"))
    assert t.led == SPADES
    t.play(3, parse_card("8♥"))
    t.play(0, parse_card("A♠"))
    assert t.led == SPADES  # the first card's suit stays the led suit
    assert t.seats == [2, 3, 0]
    assert [card_str(c) for c in t.cards] == ["KS", "8H", "AS"]
    assert t.mask == mask("K♠ 8♥ A♠")
    assert len(t) == 3
    assert t.close(R1) == 3  # 8♥ trumped
    assert t.winner == 3


def test_trick_close_without_trump_and_r1() -> None:
    t = Trick(NO_TRUMP)
    for seat, c in [(1, "A♣"), (2, "J♣"), (3, "K♥"), (0, "10♣")]:
        t.play(seat, parse_card(c))
    assert t.close(R1) == 2  # J♣ beats A♣ in R1; K♥ is off-suit
    t2 = Trick(NO_TRUMP)
    for seat, c in [(1, "A♣"), (2, "J♣"), (3, "K♥"), (0, "10♣")]:
        t2.play(seat, parse_card(c))
    assert t2.close(R2) == 1  # ace high in R2


def test_trick_legal_uses_its_own_state() -> None:
    rules = TrickRules(Regime.FORCEE, R1)
    t = Trick(HEARTS)
    hand = mask("9♠ A♠ Q♥ 8♥")
    assert t.legal(rules, hand) == hand
    t.play(0, parse_card("K♠"))
    assert t.legal(rules, hand) == mask("9♠ A♠")
    t.play(1, parse_card("J♥"))
    assert t.legal(rules, hand) == mask("9♠ A♠")
    assert t.legal(TrickRules(Regime.FORCAT, R1), hand) == mask("Q♥")
    assert t.legal(TrickRules(Regime.PLAISANT, R1), hand, is_last=True) == mask("Q♥")
    assert t.legal(TrickRules(Regime.PLAISANT, R1), hand, is_last=False) == mask("9♠ A♠")


def test_played_trick_seats_go_round_from_the_leader() -> None:
    cards = [parse_card(c) for c in ("Q♦", "7♥", "K♦", "J♥")]
    played = Trick(HEARTS)
    for s, c in zip([3, 0, 1, 2], cards, strict=True):
        played.play(s, c)
    winner = played.close(R1)
    assert winner == 2  # J♥ overtrumps 7♥
    done = PlayedTrick(3, cards, winner, 4)
    assert done.seats == (3, 0, 1, 2) == tuple(played.seats)
    assert PlayedTrick(4, cards[:3], 0, 5).seats == (4, 0, 1)


# --- properties on random tricks ----------------------------------------------------------


@dataclass(frozen=True)
class Spot:
    """A random trick in progress and the hand of the seat about to play."""

    hand: int
    trick: tuple[int, ...]
    trump: int
    regime: Regime
    order: RankOrder
    is_last: bool
    undertrump_duty: bool
    force_after_ruff: bool

    @property
    def led(self) -> int:
        return self.trick[0] // 13 if self.trick else -1

    @property
    def rules(self) -> TrickRules:
        return TrickRules(self.regime, self.order, self.undertrump_duty, self.force_after_ruff)

    def legal(self) -> int:
        return legal_cards(
            self.rules, self.hand, self.trump, self.led, mask_of(self.trick), self.is_last
        )


@st.composite
def spots(
    draw: st.DrawFn, min_trick: int = 0, max_trick: int = 5, regimes: list[Regime] | None = None
) -> Spot:
    """Distinct cards of the 32-card pack: the trick, then the hand. Each later card of the
    trick is of the led suit, of the trump suit or of any suit, and the hand holds 0 to 3
    cards of each suit, so that every branch of the algorithms (trump led, ruffed, void,
    able or not to beat) is drawn often."""
    trump = draw(st.sampled_from([SPADES, HEARTS, DIAMONDS, CLUBS, NO_TRUMP]))
    pool = draw(st.permutations(list(iter_cards(PACK32))))
    unused = {s: [c for c in pool if c // 13 == s] for s in (SPADES, HEARTS, DIAMONDS, CLUBS)}
    k = draw(st.integers(min_trick, max_trick))
    trick: list[int] = []
    if k:
        led = draw(st.sampled_from([SPADES, HEARTS, DIAMONDS, CLUBS]))
        trick.append(unused[led].pop())
        for _ in range(k - 1):
            anywhere = draw(st.sampled_from([SPADES, HEARTS, DIAMONDS, CLUBS]))
            suit = draw(st.sampled_from([led, trump if trump >= 0 else led, anywhere]))
            trick.append(unused[suit].pop())
    hand = 0
    for suit in (SPADES, HEARTS, DIAMONDS, CLUBS):
        hand |= mask_of(unused[suit][: draw(st.integers(0, 3))])
    return Spot(
        hand=hand,
        trick=tuple(trick),
        trump=trump,
        regime=draw(st.sampled_from(regimes or list(Regime))),
        order=draw(st.sampled_from([R1, R2])),
        is_last=draw(st.booleans()),
        undertrump_duty=draw(st.booleans()),
        force_after_ruff=draw(st.booleans()),
    )


@settings(max_examples=200, deadline=None)
@given(spots())
def test_legal_set_is_a_nonempty_subset_of_the_hand(spot: Spot) -> None:
    got = spot.legal()
    assert got & ~spot.hand == 0
    assert (got != 0) == (spot.hand != 0)
    if not spot.trick:
        assert got == spot.hand


@settings(max_examples=200, deadline=None)
@given(spots(min_trick=0, max_trick=1, regimes=[Regime.IMPERIALE_1725]))
def test_two_players_imp1725_coincides_with_forcee(spot: Spot) -> None:
    # RULES.md 2.1: with two players LEGAL_IMP1725 = LEGAL_IMP000 = LEGAL_FORCEE, whatever
    # the options (they only apply once a trump lies on a trick led in another suit).
    forcee = TrickRules(Regime.FORCEE, spot.order)
    imp = spot.rules
    trick = mask_of(spot.trick)
    assert legal_cards(forcee, spot.hand, spot.trump, spot.led, trick) == legal_cards(
        imp, spot.hand, spot.trump, spot.led, trick
    )


def reference_legal(spot: Spot) -> set[int]:
    """RULES.md 2.1 and 3.2, transcribed literally on sets of cards (notation of 0.5)."""
    H = set(iter_cards(spot.hand))
    C = list(spot.trick)
    T = spot.trump
    s = spot.order.strength
    if not C:
        return H
    L = C[0] // 13
    HL = {c for c in H if c // 13 == L}
    HT = {c for c in H if c // 13 == T}
    bestL = max((c for c in C if c // 13 == L), key=s.__getitem__)
    trumps_on = [c for c in C if c // 13 == T]
    bestT = max(trumps_on, key=s.__getitem__) if trumps_on else None
    ruffed = L != T and bool(trumps_on)

    def above(S: set[int], x: int | None) -> set[int]:
        return set(S) if x is None else {c for c in S if s[c] > s[x]}

    def forcee() -> set[int]:
        if L == T:
            if HT:
                return above(HT, bestT) or HT
            return H
        if not ruffed:
            if HL:
                return above(HL, bestL) or HL
            if HT:
                return HT
            return H
        if HL:
            return HL
        if HT:
            return above(HT, bestT) or HT
        return H

    def forcat() -> set[int]:
        if L == T:
            return forcee()
        if not ruffed:
            up = above(HL, bestL)
            if up:
                return up
            if HT:
                return HT
            if HL:
                return HL
            return H
        up = above(HT, bestT)
        if up:
            return up
        if HL:
            return HL
        return H

    def plaisant() -> set[int]:
        if spot.is_last:
            return forcat()
        if HL:
            return HL
        return H

    def imp1725() -> set[int]:
        if L == T:
            if HT:
                up = above(HT, bestT)
                return up if up else HT
            return H
        if HL:
            if ruffed and not spot.force_after_ruff:
                return HL
            up = above(HL, bestL)
            return up if up else HL
        if HT:
            if not ruffed:
                return HT
            up = above(HT, bestT)
            if up:
                return up
            return HT if spot.undertrump_duty else H
        return H

    def follow() -> set[int]:
        return HL or H

    return {
        Regime.FORCEE: forcee,
        Regime.FORCAT: forcat,
        Regime.PLAISANT: plaisant,
        Regime.IMPERIALE_1725: imp1725,
        Regime.FOLLOW: follow,
    }[spot.regime]()


@pytest.mark.parametrize("regime", list(Regime))
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_engine_agrees_with_the_rules_pseudocode(regime: Regime, data: st.DataObject) -> None:
    spot = data.draw(spots(min_trick=1, regimes=[regime]))
    assert set(iter_cards(spot.legal())) == reference_legal(spot)


@settings(max_examples=200, deadline=None)
@given(spots(min_trick=1, max_trick=6))
def test_winner_is_a_card_of_the_trick_following_rules_0_4(spot: Spot) -> None:
    m = mask_of(spot.trick)
    w = winning_card(spot.order, spot.trump, spot.led, m)
    assert m >> w & 1
    trumps = [c for c in spot.trick if c // 13 == spot.trump]
    pool = trumps or [c for c in spot.trick if c // 13 == spot.led]
    assert w == max(pool, key=spot.order.strength.__getitem__)


@pytest.mark.parametrize(
    ("regime", "trick", "hand", "card", "by_card", "code", "duty"),
    [
        (Regime.FOLLOW, "KS", "8S JH", "JH", False, "must-follow", "must follow spades"),
        (
            Regime.FORCEE,
            "9S",
            "10S 8S JH",
            "8S",
            False,
            "must-beat",
            "must follow spades and beat 9S",
        ),
        (
            Regime.FORCEE,
            "9S",
            "10S 8S JH",
            "JH",
            False,
            "must-beat",
            "must follow spades and beat 9S",
        ),
        (Regime.FORCEE, "9S", "10S 8S JH", "JH", True, "must-follow", "must follow spades"),
        (Regime.FORCEE, "9S", "10S 8S JH", "8S", True, "must-beat", "must beat 9S when able"),
        (Regime.FORCEE, "KS JH", "QH 8H 7D", "8H", False, "must-overtrump", "must overtrump JH"),
        (
            Regime.FORCEE,
            "QD",
            "KS JH 8H",
            "KS",
            False,
            "must-trump",
            "is void in diamonds: must trump",
        ),
        (
            Regime.FORCEE,
            "QD",
            "KS JH 8H",
            "KS",
            True,
            "must-trump",
            "is void in diamonds and must trump",
        ),
    ],
)
def test_explain_names_the_duty_of_the_legal_set(
    regime: Regime, trick: str, hand: str, card: str, by_card: bool, code: str, duty: str
) -> None:
    # `explain` words what `legal_cards` computed: the card is refused, and why.
    rules = TrickRules(regime, R1)
    cards = [parse_card(t) for t in trick.split()]
    c = parse_card(card)
    args = (rules, mask(hand), HEARTS, cards[0] // 13, mask_of(cards))
    assert not legal_cards(*args) >> c & 1
    assert explain(*args, c, by_card=by_card) == (code, duty)
