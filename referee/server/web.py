"""The referee's web front (`tapis serve --web HOST:PORT`): pages for people, on the referee's
own event loop and tables.

A Starlette app served by uvicorn as a task of the same asyncio loop as the gRPC server (no
thread; only the replay pages are built in a process of their own, `_Pages`); it reads the
tables through the `Referee` and knows no rule:

- `/`: the tables (live ones, and the finished ones in memory), the most recent first, a
  bounded number a page (`?page=N`), with links;
- `/tables/{id}`: a table's live spectator page, fed by `/tables/{id}/events`, a stream of
  Server-Sent Events: the spectator's copy of each table event, exactly what gRPC's
  `WatchTable` sends a spectator (`event_message(..., viewer=None)`), and after each batch
  the spectator's view (`seat_view(..., None, ...)`, as `GetView` without a seat); never a
  seat's cards;
- `/tables/{id}/replay`: the replay page of a finished table (records/html.py), built once
  and kept while the most recent ones fit in `PAGE_CACHE_BYTES`, and
  `/tables/{id}/record.tapis` its signed record to download.

A stream resumes from the browser's `Last-Event-ID` (the next event index), as `WatchTable`
from `from_event_index`; one replaying a backlog waits its turn at the referee's gate, as a
WatchTable stream does; one caught up is sent what is new at most every LIVE_INTERVAL, in one
write, the messages shared by every page of the table (`_Shared`). Every input has a bound
(a table id 64 characters, an event index 10 digits, `max_streams_per_client` streams per
client address (the socket's peer: proxy headers
such as `X-Forwarded-For` are not trusted), `max_connections` connections (of one address,
its streams and 16 more, half of them at most), each whole request,
head and body, within `HEAD_SECONDS`); an error is one HTTP status (`http_status`) with a short
text. Every response forbids framing and content sniffing and sends no referrer
(`SECURITY_HEADERS`); no redirect is made (a path with a trailing slash is not found), and no
protocol upgrade (WebSocket, h2c) is made: such a request is answered as plain HTTP.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import heapq
import html
import json
import multiprocessing
import re
import signal
import socket
import sqlite3
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from importlib import resources
from typing import Any

import h11
import uvicorn
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from tapis_cartes.records.codec import encode_file
from tapis_cartes.records.html import card_table, fill, page_asset, signed_record_page
from tapis_cartes.referee import __version__
from tapis_cartes.referee.engine import find_game
from tapis_cartes.referee.engine.cards import SUIT_SYMBOLS
from tapis_cartes.referee.errors import (
    BadRequest,
    ListenError,
    NotFound,
    OutOfRange,
    TapisError,
    Unavailable,
)
from tapis_cartes.referee.server.limits import (
    DEFAULT_LIMITS,
    HEAD_SECONDS,
    Backlog,
    Limits,
    Slot,
    StreamCount,
    address_parts,
)
from tapis_cartes.referee.server.service import event_message, seat_view, table_status
from tapis_cartes.referee.server.store import store_unreadable
from tapis_cartes.referee.server.tables import Referee, Table, Turn, is_backlog
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb

__all__ = ["WebFront", "bind", "http_status"]

KEEPALIVE = 15.0  # seconds: a comment line on an idle stream, so proxies keep it open
MAX_ID = 64  # the longest table id (as the gRPC service's bound)
_INDEX = re.compile(r"[0-9]{1,10}")  # an event index (Last-Event-ID, ?from=)
PAGE_CACHE_BYTES = 32 << 20  # the built replay pages kept, in all (`_Pages`)
# The index lists INDEX_ROWS tables a page (1,000 tables of 10 seats made a page of 3.8 MB,
# built for each request on the event loop: two visitors took gRPC's p50 to 268 ms); a page
# is made at most once each INDEX_SECONDS, the last INDEX_PAGES_KEPT pages asked for kept.
INDEX_ROWS = 100
INDEX_SECONDS = 1.0
INDEX_PAGES_KEPT = 16
_PAGE = re.compile(r"[0-9]{1,6}")  # an index page number (?page=)
# What every spectator of a table is sent alike is made once and shared by the streams
# (`_Shared`): the last SHARED_EVENTS events' messages, in all, and each table's view for
# SHARED_VIEW_SECONDS (a view holds the clocks' time left, which runs). Made for each stream,
# 1000 live pages of one table took a match of 2 s to 290 s.
SHARED_EVENTS = 4096
SHARED_VIEWS = 4096  # tables whose last view is kept
SHARED_VIEW_SECONDS = 0.5
# A live page caught up with its table is sent what is new at most this often (seconds), in
# one write: the writes of a table's pages, not its events, then bound their cost (a match
# played as fast as bots go makes hundreds of batches a second).
LIVE_INTERVAL = 0.1
# Sent with every response (the pages' own <meta> CSP stays: a page is not framed, whatever
# its policy; `frame-ancestors` is honoured only in a header).
SECURITY_HEADERS = [
    ("X-Frame-Options", "DENY"),
    ("Content-Security-Policy", "frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
]

_HTTP = {
    "INVALID_ARGUMENT": 400,
    "OUT_OF_RANGE": 400,
    "NOT_FOUND": 404,
    "FAILED_PRECONDITION": 409,
    "RESOURCE_EXHAUSTED": 429,
    "UNAVAILABLE": 503,
}


def http_status(exc: TapisError) -> int:
    """The HTTP status of an error, from its gRPC status (referee/errors.py)."""
    return _HTTP.get(exc.grpc_status or "", 500)


def host_port(address: str) -> tuple[str, int]:
    """The host and port of an address to listen on (`address_parts`, port 0: a free one);
    `ListenError` for anything else (the gRPC address and the web address alike)."""
    try:
        return address_parts(address)
    except ValueError as exc:
        raise ListenError(f"cannot listen on {address!r}: {exc}") from None


def bind(address: str) -> socket.socket:
    """A listening socket on `HOST:PORT` (port 0: a free one); `ListenError` when it cannot
    be bound. Bound first, before anything is created, as the gRPC address."""
    host, port = host_port(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise ListenError(f"cannot listen on {address!r}: {exc}") from None


def _json(message: Message) -> dict[str, Any]:
    return MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def _sse(kind: str, data: object, event_id: int | None = None) -> bytes:
    """One Server-Sent Event (JSON data has no newline)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"{head}event: {kind}\ndata: {text}\n\n".encode()


