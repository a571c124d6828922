"""The one engine interface every game implements (DESIGN.md, "The engine").

- `Rules`: immutable game + ruleset + typed options (+ the number of players).
- `Match`: the hands of one game until it is won. The driver (referee, transcript import,
  verifier) starts each hand with a dealer and a deal; the match checks both against the
  rules, then takes actions: `to_act()`, `legal_actions(seat)`, `refusal(seat, action)` (why
  an action would be refused, changing nothing), `apply(seat, action)` (returns the events it
  caused) or `step(seat, action)` (the same without building events, for replay),
  `view(seat)`, and the outcome (`finished`, `winners`).
- `Hand`: one deal played out. The base owns the card play (the trick in progress as ints,
  the fast loop of replay, the refusal of a card, the view); a game module subclasses it with
  its phases as a phase -> `PhaseRule` table (one function per phase for who acts, the legal
  actions, the refusal, pure, and the change), a few hooks (`legal_mask`, `_trick_end`,
  `_first_lead`, `_public`) and its scoring.

Every entry takes any Python ints (seats, dealers, actions, cards, masks, hand numbers):
each either works or raises a `TapisError` naming the value (`errors.quoted`), in time and
memory bounded by the size of what it was given. The bounds on a match's start and on its
hand numbers are in options.py, with the reasoning that no score can overflow.

Scores are tuples of ints per seat in the game's `units` (`("points",)`, or
`("imperiales", "jetons")` for L'Impériale). Determinism: the same rules, deals and actions
give the same events and scores, always.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Final, NamedTuple, NoReturn

from librt.vecs import append, vec
from mypy_extensions import i64, mypyc_attr

from tapis_cartes.referee.engine.actions import (
    ABANDON,
    KIND_NAMES,
    PILLE,
    PILLE_STOP,
    PLAY,
    RESIGN,
    action_error,
    action_str,
    encode,
)
from tapis_cartes.referee.engine.cards import (
    R3,
    RankOrder,
    card_str,
    count_cards,
    iter_cards,
    mask_str,
)
from tapis_cartes.referee.engine.errors import (
    DealError,
    IllegalAction,
    InvalidAction,
    NotYourTurn,
    RulesError,
    TapisError,
    quoted,
)
from tapis_cartes.referee.engine.options import (
    HAND_NUMBER_MAX,
    START_HAND_MAX,
    START_SCORE_MAX,
    GameOptions,
)
from tapis_cartes.referee.engine.tricks import PlayedTrick, winning_card

__all__ = [
    "CardFact",
    "CardsPassed",
    "CardsShown",
    "CardsTaken",
    "Deal",
    "Event",
    "Hand",
    "HandOver",
    "HandsChanged",
    "Match",
    "MatchOver",
    "Note",
    "PhaseEnum",
    "PhaseRule",
    "Rules",
    "ScoreLine",
    "Start",
    "TrickWon",
    "View",
]

Score = tuple[int, ...]
# A public fact that is cards (View.cards): card ids in order, or a tuple of them per seat.
CardFact = tuple[int, ...] | tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Rules:
    """Game, ruleset, number of players and the validated options (defaults filled in)."""

    game: str
    ruleset: str
    players: int
    options: GameOptions

    def option_values(self) -> dict[str, Any]:
        """Every option with its effective value (enums as their string values)."""
        return self.options.model_dump(mode="json")

    def with_changes(self, changes: Mapping[str, Any] | None = None, **more: Any) -> Rules:
        """These rules with some options changed (`changes`, then `more`): new rules, validated
        as `make_rules` validates (`RulesError` naming the key). The number of players stays:
        a `players` change must agree with it."""
        from tapis_cartes.referee.engine.registry import (
            make_rules,
        )  # the registry imports this module

        values = dict(self.options)
        values.pop("players", None)
        values.update(changes or {})
        values.update(more)
        return make_rules(self.game, self.ruleset, values, self.players)

    @property
    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON of game, ruleset, players and all options."""
        doc = {
            "game": self.game,
            "ruleset": self.ruleset,
            "players": self.players,
            "options": self.option_values(),
        }
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Start:
    """Where a match starts: the number of its first hand and the scores before it (one
    score per seat, one value per unit). `Match` refuses a first hand number outside 1 to
    `START_HAND_MAX` and a score beyond `START_SCORE_MAX` either way (options.py)."""

    hand_number: int = 1
    scores: tuple[Score, ...] | None = None


class Deal:
    """The cards as dealt: one mask per seat, the retourne (-1 if none), the talon top first.
    A value: immutable, equal and hashed by its fields. (A plain class, not a frozen
    dataclass: a dataclass's generated `__init__` is Python code, run once a hand.)"""

    def __init__(
        self, hands: tuple[int, ...], retourne: int = -1, talon: tuple[int, ...] = ()
    ) -> None:
        self.hands: Final = hands
        self.retourne: Final = retourne
        self.talon: Final = talon

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Deal):
            return NotImplemented
        return (
            self.hands == other.hands
            and self.retourne == other.retourne
            and self.talon == other.talon
        )

    def __hash__(self) -> int:
        return hash((self.hands, self.retourne, self.talon))

    def __repr__(self) -> str:
        return f"Deal(hands={self.hands!r}, retourne={self.retourne!r}, talon={self.talon!r})"


# --- events -------------------------------------------------------------------------------


class ScoreLine(NamedTuple):
    """One scoring event: `delta` in the game's units, and the `RULES.md` rule id."""

    seat: int
    kind: str
    delta: Score
    rule: str
    note: str = ""
    at: int = 0  # 1-based index of the action after which it was scored; 0 before any


# The score lines made so far, by value (immutable: shared by every hand that scores one).
_LINES: dict[tuple[int, str, Score, str, str, int], ScoreLine] = {}
_LINES_KEPT: Final = 1 << 16


