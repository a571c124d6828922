"""Napoléon (Nap): RULES.md section 5, seed 004 (`seeds/004_8cf0256b00796c14.txt`).

Three to ten players, each for himself; a 52-card pack, or with `short_deck` the top
`players + 3` ranks of each suit (`NAP.DECK`); ranks ace high (R3), clockwise. Five cards
each, dealt one at a time from the dealer's left; the rest of the pack is not used. One round
of bidding from the dealer's left, ending with the dealer: pass, or a contract strictly above
the highest so far, in the order Deux, Trois, Misère, Quatre, Nap, Wellington (only over Nap),
Blücher (only over Wellington) (`NAP.BID`). The declarer leads any card and its suit is trump
for the deal (`NAP.TRUMP`); follow suit if able, else any card, with no duty to trump or beat
(`NAP.FOLLOW`); the highest trump, else the highest card of the led suit, wins (`CARD.WIN`).
A contract is made with at least its number of tricks (Misère: none). Seed points: made, the
declarer scores the value (2, 3, 3, 4, 5, 10, 20); failed, each opponent scores it
(`NAP.SCORE`). The match is a fixed number of deals; the highest total wins, ties share
(`NAP.END`).

Deliberate choices (RULES.md 5.2, 6 and 7):
- `NAP.BID`: one round only (5.2.2), the lowest contract is Deux (5.2.7). Every seat speaks
  once, even after Blücher: the seats after it may only pass (example N-6, last row).
- `NAP.BID`, all pass: the cards are thrown in with no score (a `thrown-in` note); the next
  dealer deals (5.2.3; option `allpass_redeal_same_dealer`), and the thrown-in deal counts as
  one of the match's `deals` (7).
- `NAP.TRUMP`: Misère is played without trump (5.2.1; option `misere_trump = first_card`
  applies the seed's general sentence). Wellington and Blücher carry no extra lead or naming
  condition (5.2.5).
- `NAP.SCORE`: extra tricks are worth nothing; one line per seat that scores, none for a seat
  that scores 0. `scoring = stakes` (5.2.4, 7): zero-sum at the same values won or lost; made,
  the declarer +v × (players − 1) and each opponent −v; failed, the reverse.
- `stop_when_decided` (5.2.11): the hand stops after the trick that settles the contract,
  with the score a full play-out would give.
- `NAP.END` (5.1, 5.2.6, 7): the match ends after hand number `deals` (default
  `2 × players`), counted from the first hand number of the match (`Start`).
- `NAP.DECK` (5.2.9, 5.2.10, 7): short pack `4 × (n+3)`; the deal from a whole pack is one card
  at a time; the dealer passes to the left (clockwise) after every deal. This id also covers
  the dealer rotation and the deal checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

from mypy_extensions import i64

from tapis_cartes.referee.engine.actions import BID, BID_WORDS, PLAY, encode
from tapis_cartes.referee.engine.base import (
    Deal,
    Hand,
    HandResult,
    Match,
    PhaseEnum,
    PhaseRule,
    Rules,
    Start,
    check_cards,
    check_deck,
)
from tapis_cartes.referee.engine.cards import (
    FULL_DECK,
    R3,
    RANK_NAMES,
    SUIT_WORDS,
    deck_of_ranks,
)
from tapis_cartes.referee.engine.errors import DealError, IllegalAction, RulesError
from tapis_cartes.referee.engine.options import (
    GameOptions,
    MisereTrump,
    NapoleonOptions,
    NapoleonScoring,
)
from tapis_cartes.referee.engine.tricks import Regime, TrickRules, explain, legal_cards

__all__ = [
    "ALIASES",
    "FIXED_PLAYERS",
    "NAME",
    "RULESETS",
    "SEED",
    "TITLE",
    "UNITS",
    "NapoleonHand",
    "NapoleonMatch",
    "NapoleonOptions",
    "Phase",
    "pack_of",
]

# The contracts, as payloads of a BID action (actions.BID_WORDS), lowest first (NAP.BID).
BID_PASS, BID_TWO, BID_THREE, BID_MISERE, BID_FOUR, BID_NAP, BID_WELLINGTON, BID_BLUCHER = range(8)
_VALUES = (0, 2, 3, 3, 4, 5, 10, 20)  # NAP.SCORE 5.1
_GOALS = (0, 2, 3, 0, 4, 5, 5, 5)  # tricks to take at least (Misère: take none)
HAND_SIZE = 5
_TRICK_RULES = TrickRules(Regime.FOLLOW, R3)  # NAP.FOLLOW: follow suit, else any card


def _bids_over(highest: int) -> tuple[int, ...]:
    # NAP.BID: strictly above the highest bid; Wellington only over Nap, Blücher only over
    # Wellington; pass is always legal.
    if highest < BID_NAP:
        higher = range(highest + 1, BID_NAP + 1)
    elif highest < BID_BLUCHER:
        higher = range(highest + 1, highest + 2)
    else:
        higher = range(0)
    return (encode(BID, BID_PASS), *(encode(BID, b) for b in higher))


_LEGAL_BIDS = tuple(_bids_over(h) for h in range(8))


def pack_of(players: int, short_deck: bool) -> int:
    """NAP.DECK: the pack as a mask: 52 cards, or the top `players + 3` ranks of each suit."""
    if not short_deck:
        return FULL_DECK
    return deck_of_ranks(range(13 - (players + 3), 13))


def _pack_name(players: int, short_deck: bool) -> str:
    if not short_deck:
        return "the 52-card pack"
    lowest = RANK_NAMES[13 - (players + 3)]
    return f"the {4 * (players + 3)}-card short pack ({lowest} and up)"


class Phase(PhaseEnum):
    BID = "bid"
    PLAY = "play"
    OVER = "over"


class NapoleonHand(Hand):
    """One deal: the bidding round, then five tricks (or fewer with `stop_when_decided`)."""

    def __init__(self, match: Match, number: int, dealer: int, deal: Deal) -> None:
        super().__init__(match, number, dealer, deal)
        opts = match.rules.options
        assert isinstance(opts, NapoleonOptions)
        self.opts = opts
        self.phases = PHASES
        self.play_rule = "NAP.FOLLOW"
        n = self.players
        self.bids: list[tuple[int, int]] = []  # (seat, contract) in bidding order
        self.highest = BID_PASS
        self.declarer = -1
        self.contract = BID_PASS
        self.won = [0] * n  # tricks won per seat
        self.thrown_in = False
        self.turn = (dealer + 1) % n  # NAP.BID: the dealer's left speaks first
        self._phase = Phase.BID

    @property
    def phase(self) -> Phase:
        assert isinstance(self._phase, Phase)
        return self._phase

    # -- the bidding (NAP.BID) ------------------------------------------------------------

    def _bid_legal(self, seat: int) -> list[int]:
        return list(_LEGAL_BIDS[self.highest]) if seat == self.turn else []

    def _bid_refusal(self, seat: int, action: int) -> IllegalAction | None:
        kind = action & 7
        if kind == PLAY:
            why = "every seat bids or passes, in turn, before the first card"
            return self.illegal("bidding-first", seat, action, why, "NAP.BID")
        if kind != BID:
            return self._wrong_action(seat, action)
        if seat != self.turn:
            return self.not_your_turn(seat, action, "NAP.BID")
        if action in _LEGAL_BIDS[self.highest]:
            return None
        # NAP.BID: strictly above the highest bid; Wellington over Nap, Blücher over Wellington.
        bid, highest = action >> 3, self.highest
        by = f"{BID_WORDS[highest]} (seat {self.declarer})" if highest else "none"
        if highest == BID_BLUCHER:
            code, why = "bid-too-low", "nothing ranks above blucher: only pass is left"
        elif bid <= highest:
            code = "bid-too-low"
            why = f"{BID_WORDS[bid]} does not rank above the highest bid, {by}"
        elif bid == BID_WELLINGTON:
            code = "wellington-needs-nap"
            why = f"wellington may only be bid over nap; the highest bid is {by}"
        else:
            assert bid == BID_BLUCHER
            code = "blucher-needs-wellington"
            why = f"blucher may only be bid over wellington; the highest bid is {by}"
        return self.illegal(code, seat, action, why, "NAP.BID")

    def _bid_apply(self, seat: int, action: int) -> None:
        bid = action >> 3
        self.bids.append((seat, bid))
        if bid != BID_PASS:
            self.highest = bid
            self.declarer = seat
        n = self.players
        if seat != self.dealer:
            self.turn = (seat + 1) % n
            return
        # NAP.BID: the round ends with the dealer.
        if self.declarer < 0:
            self._phase = Phase.OVER
            self.over = True
            self.thrown_in = True
            self.note("thrown-in", "every seat passed: the cards are thrown in", self.dealer)
            return
        self.contract = self.highest
        self._phase = Phase.PLAY
        self.turn = self.declarer  # NAP.TRUMP: the declarer leads trick 1
        self.note(
            "contract", f"seat {self.declarer} declares {BID_WORDS[self.contract]}", self.declarer
        )

    def _wrong_action(self, seat: int, action: int) -> IllegalAction:
        why = "Napoléon has only bid and play"
        return self.illegal("wrong-action", seat, action, why, "NAP.BID")

    # -- the card play (the base's loop, with these hooks) --------------------------------

    def legal_mask(self, hand: i64, led: i64, mask: i64, count: i64) -> i64:
        return legal_cards(_TRICK_RULES, hand, self.trump, led, mask)  # NAP.FOLLOW

    def _turn_rule(self) -> str:
        return "NAP.TRUMP" if self.trick_number == 1 and self.led < 0 else "NAP.FOLLOW"

    def _not_a_card(self, seat: int, action: int) -> IllegalAction | None:
        if action & 7 == BID:
            why = "the bidding round is over"
            return self.illegal("bidding-over", seat, action, why, "NAP.BID")
        return self._wrong_action(seat, action)

    def _why_not(self, seat: int, c: int, hand: int, legal: int) -> tuple[str, str, str]:
        code, duty = explain(_TRICK_RULES, hand, self.trump, self.led, self.mask, c)
        return code, f"seat {seat} {duty}", "NAP.FOLLOW"

    def _first_lead(self, seat: int, c: int) -> None:
        # NAP.TRUMP: the suit of the declarer's first card is trump, except in Misère without
        # trump (5.2.1).
        if self.contract == BID_MISERE and self.opts.misere_trump is MisereTrump.NONE:
            text = "misere is played without trump"
        else:
            self.trump = c // 13
            text = f"trump is {SUIT_WORDS[self.trump]}"
        self.note("trump", text, seat)

    def _trick_end(self, winner: int, best: int, led: int, mask: int) -> bool:
        self.won[winner] += 1
        last = self.trick_number == HAND_SIZE
        if not last and not (self.opts.stop_when_decided and self._is_decided()):
            return False
        if not last:
            # stop_when_decided (5.2.11): the remaining tricks cannot change the score.
            self.note(
                "decided",
                f"{BID_WORDS[self.contract]} is settled after trick {self.trick_number}",
                self.declarer,
            )
        self._score()
        return True

    # -- the result -----------------------------------------------------------------------

    def _is_decided(self) -> bool:
        """Whether the contract's result is settled whatever the remaining tricks give."""
        won = self.won[self.declarer]
        left = HAND_SIZE - self.trick_number
        if self.contract == BID_MISERE:
            return won > 0 or left == 0
        goal = _GOALS[self.contract]
        return won >= goal or won + left < goal

    def _score(self) -> None:
        # NAP.SCORE: the value of the contract to the declarer if made, else to each opponent
        # (seed points); or paid between the declarer and each opponent (stakes).
        self._phase = Phase.OVER
        self.over = True
        declarer, contract, n = self.declarer, self.contract, self.players
        won = self.won[declarer]
        made = won == 0 if contract == BID_MISERE else won >= _GOALS[contract]
        value = _VALUES[contract]
        kind = "contract-made" if made else "contract-failed"
        plural = "" if won == 1 else "s"
        note = f"{BID_WORDS[contract]} {'made' if made else 'failed'}: seat {declarer} took {won}"
        note += f" trick{plural}"
        opponents = [
            s % n for s in range(self.dealer + 1, self.dealer + 1 + n) if s % n != declarer
        ]
        if self.opts.scoring is NapoleonScoring.STAKES:
            sign = 1 if made else -1
            self.score(declarer, kind, (sign * value * (n - 1),), "NAP.SCORE", note)
            for s in opponents:
                self.score(s, kind, (-sign * value,), "NAP.SCORE", note)
        elif made:
            self.score(declarer, kind, (value,), "NAP.SCORE", note)
        else:
            for s in opponents:
                self.score(s, kind, (value,), "NAP.SCORE", note)

    # -- views ----------------------------------------------------------------------------

    def describe(self) -> list[str]:
        if self.thrown_in:
            return ["everybody passed: the deal is thrown in"]
        if self.declarer < 0:
            return []
        trump = "no trump" if self.trump < 0 else f"trump {SUIT_WORDS[self.trump]}"
        if self.trick_number == 1 and not self.cards and self.trump < 0:
            trump = "trump set by the first card"
        return [f"contract: {BID_WORDS[self.contract]} by seat {self.declarer}, {trump}"]

    def _public(self, seat: int | None) -> dict[str, Any]:
        return {
            "bids": tuple((s, BID_WORDS[b]) for s, b in self.bids),
            "contract": BID_WORDS[self.contract] if self.contract else None,
            "declarer": self.declarer if self._phase is not Phase.BID else -1,
            "highest_bid": BID_WORDS[self.highest] if self.highest else None,
            "thrown_in": self.thrown_in,
            "trick_number": self.trick_number,
            "tricks_won": tuple(self.won),
        }


