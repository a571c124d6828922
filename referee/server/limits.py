"""Every bound of the referee, in one place (documented for clients in referee.proto).

`Limits` holds what `tapis serve` may change; the field bounds below are part of the contract.
A table's size is bounded (hands, actions), so that its record and every reply stay far below
the size a gRPC client accepts by default (4 MiB).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from tapis_cartes.records.codec import MAX_NAME
from tapis_cartes.referee.errors import ListenError, TooMany

__all__ = [
    "CLIENT_PING_SECONDS",
    "DEFAULT_LIMITS",
    "FD_RESERVE",
    "HEAD_SECONDS",
    "MAX_CONNECTIONS",
    "MAX_ID",
    "MAX_NAME",
    "MAX_OPTIONS",
    "MAX_OPTION_TEXT",
    "MAX_SEATS",
    "MIN_CONNECTIONS",
    "Limits",
    "Slot",
    "StreamCount",
    "address_parts",
    "connection_bound",
]

MAX_ID = 64  # characters of a table id, request id, game or ruleset name
# MAX_NAME: characters of a player's name, the records' own bound (tapis_cartes.records.codec)
MAX_OPTION_TEXT = 64  # characters of an option key or string value
MAX_OPTIONS = 64  # options in one request
MAX_SEATS = 10  # seats of a table (the most any game allows)
# Seconds a connection has to start its request (gRPC: the HTTP/2 preface; the web front: each
# whole request, head and body, from the connection or the previous response); then it is
# closed, so that one that sends nothing, or a request byte by byte, holds no descriptor for
# long.
HEAD_SECONDS = 10.0
FD_RESERVE = 256  # descriptors besides the connections: store, writer's pipes, listeners...
# The fewest connections a front must be able to hold: fewer, and the referee does not start
# (a referee of one connection serves no table of four players on connections of their own;
# with fewer than 20 files gRPC's core itself crashed).
MIN_CONNECTIONS = 16
# A client may ping its connection (HTTP/2 keepalive) every this many seconds: the referee
# counts a ping that comes sooner than half of it after the previous one (the half: room for
# timers' jitter) as a strike, and closes the connection at the third (gRPC's policy).
CLIENT_PING_SECONDS = 10.0
MAX_CONNECTIONS = 1_000_000  # the most `--max-connections` takes (gRPC's bound is a C int)
# The most `--max-streams-per-client` and `--max-message-bytes` take: gRPC's bounds are C ints,
# and the referee gives a connection 64 streams more than a client's cap, and a reply 4 times
# the largest request.
MAX_STREAMS = 1_000_000
MAX_RESTART_GRACE = 86400.0  # seconds: a day
MAX_MESSAGE_BYTES = (2**31 - 1) // 4


@dataclass(frozen=True)
class Limits:
    """The referee's limits (`tapis serve` options)."""

    # A request: the largest a client can mean is a few KiB (CreateTable with every option
    # and seat at its longest); 1 MiB of empty options, parsed, held 13 MB, and a hundred such
    # requests at once 1.3 GB.
    max_message_bytes: int = 64 << 10
    max_tables_per_client: int = 1000  # tables open at once (neither finished nor closed)
    max_streams_per_client: int = 256  # WatchTable streams at once
    open_seat_ttl: float = 3600.0  # seconds a table waits for its open seats, then expires
    # Seconds an untimed match waits for an action (from its last one, its start, or the
    # referee's start), then the referee stops it, with its record: a bot that hangs or a
    # player who leaves does not hold a table, and a count of its creator's, for ever.
    idle_match_ttl: float = 86400.0
    # Seconds a restarted referee holds each running clock of its timed tables for its seat
    # to come back (tables.py `Referee.load`): the clock runs from the seat's first call, or
    # once these have passed.
    restart_grace: float = 60.0
    max_hands: int = 1000  # hands of one match: then the referee stops it
    max_actions: int = 100_000  # actions of one match: then the referee stops it
    # Finished tables kept in memory, those finished or asked for most recently (one not kept is
    # replayed from the store when next asked for: 6 to 11 ms for a Dame de Pique match to 100
    # points). Each holds its events and its engine's hands, about 960 objects for such a match,
    # which every full collection of Python's garbage collector scans while the event loop, and
    # every submission, waits: with 1,000 kept a full collection took 402 ms, with 64 35 ms
    # (scripts/bench_finished_tables.py --tables 1000).
    max_loaded_finished: int = 64
    max_connections: int = 4096  # connections at once to each front (gRPC, web); more: closed
    # A connection whose peer went away without a word (a network cut, a machine gone) holds
    # its calls and its client's streams until it is found dead: the referee pings each
    # connection after this many seconds without a ping, and closes it when the answer has
    # not come `keepalive_timeout` seconds later, ending its calls.
    keepalive: float = 30.0
    keepalive_timeout: float = 10.0
    # Seconds a gRPC connection with no call under way stays open: then the referee closes it
    # (a client's channel opens another when it next calls), so that idle connections do not
    # hold the connection slots.
    idle_connection: float = 60.0


def address_parts(address: str, least_port: int = 0) -> tuple[str, int]:
    """The host (without an IPv6 address's brackets) and port of `HOST:PORT`, the port from
    `least_port` to 65535; `ValueError` saying what to give for anything else (an address to
    listen on, port 0 a free one; a referee's address to connect to, `least_port` 1)."""
    host, _, port_text = address.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    # An IPv6 address in brackets (its own colons would read as the port's), nothing else.
    if (
        not host
        or ("[" in host or "]" in host)
        or (":" in host) != bracketed
        or not port_text.isdigit()
        or not least_port <= int(port_text) <= 65535
    ):
        example = "127.0.0.1:50051, [::1]:50051" if least_port else "127.0.0.1:50051, [::]:50051"
        raise ValueError(
            f"give HOST:PORT (a port {least_port} to 65535), an IPv6 address in brackets"
            f" (e.g. {example})"
        )
    return host, int(port_text)


