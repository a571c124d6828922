"""L'Impériale: RULES.md sections 1 (`moderne`, seed 000 `seeds/000_e6b672ed86b499ab.txt`) and
2 (`academie`, the default, seed 001 `seeds/001_baf2898bda2502d9.txt`), with section 7.

Two players with 32 cards (7 to ace), or in `academie` three with 36 (the sixes added).
Twelve cards each; the retourne sets trump (with two players it lies on the 7-card talon,
never used; with three it is the dealer's last card and stays in his hand). Seats play in
order from the seat after the dealer, the *premier en cartes* (E). Play uses R1 (K Q J A 10
9 8 7 6), the Point uses R2 values (A 11, K Q J 10, others their pips). Honours are the trump
A K Q J and 7 (the 6 with three players). A jeton is 4 points, a fiche is one impériale (24
points); six jetons become a fiche at once, extra jetons kept. The first to hold
`target_fiches` fiches wins at that instant, even mid-coup; nothing after it is scored.

`academie` (`IMP-A.*`): events strictly in order, each followed by conversion, effacement
and the target check: E1 retourne honour, dealer +1 jeton, protected; E2 then E3 the
impériales d'emblée of each seat from E to the dealer (cartes blanches +2 fiches; quatrièmes
majeures +1, in trump `trump_major_value`; carrés +1; then the dealer's optional impériale de
retourne, +1 never 2); E4 cartes blanches shown stop the coup; E5 the Point, by count then
pips, ties to the earliest seat, +1 jeton; E6 twelve tricks under `LEGAL_IMP1725`
(`IMP-A.PLAY`), the winner of a trick +1 jeton per trump honour in it; E7 the optional
impériale tombée (one seat's tricks hold trump K Q J A), +1 fiche; E8 capot +2 fiches, else
+1 jeton per trick above 6 (above 4 with three players, paid from E round the table).
Effacement (`IMP-A.EFFACEMENT`): whenever a seat gains a fiche, every opponent's jetons fall
to 0, except that before the Point the dealer keeps this coup's retourne jeton.

`moderne` (`IMP-M.*`): retourne (`IMP-M.RETOURNE`), the couleur by pips, ties to E
(`IMP-M.COULEUR`), then the impériales (`IMP-M.IMPERIALES`: des quatre honneurs, de couleur,
tournée; 1 fiche each); twelve tricks under `LEGAL_IMP000`, forcée (`IMP-M.PLAY`); after each
trick an impériale tombée, two trump K Q J A in it, +1 fiche to the winner and no honour
jetons (`IMP-M.TOMBEE`), else +1 jeton per trump honour (`IMP-M.HONNEURS`); after trick 12
one jeton for more than six tricks, or at 6-6 for the first to six (`IMP-M.CARTES`); target 3
(`IMP-M.END`). No effacement, capot or cartes blanches unless an option says so.

Score lines: one per event, with its rule id and, in its note, what was scored and the seat's
score after it. A sixth jeton is a `conversion` line (+1 fiche, -6 jetons) under the rule of
the event that brought it; effacement is an `effacement` line (minus the jetons lost) for the
seat that loses them, under `IMP-A.EFFACEMENT` in both rulesets (RULES.md has no `IMP-M` id
for it: `moderne` borrows the académie's rule with `effacement = true`, as section 7 says).
The sum of a seat's lines is its change of score. Everything scored before the first card
(E1-E5, and the whole coup when cartes blanches stop it or the target is reached in the
announcements) is scored as the hand is dealt (`ScoreLine.at` 0).

Deliberate choices (RULES.md 1.2, 2.3, 6, 7):
- Dealing and dealers: rule id `IMP-A.E1` (`academie`) or `IMP-M.RETOURNE` (`moderne`), the
  event of the turned card; three-player deal shapes `IMP-A.3P`. Packets of `packet` (3 in
  `moderne`) from the seat after the dealer; the deal passes to the next seat (7).
- Order within one seat's impériales (7): cartes blanches; quatrièmes majeures by suit
  ♠ ♥ ♦ ♣; carrés J, Q, K, A, 7 (6 with three players); then the impériale de retourne. In
  `moderne` the seed's order: des quatre honneurs K, Q, J, A, 7; de couleur ♠ ♥ ♦ ♣; tournée.
- `allow_overlap = false` (2.3.9): no card serves in two impériales; a seat scores the
  disjoint choice worth the most fiches, and on equal worth the one that keeps the earliest
  impériales of the order above. The impériale de retourne then needs three cards not used.
- `imperiales_before_point = false` in `academie`: the Point comes right after E1, so the
  retourne protection has lapsed before any impériale (E5 ends it).
- Cartes blanches stopping the coup (2.3.4): E1-E3 stand, the impériale de retourne too.
- The impériale de retourne (2.3.10): dealer only, both kinds (trump quatrième majeure, or
  the carré of the retourne's rank when that carré is an impériale: J, Q, K, A or 7); never
  with three players (`RulesError`, 7).
- `moderne`, `tombee_mode = end_of_coup`: the académie's E7 after trick 12, with its capture
  requirement; honour jetons are then scored at every trick. `honour_timing = end_of_coup`:
  after trick 12 in the seed's order, the tombée (end of coup), then the cards, then the
  honours trick by trick. A per-trick tombée needs the winning card and another card of the
  trick to be trump K, Q, J or A (1.2.2).
- `moderne`, `cards_scoring = per_trick`: one jeton per trick above six, nothing at 6-6, no
  capot. `capot_fiches = 0` in `academie`: no capot impériale, twelve tricks score six jetons.
- A match may continue from `Start` scores only with 0-5 jetons and fewer fiches than the
  target (`RulesError`, key `start`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, NamedTuple

from mypy_extensions import i64

from tapis_cartes.referee.engine.base import (
    CardFact,
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
    JACK,
    KING,
    QUEEN,
    R1,
    SEVEN,
    SIX,
    SUIT_MASK,
    SUIT_WORDS,
    card,
    card_str,
    count_cards,
    deck_of_ranks,
    iter_cards,
    mask_str,
    rank_of,
)
from tapis_cartes.referee.engine.errors import DealError, IllegalAction, RulesError
from tapis_cartes.referee.engine.options import (
    CardsScoring,
    GameOptions,
    HonourTiming,
    ImperialeAcademieOptions,
    ImperialeModerneOptions,
    PointRule,
    TombeeMode,
    TourneeHolder,
)
from tapis_cartes.referee.engine.tricks import Regime, TrickRules, explain, legal_cards

__all__ = [
    "ALIASES",
    "FIXED",
    "FIXED_PLAYERS",
    "NAME",
    "RULESETS",
    "SEED",
    "TITLE",
    "UNITS",
    "Combo",
    "Fixed",
    "ImperialeHand",
    "ImperialeMatch",
    "Phase",
    "point_of",
]

HAND_SIZE = 12
PACK_32 = deck_of_ranks(range(SEVEN, 13))
PACK_36 = deck_of_ranks(range(SIX, 13))
_PACK_NAMES = {2: "the 32-card pack (7 to ace)", 3: "the 36-card pack (6 to ace)"}
FIGURES = deck_of_ranks((JACK, QUEEN, KING))  # cartes blanches hold none of these
MAJOR_RANKS = (JACK, QUEEN, KING, ACE)  # a quatrième majeure, an impériale de couleur
QUATRIEME = tuple(sum(1 << card(r, s) for r in MAJOR_RANKS) for s in range(4))
CARRE = tuple(sum(1 << card(r, s) for s in range(4)) for r in range(13))
# R2 point values by rank (2 .. ace): pips, K Q J 10, A 11.
POINT_VALUE: Final[tuple[int, ...]] = (2, 3, 4, 5, 6, 7, 8, 9, 10, 10, 10, 10, 11)
_RANK_WORDS = {
    SIX: "sixes",
    SEVEN: "sevens",
    JACK: "jacks",
    QUEEN: "queens",
    KING: "kings",
    ACE: "aces",
}


def point_of(hand: int, by_count: bool) -> tuple[int, int, int]:
    """The Point of a hand (RULES.md 1.1 step 2, 2.1 E5): `(count, total, suit)` of its best
    suit, by number of cards then point total (`by_count`), or by total alone."""
    best = (-1, -1, -1)
    best_key: tuple[int, ...] = (-1,)
    for s in range(4):
        cards = hand & SUIT_MASK[s]
        total = 0
        for c in iter_cards(cards):  # a loop: compiled, no generator object per suit
            total += POINT_VALUE[c % 13]
        count = count_cards(cards)
        key = (count, total) if by_count else (total,)
        if key > best_key:
            best_key = key
            best = (count, total, s)
    return best


class Combo(NamedTuple):
    """An impériale d'emblée a seat may score: its kind, the cards of the hand it uses, its
    value in fiches and a note."""

    kind: str
    cards: int
    value: int
    note: str


def best_disjoint(combos: Sequence[Combo]) -> list[Combo]:
    """`allow_overlap = false` (2.3.9): the combos, no card in two, worth the most fiches;
    on equal worth the choice that keeps the earliest combos (there are at most a few)."""
    n = len(combos)
    best: tuple[int, tuple[bool, ...]] = (-1, ())
    for bits in range(1 << n):
        used = 0
        value = 0
        ok = True
        for i in range(n):
            if bits >> i & 1:
                if used & combos[i].cards:
                    ok = False
                    break
                used |= combos[i].cards
                value += combos[i].value
        if ok:
            key = (value, tuple(bool(bits >> i & 1) for i in range(n)))
            best = max(best, key)
    return [c for c, keep in zip(combos, best[1], strict=True) if keep]


@dataclass(frozen=True)
class Fixed:
    """What a ruleset fixes that is not an option: its trick regime and the rule ids its
    events cite. The options themselves are read from the ruleset's model (options.py), where
    each ruleset also names the values it fixes for the other's options."""

    regime: Regime
    deal_id: str
    end_id: str
    play_id: str
    retourne_id: str
    first_id: str  # impériales d'emblée of the seats before the dealer
    dealer_id: str  # the dealer's impériales d'emblée
    point_id: str
    honours_id: str
    tombee_id: str
    cards_id: str


