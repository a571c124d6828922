"""Actions (referee/engine/actions.py): every key of TRANSCRIPT.md's action table, refusals
with messages naming the key, the int encoding, the round trip to the transcript form, and
the text for a person."""

from __future__ import annotations

from typing import Any

import pytest

from tapis_cartes.referee.engine.actions import (
    ABANDON,
    ABANDON_WORDS,
    BID,
    BID_WORDS,
    KIND_NAMES,
    PASS,
    PILLE,
    PILLE_STOP,
    PLAY,
    RESIGN,
    VOLE,
    VOLE_WORDS,
    action_str,
    action_to_json,
    encode,
    kind_of,
    parse_action,
    payload_of,
)
from tapis_cartes.referee.engine.cards import card_str, parse_card
from tapis_cartes.referee.engine.errors import InvalidAction, TapisError


def c(text: str) -> int:
    return parse_card(text)


# --- the table of TRANSCRIPT.md -----------------------------------------------------------


def test_kind_names_are_the_transcript_keys() -> None:
    assert KIND_NAMES == ("play", "pass", "bid", "vole", "abandon", "pille", "resign")
    assert tuple(range(7)) == (PLAY, PASS, BID, VOLE, ABANDON, PILLE, RESIGN)
    assert BID_WORDS == (
        "pass",
        "two",
        "three",
        "misere",
        "four",
        "nap",
        "wellington",
        "blucher",
    )
    assert VOLE_WORDS == ("stop", "continue")
    assert ABANDON_WORDS == ("offer", "accept", "refuse")


@pytest.mark.parametrize(
    ("entry", "kind", "payload"),
    [
        ({"seat": 0, "play": "QS"}, PLAY, c("QS")),
        ({"play": "10H"}, PLAY, c("10H")),
        ({"seat": 3, "play": "D♠"}, PLAY, c("QS")),
        # pass: the three card ids, lowest first, six bits each (AS=12, 2H=13, 5H=16)
        ({"seat": 1, "pass": ["2H", "5H", "AS"]}, PASS, 12 | 13 << 6 | 16 << 12),
        ({"seat": 2, "pass": ["QS", "R♥", "TD"]}, PASS, 10 | 24 << 6 | 34 << 12),
        *[({"seat": 0, "bid": w}, BID, i) for i, w in enumerate(BID_WORDS)],
        ({"seat": 0, "vole": "stop"}, VOLE, 0),
        ({"seat": 0, "vole": "continue"}, VOLE, 1),
        ({"seat": 1, "abandon": "offer"}, ABANDON, 0),
        ({"seat": 0, "abandon": "accept"}, ABANDON, 1),
        ({"seat": 0, "abandon": "refuse"}, ABANDON, 2),
        ({"seat": 2, "pille": "7C"}, PILLE, c("7C")),
        ({"seat": 2, "pille": "stop"}, PILLE, PILLE_STOP),
        ({"seat": 0, "resign": True}, RESIGN, 0),
    ],
)
def test_parse_every_action_key(entry: dict[str, Any], kind: int, payload: int) -> None:
    action = parse_action(entry)
    assert kind_of(action) == kind
    assert payload_of(action) == payload
    assert action == encode(kind, payload)


def test_encoding_is_payload_shifted_over_kind() -> None:
    # proto/tapis/v1/record.proto: an action is `payload << 3 | kind`, a play's payload
    # being the card id (so a play is card * 8, not the card id itself).
    for card in range(52):
        assert parse_action({"play": card_str(card)}) == card << 3 | PLAY == card * 8
    assert parse_action({"bid": "blucher"}) == 7 << 3 | BID
    assert parse_action({"abandon": "refuse"}) == 2 << 3 | ABANDON
    assert parse_action({"resign": True}) == RESIGN
    for kind in range(7):
        for payload in (0, 1, 51, PILLE_STOP, (1 << 52) - 1):
            action = encode(kind, payload)
            assert (kind_of(action), payload_of(action)) == (kind, payload)


def test_pille_stop_is_not_a_card() -> None:
    assert PILLE_STOP == 63  # record.proto: pille payload 63 = stop
    assert parse_action({"pille": "stop"}) != parse_action({"pille": "AS"})


def test_seat_is_ignored_by_parse_action() -> None:
    assert parse_action({"seat": 3, "play": "QS"}) == parse_action({"play": "QS"})
    assert parse_action({"seat": 0, "bid": "nap"}) == parse_action({"bid": "nap"})


# --- refusals -----------------------------------------------------------------------------


def refuse(entry: Any) -> str:
    with pytest.raises(InvalidAction) as info:
        parse_action(entry)
    assert isinstance(info.value, TapisError)
    return str(info.value)


def test_two_keys_are_refused() -> None:
    msg = refuse({"seat": 0, "play": "QS", "bid": "two"})
    assert "'play'" in msg
    assert "'bid'" in msg
    assert "exactly one" in msg


def test_no_key_is_refused() -> None:
    for entry in ({"seat": 0}, {}):
        msg = refuse(entry)
        assert "exactly one" in msg
        for key in KIND_NAMES:
            assert key in msg


