"""`tapis corpus`: records of bot matches played in this process (clients/corpus.py: deals
from a fixed seed, the same records from run to run), written to a record file and/or added to
an archive, for tests and benchmarks:

    tapis corpus --game hearts -n 1000 -o corpus.tapis [--archive games.db]
        [--bots heuristic|random] [--ruleset R] [--option KEY=VALUE ...] [--players N]
        [--seed TEXT] [--jobs N]

Match g is dealt from the seed "<seed>-<g>", so a corpus is the same whatever `--jobs`
(processes playing chunks of matches). Progress with counts on a terminal (standard error),
as verify shows it; then `N matches, H hands played in T s`.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tapis_cartes.clients.args import err as _err
from tapis_cartes.clients.args import output_path, positive_int, text_arg
from tapis_cartes.clients.progress import Progress
from tapis_cartes.records.codec import writable, write_frames
from tapis_cartes.records.executors import checked_workers
from tapis_cartes.records.score import counted
from tapis_cartes.referee.engine import find_game, make_rules
from tapis_cartes.referee.engine.options import parse_option
from tapis_cartes.v1 import record_pb2 as pb

__all__ = ["add_corpus_parser", "cmd_corpus"]


def cmd_corpus(args: argparse.Namespace) -> int:
    # The bots and the tables they play on (and gRPC with them) load with the command only.
    from tapis_cartes.clients.corpus import CHUNK, corpus_chunks

    if not args.output and not args.archive:
        _err("tapis corpus: give -o RECORDS and/or --archive DB")
        return 2
    try:
        opts = dict(parse_option(o) for o in args.option or ())
    except ValueError as exc:
        _err(f"tapis corpus: {exc}")
        return 2
    # The rules, the options and the outputs are checked before any match is played (a
    # `RulesError` or `OutputError`: one line, its exit code).
    game = find_game(args.game).name
    make_rules(game, args.ruleset or None, opts, args.players)
    checked_workers(args.jobs)  # an `ExecutorError` for a number no pool can start
    if args.archive:  # (an archive that is none was found only once every match was played)
        writable(args.archive)
        if os.path.exists(args.archive):
            from tapis_cartes.records.archive import open_archive

            open_archive(args.archive).close()  # (an `ArchiveError` naming it)
    out = writable(args.output or f"{args.archive}.corpus.tapis")
    t0 = time.perf_counter()
    hands = 0
    done = 0
    bar = Progress(f"playing {game}", True)
    bar.update(0, args.count)

    def frames() -> Iterator[bytes]:
        nonlocal hands, done
        chunks = corpus_chunks(
            game, args.count, args.seed, args.bots, args.ruleset, opts, args.players,
            args.jobs, CHUNK if args.jobs > 1 else 1,
        )  # fmt: skip
        for chunk in chunks:
            for frame in chunk:
                env = pb.RecordEnvelope.FromString(frame)
                hands += len(pb.GameRecord.FromString(env.record).hands)
                done += 1
                yield frame
            bar.update(done, args.count)

    try:
        matches = write_frames(out, frames())
    finally:
        bar.stop()
    took = time.perf_counter() - t0
    _err(f"{counted(matches, 'match', 'matches')}, {counted(hands, 'hand')} played in {took:.1f} s")
    if args.output:
        _err(f"wrote {args.output}")
    if not args.archive:
        return 0
    return _add(args, out)


def _add(args: argparse.Namespace, out: Path) -> int:
    """Add the corpus to the archive (verified first, as `tapis archive add`)."""
    from tapis_cartes.records.archive import add_files, open_archive
    from tapis_cartes.records.executors import make_executor

    db = open_archive(args.archive)
    bar = Progress("adding", True)
    try:
        report = add_files(db, [out], make_executor("local", args.jobs), progress=bar.update)
    finally:
        bar.stop()
        db.close()
        if not args.output:
            out.unlink()
    _err(
        f"{counted(report.added, 'record')} added, {counted(report.duplicates, 'duplicate')}, "
        f"{len(report.refused)} refused"
    )
    return 1 if report.refused or report.unreadable else 0


def add_corpus_parser(sub: Any) -> None:
    """The `corpus` command, on the top-level subparsers of `tapis`."""
    p = sub.add_parser(
        "corpus",
        help="records of bot matches played here (for tests and benchmarks)",
        description="Records of bot matches played in this process, dealt from a fixed seed"
        " (the same records from run to run), written to a record file and/or added to an"
        " archive, for tests and benchmarks.",
    )
    p.add_argument("--game", default="hearts", type=text_arg)
    p.add_argument("--ruleset", default="", type=text_arg)
    p.add_argument("-n", "--count", type=positive_int, default=100, metavar="N",
                   help="matches to play (default 100)")  # fmt: skip
    p.add_argument("--bots", choices=("heuristic", "random"), default="heuristic")
    p.add_argument(
        "--option", action="append", metavar="KEY=VALUE", type=text_arg, help="a rules option"
    )
    p.add_argument("--players", type=positive_int, metavar="N")
    p.add_argument(
        "--seed", default="corpus", type=text_arg, help="the deals' seed (default corpus)"
    )
    p.add_argument("--jobs", type=positive_int, default=1, metavar="N",
                   help="processes playing (default 1: this one)")  # fmt: skip
    p.add_argument("-o", "--output", type=output_path, metavar="RECORDS",
                   help="write a record file ('-': standard output)")  # fmt: skip
    p.add_argument("--archive", metavar="DB", help="add the records to an archive")
    p.set_defaults(func=cmd_corpus)