def score_line(seat: int, kind: str, delta: Score, rule: str, note: str, at: int) -> ScoreLine:
    """The `ScoreLine` of these values: made once per value (they repeat from hand to hand)
    and shared, being immutable."""
    fields = (seat, kind, delta, rule, note, at)
    line = _LINES.get(fields)
    if line is None:
        if len(_LINES) >= _LINES_KEPT:
            _LINES.clear()
        # tuple.__new__: the class's own __new__ is Python code, a frame per line.
        line = _LINES[fields] = tuple.__new__(ScoreLine, fields)
    return line


@dataclass(frozen=True, slots=True)
class TrickWon:
    number: int  # 1-based within the hand
    winner: int
    plays: tuple[tuple[int, int], ...]  # (seat, card) in playing order


@dataclass(frozen=True, slots=True)
class Note:
    """Something public the rules made happen (passes exchanged, contract, trump, ...)."""

    kind: str
    text: str
    seat: int = -1


@dataclass(frozen=True, slots=True)
class HandOver:
    number: int
    scores: tuple[Score, ...]


@dataclass(frozen=True, slots=True)
class MatchOver:
    winners: tuple[int, ...]
    reason: str


# The events of cards that change hands or are shown. Each says who may see which part of
# it (`visible_to`): the engine, not the referee, decides what a seat may know.


@dataclass(frozen=True, slots=True)
class CardsPassed:
    """Cards a seat gave another face down, as the exchange completes (Dame de Pique,
    DP.PASS): the giver and the receiver see them; the others see only how many."""

    seat: int
    to_seat: int
    cards: int  # the cards as a mask; 0 in the copy of a seat that may not see them
    count: int

    def visible_to(self, viewer: int | None) -> CardsPassed:
        if viewer is not None and viewer in (self.seat, self.to_seat):
            return self
        return CardsPassed(self.seat, self.to_seat, 0, self.count)


@dataclass(frozen=True, slots=True)
class CardsTaken:
    """A seat took a face-up card into its hand and discarded one face down (La Triomphe's
    pillage, TRI.PILLE): every seat sees the card taken, only the seat its discard."""

    seat: int
    took: int  # the card taken
    discarded: int  # the card discarded; -1 in the copy of another seat

    def visible_to(self, viewer: int | None) -> CardsTaken:
        if viewer == self.seat:
            return self
        return CardsTaken(self.seat, self.took, -1)


@dataclass(frozen=True, slots=True)
class CardsShown:
    """Cards shown to every seat, and why: an impériale announced, the Point, cartes
    blanches, the retourne kept in the dealer's hand, the trump ace shown to rob, a talon
    card turned in the pillage (by `seat`)."""

    seat: int
    cards: int  # the cards as a mask
    why: str  # e.g. "carre", "point", "retourne", "trump-ace", "turned"
    rule: str  # the RULES.md rule id

    def visible_to(self, viewer: int | None) -> CardsShown:
        return self


@dataclass(frozen=True, slots=True)
class HandsChanged:
    """Every seat's cards after an action changed a hand other than by a card played (the
    exchange completed, a pillage): each seat sees its own only, a spectator none."""

    hands: tuple[int, ...]

    def visible_to(self, viewer: int | None) -> int | None:
        """The viewer's cards (a mask), or None for a spectator."""
        return None if viewer is None else self.hands[viewer]


Event = (
    ScoreLine
    | TrickWon
    | Note
    | HandOver
    | MatchOver
    | CardsPassed
    | CardsTaken
    | CardsShown
    | HandsChanged
)


@dataclass(frozen=True)
class View:
    """What one seat (or a spectator, `seat = None`) may know at this moment."""

    seat: int | None
    phase: str
    hand_number: int
    dealer: int
    hand: int  # this seat's cards (0 for a spectator)
    trick: tuple[tuple[int, int], ...]
    trump: int  # suit, or -1
    to_act: tuple[int, ...]
    legal: tuple[int, ...]
    scores: tuple[Score, ...]
    known: dict[int, int] = field(default_factory=dict)  # other seats' cards it may see
    public: dict[str, Any] = field(default_factory=dict)
    # The public facts that are cards, as data (the same keys as in `public`, where they are
    # text for a person).
    cards: dict[str, CardFact] = field(default_factory=dict)


# --- a hand -------------------------------------------------------------------------------


class PhaseRule(NamedTuple):
    """What a hand does in one of its phases, one function each (as OpenSpiel's hearts
    switches on its phase): the seats to act, the legal actions of a seat (sorted), why an
    action is refused (pure: `None` when it is accepted) and the change an accepted action
    makes. `plays`: the phase is the card play, whose plays replay may run in one loop.
    `run` (optional): replay's loop over this phase's actions, `(hand, seats, actions,
    start) -> end`, the seats one a byte: it applies in order the actions `Match.step` would
    accept (asking `refuse` of each, then `apply`), stops at the first other one or when the
    phase changes, and returns the index of the first not applied (`Hand.apply_run` keeps
    those applied)."""

    to_act: Callable[[Any], tuple[int, ...]]
    legal: Callable[[Any, int], list[int]]
    refuse: Callable[[Any, int, int], IllegalAction | None]
    apply: Callable[[Any, int, int], None]
    plays: bool = False
    run: Callable[[Any, bytes, list[int], int], int] | None = None


_NO_PHASES: Final[dict[Enum, PhaseRule]] = {}  # a hand's phase table until its game sets it


class PhaseEnum(Enum):
    """The base of each game's `Phase`: members hashed by identity, in C (an Enum's own hash
    is Python code, and the phase table is read at every action). Members are singletons
    compared by identity, so the hash agrees with equality."""

    __hash__ = object.__hash__


