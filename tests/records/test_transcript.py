"""Transcript import (TRANSCRIPT.md): the examples import and score as RULES.md says, and
every kind of wrong transcript is refused at the right place with its message."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tapis_cartes.records.codec import decode_record
from tapis_cartes.records.score import score_json
from tapis_cartes.records.transcript import import_transcript, load_transcript
from tapis_cartes.referee.engine import TranscriptError
from tests.commands import DATA
from tests.records.transcripts import refused


def dp1() -> dict[str, Any]:
    return json.loads((DATA / "dame-de-pique-dp1.json").read_text())


def n1() -> dict[str, Any]:
    return json.loads((DATA / "napoleon-n1.json").read_text())


def test_dp1_scores() -> None:
    rec = decode_record(import_transcript(dp1()))
    scores = score_json(rec)
    assert scores["scores"] == [{"points": 8}, {"points": 0}, {"points": 14}, {"points": 4}]
    assert scores["finished"] is False and scores["winners"] == []
    assert scores["hands"][0]["lines"][2] == {
        "seat": 2,
        "kind": "penalty",
        "points": 14,
        "rule": "DP.SCORE",
    }


def test_n1_scores() -> None:
    scores = score_json(decode_record(import_transcript(n1())))
    assert scores["game"] == "napoleon"
    assert scores["hands"][0]["lines"] == [
        {"seat": 3, "kind": "contract-made", "points": 3, "rule": "NAP.SCORE"}
    ]
    assert [s["points"] for s in scores["scores"]] == [0, 0, 0, 3]


def test_import_is_deterministic() -> None:
    assert import_transcript(dp1()) == import_transcript(dp1())


def test_alternative_card_forms_give_the_same_record() -> None:
    doc = dp1()
    french = copy.deepcopy(doc)
    table = {"J": "V", "Q": "D", "K": "R", "10": "T"}
    symbols = {"S": "♠", "H": "♥", "D": "♦", "C": "♣"}

    def frenchify(card: str) -> str:
        rank, suit = card[:-1], card[-1]
        return table.get(rank, rank) + symbols[suit]

    french["hands"][0]["deal"]["hands"] = [
        [frenchify(c) for c in h] for h in doc["hands"][0]["deal"]["hands"]
    ]
    for a in french["hands"][0]["actions"]:
        if "play" in a:
            a["play"] = frenchify(a["play"])
        else:
            a["pass"] = [frenchify(c) for c in a["pass"]]
    french["game"] = "hearts"
    assert import_transcript(french) == import_transcript(doc)


def test_deck_instead_of_deal() -> None:
    doc = dp1()
    hands = doc["hands"][0]["deal"]["hands"]
    dealer = doc["hands"][0]["dealer"]
    # One card at a time from the seat after the dealer: rebuild the pack that gives the deal.
    deck = [
        hands[(k - dealer - 1) % 4][i] for i in range(13) for k in range(dealer + 1, dealer + 5)
    ]
    with_deck = dp1()
    del with_deck["hands"][0]["deal"]
    with_deck["hands"][0]["deck"] = deck
    rec = decode_record(import_transcript(with_deck))
    assert rec.hands[0].deal.hands == decode_record(import_transcript(doc)).hands[0].deal.hands
    assert len(rec.hands[0].deal.deck) == 52
    assert score_json(rec)["scores"][2] == {"points": 14}


def test_start_continues_a_match() -> None:
    doc = dp1()
    doc["start"] = {
        "hand_number": 5,
        "scores": [{"points": 90}, {"points": 3}, {"points": 0}, {"points": 50}],
    }
    scores = score_json(decode_record(import_transcript(doc)))
    assert [s["points"] for s in scores["scores"]] == [98, 3, 14, 54]
    assert scores["hands"][0]["number"] == 5
    # 98 < 100: not finished. With one more point for North it would be.
    doc["start"]["scores"][0]["points"] = 92
    scores = score_json(decode_record(import_transcript(doc)))
    assert scores["finished"] is True and scores["winners"] == [1]


# --- refusals -----------------------------------------------------------------------------


def test_illegal_play_names_hand_action_seat_reason_and_rule() -> None:
    doc = dp1()
    # East (seat 1), void in clubs on trick 1, discards a heart instead of AS.
    actions = doc["hands"][0]["actions"]
    assert actions[7] == {"seat": 1, "play": "AS"}
    actions[7] = {"seat": 1, "play": "6H"}
    msg = refused(doc)
    assert msg.startswith("hand 1, action 8 (seat 1, play 6H): ")
    assert msg.endswith("[DP.FIRST-TRICK]")
    assert "legal: " in msg


def test_out_of_turn() -> None:
    doc = dp1()
    doc["hands"][0]["actions"][5]["seat"] = 0
    msg = refused(doc)
    assert msg.startswith("hand 1, action 6 (seat 0, play 6C): seat 0 may not act now")
    assert "waiting for seat 3" in msg


def test_pass_of_a_card_not_held() -> None:
    doc = dp1()
    doc["hands"][0]["actions"][0]["pass"] = ["AS", "5H", "KD"]
    msg = refused(doc)
    assert msg.startswith("hand 1, action 1 (seat 0, pass AS 5H KD): seat 0 does not hold KD")
    assert msg.endswith("[DP.PASS]")


def test_wrong_card_count() -> None:
    doc = dp1()
    doc["hands"][0]["deal"]["hands"][2].pop()
    assert refused(doc) == (
        "hand 1, deal: seat 2 has 12 cards (10S 9S JH 3H AD 6D 4D AC 10C 4C 3C 2C), "
        "expected 13 [DP.DEAL]"
    )


def test_duplicate_card_across_seats() -> None:
    doc = dp1()
    doc["hands"][0]["deal"]["hands"][0][0] = "QS"  # also West's
    assert refused(doc) == "hand 1, deal: QS is dealt twice (seat 0 and seat 3) [DP.DEAL]"


def test_duplicate_card_in_one_seat() -> None:
    doc = dp1()
    doc["hands"][0]["deal"]["hands"][0][1] = "5C"
    assert refused(doc) == "hand 1, deal.hands[0]: 5C appears twice"


def test_malformed_card() -> None:
    doc = dp1()
    doc["hands"][0]["deal"]["hands"][1][4] = "ZQ"
    msg = refused(doc)
    assert msg.startswith("hand 1, deal.hands[1][4]: 'ZQ' is not a card")


def test_malformed_action() -> None:
    doc = dp1()
    doc["hands"][0]["actions"][4] = {"seat": 2, "play": "2C", "bid": "two"}
    assert refused(doc).startswith("hand 1, action 5 (seat 2): an action needs exactly one of")
    doc["hands"][0]["actions"][4] = {"seat": 2, "lead": "2C"}
    assert refused(doc).startswith("hand 1, action 5 (seat 2): unknown action key 'lead'")
    doc["hands"][0]["actions"][4] = {"play": "2C"}
    assert refused(doc).startswith("hand 1, action 5: expected an object with 'seat'")
    doc["hands"][0]["actions"][4] = {"seat": 7, "play": "2C"}
    assert refused(doc) == "hand 1, action 5, seat: 7 is out of range (0..3)"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"colour": "red"}, "options: unknown option 'colour' for dame-de-pique; known options: "),
        ({"end_threshold": "100"}, "options: option 'end_threshold' of dame-de-pique: '100' "),
        ({"moon_mode": "double"}, "allowed: add_to_others, subtract_self"),
        ({"qs_breaks_hearts": 1}, "allowed: true, false"),
    ],
)
def test_bad_options(options: dict[str, Any], expected: str) -> None:
    doc = dp1()
    doc["options"] = options
    assert expected in refused(doc)


def test_unknown_game_and_players() -> None:
    doc = dp1()
    doc["game"] = "bridge"
    assert refused(doc).startswith("game: unknown game 'bridge'; known games: ")
    doc = dp1()
    doc["players"] = ["A", "B", "C"]
    assert "exactly 4 players; 3 are named" in refused(doc)
    doc = n1()
    doc["options"] = {"players": 5}
    assert refused(doc) == "players: option 'players' is 5 but 4 players are named"


def test_bad_format_and_shape() -> None:
    doc = dp1()
    doc["format"] = "tapis-transcript/2"
    assert refused(doc) == "format: expected 'tapis-transcript/1', got \"tapis-transcript/2\""
    doc = dp1()
    doc["extra"] = 1
    assert refused(doc) == "transcript: unknown key 'extra'"
    doc = dp1()
    doc["hands"][0]["deck"] = []
    assert refused(doc) == "hand 1: give exactly one of 'deal' and 'deck'"


def test_unfinished_hand_is_refused() -> None:
    doc = dp1()
    del doc["hands"][0]["actions"][-3:]
    assert refused(doc) == (
        "hand 1: the hand is not finished after 53 actions (waiting for seat 0)"
    )


def test_actions_after_the_end_of_a_hand() -> None:
    doc = dp1()
    doc["hands"][0]["actions"].append({"seat": 0, "play": "2C"})
    assert refused(doc) == "hand 1, action 57: the hand is already over: no further action in it"


def test_dealer_out_of_rotation() -> None:
    doc = dp1()
    second = copy.deepcopy(doc["hands"][0])
    second["dealer"] = 2  # after West (3) comes North (0)
    doc["hands"].append(second)
    assert refused(doc) == (
        "hand 2, dealer: the dealer of hand 2 must be seat 0, not seat 2 [DP.DEAL]"
    )


def test_hand_after_the_match_ended() -> None:
    doc = dp1()
    doc["start"] = {
        "hand_number": 1,
        "scores": [{"points": 95}, {"points": 0}, {"points": 0}, {"points": 0}],
    }
    extra = copy.deepcopy(doc["hands"][0])
    extra["dealer"] = 0
    doc["hands"].append(extra)
    assert refused(doc).startswith("hand 2: the match is already over (a total reached 100)")


def test_napoleon_illegal_bid() -> None:
    doc = n1()
    doc["hands"][0]["actions"][3] = {"seat": 3, "bid": "two"}
    msg = refused(doc)
    assert msg.startswith("hand 1, action 4 (seat 3, bid two): ")
    assert msg.endswith("[NAP.BID]")


def test_napoleon_card_outside_short_pack() -> None:
    doc = n1()
    doc["options"] = {"short_deck": True}
    msg = refused(doc)
    assert msg.startswith("hand 1, deal: ") and msg.endswith("[NAP.DECK]")
    assert "is not in" in msg


def test_load_transcript_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "tapis-transcript/1",\n "game": }')
    with pytest.raises(TranscriptError) as exc:
        load_transcript(bad)
    assert str(exc.value) == f"{bad}: not valid JSON: Expecting value at line 2, column 10"
    with pytest.raises(TranscriptError) as exc:
        load_transcript(tmp_path / "missing.json")
    assert "cannot read" in str(exc.value)
    arr = tmp_path / "array.json"
    arr.write_text("[]")
    with pytest.raises(TranscriptError) as exc:
        load_transcript(arr)
    assert "a transcript is a JSON object, not an array" in str(exc.value)  # (JSON's words)
    for text, said in [("null", "not null"), ('"x"', "not a string"), ("4", "not a number")]:
        arr.write_text(text)
        with pytest.raises(TranscriptError, match=said):
            load_transcript(arr)
    arr.write_text('{"a": "x\x01"}')
    with pytest.raises(TranscriptError) as exc:
        load_transcript(arr)
    assert str(exc.value).endswith("Invalid control character at line 1, column 9")  # one "at"


def test_a_transcript_of_millions_of_values_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """Each value read is a Python object: 62 MB of cards in one list took 1.1 GB to
    refuse. A match the referee allows has about 300,000 commas."""
    from tapis_cartes.records.transcript import MAX_COMMAS

    big = tmp_path / "big.json"
    big.write_text('{"hands": [' + ",".join(["0"] * (MAX_COMMAS + 2)) + "]}")
    with pytest.raises(TranscriptError, match=f"{MAX_COMMAS + 1:,} commas"):
        load_transcript(big)
