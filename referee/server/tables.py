"""Tables: the referee's game state, durable and replayable.

A `Table` holds a match of the engine, its seats (tokens kept only as SHA-256), its action
list and its event list. Everything is rebuilt from the store by replay: the seed gives every
deal (records/dealing.py), the action list every move. `Referee` owns the tables: it creates
and restores them, checks tokens, applies submissions (each acknowledged only after its
commit), deals the next hand, and issues the signed record when a match ends.

Events are kept as engine events plus a few of the referee's own (a seat taken, a hand dealt,
an action taken, the match ended, the table closed); each viewer gets its own copy of each
event (service.py), with what it may not know left out as the engine's events say
(`visible_to`): the referee never compares states to find what changed.

What holds under faults and hostile clients:
- A change of state (a table created, a seat taken, an action) runs to its end as a task of
  its own once begun: a caller that goes away (its deadline, a dropped connection) never cuts
  a commit from the record and the events it must publish (`_finish`).
- An action is checked by the engine without changing anything (`Match.refusal`), committed,
  then applied: memory never holds what the store does not. Seats acting at the same time (the
  Dame de Pique exchange) do not wait for one another's commit: their actions, none of which
  depends on the others, are stored together and applied in order (`Referee._submit`), each
  stored only with the one before it (`Store.queue_action`), so a failed write leaves no gap.
- A table that hits an internal error is closed as *broken* (in memory and in the store, its
  watchers told why, logged); the process and the other tables go on, and a restart skips it.
- A table waiting for players longer than `Limits.open_seat_ttl` *expires*; a match is stopped
  at `Limits.max_hands` hands or `Limits.max_actions` actions, with a record saying so, and so
  is an untimed match no action has come to for `Limits.idle_match_ttl` (a timed one ends on
  its clocks).
- The open tables of each client are counted exactly: once when created (or reloaded), once
  when finished, expired or broken (`Table.counted`).
- CreateTable and JoinTable with a request id are done once: a repeat gives the same table and
  tokens. Tokens are derived from the referee's key (HMAC), so a repeat can give them again
  while the store keeps only their SHA-256.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import hashlib
import hmac
import json
import logging
import secrets
import sqlite3
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Sequence,
)
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from tapis_cartes.records.clocks import FORFEIT, Clocks, TimeControl, Timing, forfeit_reason
from tapis_cartes.records.codec import Provenance, build_record, canonical_bytes, record_id
from tapis_cartes.records.dealing import ALGORITHM, commitment, new_seed
from tapis_cartes.records.signing import sign
from tapis_cartes.referee.engine import Event, Match, Rules, TapisError, make_rules, new_match
from tapis_cartes.referee.engine.actions import RESIGN, action_str, encode
from tapis_cartes.referee.engine.base import HandsChanged, MatchOver
from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.referee.engine.shuffle import first_dealer, shuffled_pack
from tapis_cartes.referee.errors import (
    BadRequest,
    NotFound,
    NotReady,
    OutOfRange,
    PermissionDenied,
    Stale,
    Stopping,
    TableClosed,
    TooMany,
    Unauthenticated,
    Unavailable,
)
from tapis_cartes.referee.server.limits import DEFAULT_LIMITS, Limits, ReplayGate
from tapis_cartes.referee.server.store import REQUEST_MEMORY, Request, Store, StoredTable
from tapis_cartes.referee.server.timesource import SYSTEM_TIME, Alarm, TimeSource
from tapis_cartes.v1 import record_pb2 as pb

log = logging.getLogger("tapis.referee")

__all__ = [
    "ActionEvent",
    "BadRequest",
    "ClosedEvent",
    "EndEvent",
    "HandEvent",
    "NotFound",
    "NotReady",
    "OutOfRange",
    "PermissionDenied",
    "Referee",
    "SeatEvent",
    "Stale",
    "Stopping",
    "Table",
    "TableClosed",
    "TooMany",
    "Turn",
    "Unauthenticated",
    "Unavailable",
    "new_table_id",
]

T = TypeVar("T")


# --- the referee's own events ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SeatEvent:
    seat: int
    name: str


@dataclass(frozen=True, slots=True)
class HandEvent:
    number: int
    dealer: int
    hands: tuple[int, ...]
    retourne: int


@dataclass(frozen=True, slots=True)
class ActionEvent:
    index: int
    seat: int
    action: int
    # Every seat's cards after the action (each sees its own only), a mask each: a tuple of
    # ints, which the garbage collector stops tracking (one object per action it scans less).
    hands: tuple[int, ...]
    elapsed: int = 0  # ms the seat took (a timed table)
    timeout: bool = False  # made by the referee because the seat's time ran out
    remaining: int | None = None  # the seat's budget left after it (a timed table's budget)


@dataclass(frozen=True, slots=True)
class Turn:
    """Not an event: on a seat's stream, the seat must act now, at `action_index`."""

    action_index: int


@dataclass(eq=False, slots=True)
class Writing:
    """An action being stored, not applied yet: one of the actions of seats acting at the same
    time (the Dame de Pique exchange), stored together rather than one commit after the
    other (`Referee._submit`)."""

    seat: int
    action: int
    index: int
    stored: asyncio.Future[None]  # the store's commit
    after: Writing | None  # the one before it, applied (or failed) first
    done: asyncio.Future[None]  # applied, or failed


@dataclass(frozen=True, slots=True)
class EndEvent:
    winners: tuple[int, ...]
    reason: str
    record_id: str


@dataclass(frozen=True, slots=True)
class ClosedEvent:
    """The table closed without a record: `status` "expired" or "broken"."""

    status: str
    reason: str


TableEventData = SeatEvent | HandEvent | ActionEvent | EndEvent | ClosedEvent | Event


def new_table_id() -> str:
    """A new table's id: 16 random URL-safe characters, never starting with "-" (a command
    line would read such an id as an option: `tapis table record -Iq...`)."""
    while (table_id := secrets.token_urlsafe(12)).startswith("-"):
        pass
    return table_id


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass
class Seat:
    name: str
    open: bool
    token_hash: bytes | None = None
    order: int | None = None

    @property
    def taken(self) -> bool:
        return self.token_hash is not None