@mypyc_attr(allow_interpreted_subclasses=True)  # game modules need not be compiled
class Hand(ABC):
    """One deal played out. The base keeps the trick in progress and plays the cards; a
    subclass sets `phases` (its phase -> `PhaseRule` table), `_phase`, `play_rule` and the
    hooks of its card play."""

    def __init__(self, match: Match, number: int, dealer: int, deal: Deal) -> None:
        # The match's scores (its list, which it keeps up to date), not the match: a hand holds
        # no reference back to its match, so a finished match and its hands are freed when
        # dropped, without the cycle collector (a third of a verify's time once).
        self.match_scores = match.scores
        self.rules = match.rules
        self.number = number
        self.dealer = dealer
        self.deal = deal
        self.players = match.rules.players
        # The actions applied and their seats. `actions` may be a list a replay gave
        # (`apply_run`, while `borrowed`): copied before anything is added to it.
        self.actions: list[int] = []
        self.action_seats = bytearray()
        self.borrowed = False
        # A run's index of an action minus its place in the hand (`apply_run`, `apply`): the
        # runs set `cursor` from it.
        self.base = 0
        self.lines: list[ScoreLine] = []
        self.events: list[Event] = []  # kept only when the match logs events
        self.log_events = match.log_events
        # The completed tricks, in order, as native ints (no object per trick: `tricks` builds
        # them for a caller who asks): each one's leader and winner, and the cards of all of
        # them in playing order, `players` cards a trick, followed by those of the trick in
        # progress (from `trick_start` on: `cards`). Room for a whole pack, 13 tricks.
        self.trick_leaders: vec[i64] = vec[i64](capacity=13)
        self.trick_winners: vec[i64] = vec[i64](capacity=13)
        self.trick_cards: vec[i64] = vec[i64](capacity=52)
        self.trick_start = 0
        # Each seat's cards now (games update it), native ints: no int object per card played.
        # (Built from a comprehension: compiled, `vec[i64](a_tuple)` first asks the tuple for
        # a buffer, which raises and clears a TypeError.)
        self.held: vec[i64] = vec[i64]([m for m in deal.hands])
        self.cursor = 0  # 1-based index of the action being applied (0: none yet)
        self.over = False
        self.phases: dict[Enum, PhaseRule] = _NO_PHASES  # set by each game: its phase table
        self._phase: Enum  # set by each game
        self.play_rule = ""  # the rule id of the card play (not-held, and by default turns)
        self.rank_order: RankOrder = match.order  # CARD.WIN: the rank order of play
        self.trump = -1  # suit, or -1 for no trump
        self.turn = -1  # the seat to play a card
        self.trick_number = 1  # the trick in progress (the last one once the hand is over)
        # The trick in progress, as ints: its leader, led suit (-1: none yet), its cards as a
        # mask (in playing order: `cards`). Once the hand is over it is the last trick, kept on
        # view.
        self.leader = -1
        self.led = -1
        self.mask = 0

    @property
    def phase(self) -> Enum:
        return self._phase

    @property
    def cards(self) -> list[int]:
        """The cards of the trick in progress in playing order (once the hand is over, of
        the last trick)."""
        played = self.trick_cards
        return [played[k] for k in range(self.trick_start, len(played))]

    @property
    def tricks(self) -> list[PlayedTrick]:
        """The completed tricks, in order."""
        n = self.players
        cards = self.trick_cards
        leaders = self.trick_leaders
        winners = self.trick_winners
        return [
            PlayedTrick(leaders[k], [cards[j] for j in range(k * n, k * n + n)], winners[k], n)
            for k in range(len(leaders))
        ]

    # -- the phase table ------------------------------------------------------------------

    def to_act(self) -> tuple[int, ...]:
        """The seats that may act now (several during Dame de Pique's exchange)."""
        if self.over:
            return ()
        return self.phases[self._phase].to_act(self)

    def legal_actions(self, seat: int) -> list[int]:
        """The legal actions of `seat`, sorted (empty when it may not act)."""
        if self.over:
            return []
        return self.phases[self._phase].legal(self, seat)

    def refusal(self, seat: int, action: int) -> IllegalAction | None:
        """Why `seat` may not take `action` now, or None when it may: the refusal function of
        the current phase. `Match.refusal` has checked that the action is well formed and not
        a resignation, that the seat exists and that the hand is in progress. Pure: it
        changes nothing."""
        return self.phases[self._phase].refuse(self, seat, action)

    def _apply(self, seat: int, action: int) -> None:
        """Apply an action `refusal` accepts: the current phase's changes, no checks."""
        self.phases[self._phase].apply(self, seat, action)

    def describe(self) -> list[str]:
        """Short public facts of this hand for a person (exchange, contract, trump...)."""
        return []

    def apply(self, seat: int, action: int) -> None:
        """Apply an action `refusal` accepts (`Match.step` asks it first) and keep it."""
        self.base = len(self.actions)
        self.cursor = self.base + 1
        self._apply(seat, action)
        self.keep(seat, action)

    def keep(self, seat: int, action: int) -> None:
        """Add an action to the hand's."""
        self._owned().append(action)
        self.action_seats.append(seat)

    def _owned(self) -> list[int]:
        """The hand's list of actions, to add to: a list a replay gave is copied first."""
        if self.borrowed:
            self.actions = self.actions[:]
            self.borrowed = False
        return self.actions

    def apply_run(self, seats: bytes, actions: list[int], start: int) -> int:
        """Apply the actions from `start` on for as long as the fast path can (legal card
        plays, and the actions other phases accept), phase after phase; return the index of
        the first not applied. `Match.step` takes each action the runs stop at. While the
        phase `plays` this runs `_play_run`, else the phase's `run` or `_phase_run`. It keeps
        the actions applied: when they are the whole of `actions` and the hand's first, the
        list itself (`borrowed`, not a copy: see `Match.step_many`)."""
        self.base = len(self.actions) - start
        i = start
        while not self.over:
            rule = self.phases[self._phase]
            if rule.plays:
                end = self._play_run(seats, actions, i)
            elif rule.run is not None:
                end = rule.run(self, seats, actions, i)
            else:
                end = self._phase_run(seats, actions, i)
            if end == i:
                break
            i = end
        if i > start:
            if start == 0 and i == len(actions) and not self.actions:
                self.actions = actions
                self.borrowed = True
                self.action_seats = bytearray(seats)
            else:
                self._owned().extend(actions[start:i])
                self.action_seats.extend(seats[start:i])
        return i

    def _phase_run(self, seats: bytes, actions: list[int], start: int) -> int:
        """Apply in order, through the phase table, the actions of phases that are not the
        card play and have no `run`, as long as `Match.step` would accept them (well formed,
        not a resignation, by a seat, and the phase's `refuse` accepts them): the same
        functions, without the match's dispatch per action. Stops before any other action,
        when the card play or a phase with a `run` begins, or when the hand is over; returns
        the index of the first action not applied."""
        n = self.players
        i = start
        end = len(actions)
        while i < end and not self.over:
            rule = self.phases[self._phase]
            if rule.plays or rule.run is not None:
                break
            seat = seats[i]
            action = actions[i]
            if not 0 <= seat < n or action_error(action) is not None or action & 7 == RESIGN:
                break
            if rule.refuse(self, seat, action) is not None:
                break
            self.cursor = self.base + i + 1
            rule.apply(self, seat, action)
            i += 1
        return i

    # -- the card play (the hooks a game supplies) ----------------------------------------

    @abstractmethod
    def legal_mask(self, hand: i64, led: i64, mask: i64, count: i64) -> i64:
        """The cards of `hand` the seat to play may play to the trick in progress: led suit
        `led` (-1: it leads), the cards on it `mask`, `count` of them. Int arithmetic only:
        this is the hot path of replay."""

    @abstractmethod
    def _trick_end(self, winner: int, best: int, led: int, mask: int) -> bool:
        """The game's part of a completed trick (kept in `tricks`; `winner` leads next and
        played `best`; the trick's led suit and cards `led`, `mask`): count, score, end the
        hand or ask for a decision. True when the run of card plays must stop."""

    def _first_lead(self, seat: int, c: int) -> None:
        """What the first card of the hand does besides being played (Napoléon: trump);
        nothing by default."""
        return None

    def _turn_rule(self) -> str:
        """The rule id of a card played out of turn."""
        return self.play_rule

    def _not_a_card(self, seat: int, action: int) -> IllegalAction | None:
        """Why an action that is not a card is refused in the card play."""
        return self.illegal(
            "wrong-action", seat, action, "only cards are played now", self.play_rule
        )

    @abstractmethod
    def _why_not(self, seat: int, c: int, hand: int, legal: int) -> tuple[str, str, str]:
        """`(code, reason, rule)` of a card `seat` holds but may not play (`legal`)."""

    def legal_play_mask(self, seat: int) -> int:
        """The cards `seat` may play now (0 when it may not play)."""
        if self.over or not self.phases[self._phase].plays or seat != self.turn:
            return 0
        count = len(self.trick_cards) - self.trick_start
        return self.legal_mask(self.held[seat], self.led, self.mask, count)

    def _turn_to_act(self) -> tuple[int, ...]:
        return (self.turn,)

    def _play_legal(self, seat: int) -> list[int]:
        return [c << 3 | PLAY for c in iter_cards(self.legal_play_mask(seat))]

    def _play_refusal(self, seat: int, action: int) -> IllegalAction | None:
        # A card by the seat to play, held, and in the legal set; else the game says which
        # of its duties the card breaks.
        if action & 7 != PLAY:
            return self._not_a_card(seat, action)
        if seat != self.turn:
            return self.not_your_turn(seat, action, self._turn_rule())
        c = action >> 3
        hand = self.held[seat]
        count = len(self.trick_cards) - self.trick_start
        legal = self.legal_mask(hand, self.led, self.mask, count)
        if legal >> c & 1:
            return None
        if not hand >> c & 1:
            why = f"seat {seat} does not hold {card_str(c)}"
            return self.illegal("not-held", seat, action, why, self.play_rule)
        code, why, rule = self._why_not(seat, c, hand, legal)
        return self.illegal(code, seat, action, why, rule)

    def _play_apply(self, seat: int, action: int) -> None:
        played = self._play_run(bytes((seat,)), [action], 0)
        assert played == 1

    def _play_run(self, seats: bytes, actions: list[int], start: int) -> int:
        """Play the legal card plays of `actions[start:]` in order, without recording them;
        stop before the first action that is not a legal play by the seat to play, or when
        `_trick_end` stops the hand. Returns the index of the first action not played. (The
        hot path of replay: the trick in progress is kept in locals, native ints only.)"""
        held = self.held
        n: i64 = self.players
        turn: i64 = self.turn
        leader: i64 = self.leader
        led: i64 = self.led
        mask: i64 = self.mask
        played = self.trick_cards  # the trick in progress is its tail, from `first` on
        first: i64 = self.trick_start
        count: i64 = len(played) - first
        i: i64 = start
        end: i64 = len(actions)
        while i < end:
            action = actions[i]
            seat = seats[i]
            # A card play (kind 0) of a card id 0..51 by the seat to play, else stop: no
            # mask is built from an id out of range, and the action and seat are ranged as
            # Python ints before they are native ones (which hold 64 bits).
            if action & 7 or not 0 <= action < 416 or not 0 <= seat < 64:
                break
            s: i64 = seat
            if s != turn:
                break
            c: i64 = action >> 3
            bit: i64 = 1
            bit <<= c  # (compiled, `1 << c` of a native int shifts 32 bits only)
            hand = held[s]
            if not self.legal_mask(hand, led, mask, count) & bit:
                break
            held[s] = hand ^ bit
            if led < 0:
                leader = s
                led = c // 13
                if self.trick_number == 1:
                    self.trick_cards = played  # a hook sees the hand as it is
                    self._first_lead(s, c)
            mask |= bit
            played = append(played, c)
            count += 1
            i += 1
            if count < n:
                # (Statements, not `a if c else b`: compiled, that is a boxed int.)
                turn = s + 1
                if turn >= n:
                    turn = 0
                continue
            best: i64 = winning_card(self.rank_order, self.trump, led, mask)  # CARD.WIN
            # The winner played `best`: the leader's k-th follower, k its place in the trick.
            k: i64 = 0
            while played[first + k] != best:
                k += 1
            turn = leader + k
            if turn >= n:
                turn -= n
            self.trick_cards = played
            self.trick_won(leader, turn)
            self.cursor = self.base + i
            self.turn = turn
            self.leader, self.led, self.mask = leader, led, mask
            stop = self._trick_end(turn, best, led, mask)
            if self.over:
                return i  # the last trick stays on view
            self.trick_number += 1
            leader = led = -1
            mask = 0
            first += n  # the trick is kept (trick_won); the next one starts after it
            count = 0
            self.trick_start = first
            if stop:
                break
        self.trick_cards = played
        self.turn = turn
        self.leader = leader
        self.led = led
        self.mask = mask
        return i

    def _trick_view(self) -> tuple[tuple[int, int], ...]:
        n = self.players
        return tuple(((self.leader + k) % n, c) for k, c in enumerate(self.cards))

    # -- the view -------------------------------------------------------------------------

    def view(self, seat: int | None) -> View:
        """What `seat` (None: a spectator) may know now."""
        return View(
            seat=seat,
            phase=self._phase.value,
            hand_number=self.number,
            dealer=self.dealer,
            hand=self.held[seat] if seat is not None else 0,
            trick=self._trick_view(),
            trump=self.trump,
            to_act=self.to_act(),
            legal=tuple(self.legal_actions(seat)) if seat is not None else (),
            scores=self._view_scores(),
            known=self._known(seat),
            public=self._public(seat),
            cards=self._public_cards(seat),
        )

    def _public(self, seat: int | None) -> dict[str, Any]:
        """The game's public facts for `seat`'s view (View.public)."""
        return {}

    def _known(self, seat: int | None) -> dict[int, int]:
        """Other seats' cards `seat` may see (View.known)."""
        return {}

    def _public_cards(self, seat: int | None) -> dict[str, CardFact]:
        """The public facts of `_public` that are cards, as card ids (View.cards)."""
        return {}

    def _view_scores(self) -> tuple[Score, ...]:
        return tuple(self.match_scores)

    def score(self, seat: int, kind: str, delta: Score, rule: str, note: str = "") -> None:
        """Score `delta` to `seat` after the action being applied (a `ScoreLine`)."""
        self.add_line(score_line(seat, kind, delta, rule, note, self.cursor))

    def add_line(self, line: ScoreLine) -> None:
        """Keep a score line of this hand (`score` makes them), logged with the events."""
        self.lines.append(line)
        if self.log_events:
            self.events.append(line)

    def note(self, kind: str, text: str, seat: int = -1) -> None:
        if self.log_events:
            self.events.append(Note(kind, text, seat))

    def show(self, seat: int, cards: int, why: str, rule: str) -> None:
        """Cards `seat` shows to every seat (a `CardsShown` event when events are logged)."""
        if self.log_events:
            self.events.append(CardsShown(seat, cards, why, rule))

    def hands_changed(self) -> None:
        """Every seat's cards after a change other than a card played (a `HandsChanged`)."""
        if self.log_events:
            self.events.append(HandsChanged(tuple(self.held)))

    def illegal(self, code: str, seat: int, action: int, why: str, rule: str) -> IllegalAction:
        """An `IllegalAction` whose message names the action, the phase, the reason and the
        seat's legal set, which it carries (`legal_actions(seat)` at this moment)."""
        legal = self.legal_actions(seat)
        reason = why + (f"; legal: {legal_str(legal)}" if legal else "")
        msg = f"{action_str(action)} is not legal in the {self.phase.name.lower()} phase: {reason}"
        return IllegalAction(code, msg, rule, seat=seat, legal=tuple(legal), reason=reason)

    def not_your_turn(self, seat: int, action: int, rule: str) -> NotYourTurn:
        """A `NotYourTurn` naming the seats the hand waits for."""
        to_act = self.to_act()
        who = ", ".join(f"seat {s}" for s in to_act) or "nobody"
        reason = f"seat {seat} may not act now; waiting for {who}"
        msg = f"{action_str(action)}: {reason}"
        legal = tuple(self.legal_actions(seat))
        return NotYourTurn("not-your-turn", msg, rule, seat=seat, legal=legal, reason=reason)

    def trick_won(self, leader: int, winner: int) -> None:
        """Record a completed trick, whose cards are `cards` (in `trick_cards` already): its
        leader and its winner."""
        self.trick_leaders = append(self.trick_leaders, leader)
        self.trick_winners = append(self.trick_winners, winner)
        if self.log_events:
            n = self.players
            cards = self.cards
            plays = tuple(((leader + k) % n, c) for k, c in enumerate(cards))
            self.events.append(TrickWon(len(self.trick_leaders), winner, plays))


