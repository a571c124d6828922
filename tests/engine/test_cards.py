"""Cards as ints and card sets as masks (referee/engine/cards.py): every text form of
TRANSCRIPT.md, refusals, masks and their text, and the rank orders of RULES.md 0.3."""

from __future__ import annotations

from typing import Any

import pytest

from tapis_cartes.referee.engine.cards import (
    ACE,
    CLUBS,
    DIAMONDS,
    FULL_DECK,
    HEARTS,
    JACK,
    KING,
    QUEEN,
    R1,
    R2,
    R3,
    RANK_NAMES,
    SPADES,
    SUIT_MASK,
    SUIT_NAMES,
    RankOrder,
    card,
    card_str,
    cards_of,
    deck_of_ranks,
    distinct_mask,
    iter_cards,
    mask_of,
    mask_str,
    parse_card,
    parse_cards,
    rank_of,
    suit_of,
)
from tapis_cartes.referee.engine.errors import InvalidAction, TapisError
from tests.cards import mask

TWO, SIX, SEVEN, EIGHT, NINE, TEN = 0, 4, 5, 6, 7, 8


# --- ids ----------------------------------------------------------------------------------


def test_card_ids_are_suit_major() -> None:
    assert (SPADES, HEARTS, DIAMONDS, CLUBS) == (0, 1, 2, 3)
    assert card(TWO, SPADES) == 0
    assert card(ACE, SPADES) == 12
    assert card(TWO, HEARTS) == 13
    assert card(ACE, CLUBS) == 51
    for c in range(52):
        assert card(rank_of(c), suit_of(c)) == c


def test_suit_masks_partition_the_full_deck() -> None:
    assert [m.bit_count() for m in SUIT_MASK] == [13] * 4
    assert SUIT_MASK[0] | SUIT_MASK[1] | SUIT_MASK[2] | SUIT_MASK[3] == FULL_DECK
    assert FULL_DECK.bit_count() == 52
    for s in range(4):
        for t in range(s + 1, 4):
            assert SUIT_MASK[s] & SUIT_MASK[t] == 0
        assert all(suit_of(c) == s for c in iter_cards(SUIT_MASK[s]))


# --- text forms ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rank", "suit", "canonical"),
    [
        ("QS", QUEEN, SPADES, "QS"),
        ("10H", TEN, HEARTS, "10H"),
        ("7C", SEVEN, CLUBS, "7C"),
        ("2D", TWO, DIAMONDS, "2D"),
        ("AS", ACE, SPADES, "AS"),
        ("JC", JACK, CLUBS, "JC"),
        ("KD", KING, DIAMONDS, "KD"),
        # `T` for ten
        ("TS", TEN, SPADES, "10S"),
        ("TH", TEN, HEARTS, "10H"),
        # French letters: V valet, D dame, R roi
        ("DD", QUEEN, DIAMONDS, "QD"),
        ("RC", KING, CLUBS, "KC"),
        ("VH", JACK, HEARTS, "JH"),
        ("VS", JACK, SPADES, "JS"),
        ("DS", QUEEN, SPADES, "QS"),
        ("RH", KING, HEARTS, "KH"),
        # suit symbols
        ("10♥", TEN, HEARTS, "10H"),
        ("D♠", QUEEN, SPADES, "QS"),
        ("A♦", ACE, DIAMONDS, "AD"),
        ("7♣", SEVEN, CLUBS, "7C"),
        ("K♠", KING, SPADES, "KS"),
        ("T♦", TEN, DIAMONDS, "10D"),
        ("V♣", JACK, CLUBS, "JC"),
        ("R♥", KING, HEARTS, "KH"),
    ],
)
def test_parse_every_accepted_form(text: str, rank: int, suit: int, canonical: str) -> None:
    c = parse_card(text)
    assert c == card(rank, suit)
    assert (rank_of(c), suit_of(c)) == (rank, suit)
    assert card_str(c) == canonical


def test_dd_is_the_queen_of_diamonds_not_a_diamond_d() -> None:
    # `D` is both a rank (dame) and a suit (diamonds): rank first, then suit.
    assert parse_card("DD") == card(QUEEN, DIAMONDS)
    assert parse_card("DS") == card(QUEEN, SPADES)
    assert parse_card("QD") == card(QUEEN, DIAMONDS)
    assert parse_card("10D") == card(TEN, DIAMONDS)


def test_output_is_always_the_first_form() -> None:
    for c in range(52):
        text = card_str(c)
        assert text == RANK_NAMES[rank_of(c)] + SUIT_NAMES[suit_of(c)]
        assert parse_card(text) == c
        # The output never uses T, the French letters or symbols.
        assert "T" not in text
        assert not any(ch in text for ch in "VR♠♥♦♣")
    assert card_str(parse_card("TS")) == "10S"
    assert [card_str(c) for c in parse_cards(["DD", "RC", "VH", "10♥", "D♠", "TS"])] == [
        "QD",
        "KC",
        "JH",
        "10H",
        "QS",
        "10S",
    ]


