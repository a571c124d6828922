"""Cards as ints, card sets as int bitmasks.

A card is `suit * 13 + rank` with suits in the order ♠ ♥ ♦ ♣ (0..3) and ranks 2..A (0..12).
A set of cards is an int whose bit `c` is set when card `c` is in the set; the 24-, 32- and
36-card packs are masks over the same 52 ids. Rank *strength* is a per-game table
(`RankOrder`), not a branch: within a suit, `order.above[c]` is the mask of the cards of that
suit that beat `c`.

Text forms (TRANSCRIPT.md): rank then suit; ranks `2`-`10`, `J`, `Q`, `K`, `A`, also `T` for
ten and the French `V` (valet), `D` (dame), `R` (roi); suits `S H D C` or `♠ ♥ ♦ ♣`. Output
always uses `QS`, `10H`, `7C`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from mypy_extensions import i64

from tapis_cartes.referee.engine.errors import InvalidAction, quoted

__all__ = [
    "ACE",
    "CLUBS",
    "DIAMONDS",
    "FULL_DECK",
    "HEARTS",
    "JACK",
    "KING",
    "QUEEN",
    "R1",
    "R2",
    "R3",
    "RANK_NAMES",
    "SPADES",
    "SUIT_MASK",
    "SUIT_NAMES",
    "SUIT_WORDS",
    "RankOrder",
    "card",
    "card_str",
    "cards_of",
    "count_cards",
    "deck_of_ranks",
    "distinct_mask",
    "iter_cards",
    "mask_of",
    "mask_str",
    "parse_card",
    "parse_cards",
    "rank_of",
    "suit_mask",
    "suit_of",
]

# Module constants are Final: compiled code reads them as C values, not from the module's dict.
SPADES: Final = 0
HEARTS: Final = 1
DIAMONDS: Final = 2
CLUBS: Final = 3
SUIT_NAMES: Final = ("S", "H", "D", "C")
SUIT_SYMBOLS: Final = ("♠", "♥", "♦", "♣")
SUIT_WORDS: Final = ("spades", "hearts", "diamonds", "clubs")
RANK_NAMES: Final = ("2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K", "A")
TWO: Final = 0
SIX: Final = 4
SEVEN: Final = 5
TEN: Final = 8
JACK: Final = 9
QUEEN: Final = 10
KING: Final = 11
ACE: Final = 12


def suit_mask(s: i64) -> i64:
    """The mask of suit `s`'s 13 cards (s in 0..3; `SUIT_MASK[s]`), in native ints."""
    mask: i64 = 0x1FFF  # (not `0x1FFF << n`: mypyc makes that a 32-bit shift for an i64)
    mask <<= 13 * s
    return mask


SUIT_MASK: Final[tuple[int, ...]] = tuple(suit_mask(s) for s in range(4))
FULL_DECK: Final = (1 << 52) - 1