# --- a match ------------------------------------------------------------------------------


class HandResult:
    """A hand as it was played: enough to rebuild it, plus what it scored. (A plain class:
    a dataclass's generated `__init__` is Python code, run once a hand.)"""

    def __init__(
        self,
        number: int,
        dealer: int,
        deal: Deal,
        actions: list[int],
        action_seats: bytearray,
        lines: list[ScoreLine],
        scores_after: tuple[Score, ...],
        hand: Hand,
    ) -> None:
        self.number = number
        self.dealer = dealer
        self.deal = deal
        self.actions = actions
        self.action_seats = action_seats
        self.lines = lines
        self.scores_after = scores_after
        self.hand = hand

    def __repr__(self) -> str:
        return f"HandResult(number={self.number}, dealer={self.dealer}, lines={self.lines})"

    @property
    def tricks(self) -> list[PlayedTrick]:
        """The hand's completed tricks, in order."""
        return self.hand.tricks


# The choices CLOCK.AUTOPLAY makes otherwise than by the smallest code (`Match.default_action`).
_ABANDON_OFFER: Final = encode(ABANDON, 0)
_PILLAGE_STOP: Final = encode(PILLE, PILLE_STOP)


@mypyc_attr(allow_interpreted_subclasses=True)
class Match(ABC):
    """The hands of one game until it is won."""

    units: ClassVar[tuple[str, ...]] = ("points",)
    deal_rule: str  # rule id of dealing and dealers for this game (set by each game)
    pack: int  # the mask of the cards this game is played with (set by each game)
    order: RankOrder = R3  # the rank order of play (RULES.md 0.3), e.g. to show hands
    lowest_wins: ClassVar[bool] = False  # the lowest total wins (Dame de Pique)

    def __init__(self, rules: Rules, start: Start | None = None, log_events: bool = True) -> None:
        start = start or Start()
        self.rules = rules
        self.log_events = log_events
        self.players = rules.players
        _check_start(start, self.players, len(self.units))
        self.first_hand_number = start.hand_number
        zero = tuple(0 for _ in self.units)
        self.start_scores: tuple[Score, ...] = (
            tuple(tuple(score) for score in start.scores)
            if start.scores
            else tuple(zero for _ in range(self.players))
        )
        self.scores: list[Score] = list(self.start_scores)
        self.results: list[HandResult] = []
        self.hand: Hand | None = None
        self.finished = False
        self.winners: tuple[int, ...] = ()
        self.resigned: int | None = None
        self.end_reason = ""

    # -- rules each game supplies ---------------------------------------------------------

    @abstractmethod
    def _new_hand(self, number: int, dealer: int, deal: Deal) -> Hand: ...

    @abstractmethod
    def _check_deal(self, deal: Deal) -> None:
        """Raise `DealError` when `deal` is not a possible deal of this game."""

    @abstractmethod
    def deal_deck(self, dealer: int, deck: Sequence[int]) -> Deal:
        """Deal a whole pack (top card first) by the rules' dealing procedure (RULES.md 7);
        `DealError` for a dealer that is no seat or a deck that is not the whole pack."""

    @abstractmethod
    def _next_dealer(self, previous: HandResult) -> int: ...

    @abstractmethod
    def _end_after_hand(self) -> None:
        """Decide `finished` and `winners` after a hand's scores are added."""

    def _leaders(self, seats: Sequence[int]) -> tuple[int, ...]:
        """The best placed of `seats` by the current scores (ties share): the highest score
        (compared unit by unit), or the lowest where `lowest_wins`."""
        scores = self.scores
        pick = min if self.lowest_wins else max
        best = pick(scores[s] for s in seats)
        return tuple(s for s in seats if scores[s] == best)

    def first_dealers(self) -> tuple[int, ...]:
        """The seats that may deal the first hand (the referee draws one of them)."""
        return tuple(range(self.players))

    def public_action(self, action: int) -> int:
        """The action as the other seats may know it: the same, except where the rules keep
        it face down (Dame de Pique's passed cards, a pillage discard)."""
        return action

    def team_of(self, seat: int) -> int:
        """The team of a seat (0 where the game has no teams)."""
        return 0

    def _resign_winners(self, seat: int) -> tuple[int, ...]:
        """Who wins when `seat` concedes: the best placed of the others."""
        return self._leaders([s for s in range(self.players) if s != seat])

    # -- the driver's interface -----------------------------------------------------------

    @property
    def hand_number(self) -> int:
        """The number of the current hand, or of the next one between hands."""
        return self.first_hand_number + len(self.results)

    def expected_dealer(self) -> int | None:
        """The dealer the rotation requires for the next hand; None for the first hand."""
        if not self.results:
            return None
        return self._next_dealer(self.results[-1])

    def start_hand(self, dealer: int, deal: Deal) -> Hand:
        """Start the next hand; the dealer must follow the rotation (RULES.md 7)."""
        if self.hand is not None and not self.hand.over:
            raise IllegalAction(
                "hand-in-progress",
                f"hand {self.hand.number} is still in progress: no new deal",
                self.deal_rule,
            )
        if self.finished:
            raise IllegalAction(
                "match-over", "the match is over: no further hand", self.rules_end_rule()
            )
        if self.hand_number > HAND_NUMBER_MAX:
            # The last hand number a record holds (options.py): the match can go no further.
            raise IllegalAction(
                "match-over",
                f"the match is over: no hand is numbered above {HAND_NUMBER_MAX}",
                self.rules_end_rule(),
            )
        self._check_dealer(dealer)
        expected = self.expected_dealer()
        if expected is not None and dealer != expected:
            raise DealError(
                "dealer-rotation",
                f"the dealer of hand {self.hand_number} must be seat {expected}, not seat {dealer}",
                self.deal_rule,
            )
        self._check_deal(deal)
        hand = self.hand = self._new_hand(self.hand_number, dealer, deal)
        if hand.over:
            # The rules ended the hand before any action (announcements that win the match,
            # cartes blanches, ...): its score lines were made when it was dealt.
            self._close_hand(hand)
        return hand

    def begin_hand(self, dealer: int, deal: Deal) -> list[Event]:
        """`start_hand`, returning the events of the deal itself: what the rules score as
        the cards are dealt, and the end of the hand or match when they end it at once."""
        results_before = len(self.results)
        was_finished = self.finished
        hand = self.start_hand(dealer, deal)
        events: list[Event] = list(hand.events)
        if len(self.results) > results_before:
            events.append(HandOver(self.results[-1].number, self.results[-1].scores_after))
        if self.finished and not was_finished:
            events.append(MatchOver(self.winners, self.end_reason))
        return events

    def rules_end_rule(self) -> str:
        return self.deal_rule.split(".")[0] + ".END"

    def to_act(self) -> tuple[int, ...]:
        if self.finished or self.hand is None or self.hand.over:
            return ()
        return self.hand.to_act()

    def legal_actions(self, seat: int) -> list[int]:
        """The legal actions of `seat`, sorted: empty when it may not act (or is no seat)."""
        if self.finished or self.hand is None or self.hand.over or not 0 <= seat < self.players:
            return []
        return self.hand.legal_actions(seat)

    def default_action(self, seat: int) -> int:
        """CLOCK.AUTOPLAY: the action a referee makes for a seat whose time ran out under
        the autoplay policy: the choice that binds the seat to nothing. Its legal action
        with the smallest code (a pass in an auction, its lowest card by id in play, the
        lowest cards in an exchange, `stop` before a vole, `accept` of an offer to concede),
        but never an offer to concede the coup (TRI.ABANDON: its code is below most cards'),
        and `stop` when the seat may rob the talon (TRI.PILLE); -1 when it may not act. A
        resignation is never a seat's legal action, so never its default."""
        legal = self.legal_actions(seat)
        if _PILLAGE_STOP in legal:
            return _PILLAGE_STOP
        for action in legal:
            if action != _ABANDON_OFFER:
                return action
        return -1

    def refusal(self, seat: int, action: int) -> TapisError | None:
        """The exception `step(seat, action)` would raise, or None when `step` would accept
        the action: an `InvalidAction` for an int that is no action, else an `IllegalAction`
        (a `NotYourTurn` for a seat out of turn) with its `code`, `rule`, `message`, `reason`
        and `legal`, the seat's legal actions at this moment. Resignations too. Pure, as
        python-chess keeps `is_legal` apart from `push`: nothing changes, not even the hand's
        cursor, so a referee asks it without copying or replaying a table."""
        error = action_error(action)
        if error is not None:
            return error
        if action & 7 == RESIGN:
            return self._resign_refusal(seat)
        if self.finished:
            return IllegalAction(
                "match-over", "the match is already over", self.rules_end_rule(), seat=seat
            )
        hand = self.hand
        if hand is None or hand.over:
            return IllegalAction(
                "no-hand",
                f"no hand is in progress for {KIND_NAMES[action & 7]}",
                self.rules_end_rule(),
                seat=seat,
            )
        if not 0 <= seat < self.players:
            return self._bad_seat(seat)
        return hand.refusal(seat, action)

    def step(self, seat: int, action: int) -> None:
        """Apply one action, or raise what `refusal` says (`IllegalAction` if it breaks a
        rule, `InvalidAction` if it is not an action at all); builds no events beyond the
        hand's own log."""
        error = self.refusal(seat, action)
        if error is not None:
            raise error
        if action & 7 == RESIGN:
            self._resign(seat, action)
            return
        hand = self.hand
        assert hand is not None
        hand.apply(seat, action)
        if hand.over:
            self._close_hand(hand)

    def step_many(self, seats: Sequence[int], actions: Sequence[int]) -> None:
        """`step` each action in order (a replay); on a refusal the actions before it are
        applied, so the current hand's `actions` tell the position of the fault. A list of
        `actions` that is a whole hand's, from its first, may become that hand's `actions`
        as it is (`Hand.apply_run`): the caller does not change it afterwards."""
        if len(seats) != len(actions):
            raise InvalidAction(f"{len(actions)} actions but {len(seats)} seats to take them")
        # The seats as bytes and the actions as a list (one copy, in C, unless they are
        # already: nothing here or in a hand changes them): the runs then read them without a
        # generic call per item (a record's seats are bytes, its actions a protobuf
        # container). Seats that are no bytes (one out of 0..255, or not an int) are stepped
        # one by one: `step` says what is wrong.
        try:
            seat_bytes = seats if isinstance(seats, bytes) else bytes(seats)
        except (TypeError, ValueError):
            for seat, action in zip(seats, actions, strict=True):
                self.step(seat, action)
            return
        action_list = actions if isinstance(actions, list) else list(actions)
        i, n = 0, len(action_list)
        while i < n:
            hand = self.hand
            if hand is not None and not hand.over and not self.finished:
                j = hand.apply_run(seat_bytes, action_list, i)
                if hand.over:
                    self._close_hand(hand)
                if j > i:
                    i = j
                    continue
            self.step(seat_bytes[i], action_list[i])
            i += 1

    def apply(self, seat: int, action: int) -> list[Event]:
        """Apply one action and return the events it caused."""
        hand = self.hand
        before = len(hand.events) if hand is not None else 0
        results_before = len(self.results)
        was_finished = self.finished
        self.step(seat, action)
        events: list[Event] = list(hand.events[before:]) if hand is not None else []
        if len(self.results) > results_before:
            events.append(HandOver(self.results[-1].number, self.results[-1].scores_after))
        if self.finished and not was_finished:
            events.append(MatchOver(self.winners, self.end_reason))
        return events

    def view(self, seat: int | None) -> View | None:
        """What `seat` (None: a spectator) may know now; None before the first hand.
        `IllegalAction` (`bad-seat`) for a seat the game does not have."""
        if seat is not None and not 0 <= seat < self.players:
            raise self._bad_seat(seat)
        return None if self.hand is None else self.hand.view(seat)

    # -- internals ------------------------------------------------------------------------

    def _close_hand(self, hand: Hand, scored: bool = True) -> None:
        """Add the hand's score lines (unless a resignation cut it short) and keep it."""
        scores = self.scores
        lines = hand.lines if scored else []
        for line in lines:
            seat = line.seat
            before = scores[seat]
            delta = line.delta
            if len(before) == 1 and len(delta) == 1:  # one unit: no generator per line
                scores[seat] = (before[0] + delta[0],)
            else:
                scores[seat] = tuple([a + b for a, b in zip(before, delta, strict=True)])
        self.results.append(
            HandResult(
                hand.number,
                hand.dealer,
                hand.deal,
                hand.actions,
                hand.action_seats,
                lines,
                tuple(scores),
                hand,
            )
        )
        if scored:
            self._end_after_hand()

    def _check_dealer(self, dealer: int) -> None:
        """`DealError` unless `dealer` is a seat."""
        if not 0 <= dealer < self.players:
            raise DealError(
                "bad-dealer",
                f"dealer {quoted(dealer)} is not a seat (0..{self.players - 1})",
                self.deal_rule,
            )

    def _bad_seat(self, seat: int) -> IllegalAction:
        return IllegalAction(
            "bad-seat",
            f"seat {quoted(seat)} does not exist (0..{self.players - 1})",
            self.rules_end_rule(),
            seat=seat,
        )

    def _resign_refusal(self, seat: int) -> IllegalAction | None:
        # A seat may concede at any time while the match is on, once a hand has been dealt.
        rule = self.rules_end_rule()
        if self.finished:
            return IllegalAction("match-over", "the match is already over", rule, seat=seat)
        if not 0 <= seat < self.players:
            return self._bad_seat(seat)
        if self.hand is None:
            return IllegalAction("no-hand", "no hand has been dealt yet", rule, seat=seat)
        return None

    def _resign(self, seat: int, action: int) -> None:
        # Kept with the hand in progress (which ends unscored), else with the last hand.
        # CLOCK.FORFEIT: a seat out of time under the forfeit policy ends the same way, the
        # referee resigning for it.
        hand = self.hand
        assert hand is not None
        if not hand.over:
            hand.keep(seat, action)
            hand.over = True
            self._close_hand(hand, scored=False)
        else:
            last = self.results[-1]
            last.hand.keep(seat, action)
            last.actions = last.hand.actions
            last.action_seats = last.hand.action_seats
        self.resigned = seat
        self.finished = True
        self.end_reason = f"seat {seat} resigned"
        self.winners = self._resign_winners(seat)


