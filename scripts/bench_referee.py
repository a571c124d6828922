"""Benchmark: the referee's acknowledged actions per second and latency, played the old way
(GetView then SubmitAction) and by stream-driven bots (one call per move), side by side with a
bare gRPC echo server driven the same way, and the referee's memory per idle open table.

Not a test. In one run, each server a real subprocess on loopback, the client one asyncio
process:

1. Referee, two ways, on `tapis serve` with its durable SQLite store (synchronous=FULL, group
   commit) in a fresh temporary directory. ``--tables`` coroutines each play Dame de Pique
   with random legal actions (``end_threshold`` small, so matches end, their records are
   signed, and the coroutine opens a new table):
   - "loop", today's GetView -> SubmitAction loop: GetView for the seat expected to act, then
     SubmitAction. The seat expected to act is the next one in playing order, or the winner
     of the trick the last action completed; when it is wrong (the view lists no legal
     action, about once a hand), one more GetView asks the seat the view names.
   - "stream", as a bot plays now (docs/protocol.md's turn loop): one WatchTable stream per
     seat for the match, and one SubmitAction on each `turn` message, or at once on a
     SubmitActionResponse's `next_view`. No GetView.
   - "one call" (``--play-seat``): each seat on one PlaySeat call for the match, its
     submissions and their answers on the same stream as its turns (docs/protocol.md, the
     one-call match loop). Its latency: from writing a submission to reading its answer.
   Counted over ``--seconds`` after ``--warmup``: acknowledged SubmitAction calls (the rate of
   actions), every call (CreateTable included; a stream counts once), and the latency of each
   SubmitAction. The target is stream >= 1.5x the loop's actions/s.
2. Baseline: a bare grpc.aio echo server (`--echo-server PORT`: this script in its own
   subprocess; a generic handler with identity bytes serializers; on the referee's event
   loop, `--event-loop`: the same stack under both) driven by the same client
   set-up (same coroutines, same channel arrangement, two unary calls per "action" with the
   same metadata and the mean request and response sizes measured for GetView and
   SubmitAction in the loop's round 1); and the echo in the stream's shape, the transport's
   own cost of one call per move: one stream per coroutine and, per action, one unary call
   (sized like SubmitAction) after which the stream brings one message (sized like a turn)
   before the next. Its ratio to the echo is the most the stream can gain over the loop from
   the calls alone. The loop, the stream and the echo run throughout
   parts 1 and 2 and the load takes turns (``--rounds``, each with its warm-up), so a drift in
   the machine's speed hits all. Then the stream-driven bots are offered half of the echo's
   saturation rate (its actions/s): their SubmitAction p99 there is the latency target
   (<= 10 ms); at saturation p99 is queueing, reported but not the target. The echo is
   offered half of its own rate too, in both shapes (``--no-echo-paced``: not): its p99
   there is the transport's own, the floor under the referee's on this machine.
   The paced load is spread, not offered in bursts: each table's coroutine acts at its own
   rate (the mean times a factor between 0.5 and 1.5, the rates adding up to the rate offered:
   at one common rate the tables, started together, would stay in step and reach the end of
   a hand and the four turns of the exchange all at once), from its own random phase; a
   table that waited longer than its interval (for a turn) acts at once, and its next action
   too (of the exchange's four passes, two go at once, as four bots would send them). A
   latency runs from the client's writing of a submission to its reading of the answer, so
   it holds the client's own delays (one asyncio process for every bot, on the cores the
   server uses): "the client's event loop late by" bounds them. Nothing is subtracted: it
   is never less than the real submit-to-answer time. Last, what the referee's store said
   when it stopped (its "referee stopped" log line, `Store.commit_stats`): its commits over
   the whole run and how long they took, the transaction and its COMMIT alone (the log
   synced to the disk), since each acknowledgement waits for the commit holding its action,
   and a write from its queuing to its answer read on the event loop (the whole wait the
   store adds to an acknowledgement: the pipes, the writer's queue, the transaction);
   the referee's CPU by thread (the event loop, the store's writer, gRPC's threads); and the
   garbage collector's pauses by generation (a full collection stops the event loop for tens
   of milliseconds: every submission under way waits it out; the referee makes them itself,
   every 10 minutes, app.py `sweep_garbage`: a run of this benchmark sees none).
3. Memory: a fresh `tapis serve`; its VmRSS once it serves, then after ``--idle-tables``
   CreateTable calls of Dame de Pique with all four seats open (WAITING) and a short settle.
   The target is (RSS after - RSS before) / N <= 20 KB per table.

The machine may have few cores: client and servers are not pinned and share them.

Usage (from the repository root):

    .venv/bin/python scripts/bench_referee.py [--tables 32] [--seconds 10]
        [--rounds 2] [--channels per-table|shared] [--idle-tables 10000] [--profile-server 25]

A short run: ``--seconds 4 --rounds 1 --idle-tables 0``; of the referee only the bots on
PlaySeat (no loop, no WatchTable stream; the echo's sizes then from their turns):
``--only-play-seat``. ``--profile-server N`` runs the
referee of parts 1 and 2 under cProfile (only that server process; the numbers of that run are
then slower than the real ones) and prints its top N functions.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import contextlib
import cProfile
import functools
import io
import json
import os
import platform
import pstats
import random
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tapis_cartes.referee.engine import COMPILED as ENGINE_COMPILED
from tapis_cartes.referee.server.app import default_event_loop, run_on
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc as rpc

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve()
SERVICE = "tapis.v1.RefereeService"
ECHO_VIEW = "/tapis.bench.Echo/View"
ECHO_SUBMIT = "/tapis.bench.Echo/Submit"
ECHO_ACT = "/tapis.bench.Echo/Act"  # a Submit that also pushes a message on a Turns stream
ECHO_TURNS = "/tapis.bench.Echo/Turns"
CPROFILE_FLAG = "--cprofile-server"  # internal: run `tapis serve` under cProfile

TARGET_RATIO = 0.50  # referee actions/s >= this fraction of echo's
TARGET_STREAM_RATIO = 1.5  # stream-driven bots' actions/s >= this times the old loop's
TARGET_P99_MS = 10.0  # SubmitAction p99 latency
TARGET_KB_PER_TABLE = 20.0  # RSS per idle open table
BUSY_WARNING_PCT = 15.0  # warn when the rest of the machine used more of a core than this
LAG_PERIOD = 0.005  # seconds between two samples of the client's event-loop lag
SIZE_SAMPLES = 1000  # turns whose size the PlaySeat bots measure (as GetView's answer)
PACE_SPREAD = 0.5  # paced tables' rates: the mean times a factor in 1 +- this (spread_intervals)


# --- processes ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU time spent by the whole machine so far, all cores (from /proc/stat)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / clock_ticks()


class Child:
    """A server subprocess: its output goes to a log file."""

    def __init__(self, cmd: Sequence[str], log: Path) -> None:
        self.cmd = list(cmd)
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.cmd,
                cwd=ROOT,
                stdout=out,
                stderr=out,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def status_kb(self, key: str) -> int:
        """A `kB` line of /proc/<pid>/status, e.g. VmRSS."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise KeyError(key)

    def cpu_seconds(self) -> float:
        """User + system CPU time so far of the process (all its threads) and of its
        children (the referee's store writer, a process of its own)."""
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # a process that ended meanwhile
            if int(stat.parent.name) == self.pid or int(fields[1]) == self.pid:
                total += int(fields[11]) + int(fields[12])
        return total / clock_ticks()

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise SystemExit(f"server exited with {self.proc.returncode}:\n{tail}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait(10)
        return self.proc.returncode


def referee_cmd(
    tmp: Path, port: int, max_tables: int, profile: Path | None, event_loop: str
) -> list[str]:
    serve = ["serve", "--listen", f"127.0.0.1:{port}", "--db", str(tmp / "tapis.db"),
             "--key", str(tmp / "referee.key"),
             "--max-tables-per-client", str(max_tables), "--event-loop", event_loop]  # fmt: skip
    if profile is not None:
        return [sys.executable, str(SCRIPT), CPROFILE_FLAG, str(profile), *serve]
    return [sys.executable, "-m", "tapis_cartes.clients.cli", *serve]


async def wait_serving(child: Child, target: str) -> None:
    """Until the referee's health check says SERVING."""
    async with grpc.aio.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            child.check_alive()
            with contextlib.suppress(grpc.aio.AioRpcError):
                reply = await health.Check(
                    health_pb2.HealthCheckRequest(service=SERVICE), timeout=1
                )
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            await asyncio.sleep(0.05)
    raise SystemExit("the referee did not become SERVING")


async def wait_ready(child: Child, target: str) -> None:
    """Until a channel to the echo server connects."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        child.check_alive()
        async with grpc.aio.insecure_channel(target) as channel:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(channel.channel_ready(), 1)
                return
        await asyncio.sleep(0.05)
    raise SystemExit("the echo server did not come up")


# --- the echo server (a subprocess: this script with --echo-server PORT) ------------------


def _identity(data: bytes) -> bytes:
    return data


async def _echo_server(port: int) -> None:
    """Answer each call with as many bytes as its first 4 bytes say (little endian). The
    stream-shaped pair: a Turns stream (its request: 4 bytes of the size of its messages and
    a key of 8) sends a message each time an Act call (4 bytes of its answer's size, the key)
    comes for its key, as a seat's stream sends a turn after a submission."""
    payload = bytes(range(256)) * 4096
    streams: dict[bytes, tuple[int, asyncio.Queue[None]]] = {}

    async def respond(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        return payload[: int.from_bytes(request[:4], "little")]

    async def act(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        stream = streams.get(request[4:12])
        if stream is not None:
            stream[1].put_nowait(None)
        return payload[: int.from_bytes(request[:4], "little")]

    async def turns(
        request: bytes, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        size, key, queue = int.from_bytes(request[:4], "little"), request[4:12], asyncio.Queue()
        streams[key] = (size, queue)
        try:
            yield payload[:size]  # the stream is ready
            while True:
                await queue.get()
                yield payload[:size]
        finally:
            del streams[key]

    def unary(handle: Callable[..., Awaitable[bytes]]) -> grpc.RpcMethodHandler[Any, Any]:
        return grpc.unary_unary_rpc_method_handler(
            handle, request_deserializer=_identity, response_serializer=_identity
        )

    handlers = {
        ECHO_VIEW: unary(respond),
        ECHO_SUBMIT: unary(respond),
        ECHO_ACT: unary(act),
        ECHO_TURNS: grpc.unary_stream_rpc_method_handler(
            turns, request_deserializer=_identity, response_serializer=_identity
        ),
    }
    service = ECHO_VIEW.rsplit("/", 2)[1]
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                service, {name.rsplit("/", 1)[1]: h for name, h in handlers.items()}
            ),
        )
    )
    if server.add_insecure_port(f"127.0.0.1:{port}") == 0:
        raise SystemExit(f"echo server: cannot listen on port {port}")
    await server.start()
    print(f"echo server listening on 127.0.0.1:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1)


def _cprofile_server(out: str, argv: list[str]) -> int:
    """`tapis serve` under cProfile (its event-loop thread); stats written on SIGTERM."""
    from tapis_cartes.clients.cli import main as cli_main

    profiler = cProfile.Profile()
    try:
        code = profiler.runcall(cli_main, argv)
    finally:
        profiler.dump_stats(out)
    return int(code)


# --- the load -------------------------------------------------------------------------------


def dame_table(threshold: int) -> pb.CreateTableRequest:
    """The table every bot of this benchmark plays: Dame de Pique, four bots, matches ending
    at `threshold` points."""
    return pb.CreateTableRequest(
        game="dame-de-pique",
        options=[rpb.Option(key="end_threshold", int_value=threshold)],
        seats=[pb.SeatRequest(name=f"bot {i}") for i in range(4)],
    )


@dataclass
class Load:
    """What the coroutines measured; only calls wholly inside [start, end] count."""

    start: float
    end: float
    # Paced (--pace): per table, the seconds between its actions (`spread_intervals`); none:
    # each coroutine acts as fast as it can.
    intervals: list[float] = field(default_factory=list)
    tables_paced: int = 0  # the intervals taken so far (`table_interval`)
    acks: int = 0
    rpcs: int = 0
    views: int = 0
    misses: int = 0  # extra GetView calls: the seat asked was not the one to act
    streams: int = 0  # WatchTable streams opened (stream mode)
    turns: int = 0  # turn messages acted on (stream mode)
    next_views: int = 0  # next_view acted on at once (stream mode)
    stale: int = 0  # submissions refused as stale (ABORTED) (stream mode)
    creates: int = 0
    matches: int = 0  # matches played to their end (a signed record each)
    submit_ms: list[float] = field(default_factory=list)
    view_ms: list[float] = field(default_factory=list)
    # How late the client's own event loop ran a timer, sampled every LAG_PERIOD s: what the
    # client (one process, sharing the machine's cores with the server) adds at worst to a
    # latency it measures (a reply read late).
    client_lag_ms: list[float] = field(default_factory=list)
    # Mean sizes of the serialized messages (all calls, warm-up included).
    size_sum: dict[str, int] = field(default_factory=dict)
    size_n: dict[str, int] = field(default_factory=dict)

    def counts(self, t0: float, t1: float) -> bool:
        return t0 >= self.start and t1 <= self.end

    def table_interval(self) -> float:
        """A coroutine's own seconds between its actions (0: not paced), taken once when it
        starts: each table its own."""
        if not self.intervals:
            return 0.0
        self.tables_paced += 1
        return self.intervals[(self.tables_paced - 1) % len(self.intervals)]

    async def pace(self, due: float, interval: float) -> float:
        """When paced, wait until this coroutine's next action is due, `interval` after the
        last (each starts at a random phase; one late does not burst to catch up); returns
        the time it was due."""
        if not interval:
            return due
        now = time.perf_counter()
        due = max(due + interval, now - interval)
        if due > now:
            await asyncio.sleep(due - now)
        return due

    async def create_table(
        self, stub: Any, create: pb.CreateTableRequest
    ) -> tuple[pb.CreateTableResponse, float]:
        """A new table, counted when the call is inside the window; with when it was asked."""
        t0 = time.perf_counter()
        created = await stub.CreateTable(create)
        if self.counts(t0, time.perf_counter()):
            self.rpcs += 1
            self.creates += 1
        return created, t0

    def size(self, name: str, n: int) -> None:
        self.size_sum[name] = self.size_sum.get(name, 0) + n
        self.size_n[name] = self.size_n.get(name, 0) + 1

    def mean_size(self, name: str) -> int:
        return round(self.size_sum.get(name, 0) / max(1, self.size_n.get(name, 0)))


def channel_options(mode: str) -> list[tuple[str, Any]]:
    # gRPC shares one connection between channels with the same target and arguments
    # (global subchannel pool); a local pool gives each channel its own TCP connection.
    return [("grpc.use_local_subchannel_pool", 1)] if mode == "per-table" else []


async def drive(
    target: str,
    mode: str,
    n: int,
    bot: Callable[[int, grpc.aio.Channel], Awaitable[None]],
) -> None:
    """Run `n` bots: each on its own channel (per-table) or all on one (shared)."""
    count = n if mode == "per-table" else 1
    channels = [
        grpc.aio.insecure_channel(target, options=channel_options(mode)) for _ in range(count)
    ]
    try:
        await asyncio.gather(*(asyncio.wait_for(c.channel_ready(), 30) for c in channels))
        await asyncio.gather(*(bot(i, channels[i % count]) for i in range(n)))
    finally:
        for c in channels:
            await c.close()


def auth(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def next_seat(seat: int, resp: pb.SubmitActionResponse) -> int | None:
    """The seat likely to act next (None: the match ended)."""
    guess = (seat + 1) % 4
    for event in resp.events:
        kind = event.WhichOneof("event")
        if kind == "trick_completed":
            guess = event.trick_completed.winner
        elif kind == "match_ended":
            return None
    return guess


async def referee_bot(
    channel: grpc.aio.Channel, load: Load, threshold: int, rng: random.Random
) -> None:
    """Tables of Dame de Pique, one after the other, until the window ends."""
    stub = rpc.RefereeServiceStub(channel)
    now = time.perf_counter
    interval = load.table_interval()
    due = now() + rng.random() * interval - interval  # a random phase
    create = dame_table(threshold)
    while now() < load.end:
        created, t0 = await load.create_table(stub, create)
        table_id = created.table_id
        metadata = {t.seat: auth(t.token) for t in created.tokens}
        seat: int | None = 0
        while seat is not None and now() < load.end:
            due = await load.pace(due, interval)
            request = pb.GetViewRequest(table_id=table_id, seat=seat)
            t0 = now()
            reply = await stub.GetView(request, metadata=metadata[seat])
            t1 = now()
            load.size("view.request", request.ByteSize())
            load.size("view.response", reply.ByteSize())
            view = reply.view
            counted = load.counts(t0, t1)
            if counted:
                load.rpcs += 1
                load.views += 1
                load.view_ms.append(1000 * (t1 - t0))
            if view.status == pb.TABLE_STATUS_FINISHED:
                break
            if not view.legal_actions:
                if counted:
                    load.misses += 1
                seat = view.to_act[0]
                continue
            submit = pb.SubmitActionRequest(
                table_id=table_id,
                seat=seat,
                expected_action_index=view.action_index,
                action=rng.choice(view.legal_actions).action,
            )
            t0 = now()
            ack = await stub.SubmitAction(submit, metadata=metadata[seat])
            t1 = now()
            load.size("submit.request", submit.ByteSize())
            load.size("submit.response", ack.ByteSize())
            if load.counts(t0, t1):
                load.rpcs += 1
                load.acks += 1
                load.submit_ms.append(1000 * (t1 - t0))
            seat = next_seat(seat, ack)
            if seat is None and load.counts(t0, t1):
                load.matches += 1


async def stream_bot(
    channel: grpc.aio.Channel,
    load: Load,
    threshold: int,
    rng: random.Random,
    only_turns: bool = False,
    batch_events: bool = False,
) -> None:
    """Tables of Dame de Pique as in `referee_bot`, but played as a bot does it now: one
    WatchTable stream per seat for the match, and on each `turn` (or at once on a
    SubmitActionResponse's `next_view`) one SubmitAction. No GetView. With `only_turns`, the
    streams carry the seat's turns and the match's end only (WatchTableRequest.only_turns);
    with `batch_events`, each message carries the events since the last (batch_events), and
    with both the events come with the seat's turns."""
    stub = rpc.RefereeServiceStub(channel)
    now = time.perf_counter
    interval = load.table_interval()
    due = [now() + rng.random() * interval - interval]  # a random phase, per table
    create = dame_table(threshold)

    async def play(table_id: str, seat: int, call: Any, metadata: Any) -> None:
        done = -1  # the highest action index this seat acted at or was given a turn at
        async for message in call:
            ended = message.event.HasField("match_ended") or any(
                e.HasField("match_ended") for e in message.events
            )
            if ended and load.counts(now(), now()):
                load.matches += seat == 0
            if not message.HasField("turn"):
                continue
            view: pb.SeatView | None = message.turn
            if load.counts(now(), now()):
                load.turns += 1
            while view is not None and view.action_index > done and now() < load.end:
                done = view.action_index
                due[0] = await load.pace(due[0], interval)
                submit = pb.SubmitActionRequest(
                    table_id=table_id,
                    seat=seat,
                    expected_action_index=view.action_index,
                    action=rng.choice(view.legal_actions).action,
                )
                t0 = now()
                try:
                    ack = await stub.SubmitAction(submit, metadata=metadata)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() != grpc.StatusCode.ABORTED:
                        raise
                    t1 = now()
                    if load.counts(t0, t1):
                        load.rpcs += 1
                        load.stale += 1
                    break  # another seat acted first: its stream brings the next turn
                t1 = now()
                load.size("submit.request", submit.ByteSize())
                load.size("submit.response", ack.ByteSize())
                counted = load.counts(t0, t1)
                if counted:
                    load.rpcs += 1
                    load.acks += 1
                    load.submit_ms.append(1000 * (t1 - t0))
                done = max(done, ack.action_index)
                view = ack.next_view if ack.HasField("next_view") else None
                if view is not None and counted:
                    load.next_views += 1
            if now() >= load.end:
                return

    while now() < load.end:
        created, t0 = await load.create_table(stub, create)
        table_id = created.table_id
        calls = []
        for t in created.tokens:
            metadata = auth(t.token)
            request = pb.WatchTableRequest(
                table_id=table_id, seat=t.seat, only_turns=only_turns, batch_events=batch_events
            )
            calls.append((t.seat, stub.WatchTable(request, metadata=metadata), metadata))
            if load.counts(t0, now()):
                load.rpcs += 1
                load.streams += 1
        tasks = [asyncio.ensure_future(play(table_id, s, c, m)) for s, c, m in calls]
        try:
            # The seats' loops end with the match; at the end of the window the seats not to
            # act would wait on their streams: they are cancelled.
            await asyncio.wait(tasks, timeout=max(0.0, load.end - now()) + 0.5)
        finally:
            for _, call, _ in calls:
                call.cancel()
            for task in tasks:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, asyncio.CancelledError):
                raise result


async def play_seat_bot(
    channel: grpc.aio.Channel, load: Load, threshold: int, rng: random.Random
) -> None:
    """Tables of Dame de Pique as in `stream_bot`, each seat on one PlaySeat call for the
    match (the one-call loop of docs/protocol.md): on each turn, or an acknowledgement's
    next_view, a submission written on the same stream, whose answer (ack, or refused) comes
    on it. Its latency: from writing the submission to reading its answer."""
    stub = rpc.RefereeServiceStub(channel)
    now = time.perf_counter
    interval = load.table_interval()
    due = [now() + rng.random() * interval - interval]  # a random phase, per table
    create = dame_table(threshold)

    async def play(table_id: str, seat: int, call: Any) -> None:
        sent = 0.0  # when the submission not answered yet was written (0: none)
        while True:
            message = await call.read()
            if message is grpc.aio.EOF:
                return
            result = message.WhichOneof("result")
            view: pb.SeatView | None = None
            if result is not None:
                t1 = now()
                counted = load.counts(sent, t1)
                if result == "refused":
                    if message.refused.code != grpc.StatusCode.ABORTED.value[0]:
                        raise RuntimeError(f"refused: {message.refused.message}")
                    if counted:
                        load.stale += 1
                    continue  # another seat acted first: the stream brings the next turn
                ack = message.ack
                load.size("submit.response", ack.ByteSize())
                if counted:
                    load.acks += 1
                    load.submit_ms.append(1000 * (t1 - sent))
                events = ack.events
                if ack.HasField("next_view"):
                    view = ack.next_view
                    if counted:
                        load.next_views += 1
            else:
                events = message.events
                if message.HasField("turn"):
                    view = message.turn
                    if load.counts(now(), now()):
                        load.turns += 1
                    if load.size_n.get("view.response", 0) < SIZE_SAMPLES:
                        # As GetView would answer and be asked (the echo's sizes without the
                        # loop: --only-play-seat).
                        load.size("view.response", pb.GetViewResponse(view=view).ByteSize())
                        asked = pb.GetViewRequest(table_id=table_id, seat=seat)
                        load.size("view.request", asked.ByteSize())
            if any(e.HasField("match_ended") for e in events):
                if load.counts(now(), now()):
                    load.matches += seat == 0
                return
            if view is None:
                continue
            if now() >= load.end:
                return
            due[0] = await load.pace(due[0], interval)
            submit = pb.PlaySeatRequest(
                submit=pb.SubmitActionRequest(
                    table_id=table_id,
                    seat=seat,
                    expected_action_index=view.action_index,
                    action=rng.choice(view.legal_actions).action,
                )
            )
            load.size("submit.request", submit.ByteSize())
            sent = now()
            await call.write(submit)

    while now() < load.end:
        created, t0 = await load.create_table(stub, create)
        table_id = created.table_id
        calls = []
        for t in created.tokens:
            call = stub.PlaySeat(metadata=auth(t.token))
            opening = pb.PlaySeatOpen(table_id=table_id, seat=t.seat)
            await call.write(pb.PlaySeatRequest(open=opening))
            calls.append((t.seat, call))
            if load.counts(t0, now()):
                load.rpcs += 1
                load.streams += 1
        tasks = [asyncio.ensure_future(play(table_id, s, c)) for s, c in calls]
        try:
            await asyncio.wait(tasks, timeout=max(0.0, load.end - now()) + 0.5)
        finally:
            for _, call in calls:
                call.cancel()
            for task in tasks:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, asyncio.CancelledError):
                raise result


def sized(request_size: int, response_size: int) -> bytes:
    """An echo request of `request_size` bytes asking for `response_size` bytes back."""
    return response_size.to_bytes(4, "little") + b"\x01" * max(0, request_size - 4)


async def echo_bot(channel: grpc.aio.Channel, load: Load, sizes: dict[str, int]) -> None:
    """Two unary calls per "action", sized like GetView and SubmitAction, until the end."""
    view = channel.unary_unary(
        ECHO_VIEW, request_serializer=_identity, response_deserializer=_identity
    )
    submit = channel.unary_unary(
        ECHO_SUBMIT, request_serializer=_identity, response_deserializer=_identity
    )
    metadata = auth(random.randbytes(24).hex()[:32])  # the length of a seat token
    view_request = sized(sizes["view.request"], sizes["view.response"])
    submit_request = sized(sizes["submit.request"], sizes["submit.response"])
    now = time.perf_counter
    interval = load.table_interval()
    due = now() + random.random() * interval - interval  # a random phase
    while now() < load.end:
        due = await load.pace(due, interval)
        t0 = now()
        await view(view_request, metadata=metadata)
        t1 = now()
        if load.counts(t0, t1):
            load.rpcs += 1
            load.views += 1
            load.view_ms.append(1000 * (t1 - t0))
        t0 = now()
        await submit(submit_request, metadata=metadata)
        t1 = now()
        if load.counts(t0, t1):
            load.rpcs += 1
            load.acks += 1
            load.submit_ms.append(1000 * (t1 - t0))


async def echo_stream_bot(channel: grpc.aio.Channel, load: Load, sizes: dict[str, int]) -> None:
    """The stream's shape on the echo: one stream, and per "action" one unary call (sized like
    SubmitAction) after which the stream brings one message (sized like a turn: GetView's
    response) before the next action: the transport's own cost of one call per move."""
    act = channel.unary_unary(
        ECHO_ACT, request_serializer=_identity, response_deserializer=_identity
    )
    turns = channel.unary_stream(
        ECHO_TURNS, request_serializer=_identity, response_deserializer=_identity
    )
    metadata = auth(random.randbytes(24).hex()[:32])
    key = random.randbytes(8)
    call = turns(sizes["view.response"].to_bytes(4, "little") + key, metadata=metadata)
    messages = call.__aiter__()
    request = sizes["submit.response"].to_bytes(4, "little") + key
    request += b"\x01" * max(0, sizes["submit.request"] - len(request))
    now = time.perf_counter
    interval = load.table_interval()
    due = now() + random.random() * interval - interval
    try:
        await anext(messages)  # the stream is ready
        while now() < load.end:
            due = await load.pace(due, interval)
            t0 = now()
            await act(request, metadata=metadata)
            t1 = now()
            await anext(messages)
            if load.counts(t0, t1):
                load.rpcs += 1
                load.acks += 1
                load.turns += 1
                load.submit_ms.append(1000 * (t1 - t0))
    finally:
        call.cancel()


@dataclass
class Run:
    name: str
    seconds: float
    load: Load
    server_cpu: float  # seconds of server CPU in the window(s)
    client_cpu: float  # seconds of client CPU in the window(s)
    other_cpu: float  # seconds of CPU of the rest of the machine in the window(s)
    rounds: list[float] = field(default_factory=list)  # actions/s of each round

    @property
    def actions_per_s(self) -> float:
        return self.load.acks / self.seconds

    @property
    def rpcs_per_s(self) -> float:
        return self.load.rpcs / self.seconds


def merged(runs: Sequence[Run]) -> Run:
    """Several rounds against one server as one run."""
    load = Load(0.0, 0.0)
    for run in runs:
        part = run.load
        load.acks += part.acks
        load.rpcs += part.rpcs
        load.views += part.views
        load.misses += part.misses
        load.streams += part.streams
        load.turns += part.turns
        load.next_views += part.next_views
        load.stale += part.stale
        load.creates += part.creates
        load.matches += part.matches
        load.submit_ms += part.submit_ms
        load.view_ms += part.view_ms
        load.client_lag_ms += part.client_lag_ms
        for key, n in part.size_n.items():
            load.size_n[key] = load.size_n.get(key, 0) + n
            load.size_sum[key] = load.size_sum.get(key, 0) + part.size_sum[key]
    return Run(
        runs[0].name,
        sum(r.seconds for r in runs),
        load,
        sum(r.server_cpu for r in runs),
        sum(r.client_cpu for r in runs),
        sum(r.other_cpu for r in runs),
        [r.actions_per_s for r in runs],
    )


Bot = Callable[[int, grpc.aio.Channel], Awaitable[None]]


def spread_intervals(tables: int, rate: float, rng: random.Random) -> list[float]:
    """Per table, the seconds between its actions when `rate` actions/s are offered in all:
    each table at its own rate, the mean times a factor drawn between 1 - PACE_SPREAD and
    1 + PACE_SPREAD, scaled so that the rates add up to `rate` exactly. At one common rate,
    tables started together stay in step: each reaches a heavy moment (a hand's end and the
    four turns of the exchange) when all the others do, a burst of all tables at once that
    independent players would not make; at their own rates they drift apart."""
    factors = [1 + PACE_SPREAD * (2 * rng.random() - 1) for _ in range(tables)]
    scale = rate / sum(factors)
    return [1 / (scale * f) for f in factors]


async def measured(
    child: Child,
    target: str,
    args: argparse.Namespace,
    name: str,
    seconds: float,
    make_bot: Callable[[Load], Bot],
    pace: float | None = None,
) -> Run:
    """Drive the load, sampling the CPU of server and client at the window's edges; `pace`
    (actions/s offered in all) overrides --pace."""
    start = time.perf_counter() + args.warmup
    pace = pace or args.pace
    intervals = spread_intervals(args.tables, pace, random.Random(args.seed)) if pace else []
    load = Load(start, start + seconds, intervals)
    cpu: dict[str, tuple[float, float, float]] = {}

    async def sample() -> None:
        await asyncio.sleep(max(0.0, load.start - time.perf_counter()))
        cpu["start"] = (child.cpu_seconds(), time.process_time(), machine_busy_seconds())
        while (now := time.perf_counter()) + LAG_PERIOD < load.end:
            await asyncio.sleep(LAG_PERIOD)
            load.client_lag_ms.append(1000 * (time.perf_counter() - now - LAG_PERIOD))
        await asyncio.sleep(max(0.0, load.end - time.perf_counter()))
        cpu["end"] = (child.cpu_seconds(), time.process_time(), machine_busy_seconds())

    await asyncio.gather(sample(), drive(target, args.channels, args.tables, make_bot(load)))
    child.check_alive()
    server, client, machine = (end - start for start, end in zip(*cpu.values(), strict=True))
    return Run(name, seconds, load, server, client, max(0.0, machine - server - client))


@dataclass
class Throughput:
    """Parts 1 and 2: each server's runs, merged over the rounds."""

    loop: Run | None  # the referee, GetView then SubmitAction (None: --only-play-seat)
    stream: Run | None  # the referee, stream-driven bots (None: --only-play-seat)
    one_call: Run | None  # the referee, bots on one PlaySeat call each (--play-seat)
    echo: Run | None
    echo_stream: Run | None  # the echo driven in the stream's shape (echo_stream_bot)
    paced: Run | None  # stream-driven bots offered half of echo's saturation rate
    one_call_paced: Run | None  # the same for the bots on PlaySeat (--play-seat)
    sizes: dict[str, int]
    profile: Path | None
    store: dict[str, Any] | None = None  # the referee's last log line: its commits
    # The echo offered half of its own saturation rate, in both shapes: the transport's own
    # latency there, the floor of the referee's (--no-echo-paced: not run).
    echo_paced: Run | None = None
    echo_stream_paced: Run | None = None


def store_stats(log: Path) -> dict[str, Any] | None:
    """What the referee's "referee stopped" log line says of its store (`Store.commit_stats`:
    commits, writes, how long a commit took) and of its CPU, if it says it; the CPU counted
    from when it served (its "referee serving" line), start-up left out."""
    lines = log.read_text(errors="replace").splitlines()
    served = (x for x in lines if x.startswith("{") and '"referee serving"' in x)
    serving: dict[str, Any] = json.loads(next(served, "{}"))
    for line in reversed(lines):
        if line.startswith("{") and '"referee stopped"' in line:
            fields: dict[str, Any] = json.loads(line)
            for key in ("process_cpu_s", "loop_cpu_s"):
                if key in fields and key in serving:
                    fields[key] -= serving[key]
            return fields
    return None


async def throughput_phase(args: argparse.Namespace, tmp: Path) -> Throughput:
    """Parts 1 and 2: both servers up, the load alternating between them by rounds (so a
    drift of the machine's speed hits all alike): the referee's old loop, its stream-driven
    bots, the echo (its sizes from round 1 of the loop); then the stream-driven bots offered
    half of echo's saturation rate, for the latency below saturation."""
    profile = tmp / "referee.prof" if args.profile_server else None
    referee_port, echo_port = free_port(), free_port()
    referee_target, echo_target = f"127.0.0.1:{referee_port}", f"127.0.0.1:{echo_port}"
    referee = Child(
        referee_cmd(tmp, referee_port, 10 * args.tables + 1000, profile, args.event_loop),
        tmp / "referee.log",
    )
    echo = None
    if not args.no_echo:
        echo_cmd = [sys.executable, str(SCRIPT), "--echo-server", str(echo_port),
                    "--event-loop", args.event_loop]  # fmt: skip
        echo = Child(echo_cmd, tmp / "echo.log")
    try:
        await wait_serving(referee, referee_target)
        if echo is not None:
            await wait_ready(echo, echo_target)
        rngs = [random.Random(args.seed * 1000 + i) for i in range(args.tables)]
        seconds = args.seconds / args.rounds

        def referee_bots(play: Callable[..., Awaitable[None]]) -> Callable[[Load], Bot]:
            def make(load: Load) -> Bot:
                async def bot(i: int, channel: grpc.aio.Channel) -> None:
                    await play(channel, load, args.end_threshold, rngs[i])

                return bot

            return make

        def echo_bots(sizes: dict[str, int], shaped: bool = False) -> Callable[[Load], Bot]:
            def make(load: Load) -> Bot:
                async def bot(i: int, channel: grpc.aio.Channel) -> None:
                    await (echo_stream_bot if shaped else echo_bot)(channel, load, sizes)

                return bot

            return make

        streaming = functools.partial(
            stream_bot, only_turns=args.only_turns, batch_events=args.batch_events
        )
        stream_name = "stream" + (
            " (only turns, batched)"
            if args.only_turns and args.batch_events
            else " (only turns)"
            if args.only_turns
            else " (batched)"
            if args.batch_events
            else ""
        )
        loop_runs: list[Run] = []
        stream_runs: list[Run] = []
        echo_runs: list[Run] = []
        echo_stream_runs: list[Run] = []
        one_call_runs: list[Run] = []
        sizes: dict[str, int] = {}
        for _ in range(args.rounds):
            if not args.only_play_seat:
                run = await measured(
                    referee, referee_target, args, "loop", seconds, referee_bots(referee_bot)
                )
                loop_runs.append(run)
                sizes = sizes or {k: run.load.mean_size(k) for k in run.load.size_n}
                stream_runs.append(
                    await measured(
                        referee, referee_target, args, stream_name, seconds,
                        referee_bots(streaming),
                    )
                )  # fmt: skip
            if args.play_seat:
                one_call = referee_bots(play_seat_bot)
                name = "one call (PlaySeat)"
                run = await measured(referee, referee_target, args, name, seconds, one_call)
                one_call_runs.append(run)
                # Without the loop, the sizes of GetView as the PlaySeat bots' turns give them.
                sizes = sizes or {k: run.load.mean_size(k) for k in run.load.size_n}
            if echo is not None:
                echo_runs.append(
                    await measured(echo, echo_target, args, "echo", seconds, echo_bots(sizes))
                )
                shaped = echo_bots(sizes, shaped=True)
                name = "echo, stream-shaped"
                echo_stream_runs.append(
                    await measured(echo, echo_target, args, name, seconds, shaped)
                )
        echo_run = merged(echo_runs) if echo_runs else None
        echo_stream_run = merged(echo_stream_runs) if echo_stream_runs else None
        paced = None
        if echo_run is not None and not args.pace and not args.only_play_seat:
            half = echo_run.actions_per_s / 2
            paced = await measured(
                referee, referee_target, args, f"{stream_name}, paced", seconds,
                referee_bots(streaming), pace=half,
            )  # fmt: skip
        one_call_paced = None
        if echo_run is not None and not args.pace and args.play_seat:
            one_call_paced = await measured(
                referee, referee_target, args, "one call (PlaySeat), paced", seconds,
                referee_bots(play_seat_bot), pace=echo_run.actions_per_s / 2,
            )  # fmt: skip
        echo_paced = echo_stream_paced = None
        if echo is not None and echo_run is not None and not args.pace and not args.no_echo_paced:
            half = echo_run.actions_per_s / 2
            echo_paced = await measured(
                echo, echo_target, args, "echo, paced", seconds, echo_bots(sizes), pace=half
            )
            echo_stream_paced = await measured(
                echo, echo_target, args, "echo, stream-shaped, paced", seconds,
                echo_bots(sizes, shaped=True), pace=half,
            )  # fmt: skip
    finally:
        referee.stop()
        if echo is not None:
            echo.stop()
    return Throughput(
        merged(loop_runs) if loop_runs else None,
        merged(stream_runs) if stream_runs else None,
        merged(one_call_runs) if one_call_runs else None,
        echo_run,
        echo_stream_run,
        paced,
        one_call_paced,
        sizes,
        profile,
        store_stats(referee.log),
        echo_paced,
        echo_stream_paced,
    )


# --- memory per idle table ------------------------------------------------------------------


@dataclass
class Memory:
    tables: int
    rss_before_kb: int
    rss_warm_kb: int  # after the first `warm` tables
    warm: int
    rss_after_kb: int
    hwm_kb: int
    warm_seconds: float  # to create the first `warm`
    create_seconds: float  # to create all
    db_bytes: int  # while serving: the database file
    wal_bytes: int  # while serving: its write-ahead log
    db_closed_bytes: int  # after a clean shutdown (WAL checkpointed)
    waiting: int  # of the sampled tables, how many are WAITING
    sampled: int

    @property
    def kb_per_table(self) -> float:
        return (self.rss_after_kb - self.rss_before_kb) / self.tables

    @property
    def kb_per_table_warm(self) -> float:
        return (self.rss_after_kb - self.rss_warm_kb) / max(1, self.tables - self.warm)


def file_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


async def memory_phase(args: argparse.Namespace, tmp: Path) -> Memory:
    n = args.idle_tables
    port = free_port()
    target = f"127.0.0.1:{port}"
    child = Child(referee_cmd(tmp, port, n + 1000, None, args.event_loop), tmp / "referee-idle.log")
    try:
        await wait_serving(child, target)
        await asyncio.sleep(args.settle)
        before = child.status_kb("VmRSS")
        request = pb.CreateTableRequest(
            game="dame-de-pique",
            seats=[pb.SeatRequest(name=f"player {i}", open=True) for i in range(4)],
        )
        ids: list[str] = []
        async with grpc.aio.insecure_channel(target) as channel:
            stub = rpc.RefereeServiceStub(channel)

            async def create(count: int) -> None:
                remaining = [count]

                async def worker() -> None:
                    while remaining[0] > 0:
                        remaining[0] -= 1
                        reply = await stub.CreateTable(request)
                        if reply.tokens:
                            raise SystemExit("an all-open table gave the creator a token")
                        ids.append(reply.table_id)

                await asyncio.gather(*(worker() for _ in range(min(64, count))))

            warm = min(100, n)
            t0 = time.perf_counter()
            await create(warm)
            warm_seconds = time.perf_counter() - t0
            warm_kb = child.status_kb("VmRSS")
            await create(n - warm)
            create_seconds = time.perf_counter() - t0
            await asyncio.sleep(args.settle)
            after = child.status_kb("VmRSS")
            hwm = child.status_kb("VmHWM")
            db = file_size(tmp / "tapis.db")
            wal = file_size(tmp / "tapis.db-wal")
            # Only after the readings: check a sample of the tables is WAITING.
            sample = random.Random(args.seed).sample(ids, min(50, len(ids)))
            waiting = 0
            for table_id in sample:
                got = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
                waiting += got.status == pb.TABLE_STATUS_WAITING
        child.check_alive()
    finally:
        child.stop()
    return Memory(
        n, before, warm_kb, warm, after, hwm, warm_seconds, create_seconds, db, wal,
        file_size(tmp / "tapis.db"), waiting, len(sample),
    )  # fmt: skip


# --- report ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of `values` (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def latency_line(values: Sequence[float]) -> str:
    return " / ".join(f"{percentile(values, q):.2f}" for q in (50, 90, 99, 100))


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def print_run(run: Run) -> None:
    load = run.load
    print(
        f"{run.name}: {load.acks} acknowledged actions, {load.rpcs} RPCs in {run.seconds:.1f} s "
        f"-> {run.actions_per_s:,.0f} actions/s, {run.rpcs_per_s:,.0f} RPCs/s "
        f"(rounds: {', '.join(f'{r:,.0f}' for r in run.rounds)})"
    )
    if run.name == "loop":
        print(
            f"  calls: {load.views} GetView ({load.misses} asked a seat not to act), "
            f"{load.acks} SubmitAction, {load.creates} CreateTable; "
            f"{load.rpcs / max(1, load.acks):.3f} calls per action; {load.matches} matches ended"
        )
    elif run.name.startswith("stream"):
        print(
            f"  calls: {load.streams} WatchTable, {load.acks} SubmitAction acknowledged and "
            f"{load.stale} stale, {load.creates} CreateTable, no GetView; "
            f"{load.rpcs / max(1, load.acks):.3f} calls per action; acted on {load.turns} turns "
            f"and {load.next_views} next_views; {load.matches} matches ended"
        )
    if run.name.startswith("echo, stream-shaped"):
        print(
            f"  one call and one stream message per action; call ms p50/p90/p99/max: "
            f"{latency_line(load.submit_ms)}"
        )
    elif run.name in ("echo", "echo, paced"):
        print(f"  second call (SubmitAction) ms p50/p90/p99/max: {latency_line(load.submit_ms)}")
        print(f"  first call (GetView) ms p50/p90/p99/max:      {latency_line(load.view_ms)}")
    else:
        print(f"  SubmitAction ms p50/p90/p99/max: {latency_line(load.submit_ms)}")
    if run.name == "loop":
        print(f"  GetView ms p50/p90/p99/max:      {latency_line(load.view_ms)}")
    if load.client_lag_ms:
        print(
            "  the client's event loop late by (ms) p50/p90/p99/max: "
            f"{latency_line(load.client_lag_ms)}"
        )
    per_action = 1e6 * run.server_cpu / max(1, load.acks)
    server_pct = 100 * run.server_cpu / run.seconds
    client_pct = 100 * run.client_cpu / run.seconds
    other_pct = 100 * run.other_cpu / run.seconds
    print(
        f"  CPU in the window: server {run.server_cpu:.1f} s ({server_pct:.0f}% of a core, "
        f"{per_action:,.0f} us per action), client {run.client_cpu:.1f} s ({client_pct:.0f}%), "
        f"rest of the machine {run.other_cpu:.1f} s ({other_pct:.0f}%)"
    )
    if other_pct > BUSY_WARNING_PCT:
        print(
            f"  WARNING: other processes used {other_pct:.0f}% of a core during the window: "
            "these numbers are not reliable; run again on a quiet machine"
        )


def profile_text(path: Path, top: int) -> str:
    """The top `top` functions of a cProfile dump, by own time and by cumulative time."""
    if not path.exists():
        return f"\n(no profile: {path.name} was not written)"
    parts = []
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(str(path), stream=out).strip_dirs().sort_stats(order).print_stats(top)
        body = out.getvalue().split("\n", 6)[-1].rstrip()
        parts.append(
            f"\ncProfile of the referee's event-loop thread, top {top} by {order}:\n{body}"
        )
    return "\n".join(parts)


def run_all(args: argparse.Namespace) -> int:
    cpus = os.cpu_count() or 0
    engine = "compiled with mypyc" if ENGINE_COMPILED else "pure Python (no matching build)"
    print(
        f"Python {platform.python_version()} ({platform.python_implementation()}), grpcio "
        f"{grpc.__version__}, {cpus} CPUs (client and servers unpinned, sharing them); "
        f"Tapis engine: {engine}; event loop of the referee and the echo server: "
        f"{args.event_loop}"
    )
    channels = (
        "one channel (its own TCP connection) per table"
        if args.channels == "per-table"
        else "one channel shared by all tables"
    )
    print(
        f"load: {args.tables} concurrent tables, one coroutine each, {channels}, "
        f"{args.seconds:g} s measured per server in {args.rounds} alternating round(s) of "
        f"{args.warmup:g} s warm-up + {args.seconds / args.rounds:g} s; Dame de Pique "
        f"end_threshold {args.end_threshold}"
        + (f"; paced: {args.pace:g} actions/s offered in all" if args.pace else "")
    )
    if args.profile_server:
        print("NOTE: the referee runs under cProfile: its numbers below are slowed down by it")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tapis-bench-referee-") as name:
        tmp = Path(name)
        (tmp / "serve").mkdir()
        (tmp / "idle").mkdir()
        result = asyncio.run(throughput_phase(args, tmp / "serve"))
        loop, stream, echo, paced, sizes = (
            result.loop, result.stream, result.echo, result.paced, result.sizes
        )  # fmt: skip
        profile = result.profile
        profiled = profile_text(profile, args.profile_server) if profile is not None else ""
        print(
            f"\nmean message sizes in round 1 of the {'loop' if loop else 'one call'} (bytes, "
            f"echo's sizes): GetView {sizes['view.request']} -> {sizes['view.response']}, "
            f"SubmitAction {sizes['submit.request']} -> {sizes['submit.response']}"
        )
        one_call = result.one_call
        for run in (
            loop, stream, one_call, echo, result.echo_stream, paced, result.one_call_paced,
            result.echo_paced, result.echo_stream_paced,
        ):  # fmt: skip
            if run is not None:
                print_run(run)
        memory = asyncio.run(memory_phase(args, tmp / "idle")) if args.idle_tables > 0 else None
        if memory is not None:
            print(
                f"\nidle tables: {memory.tables} created in {memory.create_seconds:.1f} s "
                f"({memory.tables / memory.create_seconds:,.0f}/s; the first {memory.warm}: "
                f"{memory.warm / memory.warm_seconds:,.0f}/s); {memory.waiting} of "
                f"{memory.sampled} sampled are WAITING"
            )
            print(
                f"  VmRSS {memory.rss_before_kb:,} kB serving -> {memory.rss_warm_kb:,} kB after "
                f"{memory.warm} -> {memory.rss_after_kb:,} kB after {memory.tables} "
                f"(peak {memory.hwm_kb:,} kB)"
            )
            print(
                f"  per table: {memory.kb_per_table:.1f} KB; beyond the first {memory.warm}: "
                f"{memory.kb_per_table_warm:.1f} KB"
            )
            print(
                f"  store: {memory.db_bytes / 1e6:.2f} MB database + "
                f"{memory.wal_bytes / 1e6:.2f} MB WAL while serving, "
                f"{memory.db_closed_bytes / 1e6:.2f} MB after shutdown "
                f"({memory.db_closed_bytes / memory.tables:,.0f} bytes per table)"
            )

    print("\nsummary")
    rows: list[tuple[str, ...]] = []

    def per_server(label: str, value: Callable[[Run], str]) -> tuple[str, ...]:
        return (
            label,
            value(loop) if loop else "-",
            value(stream) if stream else "-",
            value(one_call) if one_call else "-",
            value(echo) if echo else "-",
            "",
            "",
        )

    rows.append(per_server("acknowledged actions/s", lambda r: f"{r.actions_per_s:,.0f}"))
    rows.append(per_server("RPCs/s (all calls)", lambda r: f"{r.rpcs_per_s:,.0f}"))
    rows.append(
        per_server("calls per action", lambda r: f"{r.load.rpcs / max(1, r.load.acks):.3f}")
    )
    for q in (50, 90, 99, 100):
        label = "max" if q == 100 else f"p{q}"

        def latency(r: Run, q: float = q) -> str:
            return f"{percentile(r.load.submit_ms, q):.2f}"

        load_name = f"{args.pace:g} actions/s offered" if args.pace else "saturated"
        rows.append(per_server(f"SubmitAction latency {label} (ms), {load_name}", latency))
    if loop is not None and stream is not None:
        ratio = stream.actions_per_s / max(1e-9, loop.actions_per_s)
        target = f">= {TARGET_STREAM_RATIO:g}x"
        ok = verdict(ratio >= TARGET_STREAM_RATIO)
        one_ratio = one_call.actions_per_s / max(1e-9, loop.actions_per_s) if one_call else 0.0
        rows.append((
            "actions/s stream (one call) / loop", "", f"{ratio:.2f}x",
            f"{one_ratio:.2f}x" if one_call else "-", "", target,
            ok if one_call is None else verdict(max(ratio, one_ratio) >= TARGET_STREAM_RATIO),
        ))  # fmt: skip
    rows.append(per_server(
        "server CPU per action (us)",
        lambda r: f"{1e6 * r.server_cpu / max(1, r.load.acks):,.0f}",
    ))  # fmt: skip
    if echo:
        rows.append(("actions/s referee / echo",
                     f"{100 * loop.actions_per_s / echo.actions_per_s:.1f}%" if loop else "-",
                     f"{100 * stream.actions_per_s / echo.actions_per_s:.1f}%" if stream else "-",
                     f"{100 * one_call.actions_per_s / echo.actions_per_s:.1f}%"
                     if one_call else "-", "",
                     f">= {100 * TARGET_RATIO:.0f}%", ""))  # fmt: skip
    echo_stream = result.echo_stream
    if echo is not None and echo_stream is not None:
        floor = echo_stream.actions_per_s / echo.actions_per_s
        floor_cpu = (echo.server_cpu / max(1, echo.load.acks)) / (
            echo_stream.server_cpu / max(1, echo_stream.load.acks)
        )
        rows.append((
            "the transport alone: echo stream-shaped / echo (actions/s; server CPU per action)",
            "", f"{floor:.2f}x; {floor_cpu:.2f}x", "", "", "", "",
        ))  # fmt: skip
    one_paced = result.one_call_paced
    if (paced is not None or one_paced is not None) and echo is not None:
        p99 = percentile(paced.load.submit_ms, 99) if paced is not None else None
        p99_one = percentile(one_paced.load.submit_ms, 99) if one_paced is not None else None
        done = ", ".join(f"{r.actions_per_s:,.0f}" for r in (paced, one_paced) if r is not None)
        best = min(p for p in (p99, p99_one) if p is not None)
        echo_p99 = (
            f"{percentile(result.echo_paced.load.submit_ms, 99):.2f}"
            if result.echo_paced is not None
            else ""
        )
        rows.append((
            f"SubmitAction p99 (ms) at {echo.actions_per_s / 2:,.0f} actions/s offered "
            f"(half echo's; {done} done)",
            "", f"{p99:.2f}" if p99 is not None else "-",
            f"{p99_one:.2f}" if p99_one is not None else "-", echo_p99,
            f"<= {TARGET_P99_MS:g}", verdict(best <= TARGET_P99_MS),
        ))  # fmt: skip
    if result.echo_stream_paced is not None:
        shaped = result.echo_stream_paced
        rows.append((
            "the transport's floor: echo stream-shaped, its call's p99 (ms) at half echo's rate"
            f" ({shaped.actions_per_s:,.0f} done)",
            "", "", "", f"{percentile(shaped.load.submit_ms, 99):.2f}", "", "",
        ))  # fmt: skip
    if memory is not None:
        rows.append(("RSS per idle open table (KB)", f"{memory.kb_per_table:.1f}", "", "", "",
                     f"<= {TARGET_KB_PER_TABLE:g}",
                     verdict(memory.kb_per_table <= TARGET_KB_PER_TABLE)))  # fmt: skip
        rows.append((f"store for {memory.tables} idle tables (MB)",
                     f"{memory.db_closed_bytes / 1e6:.2f}", "", "", "", "", ""))  # fmt: skip
    header = ("", "loop", "stream", "one call", "echo", "target", "")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(7)]
    for row in [header, *rows]:
        print(
            f"  {row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  "
            f"{row[3]:>{widths[3]}}  {row[4]:>{widths[4]}}  {row[5]:<{widths[5]}}  "
            f"{row[6]}".rstrip()
        )
    store = result.store
    if store is not None and "commit_ms" in store:
        # What the disk adds to an acknowledgement: each waits for the commit holding its
        # action (and, arriving during one, for that one first).
        print(
            f"  the referee's store, whole run: {store['commits']:,} commits of "
            f"{store['writes']:,} writes; ms p50 / p90 / p99 / max:"
        )
        for key, what in (
            ("transaction_ms", "a transaction, BEGIN to the end of COMMIT"),
            ("commit_ms", "its COMMIT alone (the log written and synced to the disk)"),
            ("write_ms", "a write, queued to its answer read (pipes, queue, transaction)"),
        ):
            if key not in store:
                continue
            took = store[key]
            print(
                f"    {what}: {took['p50']:.2f} / {took['p90']:.2f} / {took['p99']:.2f} / "
                f"{took['max']:.2f}"
            )
    if store is not None and {"process_cpu_s", "loop_cpu_s", "writer_cpu_s"} <= store.keys():
        # Where the referee's CPU went: the event loop's thread (the servicer, the tables,
        # gRPC's calls), the store's writer process (SQLite, its commits), the referee's other
        # threads (gRPC's own).
        loop_s, writer_s = store["loop_cpu_s"], store["writer_cpu_s"]
        rest_s = max(0.0, store["process_cpu_s"] - loop_s)
        writes = max(1, store["writes"])
        print(
            f"  the referee's CPU once serving, whole run: event-loop thread {loop_s:.1f}"
            f" s, store writer process {writer_s:.1f} s, other threads (gRPC's) {rest_s:.1f}"
            f" s; per write stored: {1e6 * loop_s / writes:,.0f} /"
            f" {1e6 * writer_s / writes:,.0f} / {1e6 * rest_s / writes:,.0f} us"
        )
    if store is not None and "gc2" in store:
        # The collector's pauses (app.py `GcPauses`, CPU time of the collecting thread, the
        # event loop's mostly): each one delays every submission under way.
        said = ", ".join(
            f"generation {g}: {store[f'gc{g}']['count']:,} pauses, "
            f"{store[f'gc{g}']['total_ms']:,.0f} ms in all, "
            f"longest {store[f'gc{g}']['max_ms']:.1f} ms, {store[f'gc{g}']['collected']:,} freed"
            for g in range(3)
        )
        print(f"  the referee's garbage collector, whole run: {said}")
    if (
        paced is not None
        and echo is not None
        and paced.actions_per_s < 0.95 * echo.actions_per_s / 2
    ):
        print(
            "  (the stream-driven referee did not keep up with half of echo's rate: its p99 there"
            " is queueing too)"
        )
    print(f"\n(total {time.perf_counter() - started:.0f} s)")
    if profiled:
        print(profiled)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [CPROFILE_FLAG]:
        return _cprofile_server(argv[1], argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=32, help="concurrent tables (coroutines)")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window")
    parser.add_argument(
        "--warmup", type=float, default=1.0, help="seconds of load before each round's window"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="referee and echo take turns this many times, --seconds / rounds each",
    )
    parser.add_argument(
        "--channels",
        choices=("per-table", "shared"),
        default="per-table",
        help="one channel (and TCP connection) per table, or one channel for all",
    )
    parser.add_argument(
        "--end-threshold",
        type=int,
        default=26,
        help="Dame de Pique end_threshold: small, so matches end and new tables start",
    )
    parser.add_argument("--idle-tables", type=int, default=10_000, help="0: skip part 3")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds before RSS readings")
    parser.add_argument("--no-echo", action="store_true", help="skip the echo baseline")
    parser.add_argument(
        "--no-echo-paced",
        action="store_true",
        help="skip the echo offered half of its own rate (its p99 there: the transport's floor)",
    )
    parser.add_argument(
        "--only-play-seat",
        action="store_true",
        help="of the referee, only the bots on PlaySeat (--play-seat), saturated and paced: no"
        " loop, no WatchTable stream (the echo's sizes then from the PlaySeat bots' turns)",
    )
    parser.add_argument(
        "--only-turns",
        action="store_true",
        help="the stream-driven bots ask for their turns only (WatchTableRequest.only_turns)",
    )
    parser.add_argument(
        "--batch-events",
        action="store_true",
        help="the stream-driven bots ask for their events in batches, a turn in the message of"
        " the events before it (WatchTableRequest.batch_events); with --only-turns the events"
        " come with the seat's turns",
    )
    parser.add_argument(
        "--play-seat",
        action="store_true",
        help="also the bots on one PlaySeat call per seat for the match (the one-call loop),"
        " in the same rounds: the column `one call`",
    )
    parser.add_argument(
        "--pace",
        type=float,
        metavar="ACTIONS_PER_S",
        help="offer this many actions/s in all (each coroutine paced), to read latency at a "
        "load below saturation; by default each coroutine acts as fast as it can",
    )
    parser.add_argument("--seed", type=int, default=2024, help="seed of the bots' choices")
    parser.add_argument(
        "--profile-server",
        type=int,
        default=0,
        metavar="N",
        help="run part 1's referee under cProfile and print its top N functions",
    )
    parser.add_argument(
        "--event-loop",
        choices=("uvloop", "asyncio"),
        default=default_event_loop(),
        help="the event loop of the referee (`tapis serve --event-loop`) and of the echo"
        " server, the same for both (default: the referee's own default)",
    )
    parser.add_argument("--echo-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.play_seat = args.play_seat or args.only_play_seat
    if args.echo_server is not None:
        run_on(args.event_loop, _echo_server(args.echo_server))
        return 0
    if min(args.tables, args.rounds) < 1 or args.seconds <= 0:
        parser.error("--tables and --rounds must be >= 1 and --seconds > 0")
    if args.warmup < 0 or args.idle_tables < 0:
        parser.error("--warmup and --idle-tables must be >= 0")
    return run_all(args)


if __name__ == "__main__":
    sys.exit(main())
