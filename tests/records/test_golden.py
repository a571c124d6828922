"""Golden records (tests/data/golden/, made by scripts/golden.py with the code of their day):
the code of today must read each one, verify it, write it back to the same bytes, rebuild it
byte for byte from its deals and actions, and score it as its stored `.score.json` says.

A change that alters one of these fails here: either it is a regression, or it is meant (a
rule or the record format changed on purpose) and the records are made again."""

from __future__ import annotations

import json

import pytest

from tapis_cartes.records.codec import (
    canonical_bytes,
    decode_record,
    encode_file,
    read_envelopes,
    record_id,
)
from tapis_cartes.records.score import score_json
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.engine import GAMES
from tapis_cartes.v1 import record_pb2 as pb
from tests.commands import DATA
from tests.records.replaying import rebuilt, rules_of

GOLDEN = DATA / "golden"
NAMES = sorted(p.name.removesuffix(".tapis") for p in GOLDEN.glob("*.tapis"))


def _record(name: str) -> tuple[bytes, pb.RecordEnvelope]:
    data = (GOLDEN / f"{name}.tapis").read_bytes()
    (env,) = read_envelopes(GOLDEN / f"{name}.tapis")
    return data, env


def test_every_game_and_ruleset_has_a_golden_record() -> None:
    seen = set()
    for name in NAMES:
        rules = decode_record(_record(name)[1].record).rules
        seen.add((rules.game, rules.ruleset))
    assert seen == {(game, r) for game, spec in GAMES.items() for r in spec.rulesets}
    assert all((GOLDEN / f"{name}.score.json").is_file() for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_golden_record_reads_and_writes_back_identical(name: str) -> None:
    data, env = _record(name)
    assert encode_file([env]) == data
    rec = decode_record(env.record)
    assert canonical_bytes(rec) == env.record


@pytest.mark.parametrize("name", NAMES)
def test_golden_record_verifies(name: str) -> None:
    _, env = _record(name)
    result = verify_envelope(env)
    assert result.ok, result.error
    assert result.record_id == record_id(env.record)
    assert result.hands == len(decode_record(env.record).hands)
    assert result.signature == "none"


@pytest.mark.parametrize("name", NAMES)
def test_golden_record_is_rebuilt_from_its_deals_and_actions(name: str) -> None:
    """The engine, given each hand's deal and actions, and `build_record`, given the
    record's free fields (names, provenance, packs, deal source), make the same bytes."""
    _, env = _record(name)
    rec = decode_record(env.record)
    assert rules_of(rec.rules).digest == rec.rules.digest
    assert rebuilt(rec) == env.record


@pytest.mark.parametrize("name", NAMES)
def test_golden_record_scores_as_stored(name: str) -> None:
    _, env = _record(name)
    expected = json.loads((GOLDEN / f"{name}.score.json").read_text())
    assert score_json(decode_record(env.record)) == expected