def legal_str(legal: Sequence[int]) -> str:
    """A legal set for a person: `4C, 10C` for card plays, else the actions."""
    if all(a & 7 == PLAY for a in legal):
        return " ".join(card_str(a >> 3) for a in legal)
    if len(legal) > 12:
        return f"{len(legal)} actions"
    return ", ".join(action_str(a) for a in legal)


def check_deck(deck: Sequence[int], pack: int, rule: str, pack_name: str) -> None:
    """A whole pack to deal from: every card of `pack` exactly once. `DealError` otherwise
    (at the first card that is foreign or repeated, so a long deck is not read to its end)."""
    seen = 0
    for c in deck:
        if not (isinstance(c, int) and 0 <= c < 52 and pack >> c & 1):
            shown = card_str(c) if isinstance(c, int) and 0 <= c < 52 else quoted(c)
            raise DealError("card-not-in-pack", f"deck: {shown} is not in {pack_name}", rule)
        if seen >> c & 1:
            raise DealError("duplicate-card", f"deck: {card_str(c)} appears twice", rule)
        seen |= 1 << c
    if seen != pack:
        raise DealError(
            "deck-size",
            f"deck: {len(deck)} cards given; a deck is the whole of {pack_name} "
            f"({pack.bit_count()} cards)",
            rule,
        )


