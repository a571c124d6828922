"""Benchmark: Tapis record verification against OpenSpiel's Hearts on the same hands.

Not a test. Two workloads, each against OpenSpiel replaying the same games in the same run,
best of ``--repeat`` runs of each, interleaved, pinned to one core:

(a) one stream, in process. A corpus of complete Dame de Pique matches played with random
    legal actions by our engine (seeded, at least ``--hands`` hands), written as records
    (`build_record`, `canonical_bytes`, `envelope`) to one record file.
    Tapis: `read_envelopes` on the file, then `verify_envelope` on every envelope (decode,
    rules, deal, legality of every action, every score line, the scores after each hand, the
    outcome, the record's bytes).
    (a/os) OpenSpiel, its best case: per hand a new state, the pass-direction chance action,
    the 52 deal chance actions, the passes and the 52 plays, each through
    `apply_action_with_legality_check`, then `returns()`; the action lists are precomputed
    (OpenSpiel's own encoding) outside the timed loop. (Also shown, not a target: OpenSpiel
    reading our record file, decoding each record and converting its hands inside the loop.)
(b) the command line over one-hand record files. ``--files`` one-hand matches (random legal
    play, first hand numbers 1 to 4 so every exchange occurs) exported as transcripts (one
    JSON file each), imported with `tapis record import --out-dir` (untimed): one record file
    each. Tapis: `tapis record verify DIR/*` in a subprocess; the per-record time is the time
    the command reports for its work (`... in S s`) over the records, its start-up and exit
    (imports, the command line) apart: what is built once at the first record (the rules of
    the first rule set) counts in it. OpenSpiel: in this process, each transcript read and parsed
    (`json`), its cards and actions converted to OpenSpiel actions and replayed as in (a).

The target is Tapis >= 1.5x OpenSpiel's hands/s for (a) and (b). Usage (from the repository
root):

    .venv/bin/python scripts/bench_verify.py [--hands 20000] [--files 1000] [--repeat 3]
                                             [--profile 10]
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import cProfile
import gc
import json
import os
import platform
import pstats
import random
import re
import subprocess
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
from tapis_cartes.records.export import transcript_text
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.engine import COMPILED as ENGINE_COMPILED
from tapis_cartes.referee.engine import Match, Rules, Start, card_str, make_rules, new_match
from tapis_cartes.referee.engine.actions import PASS, PLAY, pass_cards
from tapis_cartes.v1 import record_pb2 as pb
from tests.engine import openspiel_hearts as osh

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("Nord", "Est", "Sud", "Ouest")
TARGET = 1.5  # Tapis hands/s must be at least this multiple of OpenSpiel's
A_TAPIS = "(a) Tapis verify_envelope"
A_OS = "(a) OpenSpiel, native actions"
A_OS_RECORDS = "    OpenSpiel, from our records"
B_TAPIS = "(b) tapis record verify DIR/*"
B_OS = "(b) OpenSpiel, from the transcripts"


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


# --- (b): one-hand record files, imported from transcripts --------------------------------


def play_one_hand(rules: Rules, rng: random.Random) -> Match:
    """A match of one hand of random legal actions, numbered 1 to 4 (every exchange)."""
    match = new_match(rules, Start(hand_number=rng.randrange(1, 5)), log_events=False)
    dealer = rng.randrange(4)
    deck = list(range(52))
    rng.shuffle(deck)
    match.start_hand(dealer, match.deal_deck(dealer, deck))
    while to_act := match.to_act():
        seat = to_act[rng.randrange(len(to_act))]
        match.step(seat, rng.choice(match.legal_actions(seat)))
    return match


def tapis_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`tapis ARGS` in a subprocess of this Python (it inherits this process's one core)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tapis_cartes.clients.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise SystemExit(f"tapis {args[:2]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done


def build_files(tmp: Path, files: int, seed: int) -> tuple[list[Path], list[Path]]:
    """`files` one-hand transcripts, and the record files `tapis record import` makes of
    them (one each)."""
    rules = make_rules("dame-de-pique")
    rng = random.Random(seed)
    transcripts = tmp / "transcripts"
    records = tmp / "records"
    transcripts.mkdir()
    for i in range(files):
        rec = build_record(play_one_hand(rules, rng), NAMES, Provenance("bench"))
        (transcripts / f"{i:05d}.json").write_text(transcript_text(rec))
    docs = sorted(transcripts.glob("*.json"))
    tapis_cli("record", "import", *docs, "--out-dir", records)
    return docs, sorted(records.glob("*.tapis"))


_OS_CARD = {card_str(c): osh.card_to_action(c) for c in range(52)}


def os_transcript_actions(doc: dict[str, Any]) -> list[list[int]]:
    """The OpenSpiel actions of each hand of a Dame de Pique transcript (as `os_actions`)."""
    card = _OS_CARD
    number = doc.get("start", {}).get("hand_number", 1)
    out = []
    for k, hand in enumerate(doc["hands"]):
        direction = osh.pass_direction_action(number + k)
        per = [[card[t] for t in cards] for cards in hand["deal"]["hands"]]
        actions = [direction]
        actions += [per[p][i] for i in range(13) for p in range(4)]
        passes: list[list[int]] = [[], [], [], []]
        plays = []
        for a in hand["actions"]:
            if "play" in a:
                plays.append(card[a["play"]])
            else:
                passes[a["seat"]] = [card[t] for t in a["pass"]]
        if direction != osh.OS_NO_PASS:
            for p in passes:
                actions += p
        out.append(actions + plays)
    return out


def run_openspiel_transcripts(game: Any, docs: Sequence[Path]) -> int:
    new_state = game.new_initial_state
    hands = 0
    for path in docs:
        with path.open("rb") as f:
            doc = json.load(f)
        for actions in os_transcript_actions(doc):
            state = new_state()
            apply = state.apply_action_with_legality_check
            for a in actions:
                apply(a)
            state.returns()
            hands += 1
    return hands


_SUMMARY = re.compile(r"([0-9,]+) records?, (\d+) valid, .* in ([0-9.]+) s ")


def run_cli_verify(paths: Sequence[Path], inside: list[float]) -> int:
    """`tapis record verify PATHS`; the number of valid records it reports. Appends to
    `inside` the time the command reports for its work (its start-up excluded: importing,
    parsing the command line)."""
    done = tapis_cli("record", "verify", *paths)
    summary = done.stdout.strip().splitlines()[-1]
    m = _SUMMARY.match(summary)
    if m is None or int(m[2]) != len(paths):
        raise SystemExit(f"tapis record verify: {summary!r}, expected {len(paths)} valid")
    inside.append(float(m[3]))
    return len(paths)


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
    parser.add_argument(
        "--files", type=int, default=1000, help="one-hand record files of (b); 0: no (b)"
    )
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
    if args.hands < 1 or args.repeat < 1 or args.files < 0:
        parser.error("--hands and --repeat must be at least 1, --files at least 0")

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

        if args.files:
            t0 = time.perf_counter()
            docs, files = build_files(Path(tmp), args.files, args.seed)
            print(
                f"files: {len(files)} one-hand record files imported from as many transcripts "
                f"(built in {time.perf_counter() - t0:.1f} s)"
            )

        runs: dict[str, tuple[int, Callable[[], int]]] = {
            A_TAPIS: (hands, lambda: run_tapis(path)),
            A_OS: (hands, lambda: run_openspiel_native(game, native)),
            A_OS_RECORDS: (hands, lambda: run_openspiel_records(game, path)),
            "     read + decode only (in a)": (hands, lambda: run_decode_only(path)),
        }
        inside: list[float] = []  # (b): the time `verify` reports, its start-up excluded
        if args.files:
            runs |= {
                B_TAPIS: (len(files), lambda: run_cli_verify(files, inside)),
                B_OS: (len(docs), lambda: run_openspiel_transcripts(game, docs)),
            }
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(args.repeat):
            for name, (want, fn) in runs.items():  # interleaved, so drift hits all alike
                seconds, n = timed(fn)
                if n != want:
                    raise SystemExit(f"{name}: {n} hands, expected {want}")
                best[name] = min(best[name], seconds)

        print(f"\nbest of {args.repeat} runs each:")
        print(f"{'':40} {'hands':>7} {'seconds':>9} {'hands/s':>10} {'us/hand':>8}")
        for name, seconds in best.items():
            n = runs[name][0]
            print(f"{name:40} {n:7d} {seconds:9.3f} {n / seconds:10,.0f} {1e6 * seconds / n:8.1f}")
        ratio_a = best[A_OS] / best[A_TAPIS]
        print(f"\n(a) Tapis / OpenSpiel hands/s: {ratio_a:.2f}x")
        ratio_records = best[A_OS_RECORDS] / best[A_TAPIS]
        print(f"    (Tapis / OpenSpiel from our records: {ratio_records:.2f}x)")
        ratios = [ratio_a]
        if args.files:
            n = len(files)
            per_record = min(inside) / n
            startup = best[B_TAPIS] - min(inside)
            ratio_b = best[B_OS] / n / per_record
            ratios.append(ratio_b)
            print(
                f"(b) tapis record verify: {1e6 * per_record:.1f} us/record (one hand), "
                f"start-up and exit {1e3 * startup:.0f} ms apart; OpenSpiel "
                f"{1e6 * best[B_OS] / n:.1f} us/hand from the transcripts"
            )
            print(f"(b) Tapis / OpenSpiel hands/s: {ratio_b:.2f}x")
        verdict = "met" if min(ratios) >= TARGET else "NOT met"
        print(f"target: Tapis >= {TARGET}x OpenSpiel hands/s in (a) and (b): {verdict}")

        if args.profile:
            profiler = cProfile.Profile()
            profiler.runcall(run_tapis, path)
            print(f"\ncProfile of one (a) run, top {args.profile} by tottime:")
            stats = pstats.Stats(profiler, stream=sys.stdout)
            stats.sort_stats("tottime").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
