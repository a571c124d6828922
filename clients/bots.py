"""Bots: programs that choose an action from what a seat sees, and `play_seat`, which plays a
seat of a referee's table to the end of the match.

A bot reads only its `SeatView` (tapis.v1): its own cards, the trick in progress, the trump,
the legal actions, the scores and the public facts (`typed_facts`, never their text); and the
rules of the table it was made for (the game and ruleset, public). It never sees the engine or
another seat's cards.

- `RandomBot(seed)`: uniform among the legal actions.
- `HeuristicBot(game, ruleset)`: simple rules of thumb per game (Dame de Pique: pass and dump
  the dangerous cards, duck under the winning card; Napoléon: bid by counting likely tricks,
  play to make or beat the contract, misère on a low hand; L'Impériale and La Triomphe: win
  tricks cheaply, keep trumps, lead strong suits).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc

from tapis_cartes.clients.sdk import RefereeError, SeatHandle, StaleAction, refusal_error
from tapis_cartes.referee.engine.actions import (
    ABANDON,
    BID,
    PILLE,
    PILLE_STOP,
    PLAY,
    RESIGN,
    VOLE,
    pass_action,
)
from tapis_cartes.referee.engine.cards import HEARTS, R1, R3, SPADES, RankOrder, parse_card
from tapis_cartes.referee.engine.errors import RulesError, quoted
from tapis_cartes.referee.engine.registry import find_game, make_rules
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb

__all__ = [
    "Bot",
    "HeuristicBot",
    "RandomBot",
    "SeatResult",
    "make_bot",
    "play_seat",
]


class Bot(Protocol):
    """Chooses one of `view.legal_actions` (called only when it has some)."""

    name: str

    def choose(self, view: pb.SeatView) -> int: ...


class RandomBot:
    """Uniform among the legal actions (never resigns)."""

    name = "random"

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def choose(self, view: pb.SeatView) -> int:
        return self.choose_among([c.action for c in view.legal_actions])

    def choose_among(self, legal: Sequence[int]) -> int:
        """The choice among legal action codes (the view's, or the engine's directly)."""
        return self.rng.choice([a for a in legal if a & 7 != RESIGN])


# --- reading a view ------------------------------------------------------------------------

QS, KS, AS = (parse_card(c) for c in ("QS", "KS", "AS"))


def _facts(view: pb.SeatView) -> dict[str, pb.TypedFact]:
    """The view's public facts, typed (SeatView.typed_facts), by key."""
    return {f.key: f for f in view.typed_facts}


def _trump(view: pb.SeatView) -> int:
    return view.trump if view.HasField("trump") else -1


def _beats(card: int, best: int, trump: int, order: RankOrder) -> bool:
    """Whether `card` played now beats `best`, the card winning the trick (CARD.WIN)."""
    if card // 13 == best // 13:
        return order.strength[card] > order.strength[best]
    return card // 13 == trump


def _winning(trick: Sequence[tuple[int, int]], trump: int, order: RankOrder) -> tuple[int, int]:
    """(seat, card) winning the trick so far."""
    best = trick[0]
    for play in trick[1:]:
        if _beats(play[1], best[1], trump, order):
            best = play
    return best


