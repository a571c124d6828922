"""La Triomphe: RULES.md section 3, seed 002 (`seeds/002_54b4d8b0a09a80c4.txt`).

A 32-card pack (7 to A), counter-clockwise play (seats are numbered in playing order, so only
the words change). The dealer gives 5 cards each (`hand_size`), 2 then 3, from the seat after
him, then turns the next card, the *retourne*: its suit is the *triomphe* (trump); the rest
is the talon, unused except by the pillage (`TRI.DEAL`). The seat after the dealer leads; the
winner of a trick leads the next. Who must follow, beat (*monter*), trump, overtrump or
undertrump is the regime's (`TRI.FORCEE` by default, `TRI.FORCAT`, `TRI.PLAISANT`), applied
by the shared trick module; the highest trump, else the highest card of the led suit, wins
(`CARD.WIN`). Cards have no value: only tricks count. A *side* is one player, or one team.

- `TRI.ABANDON` (two sides only): before its first card a side may offer to concede; the other
  side's next seat answers. Accepted: the accepting side +1, the coup ends. Refused: the
  refusing side is bound to the *vole* (every trick): +2 if made, −2 at the first trick lost.
- `TRI.VOLE`: a side that has won every trick so far and a strict majority of the coup (3 of
  5), and is not bound, decides: `stop` scores +1 and ends the coup; `continue` engages the
  vole: +2 if every trick is won, −2 at once (and the coup ends) on the first trick lost.
- `TRI.POINT`: otherwise the side with the most tricks scores +1; a tie goes by *primauté* to
  the side seated earliest from the dealer's right (the dealer is the worst placed).
- `TRI.END`: the first side whose score reaches `target` (5; 7 for a team game of six) wins.
  Scores may be negative; a loss of 2 is credited to nobody.

Rulesets:
- `individuelle` (3.4): 2 to 6 players; the next dealer is the seat after the dealer.
- `equipe` (`TRI.EQUIPE`, 3.3): 2 v 2 or 3 v 3; seats 0..k−1 are team 0 and k..2k−1 team 1,
  partners side by side. Each team's dealer is fixed, its last seat (k−1, 2k−1): the two
  alternate, so the other team always leads. Partners see each other's hands
  (`partners_see_hands`). Team scores are per seat: one score line per member.
- `as-qui-pille` (`TRI.PILLE`, 3.5): 3 to 6 players, ace high (R2), the pillage: the dealer
  if he turned the trump ace, else the holder of the trump ace, may take the face-up trump
  into his hand and discard any card face down, then turns the next talon card and may go on
  while it is a trump; never compulsory, he may stop at any time.

Deliberate choices (RULES.md 3.6, 6 and 7):
- The vole decision is an explicit action (`vole stop|continue`) owed by the seat about to
  lead after the deciding trick; a card played instead is refused (the seed's "playing a card
  for the next trick" engages the vole: here that is `continue`). With 5 cards the only
  decision point is 3–0 after trick 3 (3.6.5); one threshold for every player count.
- `TRI.ABANDON`: one offer per coup in all (3.6.8), made by the seat about to play its side's
  first card; the answer comes from the other side's first seat after the offerer (7). An
  offer is refused with `TRI.ABANDON` when there are more than two sides, when
  `abandon_allowed` is false, after the side's first card, or when an offer was already made.
  A failed vole after a refused abandon scores `vole_fail_penalty` (the same −2), a made one
  `refused_abandon_vole_value` (3.6.6); both score lines cite `TRI.ABANDON`. Engaged voles
  and a stop cite `TRI.VOLE`.
- `TRI.POINT`, primauté (3.6.10): among the sides tied for the most tricks, the one with the
  seat earliest in the order of trick 1 scores (for two teams: the non-dealing team).
- `TRI.DEAL`: a transcript's `deal` gives the hands, the retourne and the talon (top first),
  which together are the whole 32-card pack. A pack (`deck`) is dealt in two rounds of
  `hand_size // 2` then the rest (2 then 3 for 5 cards; 3.6.13 and 7).
- `TRI.EQUIPE`: the first dealer of a team match must be a team's last seat, since the other
  team leads (3.3); the start scores of partners must be equal.
- `TRI.PILLE` (3.6.12, 7): the ace holder takes the retourne itself; the discard may be the
  card just taken; if the trump ace lies in the talon there is no pillage. `pille stop` only
  when the robber declines a face-up trump; a non-trump turned, an empty talon, or
  `pillage_continues = false` after the first take, end the pillage by themselves. The cards
  taken, and the trump ace the holder shows, are public while he holds them; the discards are
  seen by the robber only (`public_action` shows the others `pille` of `PILLE_HIDDEN`).
  Trump never changes.
- `TRI.END`: start scores at or above the target are refused (the match would be over).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

from mypy_extensions import i64

from tapis_cartes.referee.engine.actions import (
    ABANDON,
    ABANDON_WORDS,
    PILLE,
    PILLE_HIDDEN,
    PILLE_STOP,
    VOLE,
    encode,
)
from tapis_cartes.referee.engine.base import (
    CardFact,
    CardsTaken,
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
    ACE,
    R1,
    R2,
    RANK_NAMES,
    SEVEN,
    SUIT_WORDS,
    RankOrder,
    card,
    card_str,
    deck_of_ranks,
    iter_cards,
    mask_str,
)
from tapis_cartes.referee.engine.errors import DealError, IllegalAction, RulesError
from tapis_cartes.referee.engine.options import (
    GameOptions,
    RankOrderName,
    TriompheAsQuiPilleOptions,
    TriompheEquipeOptions,
    TriompheIndividuelleOptions,
    TriompheOptions,
)
from tapis_cartes.referee.engine.tricks import Regime, TrickRules, explain, legal_cards

__all__ = [
    "ALIASES",
    "FIXED_PLAYERS",
    "NAME",
    "PACK",
    "PILLE_HIDDEN",
    "RULESETS",
    "SEED",
    "TITLE",
    "UNITS",
    "Phase",
    "TriompheHand",
    "TriompheMatch",
]

PACK = deck_of_ranks(range(SEVEN, 13))  # TRI.DEAL: 7 to A in each suit, 32 cards
PACK_NAME = "the 32-card pack"
OFFER, ACCEPT, REFUSE = range(3)  # ABANDON payloads (actions.ABANDON_WORDS)
STOP, CONTINUE = range(2)  # VOLE payloads (actions.VOLE_WORDS)
_REGIME_RULES = {
    Regime.FORCEE: "TRI.FORCEE",
    Regime.FORCAT: "TRI.FORCAT",
    Regime.PLAISANT: "TRI.PLAISANT",
}
_ORDERS = {RankOrderName.R1: R1, RankOrderName.R2: R2}


def _order_text(order: RankOrder) -> str:
    ranks = sorted(range(SEVEN, 13), key=order.rank_strength.__getitem__, reverse=True)
    return " ".join(RANK_NAMES[r] for r in ranks)


class Phase(PhaseEnum):
    PILLAGE = "pillage"  # TRI.PILLE: the robber takes face-up trumps or stops
    PLAY = "play"  # cards (and, before a side's first card, the abandon offer)
    ANSWER = "answer"  # TRI.ABANDON: the other side accepts or refuses the offer
    VOLE = "vole"  # TRI.VOLE: the side that won every trick stops or continues
    OVER = "over"


class TriompheHand(Hand):
    """One coup: the pillage (as-qui-pille), then the tricks with the abandon and the vole."""

    def __init__(self, match: TriompheMatch, number: int, dealer: int, deal: Deal) -> None:
        super().__init__(match, number, dealer, deal)
        opts = match.opts
        self.opts = opts
        n = self.players
        self.order = match.order
        self.trick_rules = TrickRules(opts.regime, self.order)
        self.phases = PHASES
        self.play_rule = _REGIME_RULES[opts.regime]
        self.hand_size = opts.hand_size
        self.side = match.side  # the side of each seat
        self.members = match.members  # the seats of each side
        self.is_team = match.is_team
        self.two_sides = len(self.members) == 2
        self.trump = deal.retourne // 13  # TRI.DEAL: the suit of the retourne
        self.won = [0] * n  # tricks per seat
        self.side_won = [0] * len(self.members)  # tricks per side
        self.turn = (dealer + 1) % n  # the premier en cartes leads trick 1
        # TRI.ABANDON
        self.offerer = -1
        self.answerer = -1
        self.answer = -1  # ACCEPT or REFUSE once given
        # TRI.VOLE: the side bound to win every trick (engaged, or by refusing an abandon)
        self.bound = -1
        self.bound_by_abandon = False
        self.decision = -1  # the vole decision made (STOP or CONTINUE), -1 if none
        # TRI.PILLE
        self.robber = -1
        self.face_up = -1  # the face-up trump the robber may take
        self.talon_next = 0  # index in the talon of the next card to turn
        self.taken = 0  # cards taken by the robber (public)
        self.discarded = 0  # cards discarded face down (seen by the robber only)
        self.turned: list[int] = []  # talon cards turned face up, in order
        self.ace_shown = -1  # the trump ace the holder shows to rob
        self.pillage_steps: list[str] = []  # "takes 9H, discards 7C", for describe()
        self.story: list[str] = []  # a line per rule step taken, for describe()
        self._phase = Phase.PLAY
        if isinstance(opts, TriompheAsQuiPilleOptions) and opts.as_pille:
            self._start_pillage()

    @property
    def phase(self) -> Phase:
        assert isinstance(self._phase, Phase)
        return self._phase

    def _tell(self, kind: str, text: str, seat: int = -1) -> None:
        # A step worth a line in describe() (show) as well as a note to the table.
        self.story.append(text)
        self.note(kind, text, seat)

    def _side_name(self, side: int) -> str:
        if not self.is_team:
            return f"seat {side}"
        return f"team {side} (seats {', '.join(map(str, self.members[side]))})"

    # -- the pillage (TRI.PILLE) ----------------------------------------------------------

    def _start_pillage(self) -> None:
        # The dealer robs if he turned the trump ace; else its holder, who shows it; if it
        # lies in the talon, nobody robs (3.6.12 c).
        ace = card(ACE, self.trump)
        retourne = self.deal.retourne
        if retourne == ace:
            self.robber = self.dealer
            why = "turned the trump ace"
        else:
            holder = next((s for s in range(self.players) if self.held[s] >> ace & 1), -1)
            if holder < 0:
                self._tell("pillage", f"no pillage: the trump ace {card_str(ace)} is in the talon")
                return
            self.robber = holder
            self.ace_shown = ace
            self.show(holder, 1 << ace, "trump-ace", "TRI.PILLE")
            why = f"shows the trump ace {card_str(ace)}"
        self.face_up = retourne
        self._phase = Phase.PILLAGE
        self.pillage_steps.append(why)
        text = f"seat {self.robber} {why} and may take {card_str(retourne)}"
        self.note("pillage", text, self.robber)

    def _pillage(self, robber: int, discard: int) -> None:
        # The robber takes the face-up trump and discards, or stops.
        if discard == PILLE_STOP:
            self._end_pillage(f"leaves {card_str(self.face_up)}")
            return
        bit = 1 << discard
        face_up = self.face_up
        before = self.held[robber]
        self.held[robber] = (before | 1 << face_up) & ~bit
        if self.log_events:
            self.events.append(CardsTaken(robber, face_up, discard))
            if self.held[robber] != before:  # not when the card taken is discarded
                self.hands_changed()
        self.taken |= 1 << face_up
        self.discarded |= bit
        self.pillage_steps.append(f"takes {card_str(face_up)}, discards {card_str(discard)}")
        self.note("pillage", f"seat {robber} takes {card_str(face_up)} and discards", robber)
        opts = self.opts
        assert isinstance(opts, TriompheAsQuiPilleOptions)
        talon = self.deal.talon
        if not opts.pillage_continues:
            self._end_pillage("one take only (pillage_continues is off)")
        elif self.talon_next >= len(talon):
            self._end_pillage("the talon is empty")
        else:
            # Turn the next talon card; a trump may be taken in turn, anything else ends it.
            turned = talon[self.talon_next]
            self.talon_next += 1
            self.turned.append(turned)
            self.show(robber, 1 << turned, "turned", "TRI.PILLE")
            if turned // 13 == self.trump:
                self.face_up = turned
                self.note("pillage", f"{card_str(turned)} is turned: a trump", robber)
            else:
                self._end_pillage(f"turns {card_str(turned)}, not a trump")

    def _end_pillage(self, how: str) -> None:
        self.face_up = -1
        self._phase = Phase.PLAY
        self.pillage_steps.append(how)
        self.story.append(f"pillage by seat {self.robber}: {'; '.join(self.pillage_steps)}")
        self.note("pillage", f"the pillage ends ({how})", self.robber)

    # -- who acts and what is legal, per phase ---------------------------------------------

    def can_offer(self, seat: int) -> bool:
        """TRI.ABANDON: whether `seat` may offer to abandon the point now."""
        return (
            self._phase is Phase.PLAY
            and seat == self.turn
            and self.two_sides
            and self.opts.abandon_allowed
            and self.offerer < 0
            and not self._has_played(self.side[seat])
        )

    def _has_played(self, side: int) -> bool:
        # Whether a seat of `side` has played a card this coup (every seat plays to trick 1).
        if self.trick_number > 1:
            return True
        n = self.players
        return any(self.side[(self.leader + k) % n] == side for k in range(len(self.cards)))

    def _pillage_to_act(self) -> tuple[int, ...]:
        return (self.robber,)

    def _pillage_legal(self, seat: int) -> list[int]:
        if seat != self.robber:
            return []
        choices = self.held[seat] | 1 << self.face_up
        return [*(encode(PILLE, c) for c in iter_cards(choices)), encode(PILLE, PILLE_STOP)]

    def _answer_to_act(self) -> tuple[int, ...]:
        return (self.answerer,)

    def _answer_legal(self, seat: int) -> list[int]:
        return [encode(ABANDON, ACCEPT), encode(ABANDON, REFUSE)] if seat == self.answerer else []

    def _vole_legal(self, seat: int) -> list[int]:
        return [encode(VOLE, STOP), encode(VOLE, CONTINUE)] if seat == self.turn else []

    def _cards_legal(self, seat: int) -> list[int]:
        plays = self._play_legal(seat)
        if plays and self.can_offer(seat):
            plays.insert(0, encode(ABANDON, OFFER))  # 4 sorts before every card of the pack
        return plays

    # -- refusals (pure: each says why an action is refused now, changing nothing) -------

    def _pillage_refusal(self, seat: int, action: int) -> IllegalAction | None:
        # TRI.PILLE: the robber discards a card of his hand or the face-up trump, or stops.
        if action & 7 != PILLE:
            return self._out_of_phase(seat, action)
        if seat != self.robber:
            return self.not_your_turn(seat, action, "TRI.PILLE")
        discard = action >> 3
        face_up = self.face_up
        if discard == PILLE_STOP or (self.held[seat] | 1 << face_up) >> discard & 1:
            return None
        why = (
            f"seat {seat} may discard a card of his hand or {card_str(face_up)}, "
            f"not {card_str(discard)}"
        )
        return self.illegal("not-held", seat, action, why, "TRI.PILLE")

    def _cards_refusal(self, seat: int, action: int) -> IllegalAction | None:
        # A card (the base's refusal), or (before the side's first card) the abandon offer.
        if action & 7 == ABANDON:
            return self._offer_refusal(seat, action)
        return self._play_refusal(seat, action)

    def _not_a_card(self, seat: int, action: int) -> IllegalAction | None:
        return self._out_of_phase(seat, action)

    def _why_not(self, seat: int, c: int, hand: int, legal: int) -> tuple[str, str, str]:
        # The duty of the regime the card breaks, as the trick module words it.
        is_last = len(self.cards) == self.players - 1
        code, duty = explain(self.trick_rules, hand, self.trump, self.led, self.mask, c, is_last)
        return code, f"seat {seat} {duty}", self.play_rule

    def _offer_refusal(self, seat: int, action: int) -> IllegalAction | None:
        # TRI.ABANDON: only between two sides, once a coup, before the side's first card.
        if action >> 3 != OFFER:
            why = "nobody has offered to abandon the point"
            return self.illegal("no-abandon-offer", seat, action, why, "TRI.ABANDON")
        if not self.two_sides:
            why = (
                "the abandon du point exists only between two sides (one against one or team "
                f"against team); this game has {len(self.members)}"
            )
            return self.illegal("abandon-two-sides", seat, action, why, "TRI.ABANDON")
        if not self.opts.abandon_allowed:
            why = "abandon_allowed is off"
            return self.illegal("abandon-not-allowed", seat, action, why, "TRI.ABANDON")
        if seat != self.turn:
            return self.not_your_turn(seat, action, "TRI.ABANDON")
        if self.offerer >= 0:
            why = f"one offer per coup: seat {self.offerer} has offered already"
            return self.illegal("abandon-once", seat, action, why, "TRI.ABANDON")
        if self._has_played(self.side[seat]):
            why = f"a side offers only before its first card; {self._side_name(self.side[seat])}"
            why += " has played"
            return self.illegal("abandon-too-late", seat, action, why, "TRI.ABANDON")
        return None

    def _answer_refusal(self, seat: int, action: int) -> IllegalAction | None:
        # TRI.ABANDON: the other side's first seat after the offerer accepts or refuses.
        if action & 7 != ABANDON:
            return self._out_of_phase(seat, action)
        if action >> 3 == OFFER:
            why = f"seat {self.offerer}'s offer waits for seat {self.answerer}'s answer"
            return self.illegal("abandon-once", seat, action, why, "TRI.ABANDON")
        if seat != self.answerer:
            return self.not_your_turn(seat, action, "TRI.ABANDON")
        return None

    def _vole_refusal(self, seat: int, action: int) -> IllegalAction | None:
        # TRI.VOLE: the seat about to lead decides for its side, stop or continue.
        if action & 7 != VOLE:
            return self._out_of_phase(seat, action)
        if seat != self.turn:
            return self.not_your_turn(seat, action, "TRI.VOLE")
        return None

    def _out_of_phase(self, seat: int, action: int) -> IllegalAction:
        # An action of a kind the current phase does not take.
        kind = action & 7
        phase = self._phase
        if phase is Phase.PILLAGE:
            code, rule = "pillage-first", "TRI.PILLE"
            face_up = card_str(self.face_up)
            why = f"the pillage comes first: seat {self.robber} takes {face_up} or stops"
        elif phase is Phase.ANSWER:
            code, rule = "abandon-answer-first", "TRI.ABANDON"
            why = f"seat {self.answerer} first accepts or refuses seat {self.offerer}'s offer"
        elif phase is Phase.VOLE:
            code, rule = "vole-decision-first", "TRI.VOLE"
            why = f"seat {self.turn} first decides the vole: stop or continue"
        elif kind == VOLE:
            code, rule = "no-vole-decision", "TRI.VOLE"
            why = (
                "a vole is decided only by a side that has won every trick and a majority "
                "of the coup, after the trick that gives it"
            )
        elif kind == PILLE:
            code, rule = "no-pillage", "TRI.PILLE"
            if not isinstance(self.opts, TriompheAsQuiPilleOptions):
                why = "there is no pillage in this ruleset (only in as-qui-pille)"
            elif not self.opts.as_pille:
                why = "as_pille is off: the ace does not rob"
            else:
                why = "the pillage is over"
        else:
            code, rule = "wrong-action", self.play_rule
            why = "La Triomphe has only play, vole, abandon and pille"
        return self.illegal(code, seat, action, why, rule)

    # -- applying actions -----------------------------------------------------------------

    def _cards_apply(self, seat: int, action: int) -> None:
        if action & 7 == ABANDON:
            self._offer(seat)
        else:
            self._play_apply(seat, action)

    def _pillage_apply(self, seat: int, action: int) -> None:
        self._pillage(seat, action >> 3)

    def _answer_apply(self, seat: int, action: int) -> None:
        self._answer(seat, action >> 3)

    def _vole_apply(self, seat: int, action: int) -> None:
        self._vole(seat, action >> 3)

    def _offer(self, seat: int) -> None:
        n = self.players
        mine = self.side[seat]
        self.offerer = seat
        # RULES.md 7: the other side's first seat after the offerer answers.
        self.answerer = next(
            (seat + i) % n for i in range(1, n) if self.side[(seat + i) % n] != mine
        )
        self._phase = Phase.ANSWER
        self.note("abandon", f"seat {seat} offers to abandon the point", seat)

    def _answer(self, seat: int, payload: int) -> None:
        self.answer = payload
        side = self.side[seat]
        if payload == ACCEPT:
            # The accepting side scores 1 and the coup ends: the offerer's card is not played.
            self._tell(
                "abandon", f"abandon offered by seat {self.offerer}, accepted by seat {seat}"
            )
            self._score_side(side, "abandon", 1, "TRI.ABANDON", f"seat {self.offerer} abandoned")
            self._end()
            return
        # Refused: the refusing side must make the vole; the offerer now plays its card.
        self.bound = side
        self.bound_by_abandon = True
        self._phase = Phase.PLAY
        self._tell(
            "abandon",
            f"abandon offered by seat {self.offerer}, refused by seat {seat}: "
            f"{self._side_name(side)} bound to the vole",
        )

    def _vole(self, seat: int, payload: int) -> None:
        side = self.side[seat]
        k = self.side_won[side]
        self.decision = payload
        who = f"vole: {self._side_name(side)} won the first {k} tricks"
        who += f"; seat {seat}" if self.is_team else " and"
        if self.decision == STOP:
            # The side lays its cards down and scores 1.
            self._tell("vole", f"{who} stops")
            self._score_side(side, "vole-stop", 1, "TRI.VOLE", f"stopped at {k} tricks to none")
            self._end()
            return
        self.bound = side
        self._phase = Phase.PLAY
        self._tell("vole", f"{who} continues: the vole is engaged")

    # -- the card play (the base's loop, with these hooks) --------------------------------

    def legal_mask(self, hand: i64, led: i64, mask: i64, count: i64) -> i64:
        # The regime's legal set (TRI.FORCEE, TRI.FORCAT, TRI.PLAISANT).
        return legal_cards(self.trick_rules, hand, self.trump, led, mask, count == self.players - 1)

    def _trick_end(self, winner: int, best: int, led: int, mask: int) -> bool:
        """Count the trick; score and end the coup, or ask for the vole decision, as the
        rules say. True when the run of card plays must stop."""
        w = self.side[winner]
        self.won[winner] += 1
        self.side_won[w] += 1
        k = self.trick_number
        bound = self.bound
        if bound >= 0 and w != bound:
            # The bound side lost a trick: it loses at once and the coup ends.
            if self.bound_by_abandon:
                rule, why = "TRI.ABANDON", "bound by refusing the abandon"
            else:
                rule, why = "TRI.VOLE", "vole engaged"
            self.note("vole", f"{self._side_name(bound)} loses trick {k}: the vole fails")
            self._score_side(
                bound,
                "vole-failed",
                self.opts.vole_fail_penalty,
                rule,
                f"{why}; trick {k} lost to seat {winner}",
            )
            self._end()
            return True
        if k == self.hand_size:
            self._score_end()
            return True
        if bound < 0 and self.side_won[w] == k and k > self.hand_size - k:
            # TRI.VOLE: every trick so far and a majority: stop or continue.
            self._phase = Phase.VOLE
            self.note(
                "vole", f"{self._side_name(w)} has won the first {k} tricks: stop or continue"
            )
            return True
        return False

    def _score_end(self) -> None:
        # All tricks played: the bound side made its vole, or the most tricks score the point.
        bound = self.bound
        hs = self.hand_size
        if bound >= 0:
            if self.bound_by_abandon:
                value, rule = self.opts.refused_abandon_vole_value, "TRI.ABANDON"
                note = f"all {hs} tricks after refusing the abandon"
            else:
                value, rule = self.opts.vole_value, "TRI.VOLE"
                note = f"all {hs} tricks, vole engaged"
            self.note("vole", f"{self._side_name(bound)} makes the vole")
            self._score_side(bound, "vole", value, rule, note)
            self._end()
            return
        best = max(self.side_won)
        tied = {s for s, t in enumerate(self.side_won) if t == best}
        # Primauté: the earliest seat in the order of trick 1 (from the dealer's right).
        n = self.players
        first = next(
            self.side[(self.dealer + i) % n]
            for i in range(1, n + 1)
            if self.side[(self.dealer + i) % n] in tied
        )
        plural = "s" if best != 1 else ""
        note = f"{best} trick{plural}"
        if len(tied) > 1:
            others = sorted(tied - {first})
            note += f", primauté over {', '.join(self._side_name(s) for s in others)}"
        self.note("point", f"{self._side_name(first)} takes the point: {note}")
        self._score_side(first, "point", 1, "TRI.POINT", note)
        self._end()

    def _score_side(self, side: int, kind: str, points: int, rule: str, note: str) -> None:
        # Scores are per seat: every member of a team gets the same line.
        for seat in self.members[side]:
            self.score(seat, kind, (points,), rule, note)

    def _end(self) -> None:
        self._phase = Phase.OVER
        self.over = True

    # -- views ----------------------------------------------------------------------------

    def describe(self) -> list[str]:
        retourne = card_str(self.deal.retourne)
        order = _order_text(self.order)
        out = [f"trump {SUIT_WORDS[self.trump]} (retourne {retourne}); order {order}"]
        if self.is_team:
            teams = " v ".join(self._side_name(t) for t in range(len(self.members)))
            dealing = self.side[self.dealer]
            out.append(f"teams: {teams}; team {dealing} deals, team {1 - dealing} leads")
        out.extend(self.story)
        return out

    def _public(self, seat: int | None) -> dict[str, Any]:
        public: dict[str, Any] = {
            "retourne": card_str(self.deal.retourne),
            "trick_number": self.trick_number,
            "tricks_won": tuple(self.won),
            "side_tricks": tuple(self.side_won),
            "sides": self.members,
            "bound": self.members[self.bound] if self.bound >= 0 else (),
            "vole_engaged": self.bound >= 0 and not self.bound_by_abandon,
            "abandon_offered_by": self.offerer,
            "abandon_answer": ABANDON_WORDS[self.answer] if self.answer >= 0 else None,
            "robber": self.robber,
            "face_up": card_str(self.face_up) if self.face_up >= 0 else None,
            "turned": tuple(card_str(c) for c in self.turned),
            "discards": self.discarded.bit_count(),
        }
        if seat is not None and seat == self.robber:
            public["discarded"] = mask_str(self.discarded, self.order)
        return public

    def _public_cards(self, seat: int | None) -> dict[str, CardFact]:
        cards: dict[str, CardFact] = {
            "retourne": (self.deal.retourne,),
            "turned": tuple(self.turned),
        }
        if self.face_up >= 0:
            cards["face_up"] = (self.face_up,)
        if seat is not None and seat == self.robber:
            cards["discarded"] = tuple(iter_cards(self.discarded))
        return cards

    def _known(self, seat: int | None) -> dict[int, int]:
        known: dict[int, int] = {}
        opts = self.opts
        if seat is not None and isinstance(opts, TriompheEquipeOptions) and opts.partners_see_hands:
            for p in self.members[self.side[seat]]:
                if p != seat:
                    known[p] = self.held[p]
        robber = self.robber
        if robber >= 0 and robber != seat:
            # What the robber took face up, and the ace he showed, while he holds them.
            shown = self.taken | (1 << self.ace_shown if self.ace_shown >= 0 else 0)
            shown &= self.held[robber]
            if shown:
                known[robber] = known.get(robber, 0) | shown
        return known


PHASES: dict[Enum, PhaseRule] = {
    Phase.PILLAGE: PhaseRule(
        TriompheHand._pillage_to_act,
        TriompheHand._pillage_legal,
        TriompheHand._pillage_refusal,
        TriompheHand._pillage_apply,
    ),
    Phase.PLAY: PhaseRule(
        Hand._turn_to_act,
        TriompheHand._cards_legal,
        TriompheHand._cards_refusal,
        TriompheHand._cards_apply,
        plays=True,
    ),
    Phase.ANSWER: PhaseRule(
        TriompheHand._answer_to_act,
        TriompheHand._answer_legal,
        TriompheHand._answer_refusal,
        TriompheHand._answer_apply,
    ),
    Phase.VOLE: PhaseRule(
        Hand._turn_to_act,
        TriompheHand._vole_legal,
        TriompheHand._vole_refusal,
        TriompheHand._vole_apply,
    ),
}


class TriompheMatch(Match):
    """A match of La Triomphe: coups until a side reaches the target."""

    def __init__(self, rules: Rules, start: Start | None = None, log_events: bool = True) -> None:
        super().__init__(rules, start, log_events)
        self.deal_rule = "TRI.DEAL"
        opts = rules.options
        assert isinstance(opts, TriompheOptions)
        self.opts = opts
        self.pack = PACK
        self.order = _ORDERS[opts.rank_order]
        n = self.players
        self.is_team = rules.ruleset == "equipe"
        if self.is_team:
            # TRI.EQUIPE: seats 0..k-1 and k..2k-1; each team's last seat is its dealer.
            k = n // 2
            self.side: tuple[int, ...] = tuple(s // k for s in range(n))
            self.members: tuple[tuple[int, ...], ...] = (tuple(range(k)), tuple(range(k, n)))
            self.dealers: tuple[int, ...] = (k - 1, n - 1)
        else:
            self.side = tuple(range(n))
            self.members = tuple((s,) for s in range(n))
            self.dealers = ()
        for team in self.members:
            values = {self.start_scores[s] for s in team}
            if len(values) > 1:
                raise RulesError(
                    f"seats {', '.join(map(str, team))} are partners and must start with the "
                    f"same score, not {' and '.join(str(v[0]) for v in sorted(values))}",
                    key="scores",
                )
        reached = [s for s in range(n) if self.start_scores[s][0] >= opts.target]
        if reached:
            raise RulesError(
                f"seat {reached[0]} starts with {self.start_scores[reached[0]][0]} points, at "
                f"or above the target of {opts.target}: the match would be over",
                key="target",
            )

    def team_of(self, seat: int) -> int:
        return self.side[seat] if self.is_team else 0

    def first_dealers(self) -> tuple[int, ...]:
        # TRI.EQUIPE: a team's last seat deals, so that the other team leads.
        return self.dealers if self.is_team else tuple(range(self.players))

    def public_action(self, action: int) -> int:
        # TRI.PILLE: the robber discards face down; the others learn that he took the face-up
        # card and discarded one (PILLE_HIDDEN, actions.py: no card, the action's hidden form).
        if action & 7 == PILLE and action >> 3 != PILLE_STOP:
            return encode(PILLE, PILLE_HIDDEN)
        return action

    def _new_hand(self, number: int, dealer: int, deal: Deal) -> Hand:
        if self.is_team and dealer not in self.dealers:
            a, b = self.dealers
            raise DealError(
                "bad-dealer",
                f"in the team game the dealer is a team's last seat (seat {a} or {b}), so "
                f"that the other team leads; not seat {dealer}",
                "TRI.EQUIPE",
            )
        return TriompheHand(self, number, dealer, deal)

    def _check_deal(self, deal: Deal) -> None:
        if deal.retourne < 0:
            raise DealError(
                "deal-shape",
                "deal: La Triomphe turns a retourne after the deal: give 'retourne'",
                "TRI.DEAL",
            )
        n = self.players
        check_cards(deal, PACK, self.opts.hand_size, n, "TRI.DEAL", PACK_NAME)
        talon = 31 - n * self.opts.hand_size
        if len(deal.talon) != talon:
            raise DealError(
                "deal-talon",
                f"deal: the talon has {len(deal.talon)} cards, expected {talon}: the hands, "
                f"the retourne and the talon are the whole of {PACK_NAME}",
                "TRI.DEAL",
            )

    def deal_deck(self, dealer: int, deck: Sequence[int]) -> Deal:
        """RULES.md 7: two rounds from the seat after the dealer, `hand_size // 2` cards then
        the rest (2 then 3), then the retourne; the rest is the talon, top first."""
        n = self.players
        self._check_dealer(dealer)
        check_deck(deck, PACK, "TRI.DEAL", PACK_NAME)
        size = self.opts.hand_size
        hands = [0] * n
        pos = 0
        for packet in (size // 2, size - size // 2):
            for i in range(1, n + 1):
                seat = (dealer + i) % n
                for c in deck[pos : pos + packet]:
                    hands[seat] |= 1 << c
                pos += packet
        return Deal(tuple(hands), deck[pos], tuple(deck[pos + 1 :]))

    def _next_dealer(self, previous: HandResult) -> int:
        # TRI.DEAL (7): the seat after the dealer; in the team game the other team's fixed
        # dealer (TRI.EQUIPE).
        if self.is_team:
            a, b = self.dealers
            return b if previous.dealer == a else a
        return (previous.dealer + 1) % self.players

    def _end_after_hand(self) -> None:
        # TRI.END: the first side to reach the target wins (one side scores per coup).
        target = self.opts.target
        for side, seats in enumerate(self.members):
            if self.scores[seats[0]][0] >= target:
                self.finished = True
                self.winners = seats
                who = f"team {side}" if self.is_team else f"seat {side}"
                self.end_reason = f"{who} reached {target} point{'s' if target != 1 else ''}"
                return

    def _resign_winners(self, seat: int) -> tuple[int, ...]:
        # A seat that concedes concedes for its team: the other team wins.
        if self.is_team:
            return self.members[1 - self.side[seat]]
        return super()._resign_winners(seat)


# The registry entry (registry.py builds the GameSpec from these: this module does not
# import the registry, which imports it).
NAME = "triomphe"
TITLE = "La Triomphe"
ALIASES: tuple[str, ...] = ()
RULESETS: dict[str, type[GameOptions]] = {
    "individuelle": TriompheIndividuelleOptions,
    "equipe": TriompheEquipeOptions,
    "as-qui-pille": TriompheAsQuiPilleOptions,
}
UNITS: tuple[str, ...] = ("points",)
FIXED_PLAYERS: int | None = None  # `players` is an option of each ruleset
SEED = "002"
