"""Benchmark: Tapis record verification against OpenSpiel's Hearts on the same hands.

Not a test. Builds a corpus of complete Dame de Pique matches played with random legal
actions by our engine (seeded), turns each into a record (`build_record`, `canonical_bytes`,
`envelope`) and writes them to a temporary record file. Then, in one process pinned to one
core, best of ``--repeat`` runs of each, interleaved:

(a) Tapis: `read_envelopes` on the file, then `verify_envelope` on every envelope (decode,
    rules, deal, legality of every action, every score line, the scores after each hand, the
    outcome).
(b1) OpenSpiel, its best case: per hand a new state, the pass-direction chance action, the 52
    deal chance actions, the passes and the 52 plays, each through
    `apply_action_with_legality_check`, then `returns()`; the action lists are precomputed
    (OpenSpiel's own encoding) outside the timed loop.
(b2) OpenSpiel replaying our records: the same, but reading the file, decoding each record
    and converting its hands to OpenSpiel actions inside the timed loop.

The target is Tapis >= 1.5x OpenSpiel's hands/s. Usage (from the repository root):

    .venv/bin/python scripts/bench_verify.py [--hands 20000] [--repeat 3] [--profile 10]
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import cProfile
import gc
import os
import platform
import pstats
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from tapis_cartes.records.codec import (
    Provenance,
    build_record,
    canonical_bytes,
    decode_record,
    envelope,
    read_envelopes,
    write_envelopes,
)
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.engine import COMPILED as ENGINE_COMPILED
from tapis_cartes.referee.engine import Match, Rules, make_rules, new_match
from tapis_cartes.referee.engine.actions import PASS, PLAY, pass_cards
from tapis_cartes.v1 import record_pb2 as pb
from tests.engine import openspiel_hearts as osh

NAMES = ("Nord", "Est", "Sud", "Ouest")
TARGET = 1.5  # Tapis hands/s must be at least this multiple of OpenSpiel's


# --- the corpus -----------------------------------------------------------------------------


def play_match(rules: Rules, rng: random.Random) -> Match:
    """One complete match of random legal actions (random packs, first dealer random)."""
    match = new_match(rules, log_events=False)
    dealer = rng.randrange(4)
    while not match.finished:
        expected = match.expected_dealer()
        if expected is not None:
            dealer = expected
        deck = list(range(52))
        rng.shuffle(deck)
        match.start_hand(dealer, match.deal_deck(dealer, deck))
        while to_act := match.to_act():
            seat = to_act[rng.randrange(len(to_act))]  # the exchange: any order
            match.step(seat, rng.choice(match.legal_actions(seat)))
    return match


def build_corpus(path: Path, hands: int, seed: int) -> tuple[int, int]:
    """Write complete matches to a record file until they hold at least `hands` hands;
    return (records, hands)."""
    rules = make_rules("dame-de-pique")
    rng = random.Random(seed)
    envelopes: list[pb.RecordEnvelope] = []
    total = 0
    while total < hands:
        match = play_match(rules, rng)
        record = build_record(match, NAMES, Provenance("bench"))
        envelopes.append(envelope(canonical_bytes(record)))
        total += len(match.results)
    write_envelopes(path, envelopes)
    return len(envelopes), total


# --- our records in OpenSpiel's encoding ----------------------------------------------------


def os_actions(hand: pb.HandRecord) -> list[int]:
    """The OpenSpiel actions of one recorded hand: pass direction, 52 deal actions, the 12
    pass cards (player 0 to 3), the 52 plays."""
    card_to_action = osh.card_to_action
    direction = osh.pass_direction_action(hand.number)
    out = [direction]
    out += osh.deal_actions(list(hand.deal.hands))
    passes = [0, 0, 0, 0]
    plays: list[int] = []
    for seat, action in zip(hand.seats, hand.actions, strict=True):
        kind = action & 7
        if kind == PLAY:
            plays.append(card_to_action(action >> 3))
        elif kind == PASS:
            passes[seat] = pass_cards(action)
        else:
            raise ValueError(f"unexpected action {action} in a Dame de Pique hand")
    if direction != osh.OS_NO_PASS:
        for player in range(osh.NUM_SEATS):  # OpenSpiel takes player 0's passes first
            out += [card_to_action(c) for c in osh.mask_to_cards(passes[player])]
    out += plays
    return out


def os_corpus(path: Path) -> list[list[int]]:
    """Every hand of the record file as an OpenSpiel action list (for b1, untimed)."""
    return [
        os_actions(hand) for env in read_envelopes(path) for hand in decode_record(env.record).hands
    ]


def check_corpus(path: Path, game: Any) -> int:
    """Untimed sanity check: OpenSpiel gives every hand of the corpus the points of the
    record's score lines. Returns the number of moon hands."""
    moons = 0
    for env in read_envelopes(path):
        for hand in decode_record(env.record).hands:
            state = game.new_initial_state()
            for a in os_actions(hand):
                state.apply_action_with_legality_check(a)
            ours = [0, 0, 0, 0]
            for line in hand.lines:
                ours[line.seat] += line.delta.points
            theirs = osh.points_from_state(state)
            if ours != theirs:
                raise SystemExit(f"hand {hand.number}: Tapis {ours} != OpenSpiel {theirs}")
            moons += sum(ours) == 3 * osh.TOTAL_POINTS
    return moons