_RANK_INPUT = {name: i for i, name in enumerate(RANK_NAMES)} | {
    "T": TEN,
    "V": JACK,
    "D": QUEEN,
    "R": KING,
}
_SUIT_INPUT = {
    "S": SPADES,
    "H": HEARTS,
    "D": DIAMONDS,
    "C": CLUBS,
    "♠": SPADES,
    "♥": HEARTS,
    "♦": DIAMONDS,
    "♣": CLUBS,
}
_SYMBOLS: Final = "♠♥♦♣"
_CARD_STR: Final = tuple(RANK_NAMES[c % 13] + SUIT_NAMES[c // 13] for c in range(52))


def card(rank: int, suit: int) -> int:
    """The card id of a rank (0 = two .. 12 = ace) and a suit (0..3)."""
    return suit * 13 + rank


def suit_of(c: int) -> int:
    return c // 13


def rank_of(c: int) -> int:
    return c % 13


def card_str(c: int) -> str:
    """`QS`, `10H`: the output form of a card (`card#60` for an id that is no card)."""
    return _CARD_STR[c] if 0 <= c < 52 else f"card#{quoted(c)}"


def parse_card(text: object) -> int:
    """Parse one card in a form TRANSCRIPT.md accepts (rank then suit: `2`-`10`, `J`, `Q`,
    `K`, `A`, or `T`, `V`, `D`, `R`; `S`, `H`, `D`, `C` or ♠ ♥ ♦ ♣, a symbol maybe in its
    emoji presentation, ♥ followed by U+FE0F); raise `InvalidAction` otherwise: the contract
    rejects anything else (lower case, spaces, other symbols), and a person's input is made
    into this form by the program reading it (`tapis play`)."""
    if not isinstance(text, str):
        raise InvalidAction(f"a card must be a string such as 'QS', not {quoted(text)}")
    s = text[:-1] if text.endswith("\ufe0f") and text[-2:-1] in _SYMBOLS else text
    suit = _SUIT_INPUT.get(s[-1:])
    rank = _RANK_INPUT.get(s[:-1])
    if suit is None or rank is None:
        raise InvalidAction(
            f"{quoted(text)} is not a card (rank then suit, e.g. 'QS', '10H', 'D♥')"
        )
    return card(rank, suit)


def parse_cards(texts: Iterable[object]) -> list[int]:
    """Parse several cards (order kept, duplicates kept: callers check them)."""
    return [parse_card(t) for t in texts]


def mask_of(cards: Iterable[int]) -> int:
    m = 0
    for c in cards:
        m |= 1 << c
    return m


def distinct_mask(cards: bytes) -> int:
    """The mask of `cards` (one card id a byte), or -1 when one is no card (52 or more) or
    appears twice: one pass of native code (a record's pack of 52 cards, checked once a
    hand)."""
    mask: i64 = 0
    for k in range(len(cards)):  # (indexed: iterating bytes makes an int object a byte)
        c = cards[k]
        if c >= 52:
            return -1
        bit: i64 = 1
        bit <<= c  # (not `1 << c`: mypyc makes that a 32-bit shift for an i64)
        if mask & bit:
            return -1
        mask |= bit
    return mask


def count_cards(mask: int) -> int:
    """How many cards a mask holds: `mask.bit_count()`, in native code for a mask of the 52
    cards (compiled, `int.bit_count` is a call of a Python method)."""
    if not 0 <= mask <= FULL_DECK:
        return mask.bit_count()
    # 52 bits: each step below stays within 64 bits, and each constant within 62 (compiled,
    # a larger one is a Python int, converted at each use).
    m: i64 = mask
    m -= m >> 1 & 0x0555555555555555
    m = (m & 0x3333333333333333) + (m >> 2 & 0x3333333333333333)
    m = (m + (m >> 4)) & 0x0F0F0F0F0F0F0F0F
    m += m >> 8
    m += m >> 16
    m += m >> 32
    return m & 0x7F


def iter_cards(mask: int) -> Iterator[int]:
    """The cards of a mask, lowest id first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def cards_of(mask: int) -> list[int]:
    return list(iter_cards(mask))


def mask_str(mask: int, order: RankOrder | None = None) -> str:
    """Cards of a mask as text, by suit ♠ ♥ ♦ ♣ and, within a suit, strongest first;
    `InvalidAction` for an int that is no set of cards (negative: its bits never end)."""
    if not 0 <= mask < 1 << 52:
        raise InvalidAction(f"{quoted(mask)} is not a set of cards (a mask of 52 bits)")
    strength = (order or R3).strength
    cs = sorted(iter_cards(mask), key=lambda c: (c // 13, -strength[c]))
    return " ".join(_CARD_STR[c] for c in cs)


def deck_of_ranks(ranks: Iterable[int]) -> int:
    """The pack made of these ranks in every suit."""
    m = 0
    for r in ranks:
        for s in range(4):
            m |= 1 << card(r, s)
    return m


@dataclass(frozen=True)
class RankOrder:
    """A rank order (RULES.md 0.3): `strength[c]` orders cards of one suit, `above[c]` is
    the mask of same-suit cards stronger than `c`, `best(mask)` the strongest card of a
    one-suit mask."""

    name: str
    rank_strength: tuple[int, ...]  # by rank index 0..12
    strength: tuple[int, ...]  # by card id 0..51
    above: tuple[int, ...]  # by card id 0..51
    best13: tuple[int, ...]  # by 13-bit pattern of one suit: rank index of its strongest

    @classmethod
    def from_ranks(cls, name: str, low_to_high: tuple[int, ...]) -> RankOrder:
        rank_strength = tuple(low_to_high.index(r) for r in range(13))
        strength = tuple(rank_strength[c % 13] for c in range(52))
        above = tuple(
            sum(
                1 << d
                for d in range(13 * (c // 13), 13 * (c // 13) + 13)
                if strength[d] > strength[c]
            )
            for c in range(52)
        )
        by_strength = sorted(range(13), key=rank_strength.__getitem__, reverse=True)
        best13 = tuple(next((r for r in by_strength if p >> r & 1), -1) for p in range(1 << 13))
        return cls(name, rank_strength, strength, above, best13)

    def best(self, mask: int) -> int:
        """The strongest card of a non-empty mask of cards of one suit."""
        base = (mask.bit_length() - 1) // 13 * 13
        return base + self.best13[mask >> base & 0x1FFF]

    def best_in(self, mask: i64, suit: i64) -> i64:
        """The strongest card of `mask` in `suit` (0..3), which it holds (`best` when the suit
        is known: native ints, no `bit_length`)."""
        base: i64 = 13 * suit
        return base + self.best13[mask >> base & 0x1FFF]


# RULES.md 0.3. R1 "Triomphe order": the ace between the ten and the jack.
R1 = RankOrder.from_ranks("R1", (TWO, 1, 2, 3, SIX, SEVEN, 6, 7, TEN, ACE, JACK, QUEEN, KING))
# R2 "Piquet order" and R3 "ace high" (full pack): the natural order of the ids.
R2 = RankOrder.from_ranks("R2", tuple(range(13)))
R3 = RankOrder.from_ranks("R3", tuple(range(13)))
