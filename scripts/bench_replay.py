"""Micro-benchmark: the engine's replay alone (`Match.start_hand` + `Match.step_many`).

Not a test. The corpus of `bench_verify.py` (a) (complete Dame de Pique matches of random
legal play, seeded), decoded once; then, timed, each record's hands are replayed through a
new match (`new_match`, `deal_from_pb`, `start_hand`, `step_many`), best of ``--repeat``.
Usage (from the repository root):

    .venv/bin/python scripts/bench_replay.py [--hands 5000] [--repeat 5]
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import gc
import tempfile
import time
from collections.abc import Sequence

from scripts.bench_verify import build_corpus, pin_one_core
from tapis_cartes.records.codec import deal_from_pb, decode_record, read_envelopes
from tapis_cartes.referee.engine import COMPILED as ENGINE_COMPILED
from tapis_cartes.referee.engine import Deal, make_rules, new_match


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hands", type=int, default=5000, help="corpus size (hands)")
    parser.add_argument("--repeat", type=int, default=5, help="runs; best is kept")
    parser.add_argument("--seed", type=int, default=2024, help="seed of the random play")
    args = parser.parse_args(argv)
    print(pin_one_core(), "| engine:", "compiled" if ENGINE_COMPILED else "pure Python")
    rules = make_rules("dame-de-pique")
    with tempfile.TemporaryDirectory(prefix="tapis-bench-") as tmp:
        path = Path(tmp) / "corpus.tapis"
        _, hands = build_corpus(path, args.hands, args.seed)
        records = [decode_record(env.record) for env in read_envelopes(path)]
    games: list[list[tuple[int, Deal, bytes, list[int]]]] = [
        [(h.dealer, deal_from_pb(h.deal), h.seats, list(h.actions)) for h in rec.hands]
        for rec in records
    ]
    best_replay = best_start = float("inf")
    for _ in range(args.repeat):
        gc.collect()
        t0 = time.perf_counter()
        for game in games:
            match = new_match(rules, log_events=False)
            for dealer, deal, seats, actions in game:
                match.start_hand(dealer, deal)
                match.step_many(seats, actions)
        best_replay = min(best_replay, time.perf_counter() - t0)
        t0 = time.perf_counter()
        for game in games:
            match = new_match(rules, log_events=False)
            for dealer, deal, _, _ in game[:1]:
                match.start_hand(dealer, deal)
        best_start = min(best_start, time.perf_counter() - t0)
    print(f"{hands} hands, {len(games)} matches, best of {args.repeat}:")
    print(f"  new_match + start_hand + step_many: {1e6 * best_replay / hands:6.2f} us/hand")
    print(f"  new_match + first start_hand alone: {1e6 * best_start / len(games):6.2f} us/match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
