"""A corpus of records: bots play matches in-process, each finished match becomes a record.

    PYTHONPATH=. python scripts/corpus.py --game hearts -n 200 [-o corpus.tapis]
        [--archive archive.db] [--bots heuristic|random] [--option KEY=VALUE ...]
        [--seed TEXT] [--players N] [--jobs N]

The command line of clients/corpus.py (how matches are played and dealt there): match g is
dealt from the seed "<seed>-<g>", so a corpus is the same from run to run, whatever `--jobs`
(processes playing chunks of matches in parallel). For tests and benchmarks
(`tapis archive ...`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from tapis_cartes.clients.corpus import CHUNK, corpus_chunks, make_corpus, play_record
from tapis_cartes.records.codec import write_frames
from tapis_cartes.referee.engine.options import parse_option
from tapis_cartes.v1 import record_pb2 as pb

__all__ = ["CHUNK", "main", "make_corpus", "play_record"]  # the library: clients/corpus.py


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--game", default="hearts")
    ap.add_argument("--ruleset", default="")
    ap.add_argument("-n", "--count", type=int, default=100)
    ap.add_argument("--bots", choices=("heuristic", "random"), default="heuristic")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--players", type=int)
    ap.add_argument("--seed", default="corpus")
    ap.add_argument("--jobs", type=int, default=1, help="processes playing (default 1)")
    ap.add_argument("-o", "--output", metavar="RECORDS", help="write a record file")
    ap.add_argument("--archive", metavar="DB", help="add the records to an archive")
    args = ap.parse_args(argv)
    if not args.output and not args.archive:
        ap.error("give -o RECORDS and/or --archive DB")
    opts = dict(parse_option(o) for o in args.option)
    t0 = time.perf_counter()
    out = Path(args.output or f"{args.archive}.corpus.tapis")
    hands = 0

    def frames() -> Iterator[bytes]:
        nonlocal hands
        chunks = corpus_chunks(
            args.game, args.count, args.seed, args.bots, args.ruleset, opts, args.players,
            args.jobs,
        )  # fmt: skip
        for chunk in chunks:
            for frame in chunk:
                hands += len(
                    pb.GameRecord.FromString(pb.RecordEnvelope.FromString(frame).record).hands
                )
                yield frame

    matches = write_frames(out, frames())
    took = time.perf_counter() - t0
    print(f"{matches} matches, {hands} hands played in {took:.1f} s", file=sys.stderr)
    if args.output:
        print(f"wrote {args.output}", file=sys.stderr)
    if args.archive:
        from tapis_cartes.records.archive import add_files, open_archive
        from tapis_cartes.records.executors import make_executor

        db = open_archive(args.archive)
        try:
            report = add_files(db, [out], make_executor("local", args.jobs))
        finally:
            db.close()
            if not args.output:
                out.unlink()
        print(
            f"{report.added} added, {report.duplicates} duplicates, {len(report.refused)} refused",
            file=sys.stderr,
        )
        return 1 if report.refused or report.unreadable else 0
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the record file is written whole or not at all (atomic_write)
        print("corpus: interrupted", file=sys.stderr)
        sys.exit(130)