def test_unknown_key_is_refused() -> None:
    msg = refuse({"seat": 0, "discard": "QS"})
    assert "'discard'" in msg
    for key in KIND_NAMES:
        assert key in msg
    assert "'extra'" in refuse({"seat": 0, "play": "QS", "extra": 1})


@pytest.mark.parametrize(
    "value",
    [
        ["QS", "KS"],
        ["QS", "KS", "AS", "JS"],
        [],
        "QS KS AS",
        None,
    ],
)
def test_pass_needs_three_cards(value: Any) -> None:
    msg = refuse({"seat": 0, "pass": value})
    assert "'pass'" in msg
    assert "three" in msg
    assert repr(value) in msg


@pytest.mark.parametrize("value", [["QS", "QS", "AS"], ["Q♠", "QS", "AS"], ["DS", "QS", "VS"]])
def test_pass_refuses_duplicate_cards(value: list[str]) -> None:
    msg = refuse({"seat": 0, "pass": value})
    assert "'pass'" in msg
    assert "twice" in msg


def test_pass_with_a_bad_card_quotes_it() -> None:
    assert "'1X'" in refuse({"seat": 0, "pass": ["QS", "1X", "AS"]})


@pytest.mark.parametrize("value", ["five", "", "pas", 3, None, True, ["nap"]])
def test_bad_bid_word(value: Any) -> None:
    msg = refuse({"seat": 0, "bid": value})
    assert "'bid'" in msg
    assert repr(value) in msg
    for word in BID_WORDS:
        assert word in msg


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("vole", "maybe", VOLE_WORDS),
        ("vole", True, VOLE_WORDS),
        ("abandon", "yes", ABANDON_WORDS),
        ("abandon", 1, ABANDON_WORDS),
    ],
)
def test_bad_vole_and_abandon_words(key: str, value: Any, words: tuple[str, ...]) -> None:
    msg = refuse({"seat": 0, key: value})
    assert repr(key) in msg
    assert repr(value) in msg
    for word in words:
        assert word in msg


@pytest.mark.parametrize("value", [False, "true", 1, None])
def test_resign_must_be_true(value: Any) -> None:
    msg = refuse({"seat": 0, "resign": value})
    assert "'resign'" in msg
    assert "true" in msg
    assert repr(value) in msg


@pytest.mark.parametrize(("key", "value"), [("play", "1X"), ("play", None), ("pille", "go")])
def test_bad_card_is_refused_quoting_it(key: str, value: Any) -> None:
    assert repr(value) in refuse({"seat": 0, key: value})


# --- round trip and text ------------------------------------------------------------------

CANONICAL = [
    {"play": "QS"},
    {"play": "10H"},
    {"play": "2C"},
    {"pass": ["AS", "2H", "5H"]},  # canonical order: ♠ ♥ ♦ ♣, low to high within a suit
    {"pass": ["QS", "KH", "10D"]},
    *[{"bid": w} for w in BID_WORDS],
    {"vole": "stop"},
    {"vole": "continue"},
    {"abandon": "offer"},
    {"abandon": "accept"},
    {"abandon": "refuse"},
    {"pille": "7C"},
    {"pille": "stop"},
    {"resign": True},
]


@pytest.mark.parametrize("entry", CANONICAL, ids=lambda e: str(e))
def test_round_trip(entry: dict[str, Any]) -> None:
    action = parse_action(entry)
    assert action_to_json(action) == entry
    assert parse_action(action_to_json(action)) == action


def test_round_trip_of_every_play_and_pille_card() -> None:
    for card in range(52):
        text = card_str(card)
        for key in ("play", "pille"):
            assert action_to_json(parse_action({key: text})) == {key: text}


@pytest.mark.parametrize(
    ("entry", "canonical"),
    [
        ({"play": "TS"}, {"play": "10S"}),
        ({"play": "DD"}, {"play": "QD"}),
        ({"play": "10♥"}, {"play": "10H"}),
        ({"play": "V♣"}, {"play": "JC"}),
        ({"pille": "R♦"}, {"pille": "KD"}),
        ({"pass": ["5H", "AS", "2H"]}, {"pass": ["AS", "2H", "5H"]}),
        ({"pass": ["10♦", "R♥", "D♠"]}, {"pass": ["QS", "KH", "10D"]}),
        ({"seat": 2, "bid": "nap"}, {"bid": "nap"}),
    ],
)
def test_output_is_canonical(entry: dict[str, Any], canonical: dict[str, Any]) -> None:
    assert action_to_json(parse_action(entry)) == canonical


@pytest.mark.parametrize(
    ("entry", "text"),
    [
        ({"play": "QS"}, "play QS"),
        ({"play": "T♥"}, "play 10H"),
        ({"pass": ["5H", "2H", "AS"]}, "pass AS 2H 5H"),
        ({"bid": "nap"}, "bid nap"),
        ({"bid": "pass"}, "bid pass"),
        ({"vole": "continue"}, "vole continue"),
        ({"abandon": "offer"}, "abandon offer"),
        ({"pille": "7H"}, "pille 7H"),
        ({"pille": "stop"}, "pille stop"),
        ({"resign": True}, "resign"),
    ],
)
def test_action_str(entry: dict[str, Any], text: str) -> None:
    assert action_str(parse_action(entry)) == text
