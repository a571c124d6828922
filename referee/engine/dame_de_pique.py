"""Dame de Pique ("Black Lady" Hearts): RULES.md section 4, seed 003.

Four players, 52 cards, ranks ace high (R3), no trump, clockwise. Each manche: the exchange
(three cards to the left, right, across, or none, by the manche number: `DP.PASS`), then 13
tricks: the holder of 2♣ leads it (`DP.FIRST-TRICK`), follow suit if able (`DP.FOLLOW`), no
heart or Q♠ on the first trick unless a seat holds nothing else (`DP.FIRST-TRICK`), no heart
led before hearts are broken unless the leader holds nothing else (`DP.HEARTS`). Each heart
taken is a penalty point, Q♠ thirteen (`DP.SCORE`); one seat taking all 26 scores 0 and the
others 26 (`DP.VOLTE`). The match ends after the manche in which a total reaches
`end_threshold` (inclusive); the lowest total wins, ties share (`DP.END`).

Deliberate choices (RULES.md 4.2 and 7): hearts are broken by any heart played on an earlier
trick (`hearts_broken_by`); the queen does not break them (`qs_breaks_hearts`) and may be
led at any time; a leader with only hearts and Q♠, hearts unbroken, must lead the queen
(`qs_counts_as_heart_for_lead`). Dealer rotation, the deal from a pack and its checks use the
rule id `DP.DEAL`, which RULES.md section 7 describes without naming.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any, Final

from librt.vecs import vec
from mypy_extensions import i64

from tapis_cartes.referee.engine.actions import (
    PASS,
    PLAY,
    action_error,
    encode,
    pass_cards,
    pass_choices,
)
from tapis_cartes.referee.engine.base import (
    CardFact,
    CardsPassed,
    Deal,
    Hand,
    HandResult,
    Match,
    PhaseEnum,
    PhaseRule,
    Rules,
    ScoreLine,
    Start,
    check_cards,
    check_deck,
    score_line,
)
from tapis_cartes.referee.engine.cards import (
    CLUBS,
    FULL_DECK,
    HEARTS,
    QUEEN,
    R3,
    SPADES,
    SUIT_MASK,
    card,
    card_str,
    count_cards,
    iter_cards,
    mask_str,
)
from tapis_cartes.referee.engine.errors import DealError, IllegalAction, RulesError
from tapis_cartes.referee.engine.options import (
    DamePiqueOptions,
    DealerRotation,
    HeartsBrokenBy,
    MoonMode,
)
from tapis_cartes.referee.engine.tricks import Regime, TrickRules, explain, follow

__all__ = ["DamePiqueMatch", "DamePiqueOptions"]

# Module constants are Final: compiled code reads them as C values, not from the module's dict.
TWO_CLUBS: Final = card(0, CLUBS)
QUEEN_SPADES: Final = card(QUEEN, SPADES)
HEARTS_MASK: Final = SUIT_MASK[HEARTS]
POINT_CARDS: Final = HEARTS_MASK | 1 << QUEEN_SPADES
_PASS_OFFSETS: Final = (1, 3, 2, 0)  # DP.PASS: left (seat+1), right (seat-1), across, none
_PASS_NAMES: Final = ("left", "right", "across", "none")
_FOLLOW: Final = TrickRules(Regime.FOLLOW, R3)  # DP.FOLLOW: follow suit, else any card


def _points(taken: int) -> int:
    """DP.SCORE: one point a heart, thirteen for Q♠."""
    return count_cards(taken & HEARTS_MASK) + 13 * (taken >> QUEEN_SPADES & 1)


def legal_play(hand: i64, led: i64, first: bool, broken: bool, lead_unbroken: i64) -> i64:
    """LEGAL_DP (RULES.md 4.1): the cards of `hand` that may be played to a trick whose led
    suit is `led` (-1: this seat leads), on the first trick or not, hearts broken or not.
    `lead_unbroken` is the mask of the cards that may be led while hearts are unbroken (all
    but hearts, and but Q♠ with `qs_counts_as_heart_for_lead`)."""
    if led < 0:
        if first:
            return 1 << TWO_CLUBS  # DP.FIRST-TRICK: the 2C holder leads it
        if broken:
            return hand
        return (hand & lead_unbroken) or hand  # DP.HEARTS: only hearts left: may lead one
    if first and not hand & SUIT_MASK[led]:
        return (hand & ~POINT_CARDS) or hand  # DP.FIRST-TRICK: no points if avoidable
    return follow(hand, led)  # DP.FOLLOW


def lead_mask(qs_counts_as_heart_for_lead: bool) -> int:
    """The cards that may be led while hearts are unbroken (DP.HEARTS, RULES.md 4.2.4)."""
    allowed = FULL_DECK & ~HEARTS_MASK
    return allowed & ~(1 << QUEEN_SPADES) if qs_counts_as_heart_for_lead else allowed


class Phase(PhaseEnum):
    PASS = "pass"
    PLAY = "play"
    OVER = "over"


class DamePiqueHand(Hand):
    """One manche: the exchange (`Phase.PASS`), then the card play of the base."""

    def __init__(self, match: Match, number: int, dealer: int, deal: Deal) -> None:
        super().__init__(match, number, dealer, deal)
        assert isinstance(match, DamePiqueMatch)
        self.opts = match.opts
        self.phases = PHASES
        self.play_rule = "DP.FOLLOW"
        cycle = (number - 1) % 4
        self.pass_offset = _PASS_OFFSETS[cycle]
        self.pass_name = _PASS_NAMES[cycle]
        self.passed: vec[i64] = vec[i64]([0, 0, 0, 0])  # DP.PASS: the cards each seat gave
        self.taken: vec[i64] = vec[i64]([0, 0, 0, 0])  # cards won in tricks, per seat
        self.broken = False  # DP.HEARTS: hearts broken by an earlier trick
        # What the options make of DP.HEARTS, read once per match (DamePiqueMatch).
        self.lead_unbroken = match.lead_unbroken
        self.broken_by_any_heart = match.broken_by_any_heart
        self.breaking = match.breaking
        self.add_to_others = match.add_to_others  # DP.VOLTE
        self._phase = Phase.PASS
        if self.pass_offset == 0:
            self._start_play()

    @property
    def phase(self) -> Phase:
        assert isinstance(self._phase, Phase)
        return self._phase

    @property
    def hearts_broken(self) -> bool:
        """DP.HEARTS: whether hearts are broken, counting the trick in progress."""
        return self.broken or self._breaks(self.led, self.mask)

    def _breaks(self, led: int, mask: int) -> bool:
        # DP.HEARTS: what opens hearts for the following tricks (4.2.2, 7): a heart (any, or
        # only one discarded on another suit), or Q♠ by option.
        m = mask & self.breaking
        if m >> QUEEN_SPADES & 1:
            return True
        return m & HEARTS_MASK != 0 and (self.broken_by_any_heart or led != HEARTS)

    def _start_play(self) -> None:
        self._phase = Phase.PLAY
        held = self.held
        turn = 0
        while not held[turn] >> TWO_CLUBS & 1:  # the deal holds 2C (check_cards)
            turn += 1
        self.turn = turn

    # -- the exchange (DP.PASS) -----------------------------------------------------------

    def _pass_to_act(self) -> tuple[int, ...]:
        return tuple(s for s in range(4) if not self.passed[s])

    def _pass_legal(self, seat: int) -> list[int]:
        return [] if self.passed[seat] else pass_choices(self.held[seat])

    def _pass_refusal(self, seat: int, action: int) -> IllegalAction | None:
        # DP.PASS: three cards of the dealt hand, chosen before seeing what is received.
        kind = action & 7
        if kind == PLAY:
            why = f"every seat passes three cards {self.pass_name} before the first card"
            return self.illegal("exchange-first", seat, action, why, "DP.PASS")
        if kind != PASS:
            return self._wrong_action(seat, action)
        if self.passed[seat]:
            return self.not_your_turn(seat, action, "DP.PASS")
        missing = pass_cards(action) & ~self.held[seat]
        if missing:
            why = f"seat {seat} does not hold {' '.join(map(card_str, iter_cards(missing)))}"
            return self.illegal("not-held", seat, action, why, "DP.PASS")
        return None

    def _pass_apply(self, seat: int, action: int) -> None:
        passed = self.passed
        passed[seat] = pass_cards(action)
        if passed[0] and passed[1] and passed[2] and passed[3]:
            # All transfers happen at once.
            off = self.pass_offset
            held = self.held
            for s in range(4):
                held[s] &= ~passed[s]
            for s in range(4):
                held[(s + off) % 4] |= passed[s]
            if self.log_events:
                for s in range(4):
                    given = passed[s]
                    self.events.append(CardsPassed(s, (s + off) % 4, given, count_cards(given)))
                self.hands_changed()
            self._start_play()

    def _pass_run(self, seats: bytes, actions: list[int], start: int) -> int:
        # Replay's loop over the exchange (DP.PASS; PhaseRule.run): the passes `Match.step`
        # would accept (well formed, by a seat, and `_pass_refusal` accepts them), each applied
        # by `_pass_apply`, until one is not or the exchange completes. (Direct calls: through
        # the phase table, `Hand._phase_run`, a Dame de Pique hand costs 4,000 instructions
        # more.)
        i = start
        end = len(actions)
        while i < end and self._phase is Phase.PASS:
            seat = seats[i]
            action = actions[i]
            if action & 7 != PASS or not 0 <= seat < 4 or action_error(action) is not None:
                break
            if self._pass_refusal(seat, action) is not None:
                break
            self.cursor = self.base + i + 1
            self._pass_apply(seat, action)
            i += 1
        return i

    # -- the card play (the base's loop, with these hooks) --------------------------------

    def legal_mask(self, hand: i64, led: i64, mask: i64, count: i64) -> i64:
        return legal_play(hand, led, self.trick_number == 1, self.broken, self.lead_unbroken)

    def _turn_rule(self) -> str:
        return "DP.LEAD"

    def _not_a_card(self, seat: int, action: int) -> IllegalAction | None:
        if action & 7 == PASS:
            if self.pass_offset == 0:
                why = "there is no exchange in this manche"
            else:
                why = "the exchange is over"
            return self.illegal("no-exchange", seat, action, why, "DP.PASS")
        return self._wrong_action(seat, action)

    def _why_not(self, seat: int, c: int, hand: int, legal: int) -> tuple[str, str, str]:
        led = self.led
        if led < 0:
            if self.trick_number == 1:
                why = "the holder of 2C must lead it to the first trick"
                return "lead-two-of-clubs", why, "DP.FIRST-TRICK"
            why = "hearts are not broken and the leader holds another card"
            return "hearts-not-broken", why, "DP.HEARTS"
        if hand & SUIT_MASK[led]:
            code, duty = explain(_FOLLOW, hand, -1, led, self.mask, c)  # DP.FOLLOW
            return code, f"seat {seat} {duty}", "DP.FOLLOW"
        why = "no heart or QS on the first trick while holding another card"
        return "no-points-first-trick", why, "DP.FIRST-TRICK"

    def _wrong_action(self, seat: int, action: int) -> IllegalAction:
        why = "Dame de Pique has only pass and play"
        return self.illegal("wrong-action", seat, action, why, "DP.PASS")

    def _trick_end(self, winner: int, best: int, led: int, mask: int) -> bool:
        self.taken[winner] |= mask
        if not self.broken and self._breaks(led, mask):
            self.broken = True
        if self.trick_number < 13:
            return False
        self._score()
        return True

    def _score(self) -> None:
        self._phase = Phase.OVER
        self.over = True
        taken = self.taken
        shooter = -1
        for s in range(4):
            if taken[s] & POINT_CARDS == POINT_CARDS:  # DP.VOLTE: all 13 hearts and Q♠
                shooter = s
        if shooter >= 0:
            # DP.VOLTE: all 13 hearts and Q♠ to one seat.
            add = self.add_to_others
            for s in range(4):
                delta = (26 if add else 0) if s != shooter else (0 if add else -26)
                self.score(s, "volte", (delta,), "DP.VOLTE", f"seat {shooter} took all 26")
            return
        # DP.SCORE: each seat's penalty. Its line is read by an int key (the seat, the points
        # and whether Q♠ is among them, which make its note, and the action scored after)
        # from lines made once (`score_line`), not looked up by its fields.
        at = self.cursor
        lines = _PENALTY_LINES
        for s in range(4):
            t = taken[s]
            points = _points(t)
            key = ((at * 4 + s) * 27 + points) * 2 + (t >> QUEEN_SPADES & 1)
            line = lines[key] if key < len(lines) else None
            if line is None:
                line = score_line(s, "penalty", (points,), "DP.SCORE", _points_note(t), at)
                if key < len(lines):
                    lines[key] = line
            self.add_line(line)

    def describe(self) -> list[str]:
        return [f"exchange: {self.pass_name}" if self.pass_offset else "no exchange"]

    # -- views ----------------------------------------------------------------------------

    def _public(self, seat: int | None) -> dict[str, Any]:
        public: dict[str, Any] = {
            "exchange": self.pass_name,
            "passed": tuple(bool(p) for p in self.passed),
            "hearts_broken": self.hearts_broken,
            "trick_number": self.trick_number,
            "points_taken": tuple(_points(t) for t in self.taken),
        }
        if seat is not None:
            public["given"] = mask_str(self.passed[seat])
            if self._phase is not Phase.PASS and self.pass_offset:
                public["received"] = mask_str(self.passed[(seat - self.pass_offset) % 4])
        return public

    def _public_cards(self, seat: int | None) -> dict[str, CardFact]:
        cards: dict[str, CardFact] = {}
        if seat is not None:
            cards["given"] = tuple(iter_cards(self.passed[seat]))
            if self._phase is not Phase.PASS and self.pass_offset:
                received = self.passed[(seat - self.pass_offset) % 4]
                cards["received"] = tuple(iter_cards(received))
        return cards


PHASES: dict[Enum, PhaseRule] = {
    Phase.PASS: PhaseRule(
        DamePiqueHand._pass_to_act,
        DamePiqueHand._pass_legal,
        DamePiqueHand._pass_refusal,
        DamePiqueHand._pass_apply,
        run=DamePiqueHand._pass_run,
    ),
    Phase.PLAY: PhaseRule(
        Hand._turn_to_act, Hand._play_legal, Hand._play_refusal, Hand._play_apply, plays=True
    ),
}


# The penalty lines made so far, by `_score`'s key, for a score after one of the first 64
# actions (a hand scores after its 52 or 56).
_PENALTY_LINES: Final[list[ScoreLine | None]] = [None] * (64 * 4 * 27 * 2)


def _note(hearts: int, queen: bool) -> str:
    parts = [f"{hearts} heart{'s' if hearts != 1 else ''}"] if hearts else []
    if queen:
        parts.append("QS")
    return ", ".join(parts)


# The note of each penalty: by hearts taken (0..13), then 14 more with Q♠.
_NOTES: Final = tuple(_note(h, False) for h in range(14)) + tuple(_note(h, True) for h in range(14))


def _points_note(taken: int) -> str:
    """`3 hearts, QS`: what a seat's penalty is made of (DP.SCORE)."""
    return _NOTES[count_cards(taken & HEARTS_MASK) + 14 * (taken >> QUEEN_SPADES & 1)]