FIXED = {
    "moderne": Fixed(
        regime=Regime.FORCEE,  # LEGAL_IMP000
        deal_id="IMP-M.RETOURNE",
        end_id="IMP-M.END",
        play_id="IMP-M.PLAY",
        retourne_id="IMP-M.RETOURNE",
        first_id="IMP-M.IMPERIALES",
        dealer_id="IMP-M.IMPERIALES",
        point_id="IMP-M.COULEUR",
        honours_id="IMP-M.HONNEURS",
        tombee_id="IMP-M.TOMBEE",
        cards_id="IMP-M.CARTES",
    ),
    "academie": Fixed(
        regime=Regime.IMPERIALE_1725,  # LEGAL_IMP1725
        deal_id="IMP-A.E1",
        end_id="IMP-A.TARGET",
        play_id="IMP-A.PLAY",
        retourne_id="IMP-A.E1",
        first_id="IMP-A.E2",
        dealer_id="IMP-A.E3",
        point_id="IMP-A.E5",
        honours_id="IMP-A.E6",
        tombee_id="IMP-A.E7",
        cards_id="IMP-A.E8",
    ),
}


class Phase(PhaseEnum):
    ANNOUNCE = "announce"  # E1-E5 (moderne steps 1-3), scored as the hand is dealt
    PLAY = "play"
    OVER = "over"


