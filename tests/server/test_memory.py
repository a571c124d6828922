"""What the referee holds in memory: the tables over that it no longer keeps leave it, and
Python's full collections, each a pause of every submission under way, are the referee's own
while it serves (app.py `sweep_garbage`)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tapis_cartes.referee.server.app import Limits, sweep_garbage
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc as rpc

from .util import new_table, play_random, referee


class _Node:
    me: Any = None


@contextlib.asynccontextmanager
async def _sweeping(**given: Any) -> AsyncIterator[list[int]]:
    """`sweep_garbage(**given)` running, and the full collections meanwhile (what each freed),
    in the list given."""
    full: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            full.append(info["collected"])

    sweeping = asyncio.create_task(sweep_garbage(**given))
    await asyncio.sleep(0)  # (it has begun)
    gc.callbacks.append(seen)
    try:
        yield full
    finally:
        gc.callbacks.remove(seen)
        sweeping.cancel()
        await asyncio.gather(sweeping, return_exceptions=True)


def test_full_collections_are_the_referees_own_while_it_serves() -> None:
    """While `sweep_garbage` runs, no full collection comes of itself, however many objects
    outlive the young collections (Python's own would scan them all, and every object alive);
    one comes every `every` seconds, and frees the cycles the young collections left; the
    threshold is given back when it ends."""
    before = gc.get_threshold()

    async def main() -> None:
        async with _sweeping(every=0.3) as full:
            # A cycle in the oldest generation: a full collection alone frees it.
            node = _Node()
            node.me = node
            gone = weakref.ref(node)
            gc.collect(1)  # (the young generations collected: it moves to the oldest)
            del node
            # Many objects outliving the young collections: Python's rule would run a full
            # collection once they are a quarter of those it holds (no await: no sweep).
            kept = [[] for _ in range(400_000)]
            assert not full and gone() is not None
            for _ in range(100):  # the sweep, within 5 s
                await asyncio.sleep(0.05)
                if gone() is None:
                    break
            assert gone() is None and full, full
            del kept

    asyncio.run(main())
    assert gc.get_threshold() == before


def test_a_full_collection_comes_sooner_once_the_referee_has_grown() -> None:
    """`sweep_garbage`'s other bound: memory grown by `growth` since the last sweep brings the
    next one at once, not `every` seconds later (cycles from a source the referee does not
    know of hold no more than that)."""
    held = [100]

    async def main() -> None:
        given = {"every": 3600.0, "growth": 50, "memory": lambda: held[0], "check": 0.01}
        async with _sweeping(**given) as full:
            await asyncio.sleep(0.2)
            held[0] = 149  # grown, but by less
            await asyncio.sleep(0.2)
            assert not full
            held[0] = 150
            for _ in range(250):
                await asyncio.sleep(0.02)
                if full:
                    break
            assert len(full) == 1
            await asyncio.sleep(0.2)  # measured again from there: no other
            assert len(full) == 1

    asyncio.run(main())


@pytest.mark.parametrize("timed", [False, True], ids=["untimed", "timed"])
def test_a_finished_table_no_longer_kept_leaves_memory(tmp_path: Path, timed: bool) -> None:
    """Matches played to their end, more than the referee keeps (`max_loaded_finished`): the
    tables it let go are freed at once, without waiting for a full collection (no alarm
    holds them: an untimed match's idle alarm, set for a day, held each that long)."""
    control = rpb.TimeControl(budget_ms=3_600_000, policy=rpb.TIMEOUT_POLICY_FORFEIT)

    async def main() -> None:
        async with (
            referee(tmp_path, limits=Limits(max_loaded_finished=2)) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stub = rpc.RefereeServiceStub(channel)
            tables = []
            gc.disable()  # no collection: what is freed is freed as it is let go
            try:
                for i in range(5):
                    table_id, tokens = await new_table(
                        stub, "dame-de-pique", "", {"end_threshold": 10}, 4,
                        time_control=control if timed else None,
                    )  # fmt: skip
                    tables.append(weakref.ref(server.referee.tables[table_id]))
                    await play_random(stub, table_id, tokens, random.Random(i))
                await asyncio.sleep(0.05)
                kept = [t() for t in tables]
            finally:
                gc.enable()
            assert all(t is not None and t.finished for t in kept[-2:])
            held = [i for i, t in enumerate(kept[:-2]) if t is not None]
            assert held == [], f"tables {held} of 5 still in memory"

    asyncio.run(main())


def test_refused_calls_leave_no_cycle_for_a_full_collection(tmp_path: Path) -> None:
    """Calls the referee refuses (a table that does not exist, a wrong token, a stream of
    either; of gRPC's own services, a health check of a service it does not have, requests
    that do not decode) leave nothing that only a full collection frees: before, each left
    its call's state, context, request and the tracebacks of its refusal in a cycle (about
    1.5 KB a call, held until the referee's sweep, 10 minutes)."""

    async def main() -> None:
        async with (
            referee(tmp_path) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stub = rpc.RefereeServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            table_id, _ = await new_table(stub, "dame-de-pique", "", {}, 4)
            wrong = (("authorization", "Bearer wrong"),)
            calls = [
                lambda: stub.GetTable(pb.GetTableRequest(table_id="nosuchtable")),
                lambda: stub.GetView(pb.GetViewRequest(table_id=table_id, seat=0), metadata=wrong),
                lambda: stub.SubmitAction(
                    pb.SubmitActionRequest(table_id=table_id, seat=0, action=1), metadata=wrong
                ),
                lambda: _read_all(stub.WatchTable(pb.WatchTableRequest(table_id="nosuchtable"))),
                lambda: _read_all(
                    stub.PlaySeat(
                        iter([pb.PlaySeatRequest(open=pb.PlaySeatOpen(table_id=table_id, seat=0))]),
                        metadata=wrong,
                    )
                ),
                lambda: health.Check(health_pb2.HealthCheckRequest(service="no.such.Service")),
                lambda: channel.unary_unary("/grpc.health.v1.Health/Check")(b"\xff\xff"),
                lambda: _read_all(
                    channel.stream_stream(
                        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
                    )(iter([b"\xff\xff"]))
                ),
            ]
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                for _ in range(40):
                    for call in calls:
                        with pytest.raises(grpc.aio.AioRpcError):
                            await call()
                gc.collect()
                left = [type(o).__name__ for o in gc.garbage]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
            assert left.count("RPCState") == 0 and left.count("_ServicerContext") == 0, len(left)

    asyncio.run(main())


async def _read_all(stream: Any) -> None:
    async for _ in stream:
        pass
