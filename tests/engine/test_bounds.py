"""Bounds (referee/engine/options.py, base.py; issue 10 item 1): every int option has a range
(`int_range`) and a value outside it is refused naming the key and the range; the start of a
match is bounded; no hand is numbered above 2**32 - 1; matches at the extreme allowed option
values are played to their end and every score stays within the bound options.py derives,
far inside a signed 64-bit integer; messages quote at most a short prefix of what they were
given; the rules digest of existing values is unchanged."""

from __future__ import annotations

import random
import typing
from typing import Any

import pytest

from tapis_cartes.records.codec import (
    Provenance,
    build_record,
    canonical_bytes,
    decode_record,
    envelope,
)
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.engine import (
    GAMES,
    Match,
    Start,
    make_rules,
    new_match,
    parse_action,
    parse_card,
)
from tapis_cartes.referee.engine.actions import PLAY, encode
from tapis_cartes.referee.engine.errors import IllegalAction, InvalidAction, RulesError, TapisError
from tapis_cartes.referee.engine.options import (
    HAND_DELTA_MAX,
    HAND_NUMBER_MAX,
    SCORE_MAX,
    START_HAND_MAX,
    START_SCORE_MAX,
    GameOptions,
    int_range,
)
from tests.engine.playing import deal_next, play_to_end

# (game, ruleset, key): the range, as options.py's docstring argues it.
RANGES = {
    ("dame-de-pique", "standard", "end_threshold"): (1, 1000),
    ("napoleon", "standard", "players"): (3, 10),
    ("napoleon", "standard", "deals"): (1, 1000),
    ("imperiale", "academie", "players"): (2, 3),
    ("imperiale", "academie", "target_fiches"): (1, 100),
    ("imperiale", "academie", "trump_major_value"): (1, 2),
    ("imperiale", "academie", "capot_fiches"): (0, 10),
    ("imperiale", "academie", "packet"): (3, 4),
    ("imperiale", "moderne", "players"): (2, 2),
    ("imperiale", "moderne", "target_fiches"): (1, 100),
    **{
        ("triomphe", ruleset, key): bounds
        for ruleset, players, hand_size in (
            ("individuelle", (2, 6), (1, 15)),
            ("equipe", (4, 6), (1, 7)),
            ("as-qui-pille", (3, 6), (1, 10)),
        )
        for key, bounds in (
            ("players", players),
            ("hand_size", hand_size),
            ("target", (1, 100)),
            ("vole_value", (1, 100)),
            ("vole_fail_penalty", (-100, 0)),
            ("refused_abandon_vole_value", (1, 100)),
        )
    },
}
# The most a seat's score moves in one hand, by game (options.py's docstring).
HAND_DELTA = {"dame-de-pique": 26, "napoleon": 180, "triomphe": 100, "imperiale": 40}
INT_OPTIONS = [
    (name, ruleset, model, key)
    for name, spec in GAMES.items()
    for ruleset, model in spec.rulesets.items()
    for key in model.model_fields
    if int_range(model, key) is not None
]


def _range_text(low: int, high: int) -> str:
    return f"{low}, {high}" if high == low + 1 else str(low) if low == high else f"{low} to {high}"


# --- the ranges ---------------------------------------------------------------------------


def test_every_int_option_has_its_range_and_the_others_none() -> None:
    seen = {}
    for name, spec in GAMES.items():
        for ruleset, model in spec.rulesets.items():
            defaults = make_rules(name, ruleset).option_values()
            for key, field in model.model_fields.items():
                ann = field.annotation
                is_int = ann is int or (ann is not bool and int in typing.get_args(ann))
                bounds = int_range(model, key)
                if not is_int:
                    assert bounds is None, key
                    continue
                assert bounds is not None, key
                seen[(name, ruleset, key)] = bounds
                low, high = bounds
                assert low <= defaults[key] <= high, (name, ruleset, key)
            assert int_range(model, "no-such-key") is None
    assert seen == RANGES


def test_the_score_bound_fits_a_signed_64_bit_integer() -> None:
    assert START_SCORE_MAX + HAND_NUMBER_MAX * HAND_DELTA_MAX == SCORE_MAX < 2**63
    assert max(HAND_DELTA.values()) <= HAND_DELTA_MAX
    assert HAND_NUMBER_MAX == 2**32 - 1  # the record's uint32 hand number


