"""Benchmark: what the finished tables a referee holds in memory cost its garbage collector.

Not a test. A referee in this process (its store in a temporary directory) plays `--tables`
Dame de Pique matches to their end (random legal actions, seeded, submitted through the
referee as a seat's call would be, each stored), keeping in memory the finished tables most
recently asked for, up to its limit (`Limits.max_loaded_finished`). Then, in the same run:

(A) with the referee's default limit: the objects the collector tracks and the pause of a full
    collection (`gc.collect()`, best of `--repeat`); start-up's objects are frozen first, as
    `tapis serve` does.
(B) every finished table asked for again with the limit raised to `--tables`: each one not in
    memory is replayed from the store (the cost of a table the limit let go: its time is
    printed), and then the same figures with all of them held.

A full collection stops the event loop, and with it every submission under way, for its whole
pause: its length follows the objects the live and the held tables keep. Usage (from the
repository root):

    .venv/bin/python scripts/bench_finished_tables.py [--tables 200] [--repeat 3] [--seed 1]
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import dataclasses
import gc
import random
import statistics
import tempfile
import time

from tapis_cartes.referee.server.app import create_server
from tapis_cartes.referee.server.limits import DEFAULT_LIMITS
from tapis_cartes.referee.server.tables import Referee


def collection(repeat: int) -> tuple[int, float]:
    """The objects the collector tracks, and the shortest pause (s) of `repeat` full
    collections."""
    gc.collect()
    tracked = len(gc.get_objects())
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        gc.collect()
        best = min(best, time.perf_counter() - t0)
    return tracked, best


async def play(referee: Referee, tables: int, rng: random.Random) -> tuple[list[str], int]:
    """`tables` matches played to their end; their ids and the actions in all."""
    ids, actions = [], 0
    seats = [(f"player {s}", False) for s in range(4)]
    for _ in range(tables):
        table, _tokens = await referee.create("dame-de-pique", "", {}, seats, "bench")
        while not table.finished:
            seat = table.match.to_act()[0]
            action = rng.choice(table.match.legal_actions(seat))
            await referee.submit(table, seat, len(table.actions), action)
            actions += 1
        ids.append(table.id)
    return ids, actions


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = await create_server(
            "127.0.0.1:0", Path(tmp) / "tapis.db", Path(tmp) / "referee.key", DEFAULT_LIMITS
        )
        try:
            referee = server.referee
            gc.collect()
            gc.freeze()  # start-up's objects, as `tapis serve` does
            t0 = time.perf_counter()
            ids, actions = await play(referee, args.tables, random.Random(args.seed))
            print(
                f"{args.tables} Dame de Pique matches played to their end: {actions:,} actions "
                f"in {time.perf_counter() - t0:.1f} s"
            )
            kept = DEFAULT_LIMITS.max_loaded_finished
            tracked_a, pause_a = collection(args.repeat)
            print(
                f"(A) the default limit ({kept} finished tables kept): "
                f"{len(referee.tables)} tables in memory, {tracked_a:,} objects tracked, "
                f"a full collection {1000 * pause_a:.1f} ms"
            )
            referee.limits = dataclasses.replace(referee.limits, max_loaded_finished=args.tables)
            replays = []
            for table_id in ids:
                held = table_id in referee.tables
                t0 = time.perf_counter()
                referee.get(table_id)
                if not held:
                    replays.append(time.perf_counter() - t0)
            tracked_b, pause_b = collection(args.repeat)
            if replays:
                print(
                    f"    a finished table not kept, asked for: replayed from the store in "
                    f"{1000 * statistics.median(replays):.1f} ms (median of {len(replays)}; "
                    f"longest {1000 * max(replays):.1f} ms)"
                )
            print(
                f"(B) all {args.tables} kept: {len(referee.tables)} tables in memory, "
                f"{tracked_b:,} objects tracked, a full collection {1000 * pause_b:.1f} ms"
            )
            per_table = (tracked_b - tracked_a) / max(1, args.tables - kept)
            per_ms = 1000 * (pause_b - pause_a) / max(1, args.tables - kept)
            print(
                f"a finished table held: {per_table:,.0f} objects tracked, "
                f"{per_ms:.2f} ms more in every full collection; (B) / (A): "
                f"{pause_b / pause_a:.1f}x the pause"
            )
        finally:
            await server.stop(0)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", type=int, default=200, help="matches played to their end")
    ap.add_argument("--repeat", type=int, default=3, help="full collections timed (the best)")
    ap.add_argument("--seed", type=int, default=1)
    asyncio.run(main(ap.parse_args()))
