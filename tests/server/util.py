"""Helpers of the referee tests: a real referee on a free port (in the test's event loop, or
`tapis serve` as a subprocess), tables, random play."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tapis_cartes.clients.sdk import option_messages
from tapis_cartes.referee.server.app import Limits, RunningServer, create_server
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc as rpc

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`tapis serve` as a real subprocess."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.tmp = tmp
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        cmd = [sys.executable, "-m", "tapis_cartes.clients.cli", "serve", "--listen",
               f"127.0.0.1:{self.port}", "--db", str(self.tmp / "t.db"),
               "--key", str(self.tmp / "k.key")]  # fmt: skip
        with (self.tmp / f"server-{self.starts}.log").open("wb") as log:
            self.proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                stdout=log,
                stderr=log,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
        self.starts += 1

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(20)

    async def serving(self, channel: grpc.aio.Channel) -> None:
        health = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                reply = await health.Check(
                    health_pb2.HealthCheckRequest(service="tapis.v1.RefereeService"), timeout=1
                )
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.05)
        raise AssertionError("the referee did not come back")


class ManualAlarm:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualTime:
    """A `TimeSource` the test moves by hand: `advance(ms)` moves the clock and rings the
    alarms that fall due, in order (the referee's clocks never wait for real time)."""

    def __init__(self) -> None:
        self.t = 1_000_000.0
        self.alarms: list[ManualAlarm] = []

    def now(self) -> float:
        return self.t

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> Any:
        if delay_ms <= 0:  # due now: rung at once, as the event loop would
            return asyncio.get_running_loop().call_soon(callback)
        alarm = ManualAlarm(self.t + delay_ms, callback)
        self.alarms.append(alarm)
        return alarm

    def advance(self, ms: float, ring: bool = True) -> None:
        """Move the clock `ms` on; with `ring`, call the alarms now due."""
        self.t += ms
        if not ring:
            return
        due = sorted((a for a in self.alarms if not a.cancelled and a.when <= self.t),
                     key=lambda a: a.when)  # fmt: skip
        self.alarms = [a for a in self.alarms if not a.cancelled and a.when > self.t]
        for alarm in due:
            alarm.cancelled = True
            alarm.callback()


@asynccontextmanager
async def referee(
    tmp_path: Path,
    port: int = 0,
    limits: Limits | None = None,
    time_source: ManualTime | None = None,
) -> AsyncIterator[RunningServer]:
    """A referee in this event loop, its store and key in `tmp_path` (port 0: a free one);
    `time_source`: the clock of its timed tables (the machine's by default)."""
    extra = {} if time_source is None else {"time_source": time_source}
    server = await create_server(
        f"127.0.0.1:{port}", tmp_path / "t.db", tmp_path / "k.key", limits or Limits(), **extra
    )
    try:
        yield server
    finally:
        await server.stop(0)


def run(coro_fn: Callable[..., Awaitable[Any]], tmp_path: Path, **limits: Any) -> Any:
    """`coro_fn(server, stub, channel)` against a referee with these limits."""

    async def main() -> Any:
        async with (
            referee(tmp_path, limits=Limits(**limits)) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            return await coro_fn(server, rpc.RefereeServiceStub(channel), channel)

    return asyncio.run(main())


def option(key: str, value: Any) -> rpb.Option:
    return option_messages({key: value})[0]


def auth(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def new_table(
    stub: rpc.RefereeServiceStub,
    game: str,
    ruleset: str,
    options: dict[str, Any],
    n: int,
    time_control: rpb.TimeControl | None = None,
) -> tuple[str, dict[int, str]]:
    """A table of `n` seats, all taken here (their tokens by seat); `time_control`: clocks."""
    resp = await stub.CreateTable(
        pb.CreateTableRequest(
            game=game,
            ruleset=ruleset,
            options=[option(k, v) for k, v in options.items()],
            seats=[pb.SeatRequest(name=f"P{i}") for i in range(n)],
            time_control=time_control,
        )
    )
    return resp.table_id, {t.seat: t.token for t in resp.tokens}


async def play_random(
    stub: rpc.RefereeServiceStub,
    table_id: str,
    tokens: dict[int, str],
    rng: random.Random,
    on_view: Callable[[int, pb.SeatView], None] | None = None,
    limit: int = 100_000,
) -> int:
    """Play random legal actions until the match ends; returns the number of actions."""
    count = 0
    while count < limit:
        acted = False
        for seat, token in tokens.items():
            view = (await stub.GetView(pb.GetViewRequest(table_id=table_id, seat=seat),
                                       metadata=auth(token))).view  # fmt: skip
            if on_view is not None:
                on_view(seat, view)
            if view.status == pb.TABLE_STATUS_FINISHED:
                return count
            if view.legal_actions:
                choice = rng.choice(view.legal_actions).action
                await stub.SubmitAction(
                    pb.SubmitActionRequest(
                        table_id=table_id,
                        seat=seat,
                        expected_action_index=view.action_index,
                        action=choice,
                    ),
                    metadata=auth(token),
                )
                count += 1
                acted = True
        assert acted, "nobody could act but the match is not over"
    raise AssertionError("the match did not end")