# --- the timed runs -------------------------------------------------------------------------


def run_tapis(path: Path) -> int:
    hands = 0
    for env in read_envelopes(path):
        result = verify_envelope(env)
        if not result.ok:
            raise SystemExit(f"record {result.record_id}: {result.error}")
        hands += result.hands
    return hands


def run_openspiel_native(game: Any, corpus: Sequence[Sequence[int]]) -> int:
    new_state = game.new_initial_state
    for actions in corpus:
        state = new_state()
        apply = state.apply_action_with_legality_check
        for a in actions:
            apply(a)
        state.returns()
    return len(corpus)


def run_openspiel_records(game: Any, path: Path) -> int:
    new_state = game.new_initial_state
    hands = 0
    for env in read_envelopes(path):
        for hand in decode_record(env.record).hands:
            state = new_state()
            apply = state.apply_action_with_legality_check
            for a in os_actions(hand):
                apply(a)
            state.returns()
            hands += 1
    return hands


def run_decode_only(path: Path) -> int:
    return sum(len(decode_record(env.record).hands) for env in read_envelopes(path))


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    gc.collect()
    start = time.perf_counter()
    hands = fn()
    return time.perf_counter() - start, hands


def pin_one_core() -> str:
    """Pin this process to one CPU where the OS allows it; say what was done."""
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu} (one core, single process, single thread)"
    return "one process, single thread (CPU affinity not available on this OS)"


# --- main -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hands", type=int, default=20000, help="corpus size (hands)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; best is kept")
    parser.add_argument("--seed", type=int, default=2024, help="seed of the random play")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also profile one Tapis verify run (cProfile) and print the top N by tottime",
    )
    args = parser.parse_args(argv)
    if args.hands < 1 or args.repeat < 1:
        parser.error("--hands and --repeat must be at least 1")

    where = pin_one_core()
    print(f"Python {platform.python_version()} ({platform.python_implementation()}), {where}")
    mode = (
        "compiled with mypyc" if ENGINE_COMPILED else "pure Python (TAPIS_PURE_PYTHON or no build)"
    )
    print(f"Tapis engine: {mode}")
    game = osh.load_game()
    with tempfile.TemporaryDirectory(prefix="tapis-bench-") as tmp:
        path = Path(tmp) / "corpus.tapis"
        t0 = time.perf_counter()
        records, hands = build_corpus(path, args.hands, args.seed)
        size = path.stat().st_size
        print(
            f"corpus: {records} complete matches, {hands} hands, {size / 1e6:.2f} MB "
            f"(seed {args.seed}, built in {time.perf_counter() - t0:.1f} s)"
        )
        moons = check_corpus(path, game)
        print(f"check: OpenSpiel gives every hand the recorded points ({moons} moon hands)")
        native = os_corpus(path)

        runs: dict[str, Callable[[], int]] = {
            "(a) Tapis verify_envelope": lambda: run_tapis(path),
            "(b1) OpenSpiel, native actions": lambda: run_openspiel_native(game, native),
            "(b2) OpenSpiel, from our records": lambda: run_openspiel_records(game, path),
            "     read + decode only (in a, b2)": lambda: run_decode_only(path),
        }
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(args.repeat):
            for name, fn in runs.items():  # interleaved, so drift hits all alike
                seconds, n = timed(fn)
                if n != hands:
                    raise SystemExit(f"{name}: {n} hands, expected {hands}")
                best[name] = min(best[name], seconds)

        print(f"\nbest of {args.repeat} runs each:")
        print(f"{'':36} {'hands':>7} {'seconds':>9} {'hands/s':>10} {'us/hand':>8}")
        for name, seconds in best.items():
            print(
                f"{name:36} {hands:7d} {seconds:9.3f} {hands / seconds:10,.0f} "
                f"{1e6 * seconds / hands:8.1f}"
            )
        tapis = best["(a) Tapis verify_envelope"]
        r1 = best["(b1) OpenSpiel, native actions"] / tapis
        r2 = best["(b2) OpenSpiel, from our records"] / tapis
        print(f"\nTapis / (b1) hands/s: {r1:.2f}x")
        print(f"Tapis / (b2) hands/s: {r2:.2f}x")
        verdict = "met" if min(r1, r2) >= TARGET else "NOT met"
        print(f"target: Tapis >= {TARGET}x OpenSpiel hands/s (both b1 and b2): {verdict}")

        if args.profile:
            profiler = cProfile.Profile()
            profiler.runcall(run_tapis, path)
            print(f"\ncProfile of one (a) run, top {args.profile} by tottime:")
            stats = pstats.Stats(profiler, stream=sys.stdout)
            stats.sort_stats("tottime").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