class ImperialeHand(Hand):
    """One coup: the announcements as it is dealt, then twelve tricks and the end of coup."""

    def __init__(self, match: ImperialeMatch, number: int, dealer: int, deal: Deal) -> None:
        super().__init__(match, number, dealer, deal)
        opts = match.opts
        self.opts = opts
        self.ids = match.ids
        self.moderne = match.moderne
        # Read at every trick: kept here once.
        self.trick_rules = match.trick_rules
        self.first_lead_trump = opts.three_player_first_lead_trump
        self.tombee = opts.tombee_mode
        self.honours_at_end = opts.honour_timing is HonourTiming.END_OF_COUP
        self.phases = PHASES
        self.play_rule = self.ids.play_id
        n = self.players
        self.retourne = deal.retourne
        self.trump = deal.retourne // 13
        low = SIX if n == 3 else SEVEN
        self.low = low
        self.majors = QUATRIEME[self.trump]  # trump K Q J A
        # The ranks whose carré is an impériale (RULES.md 1.1 step 3, 2.1 E2 (b)), in the
        # order they are scored; no other rank makes one, in hand or with the retourne.
        self.carre_ranks = (KING, QUEEN, JACK, ACE, SEVEN) if self.moderne else (*MAJOR_RANKS, low)
        self.honours = self.majors | 1 << card(low, self.trump)
        # The seats from E round to the dealer: announcements, the Point, card jetons.
        self.order = tuple((dealer + 1 + k) % n for k in range(n))
        scores = match.scores
        self.fiches = [s[0] for s in scores]  # the running score during the hand
        self.jetons = [s[1] for s in scores]
        self.protected = [0] * n  # IMP-A.EFFACEMENT: this coup's retourne jeton
        self.pre_point = True  # E1-E4: before the Point (the protection holds)
        self.winner = -1  # the seat that reached the target in this hand
        self.shown = [0] * n  # cards shown in the announcements (public)
        self.blanches: list[int] = []  # seats that showed cartes blanches
        self.point_winner = -1
        self.won = [0] * n  # tricks per seat
        self.taken = [0] * n  # cards won in tricks per seat
        self.first_to_six = -1  # IMP-M.CARTES: who reached six tricks first
        self.pending_honours: list[tuple[int, int, int]] = []  # (trick, winner, honours)
        self._phase = Phase.ANNOUNCE
        if n == 3:
            self.shown[dealer] |= 1 << self.retourne  # shown, and kept in the dealer's hand
            self.show(dealer, 1 << self.retourne, "retourne", "IMP-A.3P")
        self._announce()

    @property
    def phase(self) -> Phase:
        assert isinstance(self._phase, Phase)
        return self._phase

    # -- score keeping (RULES.md 2.1 "Score keeping", shared by both rulesets) -------------

    def _line(self, seat: int, kind: str, delta: tuple[int, int], rule: str, note: str) -> None:
        self.fiches[seat] += delta[0]
        self.jetons[seat] += delta[1]
        now = f"now {self.fiches[seat]}F {self.jetons[seat]}J"
        self.score(seat, kind, delta, rule, f"{note}; {now}" if note else now)

    def _jetons(self, seat: int, count: int, kind: str, rule: str, note: str) -> None:
        """award_jetons: +`count` jetons; six of them become a fiche at once."""
        self._line(seat, kind, (0, count), rule, note)
        if self.jetons[seat] >= 6:
            k = self.jetons[seat] // 6
            self.protected[seat] = 0  # the retourne jeton has been converted
            self._line(seat, "conversion", (k, -6 * k), rule, f"{6 * k} jetons make {k}F")
            self._fiches_won(seat, True)

    def _fiches(
        self, seat: int, count: int, kind: str, rule: str, note: str, erase: bool = True
    ) -> None:
        """award_fiches: +`count` fiches (`erase`: whether this kind erases, 2.3.2)."""
        self._line(seat, kind, (count, 0), rule, note)
        self._fiches_won(seat, erase)

    def _fiches_won(self, seat: int, erase: bool) -> None:
        cfg = self.opts
        if erase and cfg.effacement:
            # IMP-A.EFFACEMENT: every opponent's jetons fall to 0; before the Point the
            # dealer keeps this coup's retourne jeton (protect_retourne).
            keep_protected = cfg.protect_retourne and self.pre_point
            for k in range(1, self.players):
                o = (seat + k) % self.players
                keep = self.protected[o] if keep_protected else 0
                lost = self.jetons[o] - keep
                if lost > 0:
                    why = f"seat {seat} won an impériale"
                    if keep:
                        why += "; the retourne jeton is protected"
                    self._line(o, "effacement", (0, -lost), "IMP-A.EFFACEMENT", why)
        if self.winner < 0 and self.fiches[seat] >= cfg.target_fiches:
            # IMP-A.TARGET / IMP-M.END: the match ends at this very event.
            self.winner = seat
            self.note("target", f"seat {seat} holds {self.fiches[seat]} impériales", seat)

    # -- the announcements ----------------------------------------------------------------

    def _announce(self) -> None:
        cfg = self.opts
        if cfg.imperiales_before_point:
            steps = (self._retourne_honour, self._imperiales, self._point)
        else:
            steps = (self._retourne_honour, self._point, self._imperiales)
        self.note("trump", f"retourne {card_str(self.retourne)}: {SUIT_WORDS[self.trump]}")
        for step in steps:
            step()
            if self.winner >= 0 or self.blanches:
                self._phase = Phase.OVER
                self.over = True
                return
        self._phase = Phase.PLAY
        self.turn = self.order[0]  # E leads the first trick

    def _retourne_honour(self) -> None:
        # IMP-A.E1 / IMP-M.RETOURNE: a turned honour gives the dealer a jeton, protected in
        # academie unless it made his sixth (RULES.md 2.1, E1).
        r = self.retourne
        if not self.honours >> r & 1:
            return
        d = self.dealer
        before = self.fiches[d]
        self._jetons(d, 1, "retourne", self.ids.retourne_id, f"{card_str(r)} is an honour")
        if self.opts.protect_retourne and self.fiches[d] == before:
            self.protected[d] = 1

    def _imperiales(self) -> None:
        # IMP-A.E2, E3 / IMP-M.IMPERIALES: each seat from E to the dealer; then IMP-A.E4.
        for seat in self.order:
            self._emblee(seat)
            if self.winner >= 0:
                return
        if self.blanches:
            who = ", ".join(f"seat {s}" for s in self.blanches)
            self.note("cartes-blanches", f"cartes blanches ({who}): the coup is not played")

    def _emblee(self, seat: int) -> None:
        cfg = self.opts
        hand = self.deal.hands[seat]
        rule = self.ids.dealer_id if seat == self.dealer else self.ids.first_id
        if cfg.cartes_blanches and not hand & FIGURES:
            # IMP-A.E2 (a): no king, queen or jack among the twelve: a double impériale.
            self.blanches.append(seat)
            self.shown[seat] |= hand
            self.show(seat, hand, "cartes-blanches", rule)
            erase = cfg.blanches_erase
            self._fiches(seat, 2, "cartes-blanches", rule, "no king, queen or jack", erase)
            if self.winner >= 0:
                return
        combos = self.combos(seat)
        if not cfg.allow_overlap:
            combos = best_disjoint(combos)
        used = 0
        for combo in combos:
            used |= combo.cards
            self.shown[seat] |= combo.cards
            self.show(seat, combo.cards, combo.kind, rule)
            self._fiches(seat, combo.value, combo.kind, rule, combo.note)
            if self.winner >= 0:
                return
        if cfg.imperiale_de_retourne and seat == self.dealer:
            self._imperiale_de_retourne(hand, 0 if cfg.allow_overlap else used)

    def combos(self, seat: int) -> list[Combo]:
        """The impériales en main of a seat's dealt hand, in the order they are scored."""
        hand = self.deal.hands[seat]
        trump = self.trump
        out: list[Combo] = []
        if self.moderne:
            # IMP-M.IMPERIALES: des quatre honneurs, de couleur, tournée (seed 000's order).
            for r in self.carre_ranks:
                if hand & CARRE[r] == CARRE[r]:
                    note = f"four {_RANK_WORDS[r]}"
                    out.append(Combo("imperiale-des-honneurs", CARRE[r], 1, note))
            for s in range(4):
                if hand & QUATRIEME[s] == QUATRIEME[s]:
                    note = f"K Q J A of {SUIT_WORDS[s]}"
                    out.append(Combo("imperiale-de-couleur", QUATRIEME[s], 1, note))
            rest = self.majors & ~(1 << self.retourne)
            if (
                self.majors >> self.retourne & 1
                and hand & rest == rest
                and (self.opts.tournee_holder is TourneeHolder.ANY or seat == self.dealer)
            ):
                note = f"{card_str(self.retourne)} turned, the other three held"
                out.append(Combo("imperiale-tournee", rest, 1, note))
            return out
        # IMP-A.E2 (b): quatrièmes majeures by suit, then carrés J Q K A and the low card.
        for s in range(4):
            if hand & QUATRIEME[s] == QUATRIEME[s]:
                value = self.opts.trump_major_value if s == trump else 1
                note = f"J Q K A of {SUIT_WORDS[s]}" + (" (trump)" if s == trump else "")
                out.append(Combo("quatrieme-majeure", QUATRIEME[s], value, note))
        for r in self.carre_ranks:
            if hand & CARRE[r] == CARRE[r]:
                out.append(Combo("carre", CARRE[r], 1, f"four {_RANK_WORDS[r]}"))
        return out

    def _imperiale_de_retourne(self, hand: int, used: int) -> None:
        # IMP-A.E3 (c), 2.3.10: three cards of a trump quatrième majeure or of a carré that is
        # an impériale (J Q K A 7, E2 (b)) in the dealer's hand, the fourth turned: +1 fiche,
        # never 2 (two players only).
        r = self.retourne
        bit = 1 << r
        groups = [self.majors]
        if rank_of(r) in self.carre_ranks:
            groups.append(CARRE[rank_of(r)])
        for group in groups:
            rest = group & ~bit
            if group & bit and hand & rest == rest and not rest & used:
                self.shown[self.dealer] |= rest
                self.show(self.dealer, rest, "imperiale-de-retourne", self.ids.dealer_id)
                note = f"{card_str(r)} completes {' '.join(map(card_str, iter_cards(rest)))}"
                erase = self.opts.optional_erase
                rule = self.ids.dealer_id
                self._fiches(self.dealer, 1, "imperiale-de-retourne", rule, note, erase)
                return

    def _point(self) -> None:
        # IMP-A.E5 / IMP-M.COULEUR: best suit by count then total (or total), ties to the
        # earliest seat; the retourne protection lapses as this event starts.
        by_count = self.opts.point_rule is PointRule.COUNT_THEN_PIPS
        self.pre_point = False
        self.protected = [0] * self.players
        best_key: tuple[int, ...] = ()
        points: list[tuple[int, int, int, int]] = []
        winner = -1
        for seat in self.order:
            count, total, suit = point_of(self.deal.hands[seat], by_count)
            points.append((seat, count, total, suit))
            key = (count, total) if by_count else (total,)
            if key > best_key:  # strictly better: a tie stays with the earlier seat
                best_key = key
                winner = seat
        self.point_winner = winner
        said = {s: f"{c} {SUIT_WORDS[x]} worth {t}" for s, c, t, x in points}
        others = ", ".join(f"seat {s}: {said[s]}" for s in self.order if s != winner)
        suit = next(p[3] for p in points if p[0] == winner)
        self.shown[winner] |= self.deal.hands[winner] & SUIT_MASK[suit]
        kind = "couleur" if self.moderne else "point"
        self.show(winner, self.deal.hands[winner] & SUIT_MASK[suit], kind, self.ids.point_id)
        self._jetons(winner, 1, kind, self.ids.point_id, f"{said[winner]}, against {others}")

    # -- the card play (the base's loop, with these hooks) --------------------------------

    def legal_mask(self, hand: i64, led: i64, mask: i64, count: i64) -> i64:
        if led < 0 and self.first_lead_trump and self.trick_number == 1:
            # IMP-A.3P (three_player_first_lead_trump): the first lead is a trump if possible.
            return (hand & SUIT_MASK[self.trump]) or hand
        return legal_cards(self.trick_rules, hand, self.trump, led, mask)  # IMP-A.PLAY

    def _not_a_card(self, seat: int, action: int) -> IllegalAction | None:
        # Cards only: the referee scores the announcements as the hand is dealt.
        why = "L'Impériale has only play actions (the referee scores the announcements)"
        return self.illegal("wrong-action", seat, action, why, self.play_rule)

    def _why_not(self, seat: int, c: int, hand: int, legal: int) -> tuple[str, str, str]:
        if self.led < 0:
            return "first-lead-trump", "the first lead of the coup must be a trump", "IMP-A.3P"
        rules = self.trick_rules
        code, duty = explain(rules, hand, self.trump, self.led, self.mask, c, by_card=True)
        return code, f"seat {seat} {duty}", self.play_rule

    # -- the tricks and the end of the coup -----------------------------------------------

    def _trick_end(self, winner: int, best: int, led: int, mask: int) -> bool:
        number = len(self.trick_leaders)
        self.won[winner] += 1
        self.taken[winner] |= mask
        if self.won[winner] == 6 and self.first_to_six < 0:
            self.first_to_six = winner
        majors = mask & self.majors
        honours = mask & self.honours
        if self.tombee is TombeeMode.PER_TRICK and majors >> best & 1 and majors.bit_count() >= 2:
            # IMP-M.TOMBEE: a trump K Q J A takes another: an impériale, no honour jetons.
            took = " ".join(card_str(x) for x in iter_cards(majors & ~(1 << best)))
            note = f"trick {number}: {card_str(best)} takes {took}"
            self._fiches(winner, 1, "imperiale-tombee", self.ids.tombee_id, note)
        elif honours:
            if self.honours_at_end:
                self.pending_honours.append((number, winner, honours))
            else:
                self._honours(number, winner, honours)
        if self.winner < 0 and number == HAND_SIZE:
            self._end_of_coup()
        if self.winner >= 0 or number == HAND_SIZE:
            self._phase = Phase.OVER
            self.over = True
        return self.over

    def _honours(self, number: int, winner: int, honours: int) -> None:
        # IMP-A.E6 / IMP-M.HONNEURS: a jeton per trump honour in the trick, whoever played it.
        note = f"trick {number}: {' '.join(card_str(x) for x in iter_cards(honours))}"
        self._jetons(winner, honours.bit_count(), "honneurs", self.ids.honours_id, note)

    def _end_of_coup(self) -> None:
        cfg = self.opts
        if self.tombee is TombeeMode.END_OF_COUP:
            # IMP-A.E7: trump K Q J A in one seat's tricks (not dealt to him, by default).
            for seat in self.order:
                majors = self.majors
                dealt = self.deal.hands[seat] & majors == majors
                if self.taken[seat] & majors == majors and not (
                    dealt and cfg.tombee_requires_capture
                ):
                    note = f"K Q J A of {SUIT_WORDS[self.trump]} in his tricks"
                    erase = cfg.optional_erase
                    self._fiches(seat, 1, "imperiale-tombee", self.ids.tombee_id, note, erase)
                    if self.winner >= 0:
                        return
        self._cards()
        if self.winner >= 0:
            return
        for number, winner, honours in self.pending_honours:
            self._honours(number, winner, honours)
            if self.winner >= 0:
                return

    def _cards(self) -> None:
        # IMP-A.E8 / IMP-M.CARTES.
        cfg = self.opts
        won = self.won
        rule = self.ids.cards_id
        capot = next((s for s in self.order if won[s] == HAND_SIZE), -1)
        if capot >= 0 and cfg.capot_fiches > 0:
            self._fiches(capot, cfg.capot_fiches, "capot", rule, "all twelve tricks")
            return
        if cfg.cards_scoring is CardsScoring.FLAT_FIRST_TO_SIX:
            # Seed 000: one jeton for more than six tricks; at 6-6 the first to six.
            seat = next((s for s in self.order if won[s] > 6), -1)
            note = f"{won[seat]} tricks" if seat >= 0 else "6-6, first to six tricks"
            seat = seat if seat >= 0 else self.first_to_six
            self._jetons(seat, 1, "cartes", rule, note)
            return
        # A jeton per trick above 6 (above 4 with three players), paid from E round the table.
        par = 4 if self.players == 3 else 6
        for seat in self.order:
            if won[seat] > par:
                note = f"{won[seat]} tricks, {won[seat] - par} above {par}"
                self._jetons(seat, won[seat] - par, "cartes", rule, note)
                if self.winner >= 0:
                    return

    # -- views ----------------------------------------------------------------------------

    def describe(self) -> list[str]:
        out = [f"retourne {card_str(self.retourne)}: trump {SUIT_WORDS[self.trump]}"]
        if self.point_winner >= 0:
            what = "couleur" if self.moderne else "point"
            out.append(f"the {what}: seat {self.point_winner}")
        if self.blanches:
            out.append("cartes blanches: the coup is not played")
        if self.winner >= 0:
            # IMP-A.TARGET / IMP-M.END
            when = (
                f"after trick {len(self.trick_leaders)}"
                if len(self.trick_leaders)
                else "in the announcements"
            )
            out.append(f"seat {self.winner} reaches {self.opts.target_fiches} impériales {when}")
        if len(self.trick_leaders):
            out.append("tricks: " + ", ".join(f"seat {s} {w}" for s, w in enumerate(self.won)))
        return out

    def _known(self, seat: int | None) -> dict[int, int]:
        return {
            s: self.shown[s] & self.held[s]
            for s in range(self.players)
            if s != seat and self.shown[s] & self.held[s]
        }

    def _public(self, seat: int | None) -> dict[str, Any]:
        return {
            "retourne": card_str(self.retourne),
            "trick_number": len(self.trick_leaders) + (1 if self._phase is Phase.PLAY else 0),
            "tricks_won": tuple(self.won),
            "point": self.point_winner,
            "cartes_blanches": tuple(self.blanches),
            "shown": tuple(mask_str(m, R1) for m in self.shown),
            "winner": self.winner,
        }

    def _public_cards(self, seat: int | None) -> dict[str, CardFact]:
        return {
            "retourne": (self.retourne,),
            "shown": tuple(tuple(iter_cards(m)) for m in self.shown),
        }

    def _view_scores(self) -> tuple[tuple[int, ...], ...]:
        return tuple(zip(self.fiches, self.jetons, strict=True))


