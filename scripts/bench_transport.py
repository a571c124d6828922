"""Benchmark: what grpc.aio itself costs per move, in three shapes of a move, on a bare server.

Not a test. A server subprocess (this script with ``--server PORT``) does no work but answer,
and ``--clients`` coroutines (each on its own channel) make moves as fast as they can, each
shape in turn for ``--seconds``, ``--rounds`` times; printed: moves/s and the server's CPU per
move (user + system, all its threads), the best round of each shape:

- ``2 unary``: a call sized like GetView, then one sized like SubmitAction (the old loop);
- ``unary + stream``: one call sized like SubmitAction, after which the coroutine's own
  server-streaming call brings one message sized like a turn (the referee's stream-driven
  bots: one SubmitAction per move, turns on WatchTable);
- ``bidi``: one message each way on a bidirectional stream (a move sent, a turn back): no call
  per move.

`scripts/bench_referee.py` measures the first two against the referee in the same run; this
says how far the shape of a move alone can take it.

Usage (from the repository root): ``.venv/bin/python scripts/bench_transport.py``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

SERVICE = "tapis.bench.Transport"
VIEW = 1100  # bytes: a GetView answer or a turn (a Dame de Pique SeatView, about)
ACK = 300  # bytes: a SubmitAction answer
REQUEST = 60  # bytes of a request
METADATA = (("authorization", "Bearer " + "a" * 32),)  # as long as a seat token


def _identity(data: bytes) -> bytes:
    return data


async def _server(port: int) -> None:
    payload = b"x" * 4096
    turns: dict[bytes, asyncio.Queue[None]] = {}

    async def unary(request: bytes, context: Any) -> bytes:
        queue = turns.get(request[4:12])  # a move: the turn of its stream
        if queue is not None:
            queue.put_nowait(None)
        return payload[: int.from_bytes(request[:4], "little")]

    async def stream(request: bytes, context: Any) -> AsyncIterator[bytes]:
        queue: asyncio.Queue[None] = asyncio.Queue()
        turns[request[:8]] = queue
        try:
            yield b"ready"
            while True:
                await queue.get()
                yield payload[:VIEW]
        finally:
            del turns[request[:8]]

    async def bidi(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for _ in requests:
            yield payload[:VIEW]

    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(
            unary, request_deserializer=_identity, response_serializer=_identity
        ),
        "Stream": grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=_identity, response_serializer=_identity
        ),
        "Bidi": grpc.stream_stream_rpc_method_handler(
            bidi, request_deserializer=_identity, response_serializer=_identity
        ),
    }
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    if server.add_insecure_port(f"127.0.0.1:{port}") == 0:
        raise SystemExit(f"cannot listen on port {port}")
    await server.start()
    await server.wait_for_termination()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sized(answer: int, key: bytes = b"") -> bytes:
    request = answer.to_bytes(4, "little") + key
    return request + b"\0" * (REQUEST - len(request))


Shape = Callable[[grpc.aio.Channel, list[int], float], Awaitable[None]]


async def two_unary(channel: grpc.aio.Channel, moves: list[int], end: float) -> None:
    call = channel.unary_unary(
        f"/{SERVICE}/Unary", request_serializer=_identity, response_deserializer=_identity
    )
    while time.perf_counter() < end:
        await call(_sized(VIEW), metadata=METADATA)
        await call(_sized(ACK), metadata=METADATA)
        moves[0] += 1


async def unary_and_stream(channel: grpc.aio.Channel, moves: list[int], end: float) -> None:
    call = channel.unary_unary(
        f"/{SERVICE}/Unary", request_serializer=_identity, response_deserializer=_identity
    )
    key = os.urandom(8)
    stream = channel.unary_stream(
        f"/{SERVICE}/Stream", request_serializer=_identity, response_deserializer=_identity
    )(key, metadata=METADATA)
    messages = stream.__aiter__()
    try:
        await anext(messages)  # the stream is ready
        while time.perf_counter() < end:
            await call(_sized(ACK, key), metadata=METADATA)
            await anext(messages)
            moves[0] += 1
    finally:
        stream.cancel()


async def bidi(channel: grpc.aio.Channel, moves: list[int], end: float) -> None:
    call = channel.stream_stream(
        f"/{SERVICE}/Bidi", request_serializer=_identity, response_deserializer=_identity
    )(metadata=METADATA)
    try:
        while time.perf_counter() < end:
            await call.write(_sized(ACK))
            await call.read()
            moves[0] += 1
    finally:
        call.cancel()


SHAPES: Sequence[tuple[str, Shape]] = (
    ("2 unary", two_unary),
    ("unary + stream", unary_and_stream),
    ("bidi", bidi),
)


async def _measure(args: argparse.Namespace, pid: int) -> None:
    target = f"127.0.0.1:{args.port}"
    options = [("grpc.use_local_subchannel_pool", 1)]  # a TCP connection per channel
    channels = [grpc.aio.insecure_channel(target, options=options) for _ in range(args.clients)]
    best: dict[str, tuple[float, float]] = {}
    try:
        await asyncio.gather(*(asyncio.wait_for(c.channel_ready(), 30) for c in channels))
        for _ in range(args.rounds):
            for name, shape in SHAPES:
                moves = [0]
                end = time.perf_counter() + args.seconds
                before = _cpu_seconds(pid)
                await asyncio.gather(*(shape(c, moves, end) for c in channels))
                cpu = _cpu_seconds(pid) - before
                per_move = 1e6 * cpu / max(1, moves[0])
                rate = moves[0] / args.seconds
                print(f"  {name:15} {rate:7,.0f} moves/s, server {per_move:5,.0f} us per move")
                best[name] = min(best.get(name, (per_move, rate)), (per_move, rate))
    finally:
        for channel in channels:
            await channel.close()
    print("best round of each (server CPU per move, moves/s):")
    base = best["2 unary"][0]
    for name, (per_move, rate) in best.items():
        print(f"  {name:15} {per_move:5,.0f} us  {rate:7,.0f}/s  ({base / per_move:.2f}x 2 unary)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=32, help="concurrent coroutines")
    parser.add_argument("--seconds", type=float, default=3.0, help="per shape and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=0, help="0: a free one")
    parser.add_argument("--server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.server:
        asyncio.run(_server(args.port))
        return 0
    if args.port == 0:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            args.port = s.getsockname()[1]
    cmd = [sys.executable, __file__, "--server", "--port", str(args.port)]
    server = subprocess.Popen(cmd)
    try:
        time.sleep(1.0)
        if server.poll() is not None:
            raise SystemExit("the server did not start")
        asyncio.run(_measure(args, server.pid))
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