def _status(table: Table) -> str:
    """The table's status as the pages name it: "waiting", "playing", "finished", "expired",
    "broken" (TableStatus's names)."""
    return pb.TableStatus.Name(table_status(table)).removeprefix("TABLE_STATUS_").lower()


def _created(table: Table) -> tuple[float, str]:
    return table.created, table.id


def table_info(table: Table) -> dict[str, Any]:
    """What a spectator may know of a table itself: its game, rules, seats and status."""
    spec = find_game(table.rules.game)
    return {
        "table_id": table.id,
        "game": spec.name,
        "title": spec.title,
        "ruleset": table.rules.ruleset,
        "options": dict(table.options),
        "units": list(spec.units),
        "seats": [
            {"name": s.name, "taken": s.taken, "team": table.match.team_of(i)}
            for i, s in enumerate(table.seats)
        ],
        "status": _status(table),
        "record_id": table.record_id,
    }


def _kept(record_id: str) -> dict[str, str]:
    """The caching headers of what a finished table's record makes (its replay page, its
    file): the same for as long as the record, and Tapis's version, are."""
    return {"Cache-Control": "public, max-age=3600", "ETag": f'"{record_id}-{__version__}"'}


def _unchanged(request: Request, headers: dict[str, str]) -> bool:
    """The client holds what `headers` describe already (`If-None-Match`)."""
    held = request.headers.get("if-none-match", "")
    return headers["ETag"] in (tag.strip() for tag in held.split(","))


