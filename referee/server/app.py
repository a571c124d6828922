"""Process wiring of the referee: `create_server` (for tests: port 0 gives a free port) and
`serve` (for `tapis serve`: signals, graceful shutdown).

The port is bound first (exclusively: no other process may share it), then the store is
locked, so a bad address or a second referee on the same store fails before anything is
created. Until every live table is reloaded, the service answers UNAVAILABLE and standard gRPC
health checking reports NOT_SERVING; NOT_SERVING again as soon as shutdown begins, and the
changes under way finish before the store closes. Server reflection (`grpc.reflection.v1` and
`v1alpha`) lists the services and serves their descriptors. Logs are JSON lines on stderr, one
per event in a table's life.

With a web address (`tapis serve --web HOST:PORT`), the web front (referee/server/web.py) is
bound with the gRPC address, before anything is created, and served on the same event loop
and tables once they are loaded; it stops first.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import importlib.util
import json
import logging
import os
import signal
import sqlite3
import stat
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import grpc
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from tapis_cartes.records.signing import key_id, load_or_create_private_key, load_private_key
from tapis_cartes.referee import __version__
from tapis_cartes.referee.errors import ListenError, StoreError
from tapis_cartes.referee.server.lenient import LenientRequests
from tapis_cartes.referee.server.limits import (
    CLIENT_PING_SECONDS,
    DEFAULT_LIMITS,
    HEAD_SECONDS,
    Limits,
    StreamCount,
    connection_bound,
)
from tapis_cartes.referee.server.service import RefereeServicer, add_referee_service
from tapis_cartes.referee.server.store import Store, opening_failed
from tapis_cartes.referee.server.tables import Referee
from tapis_cartes.referee.server.timesource import SYSTEM_TIME, TimeSource
from tapis_cartes.referee.server.web import WebFront, bind, host_port
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2

__all__ = [
    "Limits",
    "ListenError",
    "RunningServer",
    "create_server",
    "default_event_loop",
    "run_on",
    "serve",
]

SERVICE = referee_pb2.DESCRIPTOR.services_by_name["RefereeService"].full_name
REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"
log = logging.getLogger("tapis.referee")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": round(record.created, 3),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        if not record.name.startswith("tapis"):  # a library's (uvicorn, asyncio, ...)
            doc["logger"] = record.name
        doc.update(getattr(record, "fields", {}))
        if record.exc_info:
            doc["traceback"] = self.formatException(record.exc_info)
        return json.dumps(doc, separators=(",", ":"), default=str)


def setup_logging(level: int = logging.INFO) -> None:
    """The process's log: JSON lines on stderr, the referee's at `level`, the libraries'
    (uvicorn, asyncio, ...) from warnings up."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    ours = logging.getLogger("tapis")
    ours.handlers[:] = [handler]
    ours.setLevel(level)
    ours.propagate = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    grpc_log = logging.getLogger("grpc._cython.cygrpc")
    if not any(isinstance(f, _CallerGone) for f in grpc_log.filters):
        grpc_log.addFilter(_CallerGone())