def connection_bound(wanted: int) -> int:
    """The connections each front (gRPC, web) may hold at once: `wanted`, when the process
    may open that many files for both and `FD_RESERVE` more (its soft limit is raised toward
    its hard one if need be: servers are often started under a soft limit of 1024); else
    what the limit leaves each. (A front past its bound closes a new connection at once,
    rather than leave the process without descriptors for the other front and its store.)
    `ListenError` when that is fewer than `MIN_CONNECTIONS`."""
    try:
        import resource
    except ImportError:  # not a POSIX system: no such limit to read
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * wanted + FD_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= need:
        return wanted
    raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        soft = raised
    least = 2 * min(wanted, MIN_CONNECTIONS) + FD_RESERVE
    if soft < least:
        raise ListenError(
            f"this process may open {soft} files at most (its limit, `ulimit -n`): the referee"
            f" needs {least} ({FD_RESERVE} for its store, pipes and listeners, and"
            f" {min(wanted, MIN_CONNECTIONS)} connections on each front): raise the limit"
        )
    return min(wanted, (soft - FD_RESERVE) // 2)


DEFAULT_LIMITS = Limits()


def client_of(peer: str | None) -> str:
    """How the referee counts a client: the address of a call's peer (`context.peer()`)
    without its port."""
    peer = peer or "unknown"
    return peer.rsplit(":", 1)[0] if peer.count(":") >= 2 else peer


class StreamCount:
    """The streams each client has open, at most `limit` at once (counted by the client's
    address, `client_of`): `open(client)` takes a `Slot`, or raises `TooMany`. One count for
    every stream the referee serves: WatchTable, PlaySeat, and gRPC's own health Watch and
    reflection streams (lenient.py `LenientRequests`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def open(self, client: str) -> Slot:
        streams = self._open.get(client, 0)
        if streams >= self.limit:
            raise TooMany(f"this client already has {streams} streams open (limit {self.limit})")
        self._open[client] = streams + 1
        return Slot(self, client)

    def _release(self, client: str) -> None:
        left = self._open[client] - 1
        if left:
            self._open[client] = left
        else:
            del self._open[client]


class Slot:
    """One stream counted for its client: `release()` gives it back, once however often it
    is called."""

    __slots__ = ("client", "count", "released")

    def __init__(self, count: StreamCount, client: str) -> None:
        self.count = count
        self.client = client
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.count._release(self.client)


class ReplayGate:
    """At most `per_client` streams of one client (`client_of`), and `total` in all, send a
    backlog at once (a stream more than a batch of events behind its table: from event 0 of a
    long match, or after a long absence); the others wait their turn (`take`, then `give`).
    A backlog costs a message written per event: 256 spectator streams of one client
    replaying a table of 10,000 events each took the event loop from every other table for
    minutes (a match of 2.5 s took 130 s; with this gate and batches of 64 events, 15 s on a
    machine of 2 cores, whose other core the attacking client's reading took, and 100 MB)."""

    def __init__(self, per_client: int = 1, total: int = 4) -> None:
        self.per_client = per_client
        self._total = asyncio.Semaphore(total)
        # Per client: its semaphore, its streams waiting or holding, and those holding.
        self._clients: dict[str, list[Any]] = {}
        self.most = 0  # the most streams of one client that held the gate at once (tests)

    async def take(self, client: str) -> None:
        """Wait for a place (the client's, then one of all); cancelled, nothing is held."""
        entry = self._clients.setdefault(client, [asyncio.Semaphore(self.per_client), 0, 0])
        entry[1] += 1
        try:
            await entry[0].acquire()
            try:
                await self._total.acquire()
            except BaseException:
                entry[0].release()
                raise
        except BaseException:
            self._leave(client)
            raise
        entry[2] += 1
        self.most = max(self.most, entry[2])

    def give(self, client: str) -> None:
        """Give back the place `take` gave."""
        entry = self._clients[client]
        entry[2] -= 1
        self._total.release()
        entry[0].release()
        self._leave(client)

    def _leave(self, client: str) -> None:
        entry = self._clients[client]
        entry[1] -= 1
        if not entry[1]:
            del self._clients[client]


class Backlog:
    """A stream's place at the referee's `ReplayGate` (a WatchTable stream's, a web page's
    live stream's): taken while the stream is more than a batch behind its table (`behind`:
    tables.py `is_backlog`), given back once it has caught up, ends, or has held it
    HOLD_SECONDS (a client that does not read its stream keeps a write waiting: its place
    goes to the next stream, and the stream waits again for one at its next batch). (A
    PlaySeat stream, its seat's, with its events in batches, waits for none: its seat's clock
    may run.)"""

    HOLD_SECONDS = 2.0

    def __init__(self, gate: ReplayGate, client: str) -> None:
        self.gate = gate
        self.client = client
        self.held: asyncio.TimerHandle | None = None  # its place's time out, while held

    async def sending(self, behind: bool) -> None:
        """Before a batch is sent: wait for a place when it is a backlog's (`behind`), or
        give the place back. (A backlog's batch holds no turn: awaited before its messages
        are built, no view is made on a state that changed meanwhile.)"""
        if behind and self.held is None:
            await self.gate.take(self.client)
            self.held = asyncio.get_running_loop().call_later(self.HOLD_SECONDS, self.release)
        elif not behind:
            self.release()

    def release(self) -> None:
        if self.held is not None:
            self.held.cancel()
            self.held = None
            self.gate.give(self.client)