@pytest.mark.parametrize(
    ("name", "ruleset", "model", "key"),
    INT_OPTIONS,
    ids=[f"{n}-{r}-{k}" for n, r, _, k in INT_OPTIONS],
)
def test_values_just_outside_the_range_are_refused_naming_it(
    name: str, ruleset: str, model: type[GameOptions], key: str
) -> None:
    bounds = int_range(model, key)
    assert bounds is not None
    low, high = bounds
    for value in (low - 1, high + 1, -(2**63), 2**63 - 1, 9223372036854775000, 2**4096):
        with pytest.raises(RulesError) as info:
            make_rules(name, ruleset, {key: value})
        message = str(info.value)
        assert info.value.key == key
        assert f"option {key!r}" in message and f"allowed: {_range_text(low, high)}" in message
        assert len(message) < 200
    # Each end is a possible game (with the number of players it needs).
    for value in (low, high):
        assert _accepted(name, ruleset, model, {key: value}), (key, value)


def _accepted(name: str, ruleset: str, model: type[GameOptions], options: dict[str, Any]) -> bool:
    counts = int_range(model, "players") if "players" not in options else None
    tries = [dict(options)]
    if counts is not None:
        tries += [{**options, "players": n} for n in range(counts[0], counts[1] + 1)]
    for given in tries:
        try:
            make_rules(name, ruleset, given)
        except RulesError:
            continue
        return True
    return False


def test_the_brief_example_and_a_wrong_type() -> None:
    with pytest.raises(RulesError) as info:
        make_rules("triomphe", "individuelle", {"target": 9223372036854775000})
    assert str(info.value) == (
        "option 'target' of triomphe (individuelle): 9223372036854775000 is not allowed; "
        "allowed: 1 to 100"
    )
    with pytest.raises(RulesError) as info:
        make_rules("hearts", options={"end_threshold": "100"})
    assert str(info.value).endswith("'100' is not allowed; expected an integer from 1 to 1000")
    with pytest.raises(RulesError) as info:
        make_rules("imperiale", "academie", {"trump_major_value": 3})
    assert str(info.value).endswith("3 is not allowed; allowed: 1, 2")


def test_combination_checks_stay_inside_the_ranges() -> None:
    """`check(players)` refuses only combinations: hand sizes the range allows for some
    number of players, an odd team game, plaisant with two players or in teams."""
    assert make_rules("triomphe", "individuelle", {"hand_size": 15}).players == 2
    with pytest.raises(RulesError, match="1 to 5 each"):
        make_rules("triomphe", "individuelle", {"hand_size": 15, "players": 6})
    assert make_rules("triomphe", "equipe", {"hand_size": 7}).players == 4
    with pytest.raises(RulesError, match="1 to 5 each"):
        make_rules("triomphe", "equipe", {"hand_size": 7, "players": 6})
    assert make_rules("triomphe", "as-qui-pille", {"hand_size": 10}).players == 3
    with pytest.raises(RulesError, match="2 v 2 or 3 v 3"):
        make_rules("triomphe", "equipe", {"players": 5})


# --- the start of a match -----------------------------------------------------------------


@pytest.mark.parametrize("number", [0, -1, START_HAND_MAX + 1, 2**32 - 1, 2**64, -(2**4096)])
def test_a_start_hand_number_out_of_range_is_refused(number: int) -> None:
    with pytest.raises(RulesError) as info:
        new_match(make_rules("hearts"), Start(number))
    assert info.value.key == "hand_number"
    assert f"allowed: 1 to {START_HAND_MAX}" in str(info.value)


def test_start_scores_are_bounded_and_shaped() -> None:
    rules = make_rules("hearts")
    edge = START_SCORE_MAX
    # (a total at the threshold, 100, would end the match before it begins: DP.END)
    m = new_match(rules, Start(START_HAND_MAX, ((-edge,), (-edge,), (0,), (99,))))
    assert m.hand_number == START_HAND_MAX and m.scores[0] == (-edge,)
    refused = [
        ((edge + 1,), (0,), (0,), (0,)),
        ((0,), (0,), (0,), (-(2**63),)),
        ((0,), (0,), (0,)),  # three seats for four
        ((0, 0), (0, 0), (0, 0), (0, 0)),  # two units for one
    ]
    for scores in refused:
        with pytest.raises(RulesError) as info:
            new_match(rules, Start(1, scores))
        assert info.value.key == "scores", scores
    imperiale = make_rules("imperiale", "academie")
    with pytest.raises(RulesError) as info:
        new_match(imperiale, Start(1, ((0,), (0,))))
    assert info.value.key == "scores"
    # The games' own start rules still apply within the bounds.
    with pytest.raises(RulesError) as info:
        new_match(imperiale, Start(1, ((0, 6), (0, 0))))
    assert info.value.key == "start"
    with pytest.raises(RulesError) as info:
        new_match(make_rules("nap"), Start(9))
    assert info.value.key == "deals"
    triomphe = new_match(make_rules("triomphe"), Start(1, ((-edge,), (4,))))
    assert triomphe.scores == [(-edge,), (4,)]