def _bodiless(status: int, media_type: str, headers: dict[str, str]) -> Response:
    """A response without its body: 304 Not Modified (the client holds it), or the head of a
    HEAD, 200 (no length said: the body is not made)."""
    response = Response(status_code=status, media_type=media_type, headers=headers)
    if "content-length" in response.headers:
        del response.headers["content-length"]
    return response


class _Http(H11Protocol):
    """uvicorn's HTTP/1.1 with the two bounds it lacks, against clients that hold connections
    without using them: at most `limit` connections at once (one past it is closed at once),
    and each whole request, its head and any body, within `HEAD_SECONDS` of the connection or
    of the previous response, or of the end of the previous request's body when that came
    after its response (else the connection is closed; uvicorn's own keep-alive timeout ends
    once any byte comes). `limit` is the web front's (`WebFront.start` makes a subclass).
    No protocol upgrade is made, and none is logged: the request is answered as plain HTTP."""

    limit = 0
    # At most this many of them from one address (the subclass's own count): one client
    # holding every connection (64 of 64, each asking for a page every 3 s) left none to
    # anyone else. An event stream is a connection: it is the client's streams and a few more.
    per_client = 0
    held: collections.Counter[str]
    _host: str | None = None
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if len(self.connections) > self.limit or self.held[host] >= self.per_client:
            transport.close()
            return
        self._host = host
        self.held[host] += 1
        self._await_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # DONE: answered before its body was all in; the time of that request runs on.
        if self.conn.our_state is not h11.DONE and not self.transport.is_closing():
            self._await_head()

    def handle_events(self) -> None:
        answered = self.conn.our_state is h11.DONE
        super().handle_events()
        # The body of a request already answered has come: the next request's time starts.
        if answered and self.conn.our_state is not h11.DONE and not self.transport.is_closing():
            self._await_head()

    def _should_upgrade(self) -> bool:
        return False  # (uvicorn's own logs two warnings for each upgrade it cannot make)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        if self._host is not None:
            self.held[self._host] -= 1
            if not self.held[self._host]:
                del self.held[self._host]
            self._host = None
        super().connection_lost(exc)

    def _await_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(HEAD_SECONDS, self._head_due)

    def _head_due(self) -> None:
        # IDLE: h11 has not read a whole request head since the timer started; SEND_BODY: nor
        # the whole body after it (the response may be sent, even a stream under way).
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            self.transport.close()