def check_cards(
    deal: Deal, pack: int, hand_size: int, players: int, rule: str, pack_name: str
) -> None:
    """The shared deal checks: the number of hands, every card from `pack` and none twice
    (the retourne and talon included), then the cards per hand. Raises `DealError` naming
    the first fault, looking at the seats, the retourne, then the talon, and at a seat's
    cards lowest id first. No mask is built from a value before it is known to be a card."""
    if len(deal.hands) != players:
        raise DealError(
            "deal-hands", f"deal: {len(deal.hands)} hands given, expected {players}", rule
        )
    seen = 0
    for s, m in enumerate(deal.hands):
        if m < 0:
            why = f"deal: seat {s} is given {quoted(m)}, which is not a set of cards"
            raise DealError("card-not-in-pack", why, rule)
        wrong = m & ~pack | m & seen
        if wrong:
            _bad_card(deal, (wrong & -wrong).bit_length() - 1, f"seat {s}", pack, rule, pack_name)
        seen |= m
    loose = (deal.retourne, *deal.talon) if deal.retourne >= 0 else deal.talon
    for i, c in enumerate(loose):
        where = "the retourne" if i == 0 and deal.retourne >= 0 else "the talon"
        if not 0 <= c < 52 or not (pack >> c & 1) or seen >> c & 1:
            _bad_card(deal, c, where, pack, rule, pack_name)
        seen |= 1 << c
    for s, m in enumerate(deal.hands):
        n = count_cards(m)
        if n != hand_size:
            raise DealError(
                "hand-size",
                f"deal: seat {s} has {n} cards ({mask_str(m)}), expected {hand_size}",
                rule,
            )


