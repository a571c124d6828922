"""Tables: the referee's game state, durable and replayable.

A `Table` holds a match of the engine, its seats (tokens kept only as SHA-256), its action
list and its event list. Everything is rebuilt from the store by replay: the seed gives every
deal (records/dealing.py), the action list every move. `Referee` owns the tables: it creates
and restores them, checks tokens, applies submissions (each acknowledged only after its
commit), deals the next hand, and issues the signed record when a match ends.

Events are kept as engine events plus a few of the referee's own (a seat taken, a hand dealt,
an action taken); each viewer gets its own copy of each event (service.py), with what it may
not know left out.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from records.codec import Provenance, build_record, canonical_bytes, record_id
from records.dealing import ALGORITHM, commitment, first_dealer, new_seed, shuffled_pack
from records.signing import sign
from referee.engine import (
    Event,
    IllegalAction,
    InvalidAction,
    Match,
    Rules,
    make_rules,
    new_match,
)
from referee.engine.actions import RESIGN, encode
from referee.server.store import Store, StoredTable
from tapis.v1 import record_pb2 as pb

log = logging.getLogger("tapis.referee")

__all__ = [
    "ActionEvent",
    "HandEvent",
    "NotFound",
    "NotReady",
    "PermissionDenied",
    "Referee",
    "SeatEvent",
    "Stale",
    "Table",
    "TooMany",
    "Unauthenticated",
]


class RefereeError(Exception):
    """Base of the referee's own refusals (mapped to gRPC codes in service.py)."""


class NotFound(RefereeError):
    pass


class Unauthenticated(RefereeError):
    pass


class PermissionDenied(RefereeError):
    pass


class Stale(RefereeError):
    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


class TooMany(RefereeError):
    pass


class NotReady(RefereeError):
    """A request the table's state does not allow yet (a record before the end, ...)."""


class BadRequest(RefereeError):
    def __init__(self, message: str, field_name: str) -> None:
        super().__init__(message)
        self.field_name = field_name


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
    hands_after: tuple[int, ...] | None  # set when a hand changed other than by a card played


@dataclass(frozen=True, slots=True)
class EndEvent:
    winners: tuple[int, ...]
    reason: str
    record_id: str