@dataclass(eq=False)
class Table:
    """One table, in memory."""

    id: str
    rules: Rules
    options: dict[str, Any]
    seed: bytes
    created: float
    creator: str
    seats: list[Seat]
    match: Match
    limits: Limits = field(default_factory=Limits)
    actions: list[tuple[int, int]] = field(default_factory=list)
    events: list[TableEventData] = field(default_factory=list)
    action_events: list[int] = field(default_factory=list)  # first event index of each action
    acting: list[int] = field(default_factory=list)  # per action: the seats to act (bits) then
    decks: list[list[int]] = field(default_factory=list)
    envelope: bytes | None = None
    record_id: str = ""
    durable_events: int = 0  # events of committed writes: all that watchers may see
    stopped: str = ""  # why the referee stopped the match at its limits ("" if it did not)
    closed: ClosedEvent | None = None  # closed without a record (expired, broken)
    record_retry: float = 0.0  # seconds before the record is tried again (the store failed)
    counted: bool = False  # counted among its creator's open tables
    # the alarm that ends the table if no one plays it: waiting for players, it expires;
    # started (untimed), its match is stopped (`Referee._schedule_expiry`)
    expiry: Alarm | None = None
    acted_at: float = 0.0  # when its last action came, or it started, or the referee did (ms)
    time_control: TimeControl | None = None  # None: no clock
    clocks: Clocks | None = None  # the seats' budgets (a timed table)
    elapsed: list[int] = field(default_factory=list)  # per action, ms (a timed table)
    timeouts: set[int] = field(default_factory=set)  # indexes of the actions made on time
    since: dict[int, float] = field(default_factory=dict)  # seat -> when its clock started
    alarm: Alarm | None = None  # when the first running clock runs out
    time_source: TimeSource = SYSTEM_TIME  # the referee's
    # per seat: (action index, its turn message then), shared by a turn and a next_view
    turn_views: dict[int, tuple[int, Any]] = field(default_factory=dict)
    _legal_cache: dict[int, tuple[list[int], frozenset[int]]] = field(default_factory=dict)
    _legal_at: int = -1
    _lock: asyncio.Lock | None = None
    _waiters: list[asyncio.Future[None]] | None = None  # watchers waiting for a change
    # per seat: the watchers that wait only for the seat's turn or the table's end
    _turn_waiters: dict[int, list[asyncio.Future[None]]] = field(default_factory=dict)
    # actions being stored, in index order, not applied yet (`Referee._submit`)
    writing: list[Writing] = field(default_factory=list)
    _settled: list[asyncio.Future[None]] = field(default_factory=list)  # waiting for none
    # Every seat taken (`started`, asked several times per action): kept by `take`, the one
    # change of a seat's token.
    _all_taken: bool = False

    def __post_init__(self) -> None:
        if self.time_control is not None and self.clocks is None:
            self.clocks = Clocks(self.time_control, self.rules.players)
        self._all_taken = all(s.taken for s in self.seats)

    @property
    def lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def notify(self) -> None:
        waiters = self._waiters
        if waiters:
            self._waiters = None
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        for seat, seat_waiters in list(self._turn_waiters.items()):
            if seat_waiters and (self.ended or self.must_act(seat)):
                del self._turn_waiters[seat]
                for waiter in seat_waiters:
                    if not waiter.done():
                        waiter.set_result(None)

    def wake_all(self) -> None:
        """Wake every watcher of the table, whatever it waits for (the referee stopping)."""
        waiters = [*(self._waiters or ()), *(w for ws in self._turn_waiters.values() for w in ws)]
        self._waiters = None
        self._turn_waiters.clear()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def settled(self) -> asyncio.Future[None]:
        """Done once no action is being stored (`writing` empty)."""
        future = asyncio.get_running_loop().create_future()
        if self.writing:
            self._settled.append(future)
        else:
            future.set_result(None)
        return future

    def written(self, entry: Writing) -> None:
        """`entry` is applied (or failed): no longer in `writing`."""
        self.writing.remove(entry)
        if not entry.done.done():
            entry.done.set_result(None)
        if not self.writing:
            settled, self._settled = self._settled, []
            for future in settled:
                if not future.done():
                    future.set_result(None)

    async def wait_change(self, timeout: float, turn_of: int | None = None) -> None:
        """Until the next `notify`, or `timeout` seconds; with `turn_of`, until a `notify`
        after which that seat must act or the table has ended (a watcher of turns only is not
        woken by every action). (A future and a timer per wait, no task: every watcher of a
        table waits after each action.)"""
        waiter = asyncio.get_running_loop().create_future()
        if turn_of is None:
            if self._waiters is None:
                self._waiters = []
            waiters = self._waiters
        else:
            waiters = self._turn_waiters.setdefault(turn_of, [])
        waiters.append(waiter)
        timer = waiter.get_loop().call_later(timeout, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            with contextlib.suppress(ValueError):  # timed out or cancelled: no longer waiting
                waiters.remove(waiter)

    @property
    def commitment(self) -> bytes:
        return commitment(self.seed)

    @property
    def started(self) -> bool:
        return self._all_taken

    @property
    def finished(self) -> bool:
        """The match is over: won, resigned, or stopped by the referee at its limits."""
        return self.match.finished or bool(self.stopped)

    @property
    def ended(self) -> bool:
        """Nothing more happens at this table: its record is issued, or it is closed."""
        return self.envelope is not None or self.closed is not None

    # -- replaying ------------------------------------------------------------------------

    @classmethod
    def replaying(
        cls,
        table_id: str,
        rules: Rules,
        options: dict[str, Any],
        seed: bytes,
        created: float,
        creator: str,
        seats: Sequence[tuple[str, bool, bytes | None, int | None]],
        actions: Sequence[tuple[int, int]],
        limits: Limits,
        time_control: TimeControl | None = None,
        timing: Sequence[tuple[int, bool]] = (),
    ) -> Generator[None, None, Table]:
        """A table rebuilt from its durable form: seats taken in their order, then every
        action (the seed gives the deals) with, at a timed table, its elapsed time and
        whether it was made on time (`timing`). Every stored action is replayed, whatever
        `limits` say (it was acknowledged under the limits of its time); they apply from the
        last one on: a match past them (a restart with lower `--max-hands` or
        `--max-actions`) is then stopped. A pause (a yield) after each `REPLAY_CHUNK`
        actions: a caller on the event loop lets the others run there (`Referee.fetch`)."""
        table = cls(
            table_id,
            rules,
            options,
            seed,
            created,
            creator,
            [Seat(name, open_) for name, open_, _, _ in seats],
            new_match(rules),
            replace(limits, max_hands=_NO_LIMIT, max_actions=_NO_LIMIT) if actions else limits,
            time_control=time_control,
        )
        taken = sorted((order, i) for i, (_, _, h, order) in enumerate(seats) if h is not None)
        for _, i in taken:
            name, _, hashed, _ = seats[i]
            assert hashed is not None
            table.take(i, name, hashed)
        for i, (seat, action) in enumerate(actions):
            elapsed, timeout = timing[i] if i < len(timing) else (0, False)
            if i == len(actions) - 1:
                table.limits = limits
            table.apply(seat, action, elapsed, timeout)
            if i % REPLAY_CHUNK == REPLAY_CHUNK - 1:
                yield
        table.durable_events = len(table.events)
        return table

    def take(self, seat: int, name: str, hashed: bytes) -> None:
        s = self.seats[seat]
        s.name = name or s.name
        s.token_hash = hashed
        s.order = sum(1 for x in self.seats if x.order is not None)
        self._all_taken = all(x.taken for x in self.seats)
        self.events.append(SeatEvent(seat, s.name))
        if self.started:
            self.deal_until_playable()
            # The legal actions kept for this action index (`legal`) were asked while the
            # table waited (none: a seat's stream opened early asks): they no longer hold.
            self._legal_at = -1

    def deal_until_playable(self) -> None:
        """Deal hands (RULES.md 7 dealers, decks from the seed) while none is in progress,
        up to the referee's limit of hands."""
        match = self.match
        while not self.finished and (match.hand is None or match.hand.over):
            if len(match.results) >= self.limits.max_hands:
                self.stopped = _stopped(len(match.results), self.limits.max_hands, "hands")
                return
            number = match.hand_number
            expected = match.expected_dealer()
            dealer = (
                first_dealer(self.seed, match.first_dealers()) if expected is None else expected
            )
            deck = shuffled_pack(self.seed, number, match.pack)
            deal = match.deal_deck(dealer, deck)
            self.decks.append(deck)
            self.events.append(HandEvent(number, dealer, deal.hands, deal.retourne))
            self.events.extend(
                e for e in match.begin_hand(dealer, deal) if not isinstance(e, HandsChanged)
            )

    def apply(
        self, seat: int, action: int, elapsed: int = 0, timeout: bool = False
    ) -> list[TableEventData]:
        """Apply one action in memory (an action the engine refuses raises, changing
        nothing); at a timed table, `elapsed` ms are spent from the seat's clock, and
        `timeout` marks an action the referee made on time."""
        match = self.match
        hand = match.hand
        acting = 0
        for s in match.to_act():
            acting |= 1 << s
        engine_events = match.apply(seat, action)
        index = len(self.actions)
        first = len(self.events)
        self.actions.append((seat, action))
        self.action_events.append(first)
        remaining = None
        if self.clocks is not None:
            self.clocks.spend(seat, elapsed)
            self.elapsed.append(elapsed)
            if timeout:
                self.timeouts.add(index)
            remaining = self.clocks.left(seat)
        self.acting.append(acting)
        self.turn_views.clear()  # the views of the index before
        # Every seat's cards after the action go with it (ActionTaken.hand, each seat its
        # own): the engine's when an exchange or a pillage changed them, else the hand's now.
        # The engine's other events follow it.
        hands = None
        for event in engine_events:
            if isinstance(event, HandsChanged):
                hands = event.hands
        if hands is None:
            hands = tuple(hand.held) if hand is not None else (0,) * len(self.seats)
        self.events.append(ActionEvent(index, seat, action, hands, elapsed, timeout, remaining))
        forfeit = timeout and action == encode(RESIGN)
        for event in engine_events:
            if isinstance(event, HandsChanged):
                continue
            if forfeit and isinstance(event, MatchOver):
                # CLOCK.FORFEIT: the engine (clock-free) resigned for the seat; the seat lost
                # on time, as the record's outcome and the end event say.
                event = MatchOver(event.winners, forfeit_reason(seat))
            self.events.append(event)
        self.deal_until_playable()
        if not self.finished and len(self.actions) >= self.limits.max_actions:
            self.stopped = _stopped(len(self.actions), self.limits.max_actions, "actions")
        return self.events[first:]

    def record(self, provenance: Provenance | None = None) -> pb.GameRecord:
        """The record of the match as played: its seats, packs, deal source and, for a match
        the referee stopped, why; `provenance` by default this referee's table."""
        if provenance is None:
            played_at = datetime.fromtimestamp(self.created, UTC).isoformat(timespec="seconds")
            provenance = Provenance("referee", self.id, played_at)
        rec = build_record(
            self.match,
            [s.name for s in self.seats],
            provenance,
            self.decks,
            pb.DealSource(algorithm=ALGORITHM, commitment=self.commitment, seed=self.seed),
            None
            if self.time_control is None
            else Timing(self.time_control, self.elapsed, frozenset(self.timeouts)),
        )
        if self.stopped:
            rec.outcome.reason = self.stopped
        return rec

    def signed_record(
        self, key: Ed25519PrivateKey, rec: pb.GameRecord | None = None
    ) -> tuple[bytes, str]:
        """The signed record of the match as played (its envelope's bytes) and its id; `rec`:
        its record, when the caller made it (`record`)."""
        data = canonical_bytes(self.record() if rec is None else rec)
        return sign(data, key).SerializeToString(deterministic=True), record_id(data)

    # -- clocks (a timed table) -----------------------------------------------------------

    def run_clocks(self, now: float, acted: int | None = None, start: float | None = None) -> None:
        """The running clocks after a change: each seat that may act runs from `now` (or
        from `start`, later: held until then), unless its clock was already running
        (`acted`, the seat that just acted, starts again if it must act again); the others
        stop."""
        if acted is not None:
            self.since.pop(acted, None)
        live = self.clocks is not None and self.started and not self.finished
        to_act = set(self.match.to_act()) if live and self.closed is None else set()
        for seat in [s for s in self.since if s not in to_act]:
            del self.since[seat]
        for seat in to_act:
            self.since.setdefault(seat, now if start is None else start)

    def elapsed_of(self, seat: int, now: float) -> int:
        """The whole ms the seat's running clock shows (0 when it is not running)."""
        start = self.since.get(seat)
        return 0 if start is None else max(0, int(now - start))

    def overdue(self, seat: int, now: float) -> bool:
        """Whether the seat's time ran out (its clock runs past what it is allowed)."""
        return (
            self.clocks is not None
            and seat in self.since
            and self.elapsed_of(seat, now) > self.clocks.allowed(seat)
        )

    def first_deadline(self) -> tuple[float, int] | None:
        """When the first running clock runs out, and whose it is."""
        if self.clocks is None or not self.since:
            return None
        allowed = self.clocks.allowed
        return min((start + allowed(seat), seat) for seat, start in self.since.items())

    def clock_view(self) -> list[tuple[int, int | None, bool, int | None]]:
        """Per seat: the budget left now (None without a budget), whether its clock runs,
        and the ms before the referee acts for it (None when it does not run)."""
        if self.clocks is None:
            return []
        now = self.time_source.now()
        out = []
        for seat in range(self.rules.players):
            used = self.elapsed_of(seat, now)
            left = self.clocks.left(seat)
            running = seat in self.since
            out.append(
                (
                    seat,
                    None if left is None else max(0, left - used),
                    running,
                    max(0, self.clocks.allowed(seat) - used) if running else None,
                )
            )
        return out

    def legal(self, seat: int) -> list[int]:
        """The seat's legal actions now (cached until the next action)."""
        if self._legal_at != len(self.actions):
            self._legal_cache.clear()
            self._legal_at = len(self.actions)
        cached = self._legal_cache.get(seat)
        if cached is None:
            legal = self.match.legal_actions(seat) if self.started and not self.stopped else []
            cached = self._legal_cache[seat] = (legal, frozenset(legal))
        return cached[0]

    def stop(self, reason: str) -> None:
        """The referee stops the match, unfinished: no seat may act from now on; the record
        gives `reason`."""
        self.stopped = reason
        self._legal_at = -1  # (the legal actions kept for this index no longer hold)
        self.turn_views.clear()

    def is_legal(self, seat: int, action: int) -> bool:
        self.legal(seat)
        return action in self._legal_cache[seat][1]

    def must_act(self, seat: int) -> bool:
        """Whether `seat` is to act now, on committed state (its view lists legal
        actions), with no action of its own being stored: what a `turn` on its stream and a
        `next_view` say."""
        return (
            self.closed is None
            and not self.finished
            and self.durable_events == len(self.events)
            and bool(self.legal(seat))
            and not (self.writing and any(w.seat == seat for w in self.writing))
        )

    def acted_since(self, seat: int, index: int) -> bool:
        """Whether `seat` made one of the actions from `index` on."""
        actions = self.actions
        return any(actions[i][0] == seat for i in range(index, len(actions)))

    def to_act_since(self, seat: int, index: int) -> bool:
        """Whether `seat` has been to act since action index `index` without acting: the
        actions since were other seats' acting at the same time (the Dame de Pique
        exchange), which a choice made at `index` could not depend on. (With `must_act`, a
        submission at `index` is then applied, and a turn sent at `index` still holds.)"""
        if index == len(self.actions):
            return True
        return (
            0 <= index < len(self.actions)
            and bool(self.acting[index] >> seat & 1)
            and not self.acted_since(seat, index)
        )


# The events of one batch of `Referee.watch` at most (a backlog is sent in batches).
WATCH_CHUNK = 64

# The actions a table over is replayed by before the event loop runs the others' calls
# (`Referee.fetch`): about 3 ms of Napoléon.
REPLAY_CHUNK = 500


# The actions of tables over that one client may have replayed (`Referee.fetch`): at most
# REPLAY_RATE a second, REPLAY_BURST at once (a tenth of the event loop's time at about 6 us
# an action: a club browsing its finished matches, of hundreds to thousands of actions each,
# never comes near).
REPLAY_RATE, REPLAY_BURST = 20_000, 100_000


class ReplayBudget:
    """Per client, a bucket of actions to replay that fills at `rate` a second up to
    `burst`; a replay takes its actions even past the bottom (a debt), and nothing more is
    replayed for the client until the bucket holds some again. The least recently used
    clients are forgotten past `MAX_CLIENTS` (one with a full bucket is one never seen)."""

    MAX_CLIENTS = 4096

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self._left: collections.OrderedDict[str, tuple[float, float]] = collections.OrderedDict()

    def check(self, client: str) -> None:
        """`TooMany` while the client's bucket is empty (or in debt)."""
        left = self._refilled(client)
        if left <= 0:
            raise TooMany(
                "this client asked for finished tables of more actions than the referee "
                f"replays for one ({self.rate:,.0f} a second): retry in "
                f"{max(0.1, -left / self.rate):.1f} s"
            )

    def spend(self, client: str, actions: int) -> None:
        """Take `actions` from the client's bucket (it may go into debt)."""
        self._left[client] = (self._refilled(client) - actions, time.monotonic())

    def _refilled(self, client: str) -> float:
        """The client's bucket now, kept as the most recently used."""
        now = time.monotonic()
        left, then = self._left.pop(client, (self.burst, now))
        left = min(self.burst, left + (now - then) * self.rate)
        self._left[client] = (left, now)
        while len(self._left) > self.MAX_CLIENTS:
            self._left.popitem(last=False)
        return left


def drained(steps: Generator[None, None, T]) -> T:
    """What a generator of pauses (`Table.replaying`) returns, run to its end at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


# How long GetRecord waits for the record of a match that has just ended to be stored (a
# moment: the store's next commit), before it says UNAVAILABLE.
RECORD_WAIT = 5.0


def is_backlog(table: Table, batch: Sequence[tuple[int, TableEventData] | Turn]) -> bool:
    """Whether a batch of `Referee.watch` is a backlog's: more than a batch behind the table
    (no turn last, and its last event not the table's last). Such a stream waits for a place
    at the referee's `replays` gate (limits.py `Backlog`) before its messages are built."""
    last = batch[-1] if batch else None
    return isinstance(last, tuple) and last[0] + 1 < table.durable_events


class Referee:
    """The tables of one referee, backed by a store, signing with one key."""

    def __init__(
        self,
        store: Store,
        key: Ed25519PrivateKey,
        limits: Limits = DEFAULT_LIMITS,
        time_source: TimeSource = SYSTEM_TIME,
    ) -> None:
        self.store = store
        self.key = key
        self.limits = limits
        self.time_source = time_source  # the clocks of timed tables read it
        self.tables: dict[str, Table] = {}
        # tables over (finished or closed), least recently asked for first: kept in memory up
        # to `limits.max_loaded_finished`, then left to the store
        self._loaded: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._rules: collections.OrderedDict[str, Rules] = collections.OrderedDict()
        self._open: dict[str, int] = {}  # per client: tables created and not over
        self._tasks: set[asyncio.Task[Any]] = set()  # changes of state under way
        self._requests: dict[tuple[str, str], asyncio.Future[Any]] = {}  # by request id
        self._token_key = _token_key(key)
        self._sweeper: asyncio.Task[None] | None = None
        self.ready = False  # every live table reloaded: the service answers
        # Shutting down: no clock runs out while the referee answers no new move (`stop_clocks`).
        self.clocks_stopped = False
        self._clocks_stopped_at = 0.0
        self.streams_ended = False  # shutting down: every stream ends (`end_streams`)
        self._broken_said: set[str] = set()  # tables over found broken when asked for: logged
        # the streams sending a backlog at once, of every front (gRPC's and the web's)
        self.replays = ReplayGate()
        self._fetching: dict[str, asyncio.Task[Table]] = {}  # tables over being replayed
        self._replaying = asyncio.Lock()  # one at a time (`fetch`)
        self._replay_budget = ReplayBudget(REPLAY_RATE, REPLAY_BURST)

    # -- start-up and shutdown ------------------------------------------------------------

    async def load(self) -> int:
        """Rebuild the live tables from the store by replay (the tables not finished, and
        those finished without their record, which is issued now). A finished table stays
        on disk until it is asked for (`get`). A table that cannot be rebuilt is closed as
        broken and the others are loaded."""
        await self.store.forget_requests(time.time() - REQUEST_MEMORY)
        for stored in self.store.load(live=True):
            await self._reload(stored)
        # The clocks run again, but neither the time the referee was down nor the time its
        # clients take to find it back counts: a client's channel tries again after a
        # back-off that grows (gRPC's: 1 s, then 1.6 times longer each time), so a bot that
        # does what protocol.md section 11 says can come back seconds after the referee, and
        # lost on time for it. Each running clock is held until its seat's first call
        # (`seat_back`), or `restart_grace` seconds.
        back = self.time_source.now() + 1000.0 * self.limits.restart_grace
        for table in self.tables.values():
            self._run_clocks(table, start=back)
        self._sweeper = asyncio.get_running_loop().create_task(self._forget_requests())
        self.ready = True
        return len(self.tables)

    def not_ready(self) -> Unavailable:
        """The refusal of a call while the referee is not ready: starting or stopping."""
        if self.clocks_stopped:
            return Unavailable("the referee is stopping: try again on the referee that comes back")
        return Unavailable("the referee is starting (reloading its tables): try again shortly")

    async def _forget_requests(self, every: float = 3600.0) -> None:
        """Forget the request ids older than `REQUEST_MEMORY`, once an hour."""
        while True:
            await asyncio.sleep(every)
            try:
                await self.store.forget_requests(time.time() - REQUEST_MEMORY)
            except Exception as exc:  # the store failing: tried again in an hour
                log.error("request ids not forgotten", exc_info=exc)

    async def _reload(self, stored: StoredTable) -> None:
        try:
            table = self._restore(stored)
        except Exception as exc:
            reason = f"it could not be replayed from the store ({_what(exc)})"
            _log_broken(stored.id, reason, exc)
            await self.store.close_table(stored.id, "broken", reason)
            return
        self.tables[table.id] = table
        self._count(table)
        await self._publish(table)  # issues the record of a table finished without one
        # (An idle match's time counts again from now, as its clocks (`load`): the referee
        # was down.)
        self._schedule_expiry(table)

    def stop_clocks(self) -> None:
        """The first step of a shutdown, as new calls are refused: no seat's time runs out
        from now on (no alarm rings, none is set again by a change still under way). A
        restart counts none of this time: a seat's clocks start again from its last action
        (`_reload`)."""
        if not self.clocks_stopped:
            self._clocks_stopped_at = self.time_source.now()
        self.clocks_stopped = True
        for table in self.tables.values():
            if table.alarm is not None:
                table.alarm.cancel()
                table.alarm = None

    def end_streams(self) -> None:
        """A step of a shutdown: every table's streams end now, UNAVAILABLE (their clients
        resume from the next event index on the referee that comes back), rather than hold
        the shutdown for its grace period (gRPC's server waits for every call under way)."""
        self.streams_ended = True
        for table in self.tables.values():
            table.wake_all()

    def _clock_now(self) -> float:
        """The time on the clocks: the time source's, which stops with the clocks."""
        now = self.time_source.now()
        return min(now, self._clocks_stopped_at) if self.clocks_stopped else now

    async def close(self) -> None:
        """Stop expiring tables and let the changes under way finish (before the store
        closes)."""
        self.ready = False
        self.stop_clocks()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for table in self.tables.values():
            if table.expiry is not None:
                table.expiry.cancel()
        await self.idle()

    async def idle(self) -> None:
        """Return once the changes of state under way are done."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _restore(self, stored: StoredTable) -> Table:
        return drained(self._restoring(stored))

    def _restoring(self, stored: StoredTable) -> Generator[None, None, Table]:
        """A table rebuilt from the store (`Table.replaying`, pausing as it does)."""
        if stored.problem:
            raise ValueError(stored.problem)
        rules = self._rules_for(stored.game, stored.ruleset, stored.options, stored.players)
        table = yield from Table.replaying(
            stored.id,
            rules,
            stored.options,
            stored.seed,
            stored.created,
            stored.creator,
            [(name, open_, h, order) for _, name, open_, h, order in stored.seats],
            stored.actions,
            self.limits,
            None if stored.time_control is None else TimeControl(**stored.time_control),
            stored.timing,
        )
        table.time_source = self.time_source
        if stored.record is not None:  # its last event: the record, as when it was issued
            table.envelope = stored.record
            record = pb.RecordEnvelope.FromString(stored.record).record
            table.record_id = record_id(record)
            reason = pb.GameRecord.FromString(record).outcome.reason
            if not table.finished:  # stopped at the limits of its time, whatever they are now
                table.stopped = reason
            table.events.append(self._end_event(table, reason))
        elif stored.closed_status is not None:
            table.closed = ClosedEvent(stored.closed_status, stored.closed_reason)
            table.events.append(table.closed)
        table.durable_events = len(table.events)
        return table

    def _rules_for(self, game: str, ruleset: str, options: dict[str, Any], players: int) -> Rules:
        key = json.dumps([game, ruleset, options, players], sort_keys=True)
        rules = self._rules.get(key)
        if rules is None:
            rules = make_rules(game, ruleset or None, options, players)
            self._rules[key] = rules
            if len(self._rules) > 256:
                self._rules.popitem(last=False)
        else:
            self._rules.move_to_end(key)
        return rules

    # -- tables ---------------------------------------------------------------------------

    def get(self, table_id: str) -> Table:
        """The table; one over and not in memory is loaded from the store by replay (and
        kept among the `max_loaded_finished` most recently asked for)."""
        table = self.tables.get(table_id)
        if table is None:
            return self._loaded_table(table_id, drained(self._rebuilding(table_id)))
        if table_id in self._loaded:
            self._keep_loaded(table)
        return table

    async def fetch(self, table_id: str, client: str = "") -> Table:
        """`get`, for a call of `client`: a table over, not in memory, is replayed a chunk at
        a time, one table at a time, the event loop running the others' calls between the
        chunks, and at most `REPLAY_RATE` actions a second for one client (`REPLAY_BURST` at
        once), past which it is `TooMany` (anyone may ask for any finished table: asking in
        turn for more of them than are kept, one client made the referee replay a match of
        60,000 actions, 0.36 s of the loop, again and again: every call waited, p99 374 ms;
        with the replay in chunks alone, 88 ms). Callers asking for the same table share
        its replay."""
        table = self.tables.get(table_id)
        if table is not None:
            if table_id in self._loaded:
                self._keep_loaded(table)
            return table
        task = self._fetching.get(table_id)
        if task is None:
            self._replay_budget.check(client)  # (before the table is read: that costs too)
            stored = self.store.load(only=[table_id]) if table_id else []
            if not stored:
                raise NotFound(f"no table {quoted(table_id)}")
            self._replay_budget.spend(client, len(stored[0].actions))
            task = asyncio.get_running_loop().create_task(self._fetched(table_id, stored))
            self._fetching[table_id] = task
            task.add_done_callback(lambda _: self._fetching.pop(table_id, None))
        return await asyncio.shield(task)  # (a caller gone leaves it to the others)

    async def _fetched(self, table_id: str, stored: list[StoredTable]) -> Table:
        async with self._replaying:
            steps = self._rebuilding(table_id, stored)
            while True:
                try:
                    next(steps)
                except StopIteration as done:
                    return self._loaded_table(table_id, done.value)
                await asyncio.sleep(0)

    def _rebuilding(
        self, table_id: str, stored: list[StoredTable] | None = None
    ) -> Generator[None, None, Table]:
        """A table over, rebuilt from the store (`_restoring`; `stored`: as loaded already).
        `NotFound` when there is no such table; `TableClosed` when it cannot be replayed
        (said in the log once)."""
        if stored is None:
            stored = self.store.load(only=[table_id]) if table_id else []
        if not stored:
            raise NotFound(f"no table {quoted(table_id)}")
        try:
            return (yield from self._restoring(stored[0]))
        except Exception as exc:
            why = stored[0].closed_reason or f"it cannot be replayed ({_what(exc)})"
            if not stored[0].closed_reason and table_id not in self._broken_said:
                # said once a table (a client asking again and again logs nothing more)
                if len(self._broken_said) >= MAX_BROKEN_SAID:
                    self._broken_said.clear()
                self._broken_said.add(table_id)
                _log_broken(table_id, why, exc)
            raise TableClosed(f"table {table_id} is broken: {why}") from None

    def _loaded_table(self, table_id: str, table: Table) -> Table:
        """A table rebuilt, now in memory (unless another call put it there meanwhile)."""
        table = self.tables.setdefault(table_id, table)
        self._keep_loaded(table)
        return table

    def _keep_loaded(self, table: Table) -> None:
        """Let a table that is over leave memory in its turn, the least recently asked for
        first (it stays in the store)."""
        self._loaded[table.id] = None
        self._loaded.move_to_end(table.id)
        while len(self._loaded) > self.limits.max_loaded_finished:
            old, _ = self._loaded.popitem(last=False)
            self.tables.pop(old, None)

    async def stored_record(self, table_id: str, wait: float = RECORD_WAIT) -> tuple[bytes, str]:
        """`record`, once it is stored: a match that has just ended has its record stored a
        moment after its last action (GetTable may say FINISHED meanwhile), waited for up to
        `wait` seconds; a record the store failed to keep is UNAVAILABLE at once (it is tried
        again later)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                return self.record(table_id)
            except Unavailable:
                table = self.tables.get(table_id)
                left = deadline - time.monotonic()
                if table is None or table.record_retry or left <= 0:
                    raise
                await table.wait_change(left)

    def record(self, table_id: str) -> tuple[bytes, str]:
        """The signed record (envelope bytes) of a finished table and its id; read from the
        store without a replay when the table is not in memory."""
        table = self.tables.get(table_id)
        envelope = table.envelope if table is not None else self.store.load_record(table_id)
        if envelope is None:
            table = table or self.get(table_id)  # NotFound, or a broken table
            if table.closed is not None:
                raise TableClosed(f"table {table.id} is {table.closed.status}: no record")
            if table.finished:
                why = (
                    "the referee's store failed; it tries again"
                    if table.record_retry
                    else "the match has just ended: it is being stored"
                )
                raise Unavailable(
                    f"the record of table {table.id} is not stored yet ({why}): retry"
                )
            raise NotReady(f"table {table.id} is not finished: no record yet")
        if table is not None and table.envelope is not None:
            return table.envelope, table.record_id
        return envelope, record_id(pb.RecordEnvelope.FromString(envelope).record)

    async def create(
        self,
        game: str,
        ruleset: str,
        options: dict[str, Any],
        seats: Sequence[tuple[str, bool]],
        creator: str,
        request_id: str = "",
        time_control: TimeControl | None = None,
    ) -> tuple[Table, list[tuple[int, str]]]:
        """A new table; returns it with the tokens of the seats the creator took. With a
        request id, a repeat of the same request gives the same table and tokens.
        `time_control`: the table's clocks (None: untimed)."""

        def create() -> Coroutine[Any, Any, tuple[Table, list[tuple[int, str]]]]:
            return self._create(game, ruleset, options, seats, creator, request, time_control)

        def again(known: Request) -> tuple[Table, list[tuple[int, str]]]:
            table = self.get(known.table_id)
            mine = [i for i, s in enumerate(table.seats) if not s.open]
            return table, [(i, self._token_again(table, i)) for i in mine]

        if not request_id:
            request = None
            return await self._finish(create())
        asked: list[Any] = ["create", game, ruleset, options, [list(s) for s in seats]]
        if time_control is not None:
            asked.append(time_control.to_json())
        digest = _digest(asked)
        request = (creator, request_id, digest)
        return await self._once(request, create, again)

    async def _create(
        self,
        game: str,
        ruleset: str,
        options: dict[str, Any],
        seats: Sequence[tuple[str, bool]],
        creator: str,
        request: tuple[str, str, str] | None,
        time_control: TimeControl | None = None,
    ) -> tuple[Table, list[tuple[int, str]]]:
        # From the cap check to the count, nothing awaits but the store: the count is
        # reserved first, so concurrent creations by one client never pass the cap.
        active = self._open.get(creator, 0)
        if active >= self.limits.max_tables_per_client:
            raise TooMany(
                f"this client already has {active} open tables"
                f" (limit {self.limits.max_tables_per_client})"
            )
        if not seats:
            raise BadRequest("a table needs seats", "seats")
        rules = self._rules_for(game, ruleset, options, len(seats))
        table = Table(
            id=new_table_id(),
            rules=rules,
            options=options,
            seed=new_seed(),
            created=time.time(),
            creator=creator,
            seats=[Seat(name or f"seat {i}", open_) for i, (name, open_) in enumerate(seats)],
            match=new_match(rules),
            limits=self.limits,
            time_control=time_control,
            time_source=self.time_source,
        )
        tokens = [(i, self._token(table.id, i)) for i, (_, open_) in enumerate(seats) if not open_]
        hashes = {i: token_hash(t) for i, t in tokens}
        # The creator's seats are taken first, in seat order.
        order = {seat: n for n, (seat, _) in enumerate(tokens)}
        stored = StoredTable(
            table.id,
            table.created,
            creator,
            rules.game,
            rules.ruleset,
            options,
            rules.players,
            table.seed,
            False,
            None,
            [(i, s.name, s.open, hashes.get(i), order.get(i)) for i, s in enumerate(table.seats)],
            [],
            time_control=None if time_control is None else time_control.to_json(),
        )
        self._count(table)
        try:
            await _stored(self.store.create_table(stored, request))
        except BaseException:
            self._uncount(table)
            raise
        for i, _ in tokens:
            table.take(i, table.seats[i].name, hashes[i])
        self.tables[table.id] = table
        await self._publish(table)  # the rules may end a match as its first hand is dealt
        self._schedule_expiry(table)
        self._run_clocks(table)
        _log("table created", table, creator=creator, open=[i for i, s in enumerate(seats) if s[1]])
        if table.started:
            _log("table started", table)
        return table, tokens

    async def join(
        self, table_id: str, seat: int | None, name: str, client: str = "", request_id: str = ""
    ) -> tuple[int, str]:
        """Take an open seat (`seat`, or the first open one); returns it and its token. With
        a request id, a repeat of the same request gives the same seat and token."""

        def join() -> Coroutine[Any, Any, tuple[int, str]]:
            return self._join(table_id, seat, name, request)

        def again(known: Request) -> tuple[int, str]:
            assert known.seat is not None
            return known.seat, self._token_again(self.get(known.table_id), known.seat)

        if not request_id:
            request = None
            return await self._finish(join())
        request = (client, request_id, _digest(["join", table_id, seat, name]))
        return await self._once(request, join, again)

    async def _join(
        self, table_id: str, seat: int | None, name: str, request: tuple[str, str, str] | None
    ) -> tuple[int, str]:
        table = self.get(table_id)
        async with table.lock:
            _check_open(table)
            free = [i for i, s in enumerate(table.seats) if not s.taken]
            if seat is None:
                if not free:
                    raise PermissionDenied(f"table {table_id} has no open seat")
                seat = free[0]
            if not 0 <= seat < len(table.seats):
                raise BadRequest(f"seat {seat} does not exist", "seat")
            if seat not in free:
                raise PermissionDenied(f"seat {seat} of table {table_id} is taken")
            token = self._token(table.id, seat)
            hashed = token_hash(token)
            order = sum(1 for s in table.seats if s.taken)
            await _stored(
                self.store.take_seat(
                    table_id, seat, name or table.seats[seat].name, hashed, order, request
                )
            )
            table.take(seat, name, hashed)
            await self._publish(table)  # the rules may end a match as its first hand is dealt
            if table.started:
                self._schedule_expiry(table)
            self._run_clocks(table)
            _log("seat taken", table, seat=seat)
            if table.started:
                _log("table started", table)
            return seat, token

    def authenticate(self, table: Table, seat: int, token: str | None) -> None:
        if not 0 <= seat < len(table.seats):
            raise BadRequest(f"seat {seat} does not exist at table {table.id}", "seat")
        if not token:
            raise Unauthenticated("this call needs the seat's token: authorization: Bearer <token>")
        expected = table.seats[seat].token_hash
        if expected is None or not hmac.compare_digest(expected, token_hash(token)):
            raise PermissionDenied(f"the token is not the token of seat {seat}")
        self._seat_back(table, seat)

    def _seat_back(self, table: Table, seat: int) -> None:
        """A call of the seat: its clock, if held since a restart (`load`), runs from now."""
        start = table.since.get(seat)
        now = self.time_source.now()
        if start is not None and start > now:
            table.since[seat] = now
            self._run_clocks(table)  # its alarm comes sooner

    # -- tokens and request ids -----------------------------------------------------------

    def _token(self, table_id: str, seat: int) -> str:
        """The token of a seat: an HMAC of the table and seat under a key derived from the
        referee's signing key (the store keeps only its SHA-256)."""
        mac = hmac.new(self._token_key, f"{table_id}/{seat}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def _token_again(self, table: Table, seat: int) -> str:
        token = self._token(table.id, seat)
        if table.seats[seat].token_hash != token_hash(token):
            raise NotReady(
                f"the token of seat {seat} of table {table.id} cannot be given again (the"
                " referee's key changed since)"
            )
        return token

    async def _once(
        self,
        request: tuple[str, str, str],
        do: Callable[[], Coroutine[Any, Any, T]],
        again: Callable[[Request], T],
    ) -> T:
        """`do()` once per (client, request id): a repeat (concurrent, later, or after a
        restart) gets `again(...)` of what the first one made; the same id with another
        request is refused."""
        client, request_id, digest = request
        key = (client, request_id)
        # Wait for the same request under way (a finished one is never waited on: awaiting a
        # done task does not yield, and its entry may not be removed yet).
        while (pending := self._requests.get(key)) is not None and not pending.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(pending)
        known = self.store.find_request(client, request_id)
        if known is not None:
            if known.digest != digest:
                raise BadRequest(
                    f"request id {quoted(request_id)} was used by this client for another request",
                    "request_id",
                )
            return again(known)
        task = self._spawn(do())
        self._requests[key] = task

        def forget(done: asyncio.Task[T]) -> None:
            if self._requests.get(key) is done:
                del self._requests[key]

        task.add_done_callback(forget)
        return await asyncio.shield(task)

    # -- moves ----------------------------------------------------------------------------

    async def submit(
        self, table: Table, seat: int, expected: int, action: int
    ) -> tuple[int, int, list[TableEventData]]:
        """Apply `action` for `seat` at index `expected`; durable before this returns.
        Returns the action's index, the index of its first event, and its events."""
        return await self._finish(self._submit(table, seat, expected, action))

    async def _submit(
        self, table: Table, seat: int, expected: int, action: int
    ) -> tuple[int, int, list[TableEventData]]:
        # One submission at a time holds the table's lock, until its action is stored and
        # applied; but the actions of seats acting at the same time (the Dame de Pique
        # exchange), none of which depends on the others, are stored together: the first
        # leaves the lock while its commit is under way, the others join it (`_joins`),
        # each checked on the state before them, and they are applied in order once stored.
        # A submission that may not join waits until none is being stored.
        while True:
            async with table.lock:
                if not table.writing or _joins(table, seat, expected, action):
                    admitted = await self._admit(table, seat, expected, action)
                    if not isinstance(admitted, Writing):
                        return admitted
                    break
                settled = table.settled()
            await settled
        return await self._apply_stored(table, admitted)

    async def _admit(
        self, table: Table, seat: int, expected: int, action: int
    ) -> tuple[int, int, list[TableEventData]] | Writing:
        """Check a submission, under the table's lock: its answer (a retry's, or the action
        stored and applied), or the action being stored when others may join it."""
        _check_open(table)
        current = len(table.actions)
        any_index = expected == ANY_INDEX  # (a resignation: it names no index)
        if any_index:
            expected = current
        done = _retried(table, seat, expected, action)
        if done is not None:
            # A retry of an acknowledged submission (the seat has not acted since, as it
            # would have had it received the acknowledgement): the same answer.
            first = table.action_events[done]
            last = table.action_events[done + 1] if done + 1 < current else len(table.events)
            return done, first, list(table.events[first:last])
        if table.finished:
            # Whatever the index: ABORTED would send the seat to wait for a turn that never
            # comes. (A retry of the last action was answered above.)
            if table.stopped:
                raise NotReady(f"the match is over: {table.stopped}")
            self._check_legal(table, seat, action)  # the engine's refusal: the match is over
        if expected < current and table.must_act(seat) and table.to_act_since(seat, expected):
            # The seat was to act at `expected` and still is, without having acted since:
            # the actions in between were other seats' acting at the same time (the Dame
            # de Pique exchange), which its choice could not depend on. Applied now.
            expected = current
        if expected != current:
            late = _made_on_time(table, seat, expected)
            raise Stale(
                f"expected_action_index is {expected} but the table is at {current}"
                if late is None
                else f"seat {seat}'s time ran out before this action came: {late}; the table"
                f" is at {current}",
                current,
            )
        if not table.started:
            raise NotReady("the table is waiting for players")
        now = self._clock_now()
        if table.overdue(seat, now):
            # The seat's time ran out before its action came: the referee acts for it.
            made = await self._time_out(table, seat)
            if table.finished and not table.stopped:
                # The referee's action on time ended the match (CLOCK.FORFEIT): refused as any
                # submission once the match is over (above), not ABORTED, which would send
                # the seat to wait for a turn that never comes.
                self._check_legal(table, seat, action)
            if not any_index or table.finished or table.closed is not None:
                raise Stale(
                    f"seat {seat}'s time ran out before this action came: {made}; the table"
                    f" is at {len(table.actions)}",
                    len(table.actions),
                )
            # A resignation, which names no index, holds after the referee's action on time
            # when that did not end the match (CLOCK.AUTOPLAY): made now, at the next index.
            now = self._clock_now()
        self._check_legal(table, seat, action)
        if _may_join(table, seat, action):
            return self._store_with_others(table, seat, action)
        return await self._commit(table, seat, action, table.elapsed_of(seat, now))

    def _store_with_others(self, table: Table, seat: int, action: int) -> Writing:
        """Queue an action for the store, now, after those being stored (under the table's
        lock)."""
        index = len(table.actions) + len(table.writing)
        after = table.writing[-1] if table.writing else None
        stored = self.store.queue_action(table.id, index, seat, action, follows=after is not None)
        entry = Writing(
            seat, action, index, stored, after, asyncio.get_running_loop().create_future()
        )
        table.writing.append(entry)
        return entry

    async def _apply_stored(
        self, table: Table, entry: Writing
    ) -> tuple[int, int, list[TableEventData]]:
        """Once its commit is done and the action before it applied: apply an action stored
        with others, publish its events. (Not under the table's lock: each step that changes
        the table is made without an await.)"""
        try:
            await _stored(entry.stored)
            if entry.after is not None:
                await entry.after.done
            _check_open(table)  # (an action before it broke the table)
            assert len(table.actions) == entry.index, "actions stored together out of order"
            first = len(table.events)
            try:
                events = table.apply(entry.seat, entry.action)
            except Exception as exc:  # a legal action the engine fails on: a bug
                table.written(entry)
                closed = await self._break(
                    table, f"action {entry.index} could not be applied ({_what(exc)})", exc
                )
                return entry.index, first, [closed]
        except BaseException:
            if entry in table.writing:
                table.written(entry)
            raise
        table.written(entry)
        if table.finished:
            async with table.lock:  # its record is issued once, as after any action
                end = await self._publish(table)
        else:
            end = await self._publish(table)  # (nothing awaited: no record to issue)
        if end is not None:
            events.append(end)
        return entry.index, first, events

    async def _commit(
        self, table: Table, seat: int, action: int, elapsed: int, timeout: bool = False
    ) -> tuple[int, int, list[TableEventData]]:
        """Store a legal action, apply it, publish its events (and the record if it ends the
        match), restart the clocks. Under the table's lock."""
        current = len(table.actions)
        await _stored(self.store.queue_action(table.id, current, seat, action, elapsed, timeout))
        table.acted_at = self.time_source.now()
        first = len(table.events)
        try:
            events = table.apply(seat, action, elapsed, timeout)
        except Exception as exc:  # a legal action the engine fails on: a bug
            closed = await self._break(
                table, f"action {current} could not be applied ({_what(exc)})", exc
            )
            return current, first, [closed]
        end = await self._publish(table)
        if end is not None:
            events.append(end)
        self._run_clocks(table, seat)
        return current, first, events

    # -- clocks ---------------------------------------------------------------------------

    def _run_clocks(
        self, table: Table, acted: int | None = None, start: float | None = None
    ) -> None:
        """Restart the table's clocks after a change (`Table.run_clocks`) and set its alarm
        for the first that runs out (nothing at an untimed table)."""
        if table.clocks is None:
            return
        if table.alarm is not None:
            table.alarm.cancel()
            table.alarm = None
        now = self.time_source.now()
        table.run_clocks(now, acted, start)
        first = table.first_deadline()
        if first is None or table.ended:
            return
        self._set_alarm(table, first[0] - now)

    def _set_alarm(self, table: Table, delay_ms: float) -> None:
        if self.clocks_stopped:
            return

        def ring() -> None:
            self._spawn(self._alarm(table))

        table.alarm = self.time_source.call_later(delay_ms, ring)

    async def _alarm(self, table: Table) -> None:
        """A clock ran out: the referee acts for the seat whose time ran out first (the
        policy of the table's time control), then the clocks go on."""
        async with table.lock:
            if table.ended or table.finished or table.clocks is None or self.clocks_stopped:
                return
            first = table.first_deadline()
            if first is None:
                return
            deadline, seat = first
            if self.time_source.now() < deadline:
                self._run_clocks(table)  # woken early: wait again
                return
            try:
                await self._time_out(table, seat)
            except Unavailable as exc:  # the store failing (said there): tried again in a second
                fields = {"table": table.id, "seat": seat, "error": str(exc)}
                log.error("time out not stored", extra={"fields": fields})
                self._set_alarm(table, 1000.0)

    async def _time_out(self, table: Table, seat: int) -> str:
        """Act for a seat whose time ran out, as its time control says: resign for it
        (CLOCK.FORFEIT) or make its default action (CLOCK.AUTOPLAY); what was done, for a
        person. Under the table's lock."""
        assert table.clocks is not None and table.time_control is not None
        allowed = table.clocks.allowed(seat)
        if table.time_control.policy == FORFEIT:
            action = encode(RESIGN)
        else:
            action = table.match.default_action(seat)
        made = _on_time(table, action)
        _log("time out", table, seat=seat, action=action, allowed_ms=allowed)
        await self._commit(table, seat, action, allowed, timeout=True)
        return made

    def _check_legal(self, table: Table, seat: int, action: int) -> None:
        """Refuse without changing the table: the engine says why (`Match.refusal` is pure,
        nothing is copied or replayed)."""
        if table.is_legal(seat, action):
            return
        error = table.match.refusal(seat, action)
        if error is not None:
            raise error

    async def resign(self, table: Table, seat: int) -> int:
        """Concede the match for `seat`; at a table still waiting for players, leave it: the
        table closes as one whose seats were not taken (EXPIRED, no record), its creator's
        place given back at once rather than when its open seats expire. Its index: that of
        the resignation (0 for a table left)."""
        if not table.started and await self._close_waiting(
            table, lambda: f"{_seats_text([seat])} left before the match began"
        ):
            return 0
        index, _, _ = await self.submit(table, seat, ANY_INDEX, encode(RESIGN))
        return index

    # -- the end of a table ---------------------------------------------------------------

    async def _publish(self, table: Table) -> EndEvent | ClosedEvent | None:
        """After a committed write: issue the record of a match that is over (its end event,
        returned, closes the table's events), then show watchers every event so far. A
        record that cannot be issued closes the table as broken (its event is returned)."""
        end: EndEvent | ClosedEvent | None = None
        if table.finished and not table.ended:
            try:
                end = await self._issue_record(table)
            except Exception as exc:
                if _store_failed(exc):  # (a full disk): its actions are stored, its record is
                    self._retry_record(table, exc)  # issued later, as a restart would issue it
                else:
                    why = f"its record could not be issued ({_what(exc)})"
                    end = await self._break(table, why, exc)
        table.durable_events = len(table.events)
        # The watchers are woken a turn of the loop later: the answer to the submission that
        # made these events (its caller is woken now) is built and sent before the next
        # seat's turn, which is not what that caller waits for.
        asyncio.get_running_loop().call_soon(table.notify)
        return end

    def _retry_record(self, table: Table, exc: BaseException) -> None:
        """Try again, later, to issue the record of a finished table that the store could not
        keep: 1 s later, then twice as long each time, a minute at most. Meanwhile the table is
        finished without its end event (GetRecord: UNAVAILABLE), as after a restart that
        stopped before its record was stored."""
        table.record_retry = min(60.0, 2 * table.record_retry or 1.0)
        stored = isinstance(exc, sqlite3.Error)  # the store's trouble (a full disk): one line
        log.error(
            "record not stored",
            exc_info=None if stored else exc,  # (else a bug: its traceback)
            extra={
                "fields": {"table": table.id, "retry_in_s": table.record_retry, "error": _what(exc)}
            },
        )

        async def again() -> None:
            async with table.lock:
                # (a referee stopping leaves it to its restart, which issues it)
                if self.ready and not table.ended and table.closed is None:
                    await self._publish(table)

        loop = asyncio.get_running_loop()
        loop.call_later(table.record_retry, lambda: self._spawn(again()))

    async def _issue_record(self, table: Table) -> EndEvent:
        """Build, sign and store the record of a finished table."""
        rec = table.record()
        envelope, rid = table.signed_record(self.key, rec)
        await self.store.finish(table.id, envelope, rid)
        # From here to the end event, nothing awaits: no watcher sees one without the other.
        table.envelope = envelope
        table.record_id = rid
        self._over(table)
        event = self._end_event(table, rec.outcome.reason)
        table.events.append(event)
        _log(
            "table finished",
            table,
            winners=list(table.match.winners),
            reason=event.reason,
            record_id=table.record_id,
            actions=len(table.actions),
        )
        return event

    def _end_event(self, table: Table, reason: str) -> EndEvent:
        """The event of a table's record: its winners, and `reason`, its record's outcome
        reason (a seat that lost on time did so, as its record says: it did not resign)."""
        assert table.record_id
        return EndEvent(table.match.winners, reason, table.record_id)

    async def _break(self, table: Table, reason: str, exc: BaseException) -> ClosedEvent:
        """Close a table that hit an internal error: in memory at once, then in the store
        (so that a restart skips it); its watchers get the closing event."""
        _log_broken(table.id, reason, exc)
        if table.closed is not None:
            return table.closed
        closed = table.closed = ClosedEvent("broken", reason)
        self._close(table)
        try:
            await self.store.close_table(table.id, "broken", reason)
        except Exception as store_exc:  # the table stays closed in memory
            _log_broken(table.id, "the store could not mark it broken", store_exc)
        return closed

    def _close(self, table: Table) -> None:
        assert table.closed is not None
        table.events.append(table.closed)
        self._over(table)
        table.durable_events = len(table.events)
        table.notify()

    def _over(self, table: Table) -> None:
        """A table whose match is over (finished, or closed): its alarms called off (an untimed
        match's idle alarm, set for `idle_match_ttl`, a day, held the table in memory that long
        after it left the finished ones kept; a clock's, until it rang), no longer counted among
        its creator's open tables, and kept in memory in its turn."""
        for alarm in (table.expiry, table.alarm):
            if alarm is not None:
                alarm.cancel()
        table.expiry = table.alarm = None
        self._uncount(table)
        self._keep_loaded(table)

    def _schedule_expiry(self, table: Table) -> None:
        """Set the alarm that ends the table if no one plays it: waiting for players, it
        expires `open_seat_ttl` after its creation (`_expire`); started and untimed, its match
        is stopped `idle_match_ttl` after its last action, or its start, or the referee's
        (`_stop_idle`; a timed match ends on its clocks). None for a table over."""
        if table.expiry is not None:
            table.expiry.cancel()
            table.expiry = None
        if table.ended or table.finished or table.closed is not None:
            return
        if not table.started:
            delay = max(0.0, table.created + self.limits.open_seat_ttl - time.time())
            loop = asyncio.get_running_loop()
            table.expiry = loop.call_later(delay, lambda: self._spawn(self._expire(table)))
        elif table.clocks is None:
            table.acted_at = self.time_source.now()
            self._idle_alarm(table, self.limits.idle_match_ttl * 1000.0)

    def _idle_alarm(self, table: Table, delay_ms: float) -> None:
        def ring() -> None:
            self._spawn(self._stop_idle(table))

        table.expiry = self.time_source.call_later(delay_ms, ring)

    async def _stop_idle(self, table: Table) -> None:
        """Stop an untimed match no action has come to for `idle_match_ttl`: unfinished,
        with its record saying so (as at the referee's limits of hands and actions); woken
        early (an action came since the alarm was set), wait again."""
        async with table.lock:
            if table.ended or table.finished or table.closed is not None:
                return
            if self.clocks_stopped:  # shutting down: the restart sets the alarm again
                return
            ttl = self.limits.idle_match_ttl
            idle = self.time_source.now() - table.acted_at
            if idle < ttl * 1000.0:
                self._idle_alarm(table, ttl * 1000.0 - idle)
                return
            waiting = table.match.to_act()
            to_act = f" ({_seats_text(waiting)} to act)" if waiting else ""
            table.stop(f"stopped by the referee: no action for {ttl:g} s{to_act}")
            await self._publish(table)

    async def _expire(self, table: Table) -> None:
        """Close a table still waiting for players once its open seats have waited
        `open_seat_ttl`."""

        def reason() -> str:
            waiting = [i for i, s in enumerate(table.seats) if not s.taken]
            return f"{_seats_text(waiting)} not taken within {self.limits.open_seat_ttl:g} s"

        await self._close_waiting(table, reason)

    async def _close_waiting(self, table: Table, why: Callable[[], str]) -> bool:
        """Close a table still waiting for players (expired, for the reason `why` gives under
        the table's lock); False when it has started or closed meanwhile."""
        async with table.lock:
            if table.started or table.closed is not None:
                return False
            reason = why()
            await self.store.close_table(table.id, "expired", reason)
            table.closed = ClosedEvent("expired", reason)
            self._close(table)
            _log("table expired", table, reason=reason)
            return True

    # -- counting and tasks ---------------------------------------------------------------

    def _count(self, table: Table) -> None:
        """Count a table among its creator's open tables (once)."""
        assert not table.counted
        table.counted = True
        self._open[table.creator] = self._open.get(table.creator, 0) + 1

    def _uncount(self, table: Table) -> None:
        """A table is no longer open (finished, expired, broken): counted off once."""
        if not table.counted:
            return
        table.counted = False
        left = self._open[table.creator] - 1
        assert left >= 0, "a client's open tables went below zero"
        if left:
            self._open[table.creator] = left
        else:
            del self._open[table.creator]

    def open_tables(self, client: str) -> int:
        """The tables this client has open (created, and not finished or closed)."""
        return self._open.get(client, 0)

    def _spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()  # retrieved here: its caller may have gone away
        if exc is not None and not isinstance(exc, TapisError):
            log.error(
                "change failed",
                exc_info=exc,
                extra={"fields": {"error": _what(exc)}},
            )

    async def _finish(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a change of state to its end even if the caller goes away meanwhile: in a task
        of its own, which hands its answer to the caller as soon as it has it (the caller's
        cancellation cancels only its wait)."""
        answer: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._spawn(_answered(coro, answer))
        return await answer

    # -- watching -------------------------------------------------------------------------

    async def watch(
        self,
        table: Table,
        start: int,
        seat: int | None = None,
        idle: float = 15.0,
        only_turns: bool = False,
        hold: bool = False,
        chunk: int = WATCH_CHUNK,
    ) -> AsyncIterator[list[tuple[int, TableEventData] | Turn]]:
        """The table's events from `start` on, waiting for new ones while the table lives,
        in batches: what is new at each wake-up, in order. For a seat, also a `Turn` each time
        it comes to act, last in its batch: after the events so far (on a stream opened while
        it must act, at the end of the backlog), once, as long as the seat stays to act
        without acting (other seats acting meanwhile, in the Dame de Pique exchange, leave its
        turn valid: `Table.to_act_since`). With `only_turns`, a seat's events are passed over
        but the table's last one, or with `hold` held back until its turn or the table's end.
        A batch is yielded with nothing awaited since it was made: the caller builds its
        messages (a turn's view) on the state it was decided on, before it awaits. A batch
        holds `chunk` events at most (a backlog comes in batches: their messages are built
        one batch at a time, not all of a long match's at once), its turn in the last."""
        if start > table.durable_events:
            raise OutOfRange(
                f"from_event_index {start} is past the table's {table.durable_events} events"
            )
        index = start
        turn_at = -1  # the action index of the last turn sent
        only_turns = only_turns and seat is not None
        events = table.events
        while True:
            if self.streams_ended:
                raise Stopping(index)
            durable = table.durable_events
            turn = (
                seat is not None
                and table.must_act(seat)
                and not (turn_at >= 0 and table.to_act_since(seat, turn_at))
            )
            batch: list[tuple[int, TableEventData] | Turn] = []
            if index < durable:
                if not only_turns or (hold and (turn or table.ended)):
                    upto = min(durable, index + chunk)
                    batch.extend((i, events[i]) for i in range(index, upto))
                    index = upto
                elif not hold:
                    # The events are passed over; the last, when it ends the table, is sent.
                    index = durable
                    last = events[index - 1]
                    if isinstance(last, EndEvent | ClosedEvent):
                        batch.append((index - 1, last))
            if turn and index == durable:
                turn_at = len(table.actions)
                batch.append(Turn(turn_at))
            if batch:
                yield batch
                continue  # events may have come while the batch was sent
            if table.ended and index >= durable:
                return  # the match is over (its last event, the record, was sent) or closed
            await table.wait_change(idle, seat if only_turns else None)


async def _answered(coro: Coroutine[Any, Any, T], answer: asyncio.Future[T]) -> T:
    """`coro`'s result or error, also set on `answer` the moment it has one: its caller then
    wakes at the next turn of the loop, not two turns later as through the task's own
    callbacks (`asyncio.shield`). An error is raised here too, for `Referee._task_done`."""
    try:
        result = await coro
    except asyncio.CancelledError:
        answer.cancel()
        raise
    except BaseException as exc:
        if not answer.done():  # (done: its caller went away)
            answer.set_exception(exc)
        raise
    if not answer.done():
        answer.set_result(result)
    return result


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _retried(table: Table, seat: int, expected: int, action: int) -> int | None:
    """The index at which a submission was applied, when this one is its retry: the seat's
    first action from `expected` on is this action, and it has not acted since; at `expected`
    itself, or later when the seat was to act at `expected` with others acting at the same
    time (applied at the index it took, `_admit`)."""
    actions = table.actions
    if not 0 <= expected < len(actions):
        return None
    done = _first_action(table, seat, expected)
    if done is None or actions[done] != (seat, action) or table.acted_since(seat, done + 1):
        return None
    if done in table.timeouts:  # the referee's action on time: this one came too late
        return None
    if done > expected and not table.acting[expected] >> seat & 1:
        return None
    return done


def _on_time(table: Table, action: int) -> str:
    """What the referee did for a seat whose time ran out (`action`), for a person."""
    assert table.time_control is not None
    if table.time_control.policy == FORFEIT:
        return "the referee resigned for it (CLOCK.FORFEIT)"
    return f"the referee played {action_str(action)} for it (CLOCK.AUTOPLAY)"


def _made_on_time(table: Table, seat: int, expected: int) -> str | None:
    """What the referee made for `seat` on time when that is the seat's first action from
    `expected` on (a submission at `expected` came too late: `_on_time`); else None."""
    done = _first_action(table, seat, expected)
    if done is None or done not in table.timeouts:
        return None
    return _on_time(table, table.actions[done][1])


def _first_action(table: Table, seat: int, expected: int) -> int | None:
    """The index of the seat's first action from `expected` on; None if it made none."""
    actions = table.actions
    return next((i for i in range(max(0, expected), len(actions)) if actions[i][0] == seat), None)


_RESIGN = encode(RESIGN)

# The limits of a table's replay before its last stored action (`Table.replayed`).
_NO_LIMIT = 1 << 62


def _seats_text(seats: Sequence[int]) -> str:
    """Seats as the engine's texts name them ("seat 2", "seats 0, 2": records/score.py's
    `named_seats` puts the players' names in their place)."""
    return f"seat{'s' if len(seats) > 1 else ''} {', '.join(map(str, seats))}"


def _stopped(count: int, limit: int, what: str) -> str:
    """Why the referee stopped a match at its limit of hands or actions: reached in play, or
    passed already when a restart lowered it."""
    if count == limit:
        return f"stopped by the referee after {limit} {what}, the most a table plays"
    return (
        f"stopped by the referee after {count} {what}, past the {limit} a table now plays"
        " (the referee's limits were lowered)"
    )


# The expected index of a resignation: wherever the table is when the resignation is admitted
# (under the table's lock). A seat resigns at any moment of play, and names no index: read
# before the lock, the index went stale whenever another seat's action came in between.
# (A client's expected index is a uint64: never this.)
ANY_INDEX = -1


def _may_join(table: Table, seat: int, action: int) -> bool:
    """Whether a legal action of `seat` may be stored while other seats' actions of the same
    turn are: seats acting at the same time (the Dame de Pique exchange), whose choices do not
    depend on one another's. Not a resignation (it ends the match), not at a timed table (the
    clocks run from each applied action) nor at the referee's last actions."""
    to_act = table.match.to_act()
    return (
        len(to_act) > 1
        and seat in to_act
        and action != _RESIGN
        and table.clocks is None
        and len(table.actions) + len(table.writing) + 1 < table.limits.max_actions
    )


def _joins(table: Table, seat: int, expected: int, action: int) -> bool:
    """Whether a submission joins the actions being stored (`_may_join`), checked on the
    state before them: a seat with no action being stored, not asking for a later index."""
    return (
        expected <= len(table.actions)
        and not any(w.seat == seat for w in table.writing)
        and _may_join(table, seat, action)
    )


def _check_open(table: Table) -> None:
    if table.closed is not None:
        raise TableClosed(f"table {table.id} is {table.closed.status}: {table.closed.reason}")


class _Unstored:
    """The changes the store failed to keep (a full disk), said in the log: the first at
    once, then at most one line every `EVERY` seconds with how many failed meanwhile (each
    call is answered UNAVAILABLE: the log is the operator's one sign)."""

    EVERY = 10.0

    def __init__(self) -> None:
        self.said_at = -self.EVERY
        self.since = 0  # failures not said yet

    def note(self, exc: sqlite3.Error) -> None:
        self.since += 1
        now = time.monotonic()
        if now - self.said_at >= self.EVERY:
            fields = {"error": _what(exc), "failed_writes": self.since}
            log.error("changes not stored", extra={"fields": fields})
            self.said_at, self.since = now, 0


_unstored = _Unstored()


async def _stored(write: Awaitable[None]) -> None:
    """A write to the store; a failure of the store itself is UNAVAILABLE (nothing changed:
    the same call may be repeated), and said in the log (`_Unstored`)."""
    try:
        await write
    except sqlite3.Error as exc:
        if not _store_failed(exc):
            raise
        _unstored.note(exc)
        raise Unavailable(f"the referee could not store this change ({exc}); retry") from None


def _store_failed(exc: BaseException) -> bool:
    """Whether `exc` is the store failing (a full disk, its file gone, its writer stopped):
    nothing was changed, and the same write may be tried again. Not an integrity error: that
    write contradicts what is stored (a bug of the referee's)."""
    if isinstance(exc, sqlite3.IntegrityError):
        return False
    return isinstance(exc, (sqlite3.Error, Unavailable))


def _token_key(key: Ed25519PrivateKey) -> bytes:
    raw = key.private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    return HKDF(hashes.SHA256(), 32, salt=None, info=b"tapis seat tokens/1").derive(raw)


def _digest(doc: object) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _what(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {quoted(str(exc), 200)}"


# The tables over found broken when asked for, remembered so as to log each once (then
# forgotten all at once: a table is logged again after this many others).
MAX_BROKEN_SAID = 4096


def _log_broken(table_id: str, reason: str, exc: BaseException) -> None:
    log.error(
        "table broken",
        exc_info=exc,
        extra={"fields": {"table": table_id, "reason": reason}},
    )


def _log(event: str, table: Table, **fields: Any) -> None:
    log.info(
        event,
        extra={"fields": {"table": table.id, "game": table.rules.game, **fields}},
    )