def test_every_card_in_every_form_parses_to_itself() -> None:
    rank_forms: dict[int, list[str]] = {r: [RANK_NAMES[r]] for r in range(13)}
    rank_forms[TEN].append("T")
    rank_forms[JACK].append("V")
    rank_forms[QUEEN].append("D")
    rank_forms[KING].append("R")
    suit_forms = {SPADES: "S♠", HEARTS: "H♥", DIAMONDS: "D♦", CLUBS: "C♣"}
    for c in range(52):
        for r in rank_forms[rank_of(c)]:
            for s in suit_forms[suit_of(c)]:
                assert parse_card(r + s) == c, r + s


def test_parse_cards_keeps_order_and_duplicates() -> None:
    ks, qs = card(KING, SPADES), card(QUEEN, SPADES)
    assert parse_cards(["KS", "QS", "KS"]) == [ks, qs, ks]
    assert parse_cards([]) == []


@pytest.mark.parametrize("junk", ["1X", "Q", "11S", "", "ZZ", "10", "QSS", "01H", "XS", "S"])
def test_junk_strings_are_refused_quoting_the_input(junk: str) -> None:
    with pytest.raises(InvalidAction) as info:
        parse_card(junk)
    assert repr(junk) in str(info.value)
    assert isinstance(info.value, TapisError)


@pytest.mark.parametrize("junk", [None, 5, 12.0, ["QS"], b"QS"])
def test_non_strings_are_refused_quoting_the_input(junk: Any) -> None:
    with pytest.raises(InvalidAction) as info:
        parse_card(junk)
    assert repr(junk) in str(info.value)


def test_parse_cards_refuses_a_bad_card_among_good_ones() -> None:
    with pytest.raises(InvalidAction, match="'1X'"):
        parse_cards(["QS", "1X"])


@pytest.mark.parametrize("text", ["1S", "1H"])
def test_one_is_not_an_ace(text: str) -> None:
    with pytest.raises(InvalidAction, match=repr(text)):
        parse_card(text)


# --- masks --------------------------------------------------------------------------------


def test_mask_of_and_iter_cards() -> None:
    cs = [parse_card(t) for t in ("QH", "2S", "AC", "10D")]
    m = mask_of(cs)
    assert m.bit_count() == 4
    assert list(iter_cards(m)) == sorted(cs)  # lowest id first
    assert cards_of(m) == sorted(cs)
    assert mask_of([]) == 0
    assert list(iter_cards(0)) == []
    assert mask_of(cs + cs) == m  # a set: duplicates collapse
    assert mask_of(iter_cards(FULL_DECK)) == FULL_DECK
    assert cards_of(FULL_DECK) == list(range(52))


def test_distinct_mask_refuses_a_card_twice_or_no_card() -> None:
    cs = [parse_card(t) for t in ("QH", "2S", "AC", "10D")]
    assert distinct_mask(bytes(cs)) == mask_of(cs)
    assert distinct_mask(bytes(range(52))) == FULL_DECK
    assert distinct_mask(b"") == 0
    assert distinct_mask(bytes(cs + cs[:1])) == -1  # a card twice
    assert distinct_mask(bytes([*cs, 52])) == -1  # no card
    assert distinct_mask(bytes([255])) == -1


def test_mask_str_orders_by_suit_then_strength() -> None:
    m = mask("7C AH 2S KS 10D QH 9S AS")
    # Suits ♠ ♥ ♦ ♣, strongest first (R3 by default: ace high).
    assert mask_str(m) == "AS KS 9S 2S AH QH 10D 7C"
    assert mask_str(m, R3) == mask_str(m)
    assert mask_str(0) == ""
    assert mask_str(mask("DD")) == "QD"


def test_mask_str_r1_puts_the_ace_between_ten_and_jack() -> None:
    m = mask("AS KS JS 10S 7S AH 9H QC")
    assert mask_str(m, R3) == "AS KS JS 10S 7S AH 9H QC"
    assert mask_str(m, R1) == "KS JS AS 10S 7S AH 9H QC"
    assert mask_str(m, R2) == "AS KS JS 10S 7S AH 9H QC"
    full_spades = SUIT_MASK[SPADES] & deck_of_ranks(range(SEVEN, 13))
    assert mask_str(full_spades, R1) == "KS QS JS AS 10S 9S 8S 7S"
    assert mask_str(full_spades, R2) == "AS KS QS JS 10S 9S 8S 7S"


# --- rank orders (RULES.md 0.3) -----------------------------------------------------------


def _low_to_high(order: RankOrder) -> list[str]:
    return [RANK_NAMES[r] for r in sorted(range(13), key=order.rank_strength.__getitem__)]


def test_rank_order_tables() -> None:
    # R1: 7 8 9 10 A J Q K, with 6 below 7 (and the lower ranks below it).
    assert _low_to_high(R1) == ["2", "3", "4", "5", "6", "7", "8", "9", "10", "A", "J", "Q", "K"]
    # R2 and R3: ace high.
    assert _low_to_high(R2) == list(RANK_NAMES)
    assert _low_to_high(R3) == list(RANK_NAMES)
    assert (R1.name, R2.name, R3.name) == ("R1", "R2", "R3")