class _Pages:
    """The built replay pages of the most recent finished tables, `limit` bytes in all (one
    larger is kept alone): a finished table's record never changes, so its page is built once,
    however many ask for it, at once or later. A page is built in a process of its own
    (`signed_record_page`; the page of a long match takes seconds: on a thread, it held the
    interpreter from the event loop, and a visitor asking for four such pages in turn took
    gRPC's p99 from 6 to 316 ms), one at a time (hundreds of MB each); the process is started
    at the first page and stopped with the front (`close`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0  # bytes of the pages kept
        self._pages: OrderedDict[tuple[str, str], bytes] = OrderedDict()  # the oldest first
        self._building: dict[tuple[str, str], asyncio.Future[bytes]] = {}
        self._one = asyncio.Semaphore(1)  # (bound to the loop at its first wait)
        self._pool: ProcessPoolExecutor | None = None

    async def get(self, key: tuple[str, str], page: tuple[bytes, bytes, str]) -> bytes:
        """The page of `key` (table id, record id), `page` what makes it (`signed_record_page`'s
        arguments: the record's envelope, the public key, the title), built when not kept."""
        kept = self._pages.get(key)
        if kept is not None:
            self._pages.move_to_end(key)
            return kept
        building = self._building.get(key)
        if building is None:
            building = self._building[key] = asyncio.ensure_future(self._build(page))
            building.add_done_callback(lambda done: self._built(key, done))
        # shielded: a client gone does not cancel the build others wait for
        return await asyncio.shield(building)

    async def _build(self, page: tuple[bytes, bytes, str]) -> bytes:
        async with self._one:
            return await self._make(page)

    async def _make(self, page: tuple[bytes, bytes, str]) -> bytes:
        """The page, built in the process that builds them (started if need be)."""
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                1,
                mp_context=multiprocessing.get_context("spawn"),  # (no fork of gRPC's threads)
                # Ctrl-C reaches the terminal's whole group: the referee's to handle
                initializer=functools.partial(signal.signal, signal.SIGINT, signal.SIG_IGN),
            )
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, signed_record_page, *page)
        except BrokenProcessPool:  # its process gone (killed, out of memory): a new one next
            self._pool = None
            raise Unavailable(
                "the process building replay pages stopped before this page was made: ask again"
            ) from None

    def close(self) -> None:
        """Stop the process building pages (a build under way is not waited for)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _built(self, key: tuple[str, str], done: asyncio.Future[bytes]) -> None:
        del self._building[key]
        if done.cancelled() or done.exception() is not None:
            return  # (its requests get the error; the next one builds again)
        page = done.result()
        self._pages[key] = page
        self.size += len(page)
        while self.size > self.limit and len(self._pages) > 1:
            _, dropped = self._pages.popitem(last=False)
            self.size -= len(dropped)


class _Shared:
    """The messages every spectator stream of a table is sent alike, made once: each event's
    (by table and index: an event never changes), the last SHARED_EVENTS in all; and each
    table's view, for SHARED_VIEW_SECONDS after it was made at the table's state (its events
    so far and its status)."""

    def __init__(self) -> None:
        self._events: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._views: OrderedDict[str, tuple[tuple[int, str], float, bytes]] = OrderedDict()

    def event(self, table: Table, index: int, event: Any) -> bytes:
        key = (table.id, index)
        said = self._events.get(key)
        if said is None:
            message = _json(event_message(table, index, event, None))  # the spectator's copy
            said = self._events[key] = _sse("event", message, index + 1)
            if len(self._events) > SHARED_EVENTS:
                self._events.popitem(last=False)
        return said

    def view(self, table: Table) -> bytes | None:
        kept = self._views.get(table.id)
        if kept is None:
            return None
        state, made, said = kept
        fresh = asyncio.get_running_loop().time() - made < SHARED_VIEW_SECONDS
        return said if fresh and state == _view_state(table) else None

    def keep_view(self, table: Table, said: bytes) -> bytes:
        self._views[table.id] = (_view_state(table), asyncio.get_running_loop().time(), said)
        self._views.move_to_end(table.id)
        if len(self._views) > SHARED_VIEWS:
            self._views.popitem(last=False)
        return said


def _view_state(table: Table) -> tuple[int, str]:
    """What a spectator's view was made at: the table's events so far and its status."""
    return table.durable_events, _status(table)


class _Server(uvicorn.Server):
    """uvicorn inside the referee's process: the referee's own signal handlers stay."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