class DamePiqueMatch(Match):
    """A match of Dame de Pique: manches until a total reaches the threshold."""

    lowest_wins = True  # DP.END

    def __init__(self, rules: Rules, start: Start | None = None, log_events: bool = True) -> None:
        super().__init__(rules, start, log_events)
        self.deal_rule = "DP.DEAL"
        opts = rules.options
        assert isinstance(opts, DamePiqueOptions)
        self.opts = opts
        self.pack = FULL_DECK
        # DP.HEARTS, as the options set it (each hand reads these): the cards that may be led
        # while hearts are unbroken, whether any heart played breaks them (else only one
        # discarded on another suit), the cards whose play may break them.
        self.lead_unbroken = lead_mask(opts.qs_counts_as_heart_for_lead)
        self.broken_by_any_heart = opts.hearts_broken_by is HeartsBrokenBy.PLAYED
        self.breaking = HEARTS_MASK | (1 << QUEEN_SPADES if opts.qs_breaks_hearts else 0)
        # DP.VOLTE, DP.DEAL and DP.END as the options set them, read once (an option is a
        # pydantic attribute, slow to read at every hand).
        self.add_to_others = opts.moon_mode is MoonMode.ADD_TO_OTHERS
        self.dealer_step = 1 if opts.dealer_rotation is DealerRotation.CLOCKWISE else -1
        self.end_threshold = opts.end_threshold
        # DP.END: a match whose start holds a total at or above the threshold would be over
        # before its first hand (as the other games refuse such a start).
        for seat, score in enumerate(self.start_scores):
            if score[0] >= self.end_threshold:
                raise RulesError(
                    f"seat {seat} starts with {score[0]} points, at or above the end_threshold "
                    f"of {self.end_threshold}: the match would be over",
                    key="end_threshold",
                )

    def _new_hand(self, number: int, dealer: int, deal: Deal) -> Hand:
        return DamePiqueHand(self, number, dealer, deal)

    def _check_deal(self, deal: Deal) -> None:
        if deal.retourne >= 0 or deal.talon:
            raise DealError(
                "deal-shape",
                "deal: Dame de Pique has no retourne and no talon: all 52 cards are dealt",
                "DP.DEAL",
            )
        check_cards(deal, FULL_DECK, 13, 4, "DP.DEAL", "the 52-card pack")

    def deal_deck(self, dealer: int, deck: Sequence[int]) -> Deal:
        # RULES.md 7: one card at a time, starting with the seat after the dealer.
        self._check_dealer(dealer)
        check_deck(deck, FULL_DECK, "DP.DEAL", "the 52-card pack")
        hands = [0, 0, 0, 0]
        for i, c in enumerate(deck):
            hands[(dealer + 1 + i) % 4] |= 1 << c
        return Deal(tuple(hands))

    def public_action(self, action: int) -> int:
        # DP.PASS: the cards passed are seen by their receiver only.
        return encode(PASS, 0) if action & 7 == PASS else action

    def _next_dealer(self, previous: HandResult) -> int:
        return (previous.dealer + self.dealer_step) % 4

    def _end_after_hand(self) -> None:
        # DP.END: a total at or above the threshold ends the match; lowest total wins.
        threshold = self.end_threshold
        for score in self.scores:
            if score[0] >= threshold:
                self.finished = True
                self.end_reason = f"a total reached {threshold}"
                self.winners = self._leaders(range(4))
                return