def test_no_hand_is_numbered_above_what_a_record_holds() -> None:
    rules = make_rules("hearts")
    m = new_match(rules)
    m.first_hand_number = HAND_NUMBER_MAX  # a match that has come this far
    rng = random.Random(1)
    deal_next(m, rng)
    assert m.hand is not None and m.hand.number == HAND_NUMBER_MAX
    while to_act := m.to_act():
        seat = rng.choice(to_act)
        m.step(seat, rng.choice(m.legal_actions(seat)))
    if not m.finished:
        with pytest.raises(IllegalAction) as info:
            deal_next(m, rng)
        assert info.value.code == "match-over"
        assert str(HAND_NUMBER_MAX) in str(info.value)


# --- matches at the extreme allowed values ------------------------------------------------


def extreme_cases() -> list[tuple[str, str, str, int | None, dict[str, Any]]]:
    """Every game × ruleset with each int option at its least (or greatest) value, at the
    least and the greatest number of players (the hand size cut to what they allow)."""
    out = []
    for name, spec in GAMES.items():
        for ruleset, model in spec.rulesets.items():
            counts = int_range(model, "players")
            for end in ("min", "max"):
                options = {
                    key: bounds[0] if end == "min" else bounds[1]
                    for key in model.model_fields
                    if key != "players" and (bounds := int_range(model, key)) is not None
                }
                for players in sorted(set(counts)) if counts else [None]:
                    given = dict(options)
                    if players is not None:
                        given["players"] = players
                    if "hand_size" in given and players is not None:
                        given["hand_size"] = min(given["hand_size"], 31 // players)
                    if name == "napoleon":
                        given["scoring"] = "stakes"  # Napoléon's largest moves
                    out.append((name, ruleset, end, players, given))
    return out


def _case_id(case: tuple[str, str, str, int | None, dict[str, Any]]) -> str:
    name, ruleset, end, players, _ = case
    return f"{name}-{ruleset}-{end}-{players}p"


def _check_scores(m: Match) -> int:
    """Every score within `SCORE_MAX`, each hand's move within its game's bound; returns
    the largest move of a seat in one hand."""
    largest = 0
    before = m.start_scores
    for result in m.results:
        for old, new in zip(before, result.scores_after, strict=True):
            for a, b in zip(old, new, strict=True):
                largest = max(largest, abs(b - a))
                assert abs(b) <= SCORE_MAX < 2**63
        before = result.scores_after
    assert largest <= HAND_DELTA[m.rules.game] <= HAND_DELTA_MAX
    return largest


@pytest.mark.parametrize("case", extreme_cases(), ids=_case_id)
def test_a_match_at_the_extreme_values_ends_and_every_score_fits(
    case: tuple[str, str, str, int | None, dict[str, Any]],
) -> None:
    name, ruleset, _, players, options = case
    rules = make_rules(name, ruleset, options, players)
    m = new_match(rules, log_events=False)
    hands = play_to_end(m, random.Random(_case_id(case)), max_hands=3000)
    assert m.finished, f"not over after {hands} hands"
    _check_scores(m)
    # Its record is written, and verifies: every score fits the record's 64-bit fields.
    names = [f"P{s}" for s in range(rules.players)]
    data = canonical_bytes(build_record(m, names, Provenance("test", "extreme options")))
    assert len(decode_record(data).hands) == hands
    check = verify_envelope(envelope(data))
    assert check.ok, check.error


@pytest.mark.parametrize(
    ("name", "ruleset", "options"),
    [
        # A heavy penalty against a far target: random play need not end the match.
        ("triomphe", "individuelle", {"target": 100, "vole_fail_penalty": -100}),
        ("triomphe", "equipe", {"target": 100, "vole_fail_penalty": -100, "players": 6}),
        # The shooter's -26 can keep a total under the threshold for a long time.
        ("dame-de-pique", "standard", {"end_threshold": 1000, "moon_mode": "subtract_self"}),
    ],
)
def test_a_very_long_match_stays_within_the_bound(
    name: str, ruleset: str, options: dict[str, Any]
) -> None:
    """From the extreme start scores, a few hundred hands: every hand moves a score by at
    most its game's bound, so no match of at most 2**32 - 1 hands can leave `SCORE_MAX`."""
    rules = make_rules(name, ruleset, options)
    lowest = tuple((-START_SCORE_MAX,) for _ in range(rules.players))
    m = new_match(rules, Start(START_HAND_MAX, lowest), log_events=False)
    play_to_end(m, random.Random(name), max_hands=300)
    largest = _check_scores(m)
    assert largest > 0


# --- short messages -----------------------------------------------------------------------

LONG = "x" * 100_000


@pytest.mark.parametrize(
    "call",
    [
        lambda: make_rules(LONG),
        lambda: make_rules("hearts", LONG),
        lambda: make_rules("hearts", options={LONG: 1}),
        lambda: make_rules("hearts", options={"end_threshold": LONG}),
        lambda: make_rules("hearts", options={"moon_mode": LONG}),
        lambda: make_rules("hearts", options={"qs_breaks_hearts": LONG}),
        lambda: make_rules("hearts", players=LONG),
        lambda: make_rules("nap", options={"players": 4}, players=LONG),
        lambda: make_rules("triomphe", options={"regime": LONG}),
        lambda: make_rules("hearts", options={"end_threshold": 10**5000}),
        lambda: make_rules("hearts", options={2**20000: 1}),
        lambda: parse_card(LONG),
        lambda: parse_card([LONG] * 1000),
        lambda: parse_action({"play": LONG}),
        lambda: parse_action({LONG: "QS"}),
        lambda: parse_action({"bid": LONG}),
        lambda: parse_action({"pass": [LONG]}),
        lambda: parse_action({"play": "QS", "bid": "two", LONG: 1}),
        lambda: parse_action({"resign": LONG}),
        lambda: parse_action(LONG),
        lambda: new_match(make_rules("hearts"), Start(10**5000)),
        lambda: new_match(make_rules("hearts")).deal_deck(10**5000, []),
        lambda: new_match(make_rules("hearts")).deal_deck(0, [2**20000]),
    ],
)
def test_a_message_quotes_a_short_prefix(call: Any) -> None:
    with pytest.raises(TapisError) as info:
        call()
    message = str(info.value)
    assert len(message) < 400, message[:500]
    if isinstance(info.value, RulesError) and info.value.key is not None:
        assert len(info.value.key) <= 80


def test_an_action_message_names_a_huge_value_by_its_size() -> None:
    m = new_match(make_rules("hearts"))
    error = m.refusal(0, encode(PLAY, 2**20000))
    assert isinstance(error, InvalidAction)
    assert "<an integer of 20004 bits>" in str(error) and len(str(error)) < 200
    with pytest.raises(IllegalAction) as info:
        m.view(2**20000)
    assert info.value.code == "bad-seat" and len(str(info.value)) < 200


# --- the digest of existing rules ---------------------------------------------------------

# Digests of the previous engine (before the ranges): records already signed still verify.
DIGESTS = [
    ("dame-de-pique", None, {}, "6159639870d42892db7f0b31c066c59f59ddba009f94b97be835b31e91976862"),
    (
        "dame-de-pique",
        None,
        {"end_threshold": 50, "moon_mode": "subtract_self"},
        "7bad1734b740430459fb62cc6916b521d345d214a0dcbf2df151660a6efaf9b1",
    ),
    ("napoleon", None, {}, "210800ee509c0352c2d2ce333ca64f96c70db6f8bef3b356e6ccd84835a0bef8"),
    (
        "napoleon",
        None,
        {"players": 10, "deals": 9, "scoring": "stakes"},
        "aad45814dcd6d5effdc9807a7a87bb2a5118cc26c99f566e988119a33fc14c98",
    ),
    (
        "imperiale",
        "academie",
        {},
        "c6bcf596e612c518f430a82d2d28941a18c45700a5f51e1a6ce54c79066f0c1f",
    ),
    (
        "imperiale",
        "academie",
        {"players": 3, "target_fiches": 10, "capot_fiches": 0, "packet": 4},
        "6dc9b68d9a0c326ce1b82c8a573abccda5b14cedd5c06865aae89b2e6edc846e",
    ),
    (
        "imperiale",
        "moderne",
        {},
        "1fcd212695c9970329573d334c2e46c4e90c73a467411fb3ba82381c30be54fb",
    ),
    (
        "triomphe",
        "individuelle",
        {},
        "7ad30a0c6111cae88856e7d02e3530be1a5721eac6f298158c787eb0f70b0db1",
    ),
    (
        "triomphe",
        "individuelle",
        {"players": 3, "regime": "plaisant", "vole_fail_penalty": -4, "vole_value": 3},
        "fcd940ee3e445fb477800a62e9cd71cbfce6966b232fa745fbbd91522b9e90dc",
    ),
    ("triomphe", "equipe", {}, "10dcbbaa64f31ad4e3de149d1abcf79612259001e8fafac9f04aa24de8fd1450"),
    (
        "triomphe",
        "equipe",
        {"players": 6},
        "f08f335d802038d909b04f9860f123098a557a02e0f8f4c5db6301d32783b081",
    ),
    (
        "triomphe",
        "as-qui-pille",
        {"hand_size": 4, "refused_abandon_vole_value": 5},
        "158450f5f2c8c8778d23f6cdcfa431ae1cc21c94dde840c3fd10065ce9a8f2c2",
    ),
]


@pytest.mark.parametrize(("game", "ruleset", "options", "digest"), DIGESTS)
def test_the_digest_of_existing_rules_is_unchanged(
    game: str, ruleset: str | None, options: dict[str, Any], digest: str
) -> None:
    assert make_rules(game, ruleset, options).digest == digest
