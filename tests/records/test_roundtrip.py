"""Every game, random matches: the record of a live match replays to the same scores, and
record -> bytes -> record -> bytes is identical; `score`, `show` and `verify` work on it."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tapis_cartes.records.codec import (
    Provenance,
    build_record,
    canonical_bytes,
    decode_record,
    envelope,
)
from tapis_cartes.records.render import render_record
from tapis_cartes.records.score import score_json
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.engine import Match, make_rules, new_match
from tapis_cartes.referee.engine.cards import iter_cards

CASES: list[tuple[str, dict[str, Any], int]] = [
    ("dame-de-pique", {"end_threshold": 40}, 4),
    ("dame-de-pique", {"moon_mode": "subtract_self", "end_threshold": 30}, 4),
    ("napoleon", {"players": 3, "deals": 4}, 3),
    ("napoleon", {"players": 5, "short_deck": True, "scoring": "stakes", "deals": 5}, 5),
    ("napoleon", {"players": 10, "misere_trump": "first_card", "deals": 3}, 10),
    ("napoleon", {"allpass_redeal_same_dealer": True, "stop_when_decided": True}, 4),
]


def play_match(game: str, options: dict[str, Any], seed: int) -> Match:
    rng = random.Random(seed)
    m = new_match(make_rules(game, options=options))
    dealer = rng.randrange(m.players)
    while not m.finished:
        expected = m.expected_dealer()
        dealer = dealer if expected is None else expected
        deck = list(iter_cards(m.pack))
        rng.shuffle(deck)
        m.start_hand(dealer, m.deal_deck(dealer, deck))
        while m.to_act():
            seat = rng.choice(m.to_act())
            m.apply(seat, rng.choice(m.legal_actions(seat)))
    return m


@pytest.mark.parametrize(("game", "options", "players"), CASES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_record_round_trip(game: str, options: dict[str, Any], players: int, seed: int) -> None:
    m = play_match(game, options, seed)
    names = [f"P{i}" for i in range(players)]
    record = build_record(m, names, Provenance("test", "round trip"))
    data = canonical_bytes(record)
    back = decode_record(data)
    assert back == record
    assert canonical_bytes(back) == data
    result = verify_envelope(envelope(data))
    assert result.ok, result.error
    assert result.hands == len(m.results)
    doc = score_json(back)
    assert doc["finished"] is True
    assert doc["winners"] == list(m.winners)
    assert [s["points"] for s in doc["scores"]] == [s[0] for s in m.scores]
    text = render_record(back, data)
    assert text.count("\nHand ") == len(m.results)