@dataclass
class _Read:
    """What a strategy reads from a view, decoded once."""

    view: pb.SeatView
    seat: int
    hand: list[int]
    trick: list[tuple[int, int]]
    trump: int
    facts: dict[str, pb.TypedFact]
    plays: dict[int, int]  # card -> action code, for the legal card plays
    others: list[int]  # the legal actions that are not card plays
    players: int
    honours: frozenset[int] = frozenset()  # ranks that score in trump (L'Impériale)

    def honour(self, card: int) -> bool:
        return card // 13 == self.trump and card % 13 in self.honours

    @classmethod
    def of(cls, view: pb.SeatView) -> _Read:
        plays: dict[int, int] = {}
        others: list[int] = []
        for choice in view.legal_actions:
            a = choice.action
            if a & 7 == PLAY:
                plays[a >> 3] = a
            elif a & 7 != RESIGN:
                others.append(a)
        return cls(
            view=view,
            seat=view.seat,
            hand=list(view.hand),
            trick=[(p.seat, p.card) for p in view.trick],
            trump=_trump(view),
            facts=_facts(view),
            plays=plays,
            others=others,
            players=len(view.scores),
        )

    def suit(self, suit: int) -> list[int]:
        return [c for c in self.hand if c // 13 == suit]

    def number(self, key: str, default: int = -1) -> int:
        """A fact that is a number or a seat (`default` when the view does not give it)."""
        fact = self.facts.get(key)
        return fact.number if fact is not None and fact.HasField("number") else default

    def numbers(self, key: str) -> list[int]:
        """A fact that is a number per seat (empty when the view does not give it)."""
        fact = self.facts.get(key)
        return list(fact.numbers.values) if fact is not None else []

    def word(self, key: str) -> str:
        """A fact that is a word ("" when the view does not give it)."""
        fact = self.facts.get(key)
        return fact.word if fact is not None else ""

    def groups(self, key: str) -> list[set[int]]:
        """A fact that is groups of seats (empty when the view does not give it)."""
        fact = self.facts.get(key)
        return [set(g.values) for g in fact.groups.groups] if fact is not None else []


Strategy = Callable[[_Read, RankOrder], int | None]


# --- Dame de Pique -------------------------------------------------------------------------


def _dp_danger(card: int, hand: Sequence[int]) -> int:
    """How much a card is worth passing away (DP.PASS): the queen of spades and the high
    spades that could catch her, high hearts, then high cards of short suits."""
    suit, rank = divmod(card, 13)
    spades = sum(1 for c in hand if c // 13 == SPADES)
    if card == QS:
        return 100 if spades < 5 else 30
    if card in (KS, AS):
        return 80 if spades < 5 else 15
    if suit == HEARTS:
        return 40 + rank if rank >= 7 else rank
    short = sum(1 for c in hand if c // 13 == suit) <= 2
    return rank + (6 if short else 0)


def _dame_de_pique(r: _Read, order: RankOrder) -> int | None:
    if r.view.phase == "pass":
        give = sorted(r.hand, key=lambda c: _dp_danger(c, r.hand), reverse=True)[:3]
        action = pass_action(sum(1 << c for c in give))
        return action if action in {c.action for c in r.view.legal_actions} else None
    cards = sorted(r.plays)
    if not cards:
        return None
    taken = r.numbers("points_taken")
    queen_out = QS not in r.hand and all(c != QS for _, c in r.trick) and max(taken, default=0) < 13
    if not r.trick:
        return r.plays[min(cards, key=lambda c: _dp_lead_cost(c, r.hand, queen_out))]
    led = r.trick[0][1] // 13
    follow = [c for c in cards if c // 13 == led]
    if not follow:
        return r.plays[_dp_discard(cards, r.hand, queen_out)]
    best = max(c for _, c in r.trick if c // 13 == led)  # ranks ace high: ids in order
    points = sum(1 for _, c in r.trick if c // 13 == HEARTS) + 13 * any(c == QS for _, c in r.trick)
    last = len(r.trick) == r.players - 1
    under = [c for c in follow if c < best]
    safe = [c for c in follow if c != QS] or follow
    if last and (points == 0 or not under):
        choice = max(safe)  # the trick is harmless, or must be taken: shed the highest card
    elif under:
        choice = max(under)  # duck as high as possible (the queen under the ace or king)
    elif led == SPADES and queen_out:
        choice = min(safe)  # a high spade could catch the queen
    else:
        choice = max(safe)
    return r.plays[choice]


def _dp_lead_cost(card: int, hand: Sequence[int], queen_out: bool) -> int:
    suit, rank = divmod(card, 13)
    if card == QS:
        return 100
    if suit == SPADES:
        if QS in hand:
            return 50 + rank
        if queen_out:
            return rank - 6 if rank < 10 else 60 + rank  # low spades drive the queen out
        return rank
    if suit == HEARTS:
        return rank + 8
    return rank


def _dp_discard(cards: Sequence[int], hand: Sequence[int], queen_out: bool) -> int:
    if QS in cards:
        return QS
    high_spades = [c for c in cards if c in (KS, AS)]
    if high_spades and queen_out:
        return max(high_spades)
    hearts = [c for c in cards if c // 13 == HEARTS]
    if hearts:
        return max(hearts)
    length = {s: sum(1 for c in hand if c // 13 == s) for s in range(4)}
    return max(cards, key=lambda c: (c % 13, -length[c // 13]))


# --- Napoléon ------------------------------------------------------------------------------

_BID_TWO, _BID_THREE, _BID_MISERE, _BID_FOUR, _BID_NAP = 1, 2, 3, 4, 5
_NEEDED = {_BID_TWO: 1.9, _BID_THREE: 2.8, _BID_FOUR: 3.7, _BID_NAP: 4.5}


def _nap_estimate(hand: Sequence[int], trump: int) -> float:
    """Likely tricks of a five-card hand with `trump` as the trump suit: the unbroken run of
    top trumps is sure, other trumps and side aces and kings likely."""
    est = 0.0
    trumps = sorted((c % 13 for c in hand if c // 13 == trump), reverse=True)
    top = 12
    for rank in trumps:
        if rank == top:
            est += 1.0
            top -= 1
        elif rank >= 10:
            est += 0.55 if rank == 11 else 0.4
        else:
            est += 0.6 if len(trumps) >= 4 else 0.45 if len(trumps) == 3 else 0.25
    for suit in range(4):
        if suit == trump:
            continue
        ranks = {c % 13 for c in hand if c // 13 == suit}
        if 12 in ranks:
            est += 0.8
            if 11 in ranks:
                est += 0.5
        elif 11 in ranks:
            est += 0.25
    return est


def _nap_best_suit(hand: Sequence[int]) -> tuple[int, float]:
    suits = {c // 13 for c in hand}
    return max(((s, _nap_estimate(hand, s)) for s in suits), key=lambda x: x[1])


def _nap_low_hand(hand: Sequence[int]) -> bool:
    """A hand for misère: nothing above the nine, at most one card above the seven."""
    ranks = [c % 13 for c in hand]
    return max(ranks) <= 7 and sum(1 for r in ranks if r >= 6) <= 1


def _napoleon(r: _Read, order: RankOrder) -> int | None:
    if r.view.phase == "bid":
        legal = {a >> 3: a for a in r.others if a & 7 == BID}
        _, est = _nap_best_suit(r.hand)
        affordable = [b for b, need in _NEEDED.items() if est >= need]
        if _nap_low_hand(r.hand):
            affordable.append(_BID_MISERE)
        for bid in sorted(affordable, reverse=True):
            if bid in legal:
                return legal[bid]
        return legal.get(0)
    if not r.plays:
        return None
    declarer = r.number("declarer")
    misere = r.word("contract") == "misere"
    if misere:
        if r.seat == declarer:
            return r.plays[_duck(r, order)]
        return r.plays[_against_misere(r, order, declarer)]
    if r.seat == declarer:
        if not r.trick and r.trump < 0:  # the first lead names trump: the best suit's top
            suit, _ = _nap_best_suit(r.hand)
            return r.plays[
                max((c for c in r.plays if c // 13 == suit), key=order.strength.__getitem__)
            ]
        return r.plays[_take(r, order, draw_trumps=True)]
    return r.plays[_defend(r, order, declarer)]


def _duck(r: _Read, order: RankOrder) -> int:
    """Take no trick: lead low, play the highest card that loses, shed high cards when
    void."""
    cards = list(r.plays)
    strength = order.strength
    if not r.trick:
        return min(cards, key=lambda c: strength[c])
    _, best = _winning(r.trick, r.trump, order)
    losing = [c for c in cards if not _beats(c, best, r.trump, order)]
    if losing:
        return max(losing, key=lambda c: strength[c])
    return min(cards, key=lambda c: strength[c])


def _against_misere(r: _Read, order: RankOrder, declarer: int) -> int:
    """Make the misère declarer take a trick: stay under his card."""
    cards = list(r.plays)
    strength = order.strength
    if r.trick and any(s == declarer for s, _ in r.trick):
        seat, best = _winning(r.trick, r.trump, order)
        if seat == declarer:
            losing = [c for c in cards if not _beats(c, best, r.trump, order)]
            if losing:
                return max(losing, key=lambda c: strength[c])
    return min(cards, key=lambda c: strength[c])


def _defend(r: _Read, order: RankOrder, declarer: int) -> int:
    """Beat the declarer: take his tricks cheaply, leave the others' tricks alone."""
    if not r.trick:
        return _lead(r, order)
    seat, _ = _winning(r.trick, r.trump, order)
    declarer_played = any(s == declarer for s, _ in r.trick)
    if declarer_played and seat != declarer:
        return _lowest(r, order)
    return _take(r, order)


# --- trick play shared by the games --------------------------------------------------------


def _lowest(r: _Read, order: RankOrder) -> int:
    """The cheapest card to lose: not a trump if possible, not an honour, the weakest."""
    return min(r.plays, key=lambda c: (c // 13 == r.trump, r.honour(c), order.strength[c]))


def _lead(r: _Read, order: RankOrder, draw_trumps: bool = False) -> int:
    """Lead: trumps first when drawing them; else the top of a strong side suit, else the
    lowest card of the longest side suit; trumps only when nothing else is left."""
    cards = list(r.plays)
    strength = order.strength
    trumps = [c for c in cards if c // 13 == r.trump]
    if draw_trumps and trumps:
        return max(trumps, key=lambda c: strength[c])
    side = [c for c in cards if c // 13 != r.trump]
    if not side:
        return max(trumps, key=lambda c: strength[c])
    top = max(strength)
    masters = [c for c in side if strength[c] == top]
    if masters:
        return masters[0]
    length = {s: sum(1 for c in r.hand if c // 13 == s) for s in range(4)}
    return min(side, key=lambda c: (-length[c // 13], strength[c]))


def _take(r: _Read, order: RankOrder, draw_trumps: bool = False) -> int:
    """Win the trick as cheaply as possible (a side card before a trump); else lose the
    cheapest card."""
    if not r.trick:
        return _lead(r, order, draw_trumps)
    _, best = _winning(r.trick, r.trump, order)
    winners = [c for c in r.plays if _beats(c, best, r.trump, order)]
    if winners:
        return min(winners, key=lambda c: (c // 13 == r.trump, order.strength[c]))
    return _lowest(r, order)


def _tricks(r: _Read, order: RankOrder) -> int | None:
    """L'Impériale and La Triomphe: win tricks cheaply, keep trumps, lead strong suits; leave
    a partner's trick alone; take the face-up trumps of the pillage, accept an abandon,
    engage the vole only with a hand of masters."""
    kinds = {a & 7 for a in r.others}
    if PILLE in kinds:
        discards = [a for a in r.others if a & 7 == PILLE and a >> 3 != PILLE_STOP]
        if discards:
            return min(
                discards,
                key=lambda a: ((a >> 3) // 13 == r.trump, order.strength[a >> 3]),
            )
    if VOLE in kinds:
        top = max(order.strength)
        strong = all(c // 13 == r.trump or order.strength[c] == top for c in r.hand)
        return next(a for a in r.others if a & 7 == VOLE and (a >> 3 == 1) == strong)
    if ABANDON in kinds and not r.plays:
        return next((a for a in r.others if a & 7 == ABANDON and a >> 3 == 1), None)  # accept
    if not r.plays:
        return None
    if r.trick:
        seat, _ = _winning(r.trick, r.trump, order)
        mine = next((side for side in r.groups("sides") if r.seat in side), {r.seat})
        if seat != r.seat and seat in mine:
            return r.plays[_lowest(r, order)]
    return r.plays[_take(r, order)]


def _generic(r: _Read, order: RankOrder) -> int | None:
    return r.plays[_take(r, order)] if r.plays else None


# --- the heuristic bot ---------------------------------------------------------------------

_STRATEGIES: dict[str, Strategy] = {
    "dame-de-pique": _dame_de_pique,
    "napoleon": _napoleon,
    "imperiale": _tricks,
    "triomphe": _tricks,
}


def _order(game: str, ruleset: str, options: Mapping[str, object]) -> RankOrder:
    """The rank order the game plays with (RULES.md 0.3)."""
    if game == "imperiale":
        return R1
    if game == "triomphe":
        default = "R2" if ruleset == "as-qui-pille" else "R1"
        return R1 if options.get("rank_order", default) == "R1" else R3
    return R3


class HeuristicBot:
    """Rules of thumb for one game; the first legal action when no rule applies."""

    name = "heuristic"

    def __init__(
        self, game: str, ruleset: str = "", options: Mapping[str, object] | None = None
    ) -> None:
        try:
            self.game = find_game(game).name
        except RulesError:
            self.game = game
        self.strategy = _STRATEGIES.get(self.game, _generic)
        self.order = _order(self.game, ruleset, options or {})

    def choose(self, view: pb.SeatView) -> int:
        legal = [c.action for c in view.legal_actions]
        read = _Read.of(view)
        if self.game == "imperiale":
            # Trump A K Q J and 7 (the 6 with three players) score for the trick's winner.
            read.honours = frozenset({12, 11, 10, 9, 4 if read.players == 3 else 5})
        action = self.strategy(read, self.order)
        return action if action in legal else legal[0]


def make_bot(
    kind: str,
    game: str,
    ruleset: str = "",
    seed: int | None = None,
    options: Mapping[str, object] | None = None,
) -> Bot:
    """A bot by kind: "random" or "heuristic", for `game`; `RulesError` for another kind, or
    a game, ruleset or options Tapis does not have (the players aside: any number the rules
    take), or a seed that is no int."""
    game = find_game(game).name  # (RulesError: no such game)
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise RulesError(f"seed is {quoted(seed)} ({type(seed).__name__}), not an int", "seed")
    if options is not None and not isinstance(options, Mapping):
        raise RulesError(f"options is {quoted(options)}, not a mapping of options", "options")
    make_rules(game, ruleset or None, dict(options or {}))  # (RulesError: what does not hold)
    if kind == "random":
        return RandomBot(seed)
    if kind == "heuristic":
        return HeuristicBot(game, ruleset, options)
    raise RulesError(f"unknown bot kind {quoted(kind)}; expected random or heuristic", "bots")


# --- playing a seat ------------------------------------------------------------------------


@dataclass(frozen=True)
class SeatResult:
    """How a seat's match ended (as its stream told it)."""

    seat: int
    winners: tuple[int, ...]
    scores: tuple[rpb.Score, ...]  # every seat's, after the last hand (empty if none ended)
    record_id: str
    actions: int  # actions this seat took
    reason: str = ""  # why the match ended, when its end says (`MatchEnded.reason`)

    @property
    def won(self) -> bool:
        return self.seat in self.winners

    @property
    def outcome(self) -> str:
        """For a person: "won", "lost", or "no winner" (a match the referee stopped), with
        why when the end says."""
        said = "won" if self.won else "lost" if self.winners else "no winner"
        return f"{said} ({self.reason})" if self.reason else said


async def play_seat(handle: SeatHandle, bot: Bot, one_call: bool | None = None) -> SeatResult:
    """Play `handle`'s seat with `bot` until the match ends: on one PlaySeat call when the
    referee offers it (`one_call` None: tried first; True: only that; False: never), else
    driven by the seat's stream: one WatchTable for the match and one SubmitAction per move
    (on each turn, and at once on a next_view; a submission the table moved past waits for
    the next turn)."""
    if one_call is not False:
        try:
            return await _play_one_call(handle, bot)
        except RefereeError as exc:
            if one_call or exc.status != grpc.StatusCode.UNIMPLEMENTED:
                raise
    return await _play_two_calls(handle, bot)


class _Ending:
    """What a seat's events say of the match's end."""

    def __init__(self) -> None:
        self.record_id = ""
        self.reason = ""
        self.winners: tuple[int, ...] = ()
        self.scores: tuple[rpb.Score, ...] = ()

    def read(self, event: pb.TableEvent) -> None:
        kind = event.WhichOneof("event")
        if kind == "hand_ended":
            self.scores = tuple(event.hand_ended.scores)
        elif kind == "match_ended":
            self.winners = tuple(event.match_ended.winners)
            self.record_id = event.match_ended.record_id
            self.reason = event.match_ended.reason
        elif kind == "table_closed":
            closed = event.table_closed
            raise RefereeError(
                grpc.StatusCode.FAILED_PRECONDITION, f"the table closed: {closed.reason}"
            )

    def result(self, seat: int, actions: int) -> SeatResult:
        if not self.record_id:
            raise RefereeError(grpc.StatusCode.UNKNOWN, "the watch ended before the match")
        return SeatResult(seat, self.winners, self.scores, self.record_id, actions, self.reason)


async def _play_one_call(handle: SeatHandle, bot: Bot) -> SeatResult:
    """The match on one PlaySeat call: a submission on each turn (and on an acknowledgement's
    next_view), sent at once; a refusal at a stale index waits for the next turn."""
    ending = _Ending()
    actions = 0
    play = handle.play()
    messages = aiter(play)
    try:
        async for message in messages:
            result = message.WhichOneof("result")
            if result == "refused":
                error = refusal_error(message.refused)
                if not isinstance(error, StaleAction):
                    raise error
                continue  # another seat acted first: the stream brings this seat's next turn
            if result == "ack":
                actions += 1
                for event in message.ack.events:
                    ending.read(event)
                view = message.ack.next_view if message.ack.HasField("next_view") else None
            else:
                for event in message.events:
                    ending.read(event)
                view = message.turn if message.HasField("turn") else None
            if view is not None:
                await play.submit(bot.choose(view), view.action_index)
    finally:
        await messages.aclose()
    return ending.result(handle.seat, actions)


async def _play_two_calls(handle: SeatHandle, bot: Bot) -> SeatResult:
    ending = _Ending()
    actions = 0
    messages = handle.turns(held=True)  # events are read at the turns: one message each
    try:
        async for message in messages:
            if message.HasField("turn"):
                view = message.turn
                try:
                    await handle.act(bot.choose(view), expected_index=view.action_index)
                    actions += 1
                except StaleAction:
                    pass  # another seat acted first: the stream brings this seat's next turn
                continue
            ending.read(message.event)
    finally:
        await messages.aclose()
    return ending.result(handle.seat, actions)