TableEventData = SeatEvent | HandEvent | ActionEvent | EndEvent | Event


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
    actions: list[tuple[int, int]] = field(default_factory=list)
    events: list[TableEventData] = field(default_factory=list)
    action_events: list[int] = field(default_factory=list)  # first event index of each action
    decks: list[list[int]] = field(default_factory=list)
    envelope: bytes | None = None
    record_id: str = ""
    durable_events: int = 0  # events of committed writes: all that watchers may see
    _legal_cache: dict[int, tuple[list[int], frozenset[int]]] = field(default_factory=dict)
    _legal_at: int = -1
    _lock: asyncio.Lock | None = None
    _changed: asyncio.Event | None = None

    @property
    def lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait_change(self, timeout: float) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    @property
    def commitment(self) -> bytes:
        return commitment(self.seed)

    @property
    def started(self) -> bool:
        return all(s.taken for s in self.seats)

    @property
    def finished(self) -> bool:
        return self.match.finished

    # -- replaying ------------------------------------------------------------------------

    @classmethod
    def replayed(
        cls,
        table_id: str,
        rules: Rules,
        options: dict[str, Any],
        seed: bytes,
        created: float,
        creator: str,
        seats: Sequence[tuple[str, bool, bytes | None, int | None]],
        actions: Sequence[tuple[int, int]],
    ) -> Table:
        """A table rebuilt from its durable form: seats taken in their order, then every
        action (the seed gives the deals)."""
        table = cls(
            table_id,
            rules,
            options,
            seed,
            created,
            creator,
            [Seat(name, open_) for name, open_, _, _ in seats],
            new_match(rules),
        )
        taken = sorted((order, i) for i, (_, _, h, order) in enumerate(seats) if h is not None)
        for _, i in taken:
            name, _, hashed, _ = seats[i]
            assert hashed is not None
            table.take(i, name, hashed)
        for seat, action in actions:
            table.apply(seat, action)
        table.durable_events = len(table.events)
        return table

    def take(self, seat: int, name: str, hashed: bytes) -> None:
        s = self.seats[seat]
        s.name = name or s.name
        s.token_hash = hashed
        s.order = sum(1 for x in self.seats if x.order is not None)
        self.events.append(SeatEvent(seat, s.name))
        if self.started:
            self.deal_until_playable()

    def deal_until_playable(self) -> None:
        """Deal hands (RULES.md 7 dealers, decks from the seed) while none is in progress."""
        match = self.match
        while not match.finished and (match.hand is None or match.hand.over):
            number = match.hand_number
            expected = match.expected_dealer()
            dealer = (
                first_dealer(self.seed, match.first_dealers()) if expected is None else expected
            )
            deck = shuffled_pack(self.seed, number, match.pack)
            deal = match.deal_deck(dealer, deck)
            self.decks.append(deck)
            self.events.append(HandEvent(number, dealer, deal.hands, deal.retourne))
            self.events.extend(match.begin_hand(dealer, deal))

    def apply(self, seat: int, action: int) -> list[TableEventData]:
        """Apply one action in memory (raises the engine's refusal, changing nothing)."""
        match = self.match
        hand = match.hand
        before = self._hands() if action & 7 != 0 else None
        engine_events = match.apply(seat, action)
        index = len(self.actions)
        first = len(self.events)
        self.actions.append((seat, action))
        self.action_events.append(first)
        after = self._hands() if hand is not None and not hand.over else None
        changed = before is not None and after is not None and after != before
        self.events.append(ActionEvent(index, seat, action, after if changed else None))
        self.events.extend(engine_events)
        self.deal_until_playable()
        return self.events[first:]

    def _hands(self) -> tuple[int, ...]:
        hand = self.match.hand
        return tuple(hand.held) if hand is not None else ()

    def legal(self, seat: int) -> list[int]:
        """The seat's legal actions now (cached until the next action)."""
        if self._legal_at != len(self.actions):
            self._legal_cache.clear()
            self._legal_at = len(self.actions)
        cached = self._legal_cache.get(seat)
        if cached is None:
            legal = self.match.legal_actions(seat) if self.started else []
            cached = self._legal_cache[seat] = (legal, frozenset(legal))
        return cached[0]

    def is_legal(self, seat: int, action: int) -> bool:
        self.legal(seat)
        return action in self._legal_cache[seat][1]


