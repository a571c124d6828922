"""The golden records of tests/data/golden/: one small record file per match, and its scores.

    PYTHONPATH=. python scripts/golden.py [--out tests/data/golden] [--only NAME ...]

Each match is held at the referee's own `Table` (referee/server/tables.py: the deals from a
seed, the same engine), seats choosing uniformly among their legal actions with a seeded
random generator, so a record is the same from run to run. Besides finished matches of every
game × ruleset there are matches under non-default options, one a seat resigns, one the
referee stops at its limit of hands, and one imported from a transcript of tests/data/. Each
record is written as `NAME.tapis` (a record file of one unsigned envelope) and its scores
(records/score.py `score_json`) as `NAME.score.json`.

The records are made once, by the code of their day, and kept: tests/records/test_golden.py
checks that the code of today reads, verifies, scores and rebuilds them byte for byte. Run
this again only when a change of the rules or of the record format is meant to change them
(and say so in the commit).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tapis_cartes.records.codec import Provenance, canonical_bytes, envelope, write_envelopes
from tapis_cartes.records.score import score_json
from tapis_cartes.records.transcript import import_transcript, load_transcript
from tapis_cartes.referee.engine import make_rules, new_match
from tapis_cartes.referee.engine.actions import RESIGN, encode
from tapis_cartes.referee.server.limits import Limits
from tapis_cartes.referee.server.tables import Seat, Table, token_hash
from tapis_cartes.v1 import record_pb2 as pb

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "golden"
NAMES = ("Ann", "Bob", "Cat", "Dan", "Eve", "Fay")
PLAYED_AT = "2026-01-01T00:00:00+00:00"


@dataclass(frozen=True)
class Golden:
    """One golden match: its game, ruleset, seats and options; with `resign_after`, seat
    `resign_seat` concedes after that many actions; with `max_hands`, the referee stops the
    match after that many hands."""

    name: str
    game: str
    ruleset: str
    players: int
    options: dict[str, bool | int | str] = field(default_factory=dict)
    resign_after: int | None = None
    resign_seat: int = 0
    max_hands: int | None = None


GOLDEN: tuple[Golden, ...] = (
    Golden("dame-de-pique", "dame-de-pique", "standard", 4),
    Golden(
        "dame-de-pique-options",
        "dame-de-pique",
        "standard",
        4,
        {
            "end_threshold": 50,
            "moon_mode": "subtract_self",
            "qs_breaks_hearts": True,
            "hearts_broken_by": "discarded",
            "dealer_rotation": "counterclockwise",
        },
    ),
    Golden("napoleon", "napoleon", "standard", 4),
    Golden("napoleon-5p-stakes", "napoleon", "standard", 5, {"scoring": "stakes", "deals": 5}),
    Golden(
        "napoleon-short-deck",
        "napoleon",
        "standard",
        3,
        {"short_deck": True, "misere_trump": "first_card", "stop_when_decided": True},
    ),
    Golden("triomphe-individuelle", "triomphe", "individuelle", 2),
    Golden("triomphe-individuelle-4p", "triomphe", "individuelle", 4),
    Golden(
        "triomphe-individuelle-plaisant",
        "triomphe",
        "individuelle",
        3,
        {"regime": "plaisant", "rank_order": "R2"},
    ),
    Golden("triomphe-equipe", "triomphe", "equipe", 4),
    Golden("triomphe-equipe-6p", "triomphe", "equipe", 6, {"regime": "forcat"}),
    Golden("triomphe-as-qui-pille", "triomphe", "as-qui-pille", 3),
    Golden("triomphe-as-qui-pille-4p", "triomphe", "as-qui-pille", 4),
    Golden("imperiale-academie-2p", "imperiale", "academie", 2),
    Golden("imperiale-academie-3p", "imperiale", "academie", 3),
    Golden(
        "imperiale-academie-options",
        "imperiale",
        "academie",
        2,
        {"point_rule": "pips", "cartes_blanches": False, "imperiale_tombee": False},
    ),
    Golden("imperiale-moderne", "imperiale", "moderne", 2),
    Golden(
        "imperiale-moderne-options",
        "imperiale",
        "moderne",
        2,
        {"tombee_mode": "end_of_coup", "cards_scoring": "per_trick"},
    ),
    Golden("resigned-napoleon", "napoleon", "standard", 4, resign_after=30, resign_seat=2),
    Golden("stopped-dame-de-pique", "dame-de-pique", "standard", 4, max_hands=2),
)

# Transcripts of tests/data/ imported as they are (records/transcript.py).
TRANSCRIPTS = ("napoleon-n1",)


def play(golden: Golden) -> pb.RecordEnvelope:
    """The record of one golden match, played at a referee's table."""
    seed = hashlib.sha256(f"golden-{golden.name}".encode()).digest()
    rules = make_rules(golden.game, golden.ruleset, dict(golden.options), golden.players)
    limits = Limits(max_hands=golden.max_hands) if golden.max_hands else Limits()
    table = Table(
        id=f"golden-{golden.name}",
        rules=rules,
        options=dict(golden.options),
        seed=seed,
        created=0.0,
        creator="golden",
        seats=[Seat(NAMES[i], False) for i in range(golden.players)],
        match=new_match(rules),
        limits=limits,
    )
    for i, seat in enumerate(table.seats):
        table.take(i, seat.name, token_hash(str(i)))
    rng = random.Random(golden.name)
    while not table.finished:
        if golden.resign_after is not None and len(table.actions) == golden.resign_after:
            table.apply(golden.resign_seat, encode(RESIGN))
            break
        seat = rng.choice(table.match.to_act())
        table.apply(seat, rng.choice([a for a in table.legal(seat) if a & 7 != RESIGN]))
    rec = table.record(Provenance("golden", golden.name, PLAYED_AT))
    return envelope(canonical_bytes(rec))


def imported(name: str) -> pb.RecordEnvelope:
    """The record of the transcript tests/data/NAME.json."""
    doc = load_transcript(ROOT / "tests" / "data" / f"{name}.json")
    return envelope(import_transcript(doc, f"{name}.json"))


def write(out: Path, name: str, env: pb.RecordEnvelope) -> None:
    write_envelopes(out / f"{name}.tapis", [env])
    scores = score_json(pb.GameRecord.FromString(env.record))
    (out / f"{name}.score.json").write_text(json.dumps(scores, indent=1) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help="folder (default tests/data/golden)")
    ap.add_argument("--only", action="append", metavar="NAME", help="only these records")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    wanted = set(args.only or ())
    for golden in GOLDEN:
        if not wanted or golden.name in wanted:
            write(args.out, golden.name, play(golden))
            print(f"wrote {golden.name}", file=sys.stderr)
    for name in TRANSCRIPTS:
        if not wanted or f"transcript-{name}" in wanted:
            write(args.out, f"transcript-{name}", imported(name))
            print(f"wrote transcript-{name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