PHASES: dict[Enum, PhaseRule] = {
    Phase.PLAY: PhaseRule(
        Hand._turn_to_act, Hand._play_legal, Hand._play_refusal, Hand._play_apply, plays=True
    ),
}


class ImperialeMatch(Match):
    """A match of L'Impériale, either ruleset: coups until a seat holds the target."""

    units = ("imperiales", "jetons")
    order = R1

    def __init__(self, rules: Rules, start: Start | None = None, log_events: bool = True) -> None:
        super().__init__(rules, start, log_events)
        opts = rules.options
        assert isinstance(opts, (ImperialeModerneOptions, ImperialeAcademieOptions))
        self.opts = opts
        self.moderne = isinstance(opts, ImperialeModerneOptions)
        self.ids = FIXED[rules.ruleset]
        # IMP-A.PLAY / IMP-M.PLAY: the ruleset's regime (the duties are academie options).
        self.trick_rules = TrickRules(
            self.ids.regime, R1, opts.undertrump_duty, opts.force_after_ruff
        )
        self.deal_rule = self.ids.deal_id  # IMP-A.E1 or IMP-M.RETOURNE
        self.pack = PACK_36 if self.players == 3 else PACK_32
        self.pack_name = _PACK_NAMES[self.players]
        target = opts.target_fiches
        for s, (fiches, jetons) in enumerate(self.start_scores):
            if not (0 <= jetons <= 5 and 0 <= fiches < target):
                raise RulesError(
                    f"start scores of seat {s}: {fiches} impériales and {jetons} jetons; a "
                    f"match under way holds 0 to 5 jetons and fewer than {target} impériales",
                    key="start",
                )

    def rules_end_rule(self) -> str:
        return self.ids.end_id

    def _new_hand(self, number: int, dealer: int, deal: Deal) -> Hand:
        if self.players == 3 and not deal.hands[dealer] >> deal.retourne & 1:
            raise DealError(
                "retourne-not-dealers",
                f"deal: the retourne {card_str(deal.retourne)} is not in the dealer's hand "
                f"(seat {dealer}): with three players it is his last card",
                "IMP-A.3P",
            )
        return ImperialeHand(self, number, dealer, deal)

    def _check_deal(self, deal: Deal) -> None:
        rule = self.ids.deal_id
        if self.players == 3:
            # IMP-A.3P: no talon; the retourne is one of the 36 dealt cards.
            check_cards(Deal(deal.hands), self.pack, HAND_SIZE, 3, rule, self.pack_name)
            if deal.talon or not 0 <= deal.retourne < 52:
                raise DealError(
                    "deal-shape",
                    "deal: with three players there is no talon, and the retourne is the "
                    "dealer's last card, named as 'retourne' and kept in his hand",
                    "IMP-A.3P",
                )
            return
        check_cards(deal, self.pack, HAND_SIZE, 2, rule, self.pack_name)
        if deal.retourne < 0 or len(deal.talon) != 7:
            raise DealError(
                "deal-shape",
                f"deal: two players are dealt 12 cards each, then the retourne and a talon of "
                f"7 cards ({len(deal.talon)} given"
                + ("" if deal.retourne >= 0 else ", no retourne")
                + ")",
                rule,
            )

    def deal_deck(self, dealer: int, deck: Sequence[int]) -> Deal:
        """RULES.md 7: packets of `packet` cards in seat order from the seat after the
        dealer; two players: the 25th card is the retourne and the last 7 the talon; three
        players: the 36th card, the dealer's last, is the retourne and stays in his hand."""
        n = self.players
        rule = self.ids.deal_id
        self._check_dealer(dealer)
        check_deck(deck, self.pack, rule, self.pack_name)
        packet = self.opts.packet
        hands = [0] * n
        for i in range(HAND_SIZE * n):
            hands[(dealer + 1 + i // packet) % n] |= 1 << deck[i]
        if n == 3:
            return Deal(tuple(hands), deck[HAND_SIZE * n - 1])
        return Deal(tuple(hands), deck[24], tuple(deck[25:]))

    def _next_dealer(self, previous: HandResult) -> int:
        # RULES.md 7 (2.1 Rotation, 1.1 step 6): the deal passes to the next seat.
        return (previous.dealer + 1) % self.players

    def _end_after_hand(self) -> None:
        # IMP-A.TARGET / IMP-M.END: the seat that reached the target wins, at that event.
        hand = self.results[-1].hand
        if isinstance(hand, ImperialeHand) and hand.winner >= 0:
            self.finished = True
            self.winners = (hand.winner,)
            self.end_reason = f"seat {hand.winner} reached {self.opts.target_fiches} impériales"


# The registry entry (registry.py builds the GameSpec from these).
NAME = "imperiale"
TITLE = "L'Impériale"
ALIASES: tuple[str, ...] = ("impériale",)
RULESETS: dict[str, type[GameOptions]] = {
    "academie": ImperialeAcademieOptions,
    "moderne": ImperialeModerneOptions,
}
UNITS: tuple[str, ...] = ("imperiales", "jetons")
FIXED_PLAYERS: int | None = None  # `players` is an option of each ruleset
SEED = "001"