class _CallerGone(logging.Filter):
    """gRPC logs as errors, with a traceback, what a client causes: a call whose caller went
    away (its deadline passed, its connection closed) while its answer was being sent
    ("ExecuteBatchError raised in core by servicer method"), and metadata that is not UTF-8
    ("Invalid encoding on b'...'": the call is answered all the same, an `authorization` so
    sent PERMISSION_DENIED). A caller may go away at any moment (protocol.md, retries) and
    send any bytes: each is a warning line, not an error of the referee."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING and str(record.msg).startswith(
            ("ExecuteBatchError", "Invalid encoding on")
        ):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True


class _Health(health.aio.HealthServicer):
    """gRPC's health servicer, with the `List` its asyncio version leaves unimplemented (a
    call of it was UNKNOWN, with an error in the log): each service's status."""

    async def List(
        self, request: health_pb2.HealthListRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthListResponse:
        return health_pb2.HealthListResponse(
            statuses={
                name: health_pb2.HealthCheckResponse(status=status)
                for name, status in self._server_status.items()
            }
        )


@dataclasses.dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    referee: Referee
    health: health.aio.HealthServicer
    store: Store
    web: WebFront | None = None
    web_port: int | None = None  # the web front's port, when it serves
    servicer: RefereeServicer | None = None  # the RefereeService (its stream counts)

    async def stop(self, grace: float = 5.0, pauses: GcPauses | None = None) -> None:
        """Graceful shutdown: NOT_SERVING at once, finish the calls under way, flush.
        `pauses`: the collector's pauses while it served, said in the last log line."""
        await self.health.set(SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        self.referee.ready = False  # new calls: UNAVAILABLE
        self.referee.stop_clocks()  # and no seat's time runs out while they are refused
        self.referee.end_streams()  # (they would hold the shutdown for its whole grace)
        if self.web is not None:
            await self.web.stop()  # its event streams end, its requests under way finish
        await self.server.stop(grace)
        await _calls_wound_up()
        await self.referee.close()  # changes under way (their callers gone or not) finish
        self.store.close()
        fields = {
            "port": self.port,
            **self.store.commit_stats(),
            # The CPU the process used, and of it this thread's (the event loop's, stop runs
            # on it): beside the store's writer thread's, what each part of the referee costs.
            "process_cpu_s": round(time.process_time(), 3),
            "loop_cpu_s": round(time.thread_time(), 3),
            **(pauses.stats() if pauses is not None else {}),
        }
        log.info("referee stopped", extra={"fields": fields})


def _say_if_key_open(path: str | Path) -> None:
    """Log a warning when the signing key's file may be read by other users than its owner
    (its group or anyone): whoever reads it can sign records as this referee."""
    with contextlib.suppress(OSError):
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & 0o077:
            log.warning(
                "signing key readable by others",
                extra={
                    "fields": {
                        "key": str(path),
                        "mode": f"{mode:04o}",
                        "note": "whoever reads it can sign records as this referee: chmod 600",
                    }
                },
            )


def _say_if_key_changed(store: Store, private_key: Ed25519PrivateKey, path: str | Path) -> None:
    """Log a warning when the store's last record was signed by another key than `path`'s
    (a key file lost and made anew, or replaced): the records signed before verify only
    with the other key's public key, which the clients that hold it must be told about."""
    envelope = store.last_record()
    if envelope is None:
        return
    try:
        previous = rpb.RecordEnvelope.FromString(envelope).key_id
    except DecodeError:
        return  # (said when that record is asked for)
    now = key_id(private_key.public_key())
    if previous and previous != now:
        log.warning(
            "signing key changed",
            extra={
                "fields": {
                    "key": str(path),
                    "key_id": now,
                    "previous_key_id": previous,
                    "note": "the records signed before verify with the previous key only",
                }
            },
        )


async def _calls_wound_up(timeout: float = 1.0) -> None:
    """gRPC's `Server.stop` cancels the calls still under way (a health watch, a table's
    stream) and returns before their tasks have ended: a loop that closes then cancels them
    once more, which gRPC logs as an error with its traceback. Wait (at most `timeout`) for
    those tasks, found by the coroutine gRPC runs each call in."""
    me = asyncio.current_task()
    calls = [
        task
        for task in asyncio.all_tasks()
        if task is not me and getattr(task.get_coro(), "__qualname__", None) == "_schedule_rpc_coro"
    ]
    if calls:
        await asyncio.wait(calls, timeout=timeout)


async def create_server(
    address: str = "127.0.0.1:0",
    db: str | Path = "tapis.db",
    key: str | Path = "referee.key",
    limits: Limits = DEFAULT_LIMITS,
    time_source: TimeSource = SYSTEM_TIME,
    web: str | None = None,
) -> RunningServer:
    """Start a referee on `address` (port 0: a free port); returns once it serves. With
    `web` (HOST:PORT), the web front too. `ListenError` when an address cannot be bound,
    `StoreLocked` when another referee owns the store. `time_source`: where the clocks of
    timed tables read the time (tests give their own)."""
    connections = connection_bound(limits.max_connections)
    if connections < limits.max_connections:
        log.warning(
            "fewer connections",
            extra={"fields": {"max_connections": connections, "asked": limits.max_connections}},
        )
        limits = dataclasses.replace(limits, max_connections=connections)
    options = [
        ("grpc.max_receive_message_length", limits.max_message_bytes),
        # Replies: what a gRPC client takes by default (a record is the largest), or more
        # with a larger bound on requests.
        ("grpc.max_send_message_length", max(4 << 20, 4 * limits.max_message_bytes)),
        ("grpc.so_reuseport", 0),  # a port in use is an error, not a port shared
        # What a client may send on a stream before the referee reads it: 64 KiB (a request's
        # most, about), not the 4 MiB gRPC's bandwidth probing grows it to. Messages a client
        # sends after a call's one request are never read: each stream held 1.7 MB of them
        # (250 streams of one client, 400 MB). The replies' flow is the client's window.
        ("grpc.http2.bdp_probe", 0),
        ("grpc.http2.lookahead_bytes", 64 << 10),
        # A connection past the bound is closed at once; one silent past HEAD_SECONDS too.
        ("grpc.max_allowed_incoming_connections", limits.max_connections),
        ("grpc.server_handshake_timeout_ms", int(HEAD_SECONDS * 1000)),
        # Streams at once on one connection (gRPC's default: no bound, each stream's memory
        # held): the per-client cap of streams and some unary calls beside them.
        ("grpc.max_concurrent_streams", limits.max_streams_per_client + 64),
        # A connection with no call under way for a while is closed (a client's channel
        # opens another when it next calls): idle connections hold no slot for long.
        ("grpc.max_connection_idle_ms", int(limits.idle_connection * 1000)),
        # A connection whose peer is gone is found by its ping, idle or not, and closed.
        ("grpc.keepalive_time_ms", int(limits.keepalive * 1000)),
        # (gRPC core waits for a ping's answer `ping_timeout_ms`, one minute by default,
        # whatever `keepalive_timeout_ms` says: both are set.)
        ("grpc.keepalive_timeout_ms", int(limits.keepalive_timeout * 1000)),
        ("grpc.http2.ping_timeout_ms", int(limits.keepalive_timeout * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # A client's own keepalive: a ping each CLIENT_PING_SECONDS (half of it: a strike).
        ("grpc.http2.min_ping_interval_without_data_ms", int(CLIENT_PING_SECONDS * 500)),
    ]
    host_port(address)  # a malformed address is named before gRPC sees it
    streams = StreamCount(limits.max_streams_per_client)  # every stream of each client
    server = grpc.aio.server(options=options, interceptors=[LenientRequests(streams)])
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise ListenError(f"cannot listen on {address!r}: {exc}") from None
    if port == 0:
        raise ListenError(f"cannot listen on {address!r}")
    try:
        web_socket = bind(web) if web is not None else None
    except ListenError:
        await server.stop(None)
        raise
    web_port = web_socket.getsockname()[1] if web_socket is not None else None
    front: WebFront | None = None
    try:
        # A key file there is read first: one that cannot be read makes no store (a missing
        # one is made once the store is open: a store refused makes no key either).
        existing = load_private_key(key) if Path(key).exists() else None
        store = Store(db)
    except BaseException:
        await server.stop(None)
        if web_socket is not None:
            web_socket.close()
        raise
    try:
        private_key = existing or load_or_create_private_key(key)
        _say_if_key_open(key)
        _say_if_key_changed(store, private_key, key)
        referee = Referee(store, private_key, limits, time_source)
        servicer = RefereeServicer(referee, limits, streams)
        add_referee_service(servicer, server)
        health_servicer = _Health()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        _enable_reflection(
            (SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name), server
        )
        await health_servicer.set(SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        await health_servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        await server.start()  # calls are answered UNAVAILABLE until the tables are loaded
        started = time.perf_counter()
        count = await referee.load()
        if web_socket is not None:
            front = WebFront(referee, limits)
            await front.start(web_socket)
    except BaseException as exc:
        if front is not None:
            await front.stop()
        if web_socket is not None:
            web_socket.close()
        await server.stop(None)
        store.close()
        if isinstance(exc, sqlite3.Error):  # the store read at the start: damaged?
            raise opening_failed(str(db), exc) from None
        raise
    await health_servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    log.info(
        "referee serving",
        extra={
            "fields": {
                "version": __version__,
                "address": address,
                "port": port,
                "tables": count,
                "finished_tables_on_disk": store.count_finished(),
                "load_seconds": round(time.perf_counter() - started, 3),
                "key_id": key_id(private_key.public_key()),
                "web_port": web_port,
                # The CPU start-up took (as "referee stopped" gives it for the whole run).
                "process_cpu_s": round(time.process_time(), 3),
                "loop_cpu_s": round(time.thread_time(), 3),
            }
        },
    )
    return RunningServer(server, port, referee, health_servicer, store, front, web_port, servicer)


def _enable_reflection(services: tuple[str, ...], server: grpc.aio.Server) -> None:
    """Server reflection under both names tools ask for: `grpc.reflection.v1` (the stable
    one) and `grpc.reflection.v1alpha`. grpcio-reflection implements only v1alpha; v1 has
    the same messages, field for field (only the package differs), so one servicer answers
    both: v1alpha's, registered a second time under v1's service name, and v1's file
    descriptor (v1alpha's, renamed) added to the pool it describes from. (When
    grpcio-reflection ships v1, its own module replaces this.)"""
    _add_reflection_v1_file(descriptor_pool.Default())
    servicer = reflection.aio.ReflectionServicer(
        (*services, REFLECTION_V1, reflection.SERVICE_NAME),
        pool=_MethodsFound(descriptor_pool.Default()),
    )
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    method = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    handlers = {"ServerReflectionInfo": method}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(REFLECTION_V1, handlers),)
    )
    server.add_registered_method_handlers(REFLECTION_V1, handlers)


class _MethodsFound:
    """A descriptor pool as reflection reads it, whose `FindFileContainingSymbol` also finds
    a method (`tapis.v1.RefereeService.PlaySeat`: a symbol of the reflection protocol, what
    `grpcurl describe` of a method asks for), the file of its service: protobuf's own pool
    finds services, messages, fields and enums, but not methods (KeyError, and reflection
    answered NOT_FOUND). The rest is the pool's."""

    def __init__(self, pool: descriptor_pool.DescriptorPool) -> None:
        self._pool = pool

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def FindFileContainingSymbol(self, symbol: str) -> Any:  # (the name of the pool's method)
        try:
            return self._pool.FindFileContainingSymbol(symbol)
        except KeyError:
            service, _, method = symbol.rpartition(".")
            found = self._pool.FindServiceByName(service) if service else None  # or KeyError
            if found is None or method not in found.methods_by_name:
                raise
            return found.file


def _add_reflection_v1_file(pool: descriptor_pool.DescriptorPool) -> None:
    """Add `grpc/reflection/v1/reflection.proto` to `pool` (once): v1alpha's file with the
    package `grpc.reflection.v1`."""
    name = "grpc/reflection/v1/reflection.proto"
    try:
        pool.FindFileByName(name)
        return
    except KeyError:
        pass
    old, new = ".grpc.reflection.v1alpha.", ".grpc.reflection.v1."
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = name
    proto.package = "grpc.reflection.v1"
    proto.ClearField("options")
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(old):
                field.type_name = new + field.type_name[len(old) :]
    for service in proto.service:
        for m in service.method:
            m.input_type = new + m.input_type[len(old) :]
            m.output_type = new + m.output_type[len(old) :]
    pool.Add(proto)


class GcPauses:
    """The pauses of Python's garbage collector in this process, by generation (`gc.callbacks`),
    in CPU time of the thread that collected (the event loop's, mostly): every submission under
    way waits out a collection on the event loop, so the longest pauses bound the referee's
    latency from below ("referee stopped" gives them, and the objects each generation freed)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.total = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self.collected = [0, 0, 0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
            return
        took = time.thread_time() - self._started
        generation = info["generation"]
        self.count[generation] += 1
        self.total[generation] += took
        self.longest[generation] = max(self.longest[generation], took)
        self.collected[generation] += info["collected"]

    def stats(self) -> dict[str, Any]:
        return {
            f"gc{g}": {
                "count": self.count[g],
                "total_ms": round(1000 * self.total[g], 2),
                "max_ms": round(1000 * self.longest[g], 2),
                "collected": self.collected[g],
            }
            for g in range(3)
        }


# How often the referee runs a full collection of the garbage collector itself, in seconds.
# Python's own full collections are turned off while it serves (`sweep_garbage`): a full
# collection scans every object alive, and the event loop, with every submission under way,
# waits it out. With 550 tables in play (61,000 action events) each took 90 ms, and came
# every 6 s (`scripts/bench_referee.py`: one in the 5 s measured at half of echo's rate was
# enough to take its p99 past 10 ms). The young generations are still collected as they
# fill: what the full ones would free is the cycles that outlived them (tables no longer
# kept, and the calls refused, are freed as they are let go: no cycle holds them); they
# wait for the next sweep, which comes sooner when the process has grown by `SWEEP_GROWTH`
# bytes since the last (a source of such cycles the referee does not know of is bounded).
FULL_SWEEP = 600.0
SWEEP_GROWTH = 256 << 20
# A threshold of full collections Python never reaches (it counts the collections of the
# generation below, from 0 after each full one).
_NO_FULL_COLLECTION = 1 << 30


def resident_memory() -> int:
    """The memory this process holds now (its resident set, in bytes); 0 where the system
    does not say (no /proc: not Linux)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


async def sweep_garbage(
    every: float = FULL_SWEEP,
    growth: int = SWEEP_GROWTH,
    memory: Callable[[], int] = resident_memory,
    check: float = 5.0,
) -> None:
    """Run until cancelled: Python's automatic full collections off, one full collection every
    `every` seconds instead, or sooner once `memory()` has grown by `growth` since the end of
    the last (looked at every `check` seconds); a pause then, counted by `GcPauses` as any.
    Their threshold is set back when cancelled."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, _NO_FULL_COLLECTION)
    loop = asyncio.get_running_loop()
    try:
        while True:
            due, base = loop.time() + every, memory()
            while loop.time() < due and memory() - base < growth:
                await asyncio.sleep(min(check, max(0.0, due - loop.time())))
            gc.collect()
    finally:
        gc.set_threshold(young, middle, old)


T = TypeVar("T")


def default_event_loop() -> str:
    """The event loop `tapis serve` runs on unless told: uvloop's (libuv, in C: its loop,
    handles and timers cost less of each submission than asyncio's own, in Python) where it
    is installed (a dependency, but on Windows), else asyncio's."""
    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def run_on(event_loop: str, main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to its end on a new event loop: "uvloop" (an ImportError when it is not
    installed) or "asyncio"."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if event_loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


async def serve(
    address: str,
    db: str | Path,
    key: str | Path,
    limits: Limits = DEFAULT_LIMITS,
    web: str | None = None,
) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully; with `web` (HOST:PORT), the
    web front too."""
    # Python's switch interval stays at its 5 ms: the store writes in a process of its own, and
    # forcing the loop off the interpreter more often for gRPC's threads only slows it.
    running = await create_server(address, db, key, limits, web=web)
    # What start-up made (modules, descriptors, the reloaded tables) lives as long as the
    # process: out of the collector's sight, so that a full collection scans only what serving
    # made since (its pause, every submission waits it out, shrinks with it).
    gc.collect()
    gc.freeze()
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    sweeping = asyncio.create_task(sweep_garbage())
    kind = (
        "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
    )
    print(
        f"tapis referee listening on {address.rsplit(':', 1)[0]}:{running.port}"
        f" (event loop: {kind})",
        flush=True,
    )
    if web is not None:
        print(f"tapis web front on http://{web.rsplit(':', 1)[0]}:{running.web_port}/", flush=True)
    stop = asyncio.Event()
    failed: list[str] = []
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def store_failed(why: str) -> None:
        # A referee that cannot store stops (exit status 1), to be restarted from what was
        # committed: its tables may be behind their store (a commit the writer made but never
        # answered), and replay is the truth.
        failed.append(why)
        stop.set()

    running.store.on_failure = store_failed
    await stop.wait()
    if failed:
        log.error("referee stopping: its store failed", extra={"fields": {"error": failed[0]}})
    else:
        log.info("shutdown requested", extra={"fields": {"port": running.port}})
    sweeping.cancel()
    await running.stop(pauses=pauses)
    if failed:
        raise StoreError(failed[0])