class Referee:
    """The tables of one referee, backed by a store, signing with one key."""

    def __init__(
        self,
        store: Store,
        key: Ed25519PrivateKey,
        max_tables_per_client: int = 1000,
        max_loaded_finished: int = 1000,
    ) -> None:
        self.store = store
        self.key = key
        self.max_tables_per_client = max_tables_per_client
        self.tables: dict[str, Table] = {}
        # finished tables loaded from the store when asked for, least recently asked first
        self._loaded: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.max_loaded_finished = max_loaded_finished
        self._rules: dict[str, Rules] = {}
        self._open_tables: dict[str, int] = {}  # per client: tables created and not finished

    # -- start-up -------------------------------------------------------------------------

    async def load(self) -> int:
        """Rebuild the live tables from the store by replay (the tables not finished, and
        those finished without their record, which is issued now). A finished table stays
        on disk until it is asked for (`get`)."""
        for stored in self.store.load(live=True):
            table = self._restore(stored)
            self.tables[table.id] = table
            # open until its record is issued (below, for a table that finished without one)
            self._open_tables[table.creator] = self._open_tables.get(table.creator, 0) + 1
            await self._publish(table)  # issues the record of a table finished without one
        return len(self.tables)

    def _restore(self, stored: StoredTable) -> Table:
        rules = self._rules_for(stored.game, stored.ruleset, stored.options, stored.players)
        table = Table.replayed(
            stored.id,
            rules,
            stored.options,
            stored.seed,
            stored.created,
            stored.creator,
            [(name, open_, h, order) for _, name, open_, h, order in stored.seats],
            stored.actions,
        )
        if stored.record is not None:  # its last event: the record, as when it was issued
            table.envelope = stored.record
            table.record_id = record_id(pb.RecordEnvelope.FromString(stored.record).record)
            table.events.append(self._end_event(table))
            table.durable_events = len(table.events)
        return table

    def _rules_for(self, game: str, ruleset: str, options: dict[str, Any], players: int) -> Rules:
        key = json.dumps([game, ruleset, options, players], sort_keys=True)
        rules = self._rules.get(key)
        if rules is None:
            rules = self._rules[key] = make_rules(game, ruleset or None, options, players)
        return rules

    # -- tables ---------------------------------------------------------------------------

    def get(self, table_id: str) -> Table:
        """The table; a finished one not in memory is loaded from the store by replay (and
        kept among the `max_loaded_finished` most recently asked for)."""
        table = self.tables.get(table_id)
        if table is None:
            stored = self.store.load(only=[table_id]) if table_id else []
            if not stored:
                raise NotFound(f"no table {table_id!r}")
            table = self.tables[table_id] = self._restore(stored[0])
            self._loaded[table_id] = None
        elif table_id in self._loaded:
            self._loaded.move_to_end(table_id)
        while len(self._loaded) > self.max_loaded_finished:
            old, _ = self._loaded.popitem(last=False)
            self.tables.pop(old, None)
        return table

    async def create(
        self,
        game: str,
        ruleset: str,
        options: dict[str, Any],
        seats: Sequence[tuple[str, bool]],
        creator: str,
    ) -> tuple[Table, list[tuple[int, str]]]:
        """A new table; returns it with the tokens of the seats the creator took."""
        active = self._open_tables.get(creator, 0)
        if active >= self.max_tables_per_client:
            raise TooMany(
                f"this client already has {active} open tables (limit {self.max_tables_per_client})"
            )
        if not seats:
            raise BadRequest("a table needs seats", "seats")
        rules = self._rules_for(game, ruleset, options, len(seats))
        table = Table(
            id=secrets.token_urlsafe(12),
            rules=rules,
            options=options,
            seed=new_seed(),
            created=time.time(),
            creator=creator,
            seats=[Seat(name or f"seat {i}", open_) for i, (name, open_) in enumerate(seats)],
            match=new_match(rules),
        )
        tokens = [(i, secrets.token_urlsafe(24)) for i, (_, open_) in enumerate(seats) if not open_]
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
        )
        await self.store.create_table(stored)
        for i, _ in tokens:
            table.take(i, table.seats[i].name, hashes[i])
        self.tables[table.id] = table
        self._open_tables[creator] = active + 1
        await self._publish(table)  # the rules may end a match as its first hand is dealt
        _log("table created", table, creator=creator, open=[i for i, s in enumerate(seats) if s[1]])
        if table.started:
            _log("table started", table)
        return table, tokens

    async def join(self, table_id: str, seat: int | None, name: str) -> tuple[int, str]:
        table = self.get(table_id)
        async with table.lock:
            free = [i for i, s in enumerate(table.seats) if not s.taken]
            if seat is None:
                if not free:
                    raise PermissionDenied(f"table {table_id} has no open seat")
                seat = free[0]
            if not 0 <= seat < len(table.seats):
                raise BadRequest(f"seat {seat} does not exist", "seat")
            if seat not in free:
                raise PermissionDenied(f"seat {seat} of table {table_id} is taken")
            token = secrets.token_urlsafe(24)
            hashed = token_hash(token)
            order = sum(1 for s in table.seats if s.taken)
            await self.store.take_seat(
                table_id, seat, name or table.seats[seat].name, hashed, order
            )
            table.take(seat, name, hashed)
            await self._publish(table)  # the rules may end a match as its first hand is dealt
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

    # -- moves ----------------------------------------------------------------------------

    async def submit(
        self, table: Table, seat: int, expected: int, action: int
    ) -> tuple[int, int, list[TableEventData]]:
        """Apply `action` for `seat` at index `expected`; durable before this returns.
        Returns the action's index, the index of its first event, and its events."""
        async with table.lock:
            current = len(table.actions)
            if (
                expected < current
                and table.actions[expected] == (seat, action)
                and all(s != seat for s, _ in table.actions[expected + 1 :])
            ):
                # A retry of an acknowledged submission (the seat has not acted since, as it
                # would have had it received the acknowledgement): the same answer.
                first = table.action_events[expected]
                last = (
                    table.action_events[expected + 1]
                    if expected + 1 < current
                    else len(table.events)
                )
                return expected, first, list(table.events[first:last])
            if expected != current:
                raise Stale(
                    f"expected_action_index is {expected} but the table is at {current}",
                    current,
                )
            if not table.started:
                raise NotReady("the table is waiting for players")
            self._check_legal(table, seat, action)
            first = len(table.events)
            events = table.apply(seat, action)
            try:
                await self.store.append_action(table.id, current, seat, action)
            except BaseException:
                self._rebuild(table)
                raise
            end = await self._publish(table)
            if end is not None:
                events.append(end)
            return current, first, events

    def _check_legal(self, table: Table, seat: int, action: int) -> None:
        """Refuse without changing the table: a refusal comes from the engine itself, on a
        copy of the table rebuilt by replay when needed."""
        if action & 7 == RESIGN or table.is_legal(seat, action):
            return
        probe = self._restore_copy(table)
        try:
            probe.match.apply(seat, action)
        except IllegalAction as exc:
            if not exc.legal:  # a refusal of the phase: list what the seat may do instead
                exc.legal = tuple(table.legal(seat))
            raise
        except InvalidAction:
            raise
        raise AssertionError("an action not in the legal set was accepted")  # pragma: no cover

    def _restore_copy(self, table: Table) -> Table:
        return Table.replayed(
            table.id,
            table.rules,
            table.options,
            table.seed,
            table.created,
            table.creator,
            [(s.name, s.open, s.token_hash, s.order) for s in table.seats],
            table.actions,
        )

    def _rebuild(self, table: Table) -> None:
        stored = self.store.load(only=[table.id])
        if stored:
            self.tables[table.id] = self._restore(stored[0])

    async def resign(self, table: Table, seat: int) -> int:
        index, _, _ = await self.submit(table, seat, len(table.actions), encode(RESIGN))
        return index

    async def _publish(self, table: Table) -> EndEvent | None:
        """After a committed write: issue the record of a match that is over (its end event,
        returned, closes the table's events), then show watchers every event so far."""
        end = None
        if table.finished and table.envelope is None:
            end = await self._issue_record(table)
        table.durable_events = len(table.events)
        table.notify()
        return end

    async def _issue_record(self, table: Table) -> EndEvent:
        """Build, sign and store the record of a finished table."""
        names = [s.name for s in table.seats]
        played_at = datetime.fromtimestamp(table.created, UTC).isoformat(timespec="seconds")
        rec = build_record(
            table.match,
            names,
            Provenance("referee", table.id, played_at),
            table.decks,
            pb.DealSource(algorithm=ALGORITHM, commitment=table.commitment, seed=table.seed),
        )
        data = canonical_bytes(rec)
        envelope = sign(data, self.key).SerializeToString(deterministic=True)
        await self.store.finish(table.id, envelope, record_id(data))
        # From here to the end event, nothing awaits: no watcher sees one without the other.
        table.envelope = envelope
        table.record_id = record_id(data)
        assert self._open_tables.get(table.creator, 0) > 0, "a table closed twice"
        self._open_tables[table.creator] -= 1
        event = self._end_event(table)
        table.events.append(event)
        _log(
            "table finished",
            table,
            winners=list(table.match.winners),
            reason=table.match.end_reason,
            record_id=table.record_id,
            actions=len(table.actions),
        )
        return event

    @staticmethod
    def _end_event(table: Table) -> EndEvent:
        assert table.record_id is not None
        return EndEvent(table.match.winners, table.match.end_reason, table.record_id)

    # -- watching -------------------------------------------------------------------------

    async def watch(
        self, table: Table, start: int, idle: float = 15.0
    ) -> AsyncIterator[tuple[int, TableEventData]]:
        """The table's events from `start` on, waiting for new ones while the table lives."""
        index = start
        while True:
            table = self.tables.get(table.id, table)
            while index < table.durable_events:
                yield index, table.events[index]
                index += 1
            if table.envelope is not None and index >= table.durable_events:
                return  # the match is over and its last event (the record) was sent
            await table.wait_change(idle)


def _log(event: str, table: Table, **fields: Any) -> None:
    log.info(
        event,
        extra={"fields": {"table": table.id, "game": table.rules.game, **fields}},
    )