def _bad_card(deal: Deal, c: int, where: str, pack: int, rule: str, pack_name: str) -> NoReturn:
    """Raise the `DealError` of card `c` found at `where`: foreign, or dealt twice (naming
    where it was dealt first)."""
    if not (0 <= c < 52 and pack >> c & 1):
        raise DealError(
            "card-not-in-pack", f"deal: {card_str(c)} ({where}) is not in {pack_name}", rule
        )
    first = next((f"seat {s}" for s, m in enumerate(deal.hands) if m >> c & 1), "")
    if not first:
        first = "the retourne" if deal.retourne == c else "the talon"
    raise DealError(
        "duplicate-card", f"deal: {card_str(c)} is dealt twice ({first} and {where})", rule
    )


def _check_start(start: Start, players: int, units: int) -> None:
    """`RulesError` unless `start` is a possible start of a match (options.py gives the
    bounds and why): a first hand number from 1 to `START_HAND_MAX`, and either no scores or
    one score per seat of one value per unit, each at most `START_SCORE_MAX` either way."""
    number = start.hand_number
    if not 1 <= number <= START_HAND_MAX:
        raise RulesError(
            f"start: hand number {quoted(number)} is not allowed; allowed: 1 to {START_HAND_MAX}",
            key="hand_number",
        )
    scores = start.scores
    if not scores:
        return
    if len(scores) != players:
        raise RulesError(
            f"start: {len(scores)} scores given for {players} seats; give one per seat",
            key="scores",
        )
    limit = START_SCORE_MAX
    for s, score in enumerate(scores):
        if len(score) != units:
            raise RulesError(
                f"start: the score of seat {s} has {len(score)} values, expected {units}",
                key="scores",
            )
        for value in score:
            if not -limit <= value <= limit:
                raise RulesError(
                    f"start: the score of seat {s}: {quoted(value)} is not allowed; "
                    f"allowed: {-limit} to {limit}",
                    key="scores",
                )