def test_r1_ace_between_ten_and_jack_and_six_below_seven() -> None:
    s = R1.rank_strength
    assert s[TEN] < s[ACE] < s[JACK] < s[QUEEN] < s[KING]
    assert s[SIX] < s[SEVEN] < s[EIGHT] < s[NINE] < s[TEN]
    for order in (R2, R3):
        t = order.rank_strength
        assert t[TEN] < t[JACK] < t[QUEEN] < t[KING] < t[ACE]
        assert t[SIX] < t[SEVEN]


def test_strength_is_per_card_and_independent_of_suit() -> None:
    for order in (R1, R2, R3):
        for c in range(52):
            assert order.strength[c] == order.rank_strength[rank_of(c)]


def test_above_masks() -> None:
    assert R1.above[parse_card("AS")] == mask("JS QS KS")
    assert R1.above[parse_card("10H")] == mask("AH JH QH KH")
    assert R1.above[parse_card("KD")] == 0
    assert R1.above[parse_card("7C")] & mask("6C 5C 2C") == 0
    assert R1.above[parse_card("6C")] & mask("7C AC") == mask("7C AC")
    assert R2.above[parse_card("AS")] == 0
    assert R2.above[parse_card("QS")] == mask("KS AS")
    assert R3.above[parse_card("JH")] == mask("QH KH AH")
    # `above` never leaves the suit of its card.
    for order in (R1, R2, R3):
        for c in range(52):
            assert order.above[c] & ~SUIT_MASK[suit_of(c)] == 0
            assert order.above[c] >> c & 1 == 0


@pytest.mark.parametrize(
    ("order", "cards", "best"),
    [
        (R1, "AS 10S", "AS"),
        (R1, "AS JS", "JS"),
        (R1, "AH 10H 9H", "AH"),
        (R1, "KC AC", "KC"),
        (R1, "7D 6D", "7D"),
        (R1, "QD", "QD"),
        (R2, "AS JS", "AS"),
        (R2, "KH QH 7H", "KH"),
        (R3, "AC KC 2C", "AC"),
        (R3, "2D 3D", "3D"),
        (R3, "10C 9C", "10C"),
    ],
)
def test_rank_order_best(order: RankOrder, cards: str, best: str) -> None:
    assert order.best(mask(cards)) == parse_card(best)


def test_best_agrees_with_strength_on_every_suit_pattern_sample() -> None:
    for order in (R1, R2, R3):
        for s in range(4):
            for pattern in (1, 0x1FFF, 0b1010101010101, 0b0100000000000, 0b1000000001):
                m = pattern << (13 * s)
                expected = max(iter_cards(m), key=order.strength.__getitem__)
                assert order.best(m) == expected


# --- packs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lowest", "size"),
    [(NINE, 24), (SEVEN, 32), (SIX, 36), (TWO, 52)],
)
def test_deck_of_ranks_sizes(lowest: int, size: int) -> None:
    pack = deck_of_ranks(range(lowest, 13))
    assert pack.bit_count() == size
    for s in range(4):
        assert (pack & SUIT_MASK[s]).bit_count() == size // 4
    assert all(rank_of(c) >= lowest for c in iter_cards(pack))


def test_deck_of_ranks_full_and_nested() -> None:
    assert deck_of_ranks(range(13)) == FULL_DECK
    p24 = deck_of_ranks(range(NINE, 13))
    p32 = deck_of_ranks(range(SEVEN, 13))
    p36 = deck_of_ranks(range(SIX, 13))
    assert p24 & p32 == p24
    assert p32 & p36 == p32
    assert p36 & FULL_DECK == p36
    assert mask_str(p32 & SUIT_MASK[CLUBS]) == "AC KC QC JC 10C 9C 8C 7C"
    assert deck_of_ranks([]) == 0


@pytest.mark.parametrize(
    "text", ["qs", "Qs", "5♧", "Q♡", " 5C", "5C ", "\u00a05C", "5C\u3000", "\t5C", "5\ufe0fC",
             "QS\x85", "\u2003QS\x1c", "\ufe0fQS", "10\u2665\ufe0f\ufe0f"],
)  # fmt: skip
def test_a_card_in_a_form_the_contract_does_not_list_is_refused(text: str) -> None:
    """TRANSCRIPT.md lists the forms of a card and rejects anything else: lower case, the
    white suit symbols, spaces and controls around, a variation selector inside were
    taken."""
    with pytest.raises(InvalidAction, match="is not a card"):
        parse_card(text)


@pytest.mark.parametrize(
    ("text", "card"), [("QS", "QS"), ("TH", "10H"), ("VD", "JD"), ("D\u2665", "QH"),
                       ("R\u2663\ufe0f", "KC"), ("10\u2666", "10D")],
)  # fmt: skip
def test_every_form_the_contract_lists_is_taken(text: str, card: str) -> None:
    assert card_str(parse_card(text)) == card