PHASES: dict[Enum, PhaseRule] = {
    Phase.BID: PhaseRule(
        Hand._turn_to_act,
        NapoleonHand._bid_legal,
        NapoleonHand._bid_refusal,
        NapoleonHand._bid_apply,
    ),
    Phase.PLAY: PhaseRule(
        Hand._turn_to_act, Hand._play_legal, Hand._play_refusal, Hand._play_apply, plays=True
    ),
}


class NapoleonMatch(Match):
    """A match of Napoléon: a fixed number of deals, thrown-in deals included."""

    def __init__(self, rules: Rules, start: Start | None = None, log_events: bool = True) -> None:
        super().__init__(rules, start, log_events)
        self.deal_rule = "NAP.DECK"
        opts = rules.options
        assert isinstance(opts, NapoleonOptions)
        self.opts = opts
        self.deals = opts.effective_deals
        self.pack = pack_of(self.players, opts.short_deck)
        self.pack_name = _pack_name(self.players, opts.short_deck)
        if self.first_hand_number > self.deals:
            raise RulesError(
                f"the match starts at hand {self.first_hand_number} but ends after hand "
                f"{self.deals} (option 'deals')",
                key="deals",
            )

    def _new_hand(self, number: int, dealer: int, deal: Deal) -> Hand:
        return NapoleonHand(self, number, dealer, deal)

    def _check_deal(self, deal: Deal) -> None:
        if deal.retourne >= 0 or deal.talon:
            raise DealError(
                "deal-shape",
                "deal: Napoléon has no retourne and no talon: the undealt cards are not used",
                "NAP.DECK",
            )
        check_cards(deal, self.pack, HAND_SIZE, self.players, "NAP.DECK", self.pack_name)

    def deal_deck(self, dealer: int, deck: Sequence[int]) -> Deal:
        """RULES.md 7: one card at a time, 5 each, from the seat after the dealer; the rest of
        the pack is not dealt. `deck` must be the whole pack (52 cards, or the short pack)."""
        n = self.players
        self._check_dealer(dealer)
        check_deck(deck, self.pack, "NAP.DECK", self.pack_name)
        hands = [0] * n
        for i in range(HAND_SIZE * n):
            hands[(dealer + 1 + i) % n] |= 1 << deck[i]
        return Deal(tuple(hands))

    def _next_dealer(self, previous: HandResult) -> int:
        # RULES.md 7: the seat after the dealer; the same dealer after a thrown-in deal with
        # `allpass_redeal_same_dealer`.
        hand = previous.hand
        if (
            self.opts.allpass_redeal_same_dealer
            and isinstance(hand, NapoleonHand)
            and hand.thrown_in
        ):
            return previous.dealer
        return (previous.dealer + 1) % self.players

    def _end_after_hand(self) -> None:
        # NAP.END: the match ends after hand number `deals` (thrown-in deals count).
        if self.results[-1].number >= self.deals:
            self.finished = True
            self.end_reason = f"{self.deals} deals played"
            self.winners = self._leaders(range(self.players))


# The registry entry (registry.py builds the GameSpec from these: this module does not
# import the registry, which imports it).
NAME = "napoleon"
TITLE = "Napoléon"
ALIASES: tuple[str, ...] = ("nap",)
RULESETS: dict[str, type[GameOptions]] = {"standard": NapoleonOptions}
UNITS: tuple[str, ...] = ("points",)
FIXED_PLAYERS: int | None = None  # `players` is an option
SEED = "004"