class WebFront:
    """The web front over a `Referee`; `start(sock)` serves it on the running loop."""

    def __init__(self, referee: Referee, limits: Limits = DEFAULT_LIMITS) -> None:
        self.referee = referee
        self.limits = limits
        self._streams = StreamCount(limits.max_streams_per_client)  # event streams
        self._closing = asyncio.Event()
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._pages = _Pages(PAGE_CACHE_BYTES)
        # index pages by number: when made, for how many tables, the page
        self._index: OrderedDict[int, tuple[float, int, bytes]] = OrderedDict()
        self._shared = _Shared()
        self.app = Starlette(
            routes=[
                Route("/", self.index),
                Route("/tables/{table_id}", self.live),
                Route("/tables/{table_id}/events", self.events),
                Route("/tables/{table_id}/replay", self.replay),
                Route("/tables/{table_id}/record.tapis", self.record),
            ],
            exception_handlers={TapisError: self._error, sqlite3.Error: self._error},
        )
        # No redirect to the path without its trailing slash (404): its address would be built
        # from the request's Host header.
        self.app.router.redirect_slashes = False

    # -- serving ----------------------------------------------------------------------------

    async def start(self, sock: socket.socket) -> None:
        """Serve on `sock` as a task of the running loop; returns once it accepts."""
        limits = self.limits
        per_client = min(limits.max_streams_per_client + 16, max(1, limits.max_connections // 2))
        http = type(
            "_Http",
            (_Http,),
            {
                "limit": limits.max_connections,
                "per_client": per_client,
                "held": collections.Counter(),
            },
        )
        config = uvicorn.Config(
            self.app,
            http=http,
            lifespan="off",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=2,
            headers=SECURITY_HEADERS,
            # The client is the socket's peer: no proxy's header says otherwise (uvicorn
            # trusts them from 127.0.0.1 by default, and so would lift the per-client bounds).
            proxy_headers=False,
            forwarded_allow_ips=[],
            ws="none",  # no WebSocket (nor other) upgrade: `_Http` answers as plain HTTP
        )
        server = self._server = _Server(config)
        self._task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
        while not server.started:
            if self._task.done():
                self._task.result()  # its failure
                raise ListenError("the web front stopped as it started")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """End the event streams, then the server (the requests under way finish), and the
        process building replay pages."""
        self._closing.set()
        try:
            if self._server is not None and self._task is not None:
                self._server.should_exit = True
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        finally:
            self._pages.close()

    # -- pages ------------------------------------------------------------------------------

    async def _error(self, request: Request, exc: Exception) -> Response:
        if isinstance(exc, sqlite3.Error):  # the store cannot be read: 503, as gRPC's UNAVAILABLE
            exc = store_unreadable(exc)
        assert isinstance(exc, TapisError)
        return PlainTextResponse(str(exc) + "\n", status_code=http_status(exc))

    async def _table(self, request: Request) -> Table:
        client = request.client.host if request.client is not None else ""
        return await self.referee.fetch(self._table_id(request), client)

    def _table_id(self, request: Request) -> str:
        """The table id of a page's path (not looked up)."""
        if not self.referee.ready:
            raise self.referee.not_ready()
        table_id: str = request.path_params["table_id"]
        if len(table_id) > MAX_ID:
            raise NotFound(f"no table {table_id[:16]!r}...")
        if b"%2f" in request.scope.get("raw_path", b"").lower():
            # A slash written %2F is no slash (the path is routed once decoded): no table's id
            # has one, and a page has one path.
            raise NotFound("no such page: a table's path has no %2F")
        return table_id

    async def index(self, request: Request) -> Response:
        """The tables, the most recent first, `INDEX_ROWS` a page (`?page=N`, from 1): each
        page bounded, however many tables the referee holds, and made at most once each
        `INDEX_SECONDS` (the page reloads itself; many visitors cost one build)."""
        given = request.query_params.get("page", "1")
        if not _PAGE.fullmatch(given) or given == "0":
            raise BadRequest("the page must be a number from 1, of at most 6 digits", "page")
        now = asyncio.get_running_loop().time()
        count = len(self.referee.tables)
        # Every page past the last is the same page; and every page is kept (a visitor
        # asking for more pages in turn than were kept had each made again at each request:
        # 11,474 builds in 8 s), so that each is made at most once each `INDEX_SECONDS`.
        last = max(1, -(-count // INDEX_ROWS))
        number = min(int(given), last + 1)
        kept = self._index.get(number)
        # (made again at once when tables came or left: a table just created is listed)
        if kept is None or now - kept[0] >= INDEX_SECONDS or kept[1] != count:
            kept = self._index[number] = (now, count, self._index_page(number))
        self._index.move_to_end(number)
        while len(self._index) > max(INDEX_PAGES_KEPT, last + 1):
            self._index.popitem(last=False)
        return HTMLResponse(kept[2])

    def _index_page(self, number: int) -> bytes:
        tables = self.referee.tables
        first = (number - 1) * INDEX_ROWS
        # By creation: the referee's dict is in the order tables came into memory (a finished
        # one asked for after a restart came back at the top).
        latest = heapq.nlargest(first + INDEX_ROWS, tables.values(), key=_created)
        shown = latest[first:]
        rows = []
        for table in shown:
            info = table_info(table)
            tid = html.escape(table.id)
            links = [f'<a href="/tables/{tid}">watch</a>']
            if table.envelope is not None:
                links += [
                    f'<a href="/tables/{tid}/replay">replay</a>',
                    f'<a href="/tables/{tid}/record.tapis">record</a>',
                ]
            names = ", ".join(html.escape(s["name"]) for s in info["seats"])
            rows.append(
                f'<li data-table="{tid}"><b>{html.escape(info["title"])}</b>'
                f" ({html.escape(info['ruleset'])}) {names}: {info['status']}"
                f" &middot; {' &middot; '.join(links)}</li>"
            )
        body = "\n".join(rows) or "<li>no table yet</li>"
        total = len(tables)
        said = (
            f"{total:,} tables (waiting, being played, and the latest finished), the most"
            f" recent first: {first + 1:,} to {first + len(shown):,}"
            if shown
            else f"{total:,} tables; this page has none"
        )
        links = []
        if number > 1:
            links.append(f'<a href="/?page={number - 1}">more recent</a>')
        if first + INDEX_ROWS < total:
            links.append(f'<a href="/?page={number + 1}">older</a>')
        page = fill(
            _asset("index.html"),
            {
                "css": page_asset("tapis.css"),
                "rows": body,
                "shown": said,
                "more": " &middot; ".join(links),
            },
        )
        return page.encode()

    async def live(self, request: Request) -> Response:
        table = await self._table(request)
        setup = {"table_id": table.id, "cards": card_table(), "suits": list(SUIT_SYMBOLS)}
        text = json.dumps(setup, ensure_ascii=False).replace("<", "\\u003c")
        return HTMLResponse(fill(_asset("live.html"), {**_live_assets(), "setup": text}))

    # The replay page and the record file are made from the stored record alone: a finished
    # table that left memory is not replayed for them.

    async def replay(self, request: Request) -> Response:
        table_id = self._table_id(request)
        envelope, record_id = await self.referee.stored_record(table_id)
        headers = _kept(record_id)
        if _unchanged(request, headers):
            return _bodiless(304, "text/html; charset=utf-8", headers)
        if request.method == "HEAD":
            # (the page's head without the page, which may take seconds to make: asked in
            # turn for more long pages than are kept, it made each every time)
            return _bodiless(200, "text/html; charset=utf-8", headers)
        key = self.referee.key.public_key().public_bytes_raw()  # the signature checked with it
        title = f"table {table_id} - Tapis replay"
        page = await self._pages.get((table_id, record_id), (envelope, key, title))
        return HTMLResponse(page, headers=headers)

    async def record(self, request: Request) -> Response:
        table_id = self._table_id(request)
        envelope, record_id = await self.referee.stored_record(table_id)
        headers = {
            **_kept(record_id),
            "Content-Disposition": f'attachment; filename="{table_id}.tapis"',
        }
        if _unchanged(request, headers):
            return _bodiless(304, "application/octet-stream", headers)
        body = encode_file([rpb.RecordEnvelope.FromString(envelope)])
        return Response(body, media_type="application/octet-stream", headers=headers)

    # -- the live stream --------------------------------------------------------------------

    async def events(self, request: Request) -> Response:
        table = await self._table(request)
        given = request.headers.get("last-event-id") or request.query_params.get("from") or "0"
        if not _INDEX.fullmatch(given):
            raise BadRequest("the event index must be a number of at most 10 digits", "from")
        start = int(given)
        if start > table.durable_events:  # as WatchTable: OUT_OF_RANGE (400)
            raise OutOfRange(f"event index {start} is past the table's {table.durable_events}")
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        if request.method == "HEAD":  # the stream's head, and no stream (it would never end)
            return Response(media_type="text/event-stream", headers=headers)
        client = request.client.host if request.client is not None else ""
        slot = self._streams.open(client)
        stream = self._stream(table, start, slot, Backlog(self.referee.replays, client))
        # A stream whose response never starts (its client gone at once) gives its place back
        # when it is collected.
        weakref.finalize(stream, slot.release)
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)

    async def _view(self, table: Table) -> bytes:
        """The spectator's view now, as an event of the stream (as GetView without a seat:
        committed state only); made once for every stream of the table (`_Shared`)."""
        said = self._shared.view(table)
        if said is not None:
            return said
        async with table.lock:
            said = self._shared.view(table)  # made while this one waited
            if said is None:
                view = table.match.view(None) if table.started else None
                out = _json(seat_view(table, None, view))
                out["table_status"] = _status(table)
                said = self._shared.keep_view(table, _sse("view", out))
            return said

    async def _stream(
        self, table: Table, start: int, slot: Slot, backlog: Backlog
    ) -> AsyncIterator[bytes]:
        """The stream of one live page: its place at the referee's backlog gate (`backlog`,
        as a WatchTable stream's) while it is more than a batch behind the table."""
        watch = self.referee.watch(table, start).__aiter__()
        closing = asyncio.ensure_future(self._closing.wait())
        pending: asyncio.Future[Any] | None = None
        try:
            yield _sse("table", table_info(table))
            yield await self._view(table)
            loop = asyncio.get_running_loop()
            paced = 0.0  # when the next batch may be asked for (caught up: LIVE_INTERVAL on)
            while True:
                if pending is None:
                    wait = paced - loop.time()
                    if wait > 0:  # what comes meanwhile is sent in one batch
                        await asyncio.wait({closing}, timeout=wait)
                        if closing.done():
                            return
                    pending = asyncio.ensure_future(anext(watch, None))
                done, _ = await asyncio.wait(
                    {pending, closing}, timeout=KEEPALIVE, return_when=asyncio.FIRST_COMPLETED
                )
                if closing in done:
                    return
                if pending not in done:
                    yield b": idle\n\n"
                    continue
                try:
                    item = pending.result()
                except Unavailable:  # the referee is stopping: the page's stream ends here
                    return  # (its browser opens it again, from its Last-Event-ID, later)
                finally:
                    pending = None
                if item is None:  # the table ended: nothing more will happen
                    yield _sse("table", table_info(table))
                    yield _sse("end", {"record_id": table.record_id})
                    return
                behind = is_backlog(table, item)
                await backlog.sending(behind)
                paced = 0.0 if behind else loop.time() + LIVE_INTERVAL
                # A spectator's batch holds events only; each message is made before the first
                # is sent, on the state the batch was made on.
                # A batch is written at once: each write costs the stack its own work, and a
                # table watched by a thousand pages makes as many writes per batch.
                events = [e for e in item if not isinstance(e, Turn)]
                sent = [self._shared.event(table, index, event) for index, event in events]
                if events and events[-1][0] + 1 >= table.durable_events:
                    sent.append(await self._view(table))
                if sent:
                    yield b"".join(sent)
        finally:
            backlog.release()
            closing.cancel()
            if pending is not None:
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Unavailable):
                    await pending
            with contextlib.suppress(RuntimeError):
                await watch.aclose()  # type: ignore[attr-defined]
            slot.release()


def _asset(name: str) -> str:
    """A file of the web front's pages (referee/server/page/)."""
    return resources.files("tapis_cartes.referee.server").joinpath("page", name).read_text("utf-8")


def _live_assets() -> dict[str, str]:
    return {"css": page_asset("tapis.css"), "js": page_asset("tapis.js") + _asset("live.js")}
