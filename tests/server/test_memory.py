"""What the referee holds in memory: the tables over that it no longer keeps leave it, and
Python's full collections, each a pause of every submission under way, are the referee's own
while it serves (app.py `sweep_garbage`)."""

from __future__ import annotations

import asyncio
import gc
import random
import weakref
from pathlib import Path
from typing import Any

import grpc
import pytest

from tapis_cartes.referee.server.app import Limits, sweep_garbage
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2_grpc as rpc

from .util import new_table, play_random, referee


class _Node:
    me: Any = None


def test_full_collections_are_the_referees_own_while_it_serves() -> None:
    """While `sweep_garbage` runs, no full collection comes of itself, however many objects
    outlive the young collections (Python's own would scan them all, and every object alive);
    one comes every `every` seconds, and frees the cycles the young collections left; the
    threshold is given back when it ends."""
    before = gc.get_threshold()
    full: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            full.append(info["collected"])

    async def main() -> None:
        sweeping = asyncio.create_task(sweep_garbage(every=0.3))
        await asyncio.sleep(0)  # (it has begun)
        gc.callbacks.append(seen)
        try:
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
        finally:
            gc.callbacks.remove(seen)
            sweeping.cancel()
            await asyncio.gather(sweeping, return_exceptions=True)

    asyncio.run(main())
    assert gc.get_threshold() == before


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
