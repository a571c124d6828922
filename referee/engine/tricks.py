"""The trick: legal sets and the winner, written once for all five games.

RULES.md 0.4 (winner), 0.5 (notation), 2.1 (`LEGAL_IMP1725`, of which `LEGAL_IMP000` is the
two-player case), 3.2 (`LEGAL_FORCEE`, `LEGAL_FORCAT`, `LEGAL_PLAISANT`); Dame de Pique and
Napoléon use plain `FOLLOW` (follow suit, else any card), Dame de Pique adding its own
first-trick and hearts restrictions on top.

A trick in progress is described by ints only: the led suit `led` (-1 before the first card)
and the mask of the cards on it. `bestL` and `bestT` of the notation are computed from that
mask by the rank order, so everything here is int arithmetic and no object is built per card.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from mypy_extensions import i64

from tapis_cartes.referee.engine.cards import (
    SUIT_MASK,
    SUIT_WORDS,
    RankOrder,
    card_str,
    suit_mask,
)

__all__ = [
    "PlayedTrick",
    "Regime",
    "Trick",
    "TrickRules",
    "explain",
    "follow",
    "legal_cards",
    "winning_card",
]


class Regime(Enum):
    """Which obligation a follower is under (the legal-set algorithm)."""

    FOLLOW = "follow"  # follow suit if able, else any card (DP 4.1, NAP 5.1)
    FORCEE = "forcee"  # TRI.FORCEE (3.2); with two players also LEGAL_IMP000 (1.1)
    FORCAT = "forcat"  # TRI.FORCAT (3.2)
    PLAISANT = "plaisant"  # TRI.PLAISANT (3.2): the last to play is under FORCAT
    IMPERIALE_1725 = "imperiale-1725"  # IMP-A.PLAY (2.1): LEGAL_IMP1725


@dataclass(frozen=True, slots=True)
class TrickRules:
    """The parameters of the shared legal-set function."""

    regime: Regime
    order: RankOrder
    undertrump_duty: bool = False  # IMP-A option (2.3.8): cannot overtrump -> must undertrump
    force_after_ruff: bool = False  # IMP-A option (2.3.7): beat the led suit even when ruffed


def follow(hand: i64, led: i64) -> i64:
    """FOLLOW: the cards of the led suit if the hand has any, else the whole hand."""
    return (hand & suit_mask(led)) or hand


def winning_card(order: RankOrder, trump: i64, led: i64, mask: i64) -> i64:
    """CARD.WIN (0.4): the highest trump on the trick if there is one, else the highest card
    of the led suit. `mask` holds the cards played; `trump` is a suit or -1."""
    if trump >= 0 and mask & suit_mask(trump):
        return order.best_in(mask, trump)
    return order.best_in(mask, led)


def legal_cards(
    rules: TrickRules, hand: int, trump: int, led: int, mask: int, is_last: bool = False
) -> int:
    """The cards of `hand` that may be played to a trick whose led suit is `led` (-1: this
    seat leads) and whose cards so far are `mask`; never empty when `hand` is not.
    `is_last` says whether this seat plays last to the trick (it matters under PLAISANT)."""
    if led < 0:
        return hand
    regime = rules.regime
    if regime is Regime.FOLLOW or (regime is Regime.PLAISANT and not is_last):
        return follow(hand, led)  # PLAISANT: others only follow suit (trump led: any trump)
    if regime is Regime.PLAISANT:
        regime = Regime.FORCAT
    hl = hand & SUIT_MASK[led]
    order = rules.order
    above = order.above
    trumps_on = mask & SUIT_MASK[trump] if trump >= 0 else 0
    ht = hand & SUIT_MASK[trump] if trump >= 0 else 0
    if led == trump:
        # Trump led: go above the best trump if you can, else any trump, else free.
        if ht:
            return (ht & above[order.best(trumps_on)]) or ht
        return hand
    ruffed = trumps_on != 0
    if regime is Regime.FORCEE:
        if not ruffed:
            if hl:
                # Follow, and beat the best card of the led suit if you can.
                return (hl & above[order.best(mask & SUIT_MASK[led])]) or hl
            return ht or hand  # void: must trump (any trump)
        if hl:
            return hl  # ruffed: follow with any card of the led suit
        if ht:
            return (ht & above[order.best(trumps_on)]) or ht  # overtrump, else undertrump
        return hand
    if regime is Regime.FORCAT:
        if not ruffed:
            up = hl & above[order.best(mask & SUIT_MASK[led])]
            if up:
                return up  # beat in the led suit if possible
            return ht or hl or hand  # otherwise trump, even holding lower cards of the suit
        up = ht & above[order.best(trumps_on)]
        if up:
            return up  # overtrump, even holding cards of the led suit
        return hl or hand  # else follow, else free (may undertrump or discard)
    assert regime is Regime.IMPERIALE_1725
    if hl:
        if ruffed and not rules.force_after_ruff:
            return hl  # a trump already lies on the trick: any card of the led suit
        return (hl & above[order.best(mask & SUIT_MASK[led])]) or hl  # follow and force
    if ht:
        if not ruffed:
            return ht  # must trump
        up = ht & above[order.best(trumps_on)]
        if up:
            return up  # must overtrump
        return ht if rules.undertrump_duty else hand  # cannot overtrump: free by default
    return hand


def explain(
    rules: TrickRules,
    hand: int,
    trump: int,
    led: int,
    mask: int,
    c: int,
    is_last: bool = False,
    by_card: bool = False,
) -> tuple[str, str]:
    """Why card `c` of `hand` may not be played where `legal_cards` (same arguments) leaves
    it out: `(code, duty)`, the duty worded for "seat N ..." (`must follow spades`). The
    duty is read from the legal set `legal_cards` computed, never decided again. `by_card`
    names the duty the card itself breaks, its suit or its height (L'Impériale's wording);
    by default it names what the legal set demands (La Triomphe's, Dame de Pique's and
    Napoléon's)."""
    legal = legal_cards(rules, hand, trump, led, mask, is_last)
    assert led >= 0 and hand >> c & 1 and not legal >> c & 1
    order = rules.order
    lead_suit = SUIT_MASK[led]
    word = SUIT_WORDS[led]
    trumps = SUIT_MASK[trump] if trump >= 0 else 0
    trumps_on = mask & trumps
    if by_card:
        if legal & lead_suit and led != trump:
            if c // 13 != led:
                return "must-follow", f"must follow {word}"
            return "must-beat", f"must beat {card_str(order.best(mask & lead_suit))} when able"
        # The legal set is trumps: trump led, or void in the led suit.
        if c // 13 != trump:
            if led == trump:
                return "must-follow", f"must follow {word} (trump led)"
            if trumps_on and legal & order.above[order.best(trumps_on)]:
                return "must-overtrump", f"is void in {word} and must overtrump"
            return "must-trump", f"is void in {word} and must trump"
        code = "must-beat" if led == trump else "must-overtrump"
        return code, f"must play a trump above {card_str(order.best(trumps_on))} when able"
    held_led = hand & lead_suit
    code, why = "must-play", "must play one of the cards the regime allows"
    if led == trump:
        if legal == held_led:
            code, why = "must-follow", f"must follow {word} (trumps led)"
        else:
            code, why = "must-beat", f"must play a trump above {card_str(order.best(trumps_on))}"
    elif not legal & ~lead_suit:
        if legal == held_led:
            code, why = "must-follow", f"must follow {word}"
        else:
            best = order.best(mask & lead_suit)
            code, why = "must-beat", f"must follow {word} and beat {card_str(best)}"
    elif not legal & ~trumps:
        if not trumps_on:
            code = "must-trump"
            if held_led:
                best = order.best(mask & lead_suit)
                why = f"cannot beat {card_str(best)} in {word}: must trump"
            else:
                why = f"is void in {word}: must trump"
        else:
            best = order.best(trumps_on)
            if legal & order.above[best] == legal:
                code, why = "must-overtrump", f"must overtrump {card_str(best)}"
            else:
                code, why = "must-undertrump", f"cannot overtrump {card_str(best)}: must undertrump"
    if rules.regime is Regime.PLAISANT and is_last:
        why += " (the last to play is under forçat)"
    return code, why


class PlayedTrick:
    """A completed trick: its leader, its cards in playing order, the winner's seat."""

    __slots__ = ("cards", "leader", "players", "winner")

    def __init__(self, leader: int, cards: list[int], winner: int, players: int) -> None:
        self.leader = leader
        self.cards = cards
        self.winner = winner
        self.players = players

    def __repr__(self) -> str:
        return f"PlayedTrick({self.leader}, {self.cards}, winner={self.winner})"

    @property
    def seats(self) -> tuple[int, ...]:
        """The seat of each card (play goes round the table from the leader)."""
        return tuple((self.leader + i) % self.players for i in range(len(self.cards)))


class Trick:
    """One trick: who played what, in order. Cheap to build; games keep completed tricks."""

    __slots__ = ("cards", "led", "mask", "seats", "trump", "winner")

    def __init__(self, trump: int) -> None:
        self.trump = trump  # suit, or -1 for no trump
        self.seats: list[int] = []
        self.cards: list[int] = []
        self.led = -1
        self.mask = 0
        self.winner = -1  # set by `close`

    def play(self, seat: int, c: int) -> None:
        if self.led < 0:
            self.led = c // 13
        self.seats.append(seat)
        self.cards.append(c)
        self.mask |= 1 << c

    def legal(self, rules: TrickRules, hand: int, is_last: bool = False) -> int:
        return legal_cards(rules, hand, self.trump, self.led, self.mask, is_last)

    def close(self, order: RankOrder) -> int:
        """Decide the winner (CARD.WIN) and return its seat."""
        best = winning_card(order, self.trump, self.led, self.mask)
        self.winner = self.seats[self.cards.index(best)]
        return self.winner

    def __len__(self) -> int:
        return len(self.cards)
