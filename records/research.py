"""Records as tables, for research: one row per action played (`plays`) or per seat of a match
(`results`), written as CSV or Parquet so that pandas, DuckDB or R read an archive in one line:

    pandas.read_parquet("plays.parquet")
    duckdb.sql("SELECT player, avg(score) FROM 'results.parquet' GROUP BY player")

`plays`: record, hand (1-based number in the record), index (1-based in the hand), seat, player,
action (its text: "play QS", "bid nap"), card (for a card played, else empty), trick (1-based in
the hand, for a card played), winner (the seat that won that trick; empty while unfinished).

`results`: record, game, ruleset, players (the number of seats), seat, player, team, points,
imperiales, jetons (the game's units; empty where the game does not keep one), winner (whether
the seat won), finished, hands, played_at.

Tricks and winners come from the one replay of each record through the engine: nothing here
knows a rule.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from tapis_cartes.records.codec import atomic_write, record_id, score_from_pb
from tapis_cartes.records.replay import replay_record
from tapis_cartes.records.verify import verified_match
from tapis_cartes.referee.engine import Match, find_game
from tapis_cartes.referee.engine.actions import PLAY, action_str
from tapis_cartes.referee.engine.base import Hand, HandResult
from tapis_cartes.referee.engine.cards import card_str
from tapis_cartes.referee.errors import ArchiveError, RecordError
from tapis_cartes.v1 import record_pb2 as pb

__all__ = ["FORMATS", "PLAY_COLUMNS", "RESULT_COLUMNS", "TABLES", "PlayRow", "hand_plays",
           "play_rows", "result_rows", "write_table"]  # fmt: skip

PLAY_COLUMNS = ("record", "hand", "index", "seat", "player", "action", "card", "trick", "winner")
RESULT_COLUMNS = (
    "record", "game", "ruleset", "players", "seat", "player", "team", "points", "imperiales",
    "jetons", "winner", "finished", "hands", "played_at",
)  # fmt: skip
UNITS = ("points", "imperiales", "jetons")
FORMATS = ("csv", "parquet")

Row = tuple[Any, ...]
# An action of a hand: index, seat, action, card text, trick, trick winner (`hand_plays`).
PlayRow = tuple[int, int, int, str | None, int | None, int | None]


def hand_plays(rec: pb.GameRecord, match: Match | None = None) -> Iterator[list[PlayRow]]:
    """Per hand of a record, its actions in order, one `PlayRow` each: (index (1-based in the
    hand), seat, action, card (text, for a card played), trick (1-based in the hand, for a card
    played), winner (the seat that won that trick; None while unfinished)), from one replay
    through the engine (strict: `RecordError` for a record that does not replay); `match`: the
    record's replay when the caller has it (`verified_match`)."""
    if match is None:
        match = replay_record(rec, check=False)
    played: list[HandResult | Hand] = list(match.results)
    if match.hand is not None and not match.hand.over:
        played.append(match.hand)  # a hand in progress (a stopped match)
    for hand, done in zip(rec.hands, played, strict=False):
        tricks = done.tricks
        t = 0  # the trick the next card belongs to
        in_trick = 0
        rows: list[PlayRow] = []
        for index, (seat, action) in enumerate(zip(hand.seats, hand.actions, strict=True), 1):
            card = trick = winner = None
            if action & 7 == PLAY:
                card = card_str(action >> 3)
                trick = t + 1
                if t < len(tricks):
                    winner = tricks[t].winner
                    in_trick += 1
                    if in_trick == len(tricks[t].cards):
                        t, in_trick = t + 1, 0
            rows.append((index, seat, action, card, trick, winner))
        yield rows


def play_rows(rid: str, rec: pb.GameRecord) -> Iterator[Row]:
    """The actions of a record, one row each (`PLAY_COLUMNS`), with each card's trick and
    who won it (`hand_plays`)."""
    names = [s.name for s in rec.seats]
    for hand, rows in zip(rec.hands, hand_plays(rec), strict=False):
        for index, seat, action, card, trick, winner in rows:
            yield (rid, hand.number, index, seat, names[seat], action_str(action), card, trick,
                   winner)  # fmt: skip


def result_rows(rid: str, rec: pb.GameRecord) -> Iterator[Row]:
    """A record's result, one row per seat (`RESULT_COLUMNS`), from the record's outcome (of
    a record verified: `write_table`)."""
    units = find_game(rec.rules.game).units
    out = rec.outcome
    for seat, (s, score) in enumerate(zip(rec.seats, out.scores, strict=True)):
        values = dict(zip(units, score_from_pb(units, score), strict=True))
        yield (
            rid, rec.rules.game, rec.rules.ruleset, rec.rules.players, seat, s.name, s.team,
            *(values.get(u) for u in UNITS),
            seat in out.winners, out.finished, len(rec.hands), rec.provenance.played_at,
        )  # fmt: skip


TABLES = {"plays": (PLAY_COLUMNS, play_rows), "results": (RESULT_COLUMNS, result_rows)}
# Each column's type in Parquet: s text, i whole number, b yes/no (every one may be empty).
TYPES = {"plays": "siiisssii", "results": "sssiisiiiibbis"}
BATCH = 65_536  # rows written to Parquet at a time


def write_table(
    path: str | Path,
    table: str,
    fmt: str,
    envelopes: Iterable[bytes],
    refuse: Callable[[ArchiveError], None] | None = None,
) -> tuple[int, int]:
    """Write the `table` ("plays" or "results") of the records (envelope bytes) to `path`
    as `fmt` ("csv" or "parquet"); returns (records, rows). Each record is read as verify
    reads it (`verified_match`): one that does not verify (an archive is a file anyone may
    have changed) is an `ArchiveError` naming it, or, with `refuse`, is given to it and left
    out. Parquet needs pyarrow (`pip install pyarrow`): `ArchiveError` without it."""
    columns, rows_of = TABLES[table]
    counts = [0, 0]

    def rows() -> Iterator[Row]:
        for frame in envelopes:
            env = pb.RecordEnvelope.FromString(frame)
            rid = record_id(env.record)
            try:
                rec, _ = verified_match(env.record)
            except RecordError as exc:
                fault = ArchiveError(f"record {rid}: does not verify: {exc} ({exc.code})")
                if refuse is None:
                    raise fault from None
                refuse(fault)
                continue
            counts[0] += 1
            for row in rows_of(rid, rec):
                counts[1] += 1
                yield row

    if fmt == "csv":

        def fill(f: Any) -> None:
            import io

            text = io.TextIOWrapper(f, encoding="utf-8", newline="")
            writer = csv.writer(text)
            writer.writerow(columns)
            writer.writerows(rows())
            text.flush()
            text.detach()

        atomic_write(path, fill)
    else:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ArchiveError("--format parquet needs pyarrow: pip install pyarrow") from None
        types = {"s": pa.string(), "i": pa.int64(), "b": pa.bool_()}
        schema = pa.schema([(n, types[t]) for n, t in zip(columns, TYPES[table], strict=True)])

        def fill_parquet(f: Any) -> None:
            # In batches of rows: memory stays bounded whatever the archive's size.
            source = rows()
            with pq.ParquetWriter(f, schema) as writer:
                while batch := list(itertools.islice(source, BATCH)):
                    data = zip(*batch, strict=True)
                    arrays = [pa.array(v, type=t) for v, t in zip(data, schema.types, strict=True)]
                    writer.write_batch(pa.record_batch(arrays, schema=schema))

        atomic_write(path, fill_parquet)
    return counts[0], counts[1]
