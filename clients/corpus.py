"""A corpus of records: bots play matches in-process, each finished match becomes a record.

The matches are held as in clients/arena.py (the referee's own Table: the same dealing from a
seed, the same engine); match g is dealt from the seed "<seed>-<g>", so a corpus is the same
from run to run, whatever the number of processes playing chunks of matches in parallel
(`corpus_chunks`). Random bots choose among the table's legal actions directly (no seat view
is built for them), so a large corpus is quick to make: about 200 Dame de Pique matches a
second per process. The records are unsigned but carry their deal source, so `tapis record
verify` recomputes every deal. For tests and benchmarks (`tapis archive ...`); the command
line is `tapis corpus` (clients/corpus_cmd.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from tapis_cartes.clients.bots import Bot, RandomBot, make_bot
from tapis_cartes.records.codec import Provenance, canonical_bytes, envelope
from tapis_cartes.records.executors import make_executor, map_in_order
from tapis_cartes.records.strict import check_played_at, check_seat_name
from tapis_cartes.referee.engine import RecordError, find_game, make_rules, new_match
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.referee.server.service import seat_view
from tapis_cartes.referee.server.tables import Seat, Table, token_hash
from tapis_cartes.v1 import record_pb2 as pb

__all__ = ["CHUNK", "corpus_chunks", "make_corpus", "play_record"]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
NAMES = ("Ann", "Bob", "Cat", "Dan", "Eve", "Fay", "Gus")


def play_record(
    game: str,
    bots: Sequence[Bot],
    seed: str,
    ruleset: str = "",
    options: Mapping[str, Option] | None = None,
    names: Sequence[str] = NAMES,
    played_at: str = "",
) -> pb.RecordEnvelope:
    """Play one match with one bot per seat and return its record's envelope (unsigned);
    `played_at` (RFC 3339) defaults to now. `RecordError` for a name or date that no record
    may hold, as verify says it (before the match is played)."""
    if not names:
        raise RecordError("seat-name", "no names given for the seats")
    for i in range(len(bots)):
        check_seat_name(names[i % len(names)], i)
    check_played_at(played_at)
    played_at = played_at or datetime.now(UTC).isoformat(timespec="seconds")
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
        bot = bots[s]
        if isinstance(bot, RandomBot):
            table.apply(s, bot.choose_among(table.legal(s)))
        else:
            table.apply(s, bot.choose(seat_view(table, s, match.view(s))))
    return envelope(canonical_bytes(table.record(Provenance("corpus", seed, played_at))))


def make_corpus(
    game: str,
    count: int,
    seed: str = "corpus",
    kind: str = "heuristic",
    ruleset: str = "",
    options: Mapping[str, Option] | None = None,
    players: int | None = None,
    start: int = 0,
) -> list[pb.RecordEnvelope]:
    """`count` records of `game`, matches start .. start+count-1; match g dealt from
    "<seed>-<g>", bot g*7+i at seat i."""
    spec = find_game(game)
    opts = dict(options or {})
    n = make_rules(spec.name, ruleset or None, opts, players).players  # the game's default
    out = []
    for g in range(start, start + count):
        bots = [make_bot(kind, spec.name, ruleset, g * 7 + i, opts) for i in range(n)]
        # a date from the match number, so the same corpus has the same record ids
        played_at = (EPOCH + timedelta(minutes=g)).isoformat(timespec="seconds")
        out.append(play_record(spec.name, bots, f"{seed}-{g}", ruleset, opts, played_at=played_at))
    return out


CHUNK = 250  # matches per task with --jobs
Job = tuple[str, int, int, str, str, str, dict[str, Option], int | None]


def _chunk(job: Job) -> list[bytes]:
    """A chunk of matches, each as its envelope's bytes."""
    game, start, count, seed, kind, ruleset, opts, players = job
    envs = make_corpus(game, count, seed, kind, ruleset, opts, players, start)
    return [e.SerializeToString(deterministic=True) for e in envs]


def corpus_chunks(
    game: str,
    count: int,
    seed: str = "corpus",
    kind: str = "heuristic",
    ruleset: str = "",
    options: Mapping[str, Option] | None = None,
    players: int | None = None,
    jobs: int = 1,
    chunk: int = CHUNK,
) -> Iterator[list[bytes]]:
    """`make_corpus`'s records as envelope bytes, `chunk` matches at a time, in match order
    (played by `jobs` processes). The records are the same whatever `jobs` and `chunk`."""
    opts = dict(options or {})
    size = max(1, chunk)
    chunks: list[Job] = [
        (game, g, min(size, count - g), seed, kind, ruleset, opts, players)
        for g in range(0, count, size)
    ]
    # The archive's local pool: the caller one of the `jobs` processes, the others stopped at
    # once by a Ctrl-C, a SIGTERM or a caller that stops reading (a plain process pool waited
    # for its running chunks, hung at a second Ctrl-C, and outlived a SIGTERM).
    for _, envs in map_in_order(make_executor("local", max(1, jobs)), _chunk, chunks):
        yield envs
