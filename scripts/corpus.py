"""A corpus of records: bots play matches in-process, each finished match becomes a record.

    PYTHONPATH=. python scripts/corpus.py --game hearts -n 200 [-o corpus.tapis]
        [--archive archive.db] [--bots heuristic|random] [--option KEY=VALUE ...]
        [--seed TEXT] [--players N]

The matches are held as in clients/arena.py (the referee's own Table: the same dealing from a
seed, the same engine); match g is dealt from the seed "<seed>-<g>", so a corpus is the same
from run to run. The records are unsigned but carry their deal source, so `tapis record
verify` recomputes every deal. For tests and benchmarks (`tapis archive ...`).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from clients.bots import Bot, make_bot
from records.codec import Provenance, build_record, canonical_bytes, envelope, write_envelopes
from records.dealing import ALGORITHM
from referee.engine import find_game, make_rules, new_match
from referee.server.service import seat_view
from referee.server.tables import Seat, Table, token_hash
from tapis.v1 import record_pb2 as pb

__all__ = ["make_corpus", "play_record"]

NAMES = ("Ann", "Bob", "Cat", "Dan", "Eve", "Fay", "Gus")


def play_record(
    game: str,
    bots: Sequence[Bot],
    seed: str,
    ruleset: str = "",
    options: Mapping[str, bool | int | str] | None = None,
    names: Sequence[str] = NAMES,
) -> pb.RecordEnvelope:
    """Play one match with one bot per seat and return its record's envelope (unsigned)."""
    seed_bytes = hashlib.sha256(seed.encode()).digest()
    opts = dict(options or {})
    rules = make_rules(game, ruleset or None, opts, len(bots))
    table = Table(
        id=seed,
        rules=rules,
        options=opts,
        seed=seed_bytes,
        created=0.0,
        creator="corpus",
        seats=[Seat(names[i % len(names)], False) for i in range(len(bots))],
        match=new_match(rules),
    )
    for i, seat in enumerate(table.seats):
        table.take(i, seat.name, token_hash(str(i)))
    match = table.match
    while not match.finished:
        s = match.to_act()[0]
        table.apply(s, bots[s].choose(seat_view(table, s, match.view(s))))
    rec = build_record(
        match,
        [s.name for s in table.seats],
        Provenance("corpus", seed, datetime.now(UTC).isoformat(timespec="seconds")),
        table.decks,
        pb.DealSource(algorithm=ALGORITHM, commitment=table.commitment, seed=table.seed),
    )
    return envelope(canonical_bytes(rec))


def make_corpus(
    game: str,
    count: int,
    seed: str = "corpus",
    kind: str = "heuristic",
    ruleset: str = "",
    options: Mapping[str, bool | int | str] | None = None,
    players: int | None = None,
) -> list[pb.RecordEnvelope]:
    """`count` records of `game`; match g dealt from "<seed>-<g>", bot g*7+i at seat i."""
    spec = find_game(game)
    opts = dict(options or {})
    n = players or spec.fixed_players or int(opts.get("players", 4))
    out = []
    for g in range(count):
        bots = [make_bot(kind, spec.name, ruleset, g * 7 + i, opts) for i in range(n)]
        out.append(play_record(spec.name, bots, f"{seed}-{g}", ruleset, opts))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from clients.play import parse_option

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--game", default="hearts")
    ap.add_argument("--ruleset", default="")
    ap.add_argument("-n", "--count", type=int, default=100)
    ap.add_argument("--bots", choices=("heuristic", "random"), default="heuristic")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--players", type=int)
    ap.add_argument("--seed", default="corpus")
    ap.add_argument("-o", "--output", metavar="RECORDS", help="write a record file")
    ap.add_argument("--archive", metavar="DB", help="add the records to an archive")
    args = ap.parse_args(argv)
    if not args.output and not args.archive:
        ap.error("give -o RECORDS and/or --archive DB")
    opts = dict(parse_option(o) for o in args.option)
    t0 = time.perf_counter()
    envs = make_corpus(
        args.game, args.count, args.seed, args.bots, args.ruleset, opts, args.players
    )
    hands = sum(len(pb.GameRecord.FromString(e.record).hands) for e in envs)
    took = time.perf_counter() - t0
    print(f"{len(envs)} matches, {hands} hands played in {took:.1f} s", file=sys.stderr)
    if args.output:
        write_envelopes(args.output, envs)
        print(f"wrote {args.output}", file=sys.stderr)
    if args.archive:
        from records.archive import add_envelopes, open_archive

        db = open_archive(args.archive)
        try:
            report = add_envelopes(db, [("corpus", i, e) for i, e in enumerate(envs, 1)])
        finally:
            db.close()
        print(
            f"{report.added} added, {report.duplicates} duplicates, {len(report.refused)} refused",
            file=sys.stderr,
        )
        return 1 if report.refused else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
