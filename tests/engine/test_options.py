"""Rules and options (referee/engine/registry.py, options.py): game names and aliases,
rulesets, option validation (unknown key, strict types, closed value lists, players), the
rules digest and `option_values()` (RULES.md section 6, TRANSCRIPT.md `options`), typed values
(enums), `Rules.with_changes` and `parse_option`."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tapis_cartes.referee.engine.base import Rules
from tapis_cartes.referee.engine.errors import RulesError, TapisError
from tapis_cartes.referee.engine.options import (
    MoonMode,
    PointRule,
    TombeeMode,
    choices,
    parse_option,
)
from tapis_cartes.referee.engine.registry import GAMES, find_game, make_rules

HAS_NAPOLEON = "napoleon" in GAMES
needs_napoleon = pytest.mark.skipif(
    not HAS_NAPOLEON,
    reason="napoleon is not registered in tapis_cartes.referee.engine.registry.GAMES",
)

# RULES.md section 6, Dame de Pique.
DP_DEFAULTS: dict[str, Any] = {
    "end_threshold": 100,
    "qs_breaks_hearts": False,
    "qs_counts_as_heart_for_lead": False,
    "moon_mode": "add_to_others",
    "hearts_broken_by": "played",
    "dealer_rotation": "clockwise",
}
# RULES.md section 6, Nap (deals: 2 × players).
NAP_DEFAULTS: dict[str, Any] = {
    "players": 4,
    "short_deck": False,
    "misere_trump": "none",
    "allpass_redeal_same_dealer": False,
    "scoring": "seed_points",
    "deals": 8,
    "stop_when_decided": False,
}


def rules_error(*args: Any, **kwargs: Any) -> RulesError:
    with pytest.raises(RulesError) as info:
        make_rules(*args, **kwargs)
    assert isinstance(info.value, TapisError)
    return info.value


# --- Dame de Pique ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dame-de-pique", "hearts"])
def test_make_rules_dame_de_pique_and_alias(name: str) -> None:
    rules = make_rules(name)
    assert isinstance(rules, Rules)
    assert rules.game == "dame-de-pique"
    assert rules.ruleset == "standard"
    assert rules.players == 4
    assert rules.option_values() == DP_DEFAULTS
    assert find_game(name).name == "dame-de-pique"


def test_alias_and_name_give_the_same_rules() -> None:
    assert make_rules("hearts") == make_rules("dame-de-pique")
    assert make_rules("hearts").digest == make_rules("dame-de-pique", "standard").digest
    assert make_rules("hearts", players=4) == make_rules("dame-de-pique")


def test_dame_de_pique_options_are_applied() -> None:
    opts = {
        "end_threshold": 50,
        "qs_breaks_hearts": True,
        "qs_counts_as_heart_for_lead": True,
        "moon_mode": "subtract_self",
        "hearts_broken_by": "discarded",
        "dealer_rotation": "counterclockwise",
    }
    rules = make_rules("dame-de-pique", options=opts)
    assert rules.option_values() == opts
    assert rules.digest != make_rules("dame-de-pique").digest


def test_unknown_game_lists_known_games() -> None:
    err = rules_error("chess")
    msg = str(err)
    assert "'chess'" in msg
    for name in ("dame-de-pique", "hearts"):
        assert name in msg
    if HAS_NAPOLEON:
        assert "napoleon" in msg
        assert "nap" in msg
    assert err.key == "game"


def test_unknown_ruleset() -> None:
    err = rules_error("dame-de-pique", "moderne")
    assert "'moderne'" in str(err)
    assert "standard" in str(err)
    assert err.key == "ruleset"


def test_unknown_option_key_names_it_and_lists_known_options() -> None:
    err = rules_error("hearts", options={"jokers": True})
    msg = str(err)
    assert "'jokers'" in msg
    for key in DP_DEFAULTS:
        assert key in msg
    assert err.key == "jokers"


def test_an_option_of_another_game_is_unknown() -> None:
    err = rules_error("hearts", options={"short_deck": True})
    assert "'short_deck'" in str(err)
    assert err.key == "short_deck"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("end_threshold", "100"),
        ("end_threshold", 100.0),
        ("end_threshold", True),
        ("end_threshold", None),
        ("qs_breaks_hearts", 1),
        ("qs_breaks_hearts", "true"),
        ("qs_counts_as_heart_for_lead", 0),
        ("moon_mode", 1),
    ],
)
def test_wrong_type_is_refused_strictly(key: str, value: Any) -> None:
    err = rules_error("dame-de-pique", options={key: value})
    assert repr(key) in str(err)
    assert repr(value) in str(err)
    assert err.key == key


def test_wrong_type_message_says_what_is_expected() -> None:
    assert "integer" in str(rules_error("hearts", options={"end_threshold": "100"}))
    assert "true, false" in str(rules_error("hearts", options={"qs_breaks_hearts": 1}))


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("moon_mode", "double", "add_to_others, subtract_self"),
        ("hearts_broken_by", "led", "played, discarded"),
        ("dealer_rotation", "left", "clockwise, counterclockwise"),
    ],
)
def test_bad_enum_value_lists_allowed_values(key: str, value: str, allowed: str) -> None:
    err = rules_error("dame-de-pique", options={key: value})
    msg = str(err)
    assert repr(key) in msg
    assert repr(value) in msg
    assert allowed in msg
    assert err.key == key


@pytest.mark.parametrize("players", [3, 5, 2])
def test_dame_de_pique_players_mismatch(players: int) -> None:
    err = rules_error("dame-de-pique", players=players)
    assert "4" in str(err)
    assert str(players) in str(err)
    assert err.key == "players"


def test_dame_de_pique_has_no_players_option() -> None:
    err = rules_error("dame-de-pique", options={"players": 4})
    assert "'players'" in str(err)


def test_digest_is_stable_and_follows_every_option() -> None:
    base = make_rules("dame-de-pique")
    assert base.digest == make_rules("hearts").digest
    assert base.digest == make_rules("dame-de-pique", options=dict(DP_DEFAULTS)).digest
    assert len(base.digest) == 64
    int(base.digest, 16)  # hex
    changed = {
        "end_threshold": 101,
        "qs_breaks_hearts": True,
        "qs_counts_as_heart_for_lead": True,
        "moon_mode": "subtract_self",
        "hearts_broken_by": "discarded",
        "dealer_rotation": "counterclockwise",
    }
    digests = {base.digest}
    for key, value in changed.items():
        d = make_rules("dame-de-pique", options={key: value}).digest
        assert d != base.digest, key
        digests.add(d)
    assert len(digests) == 1 + len(changed)


def test_option_values_contains_every_option_with_its_default() -> None:
    rules = make_rules("dame-de-pique")
    values = rules.option_values()
    assert set(values) == set(type(rules.options).model_fields)
    assert values == DP_DEFAULTS


def test_options_are_frozen() -> None:
    rules = make_rules("dame-de-pique")
    with pytest.raises(ValidationError, match="frozen"):
        setattr(rules.options, "end_threshold", 5)  # noqa: B010
    assert rules.option_values()["end_threshold"] == 100


# --- Napoléon -----------------------------------------------------------------------------


@needs_napoleon
@pytest.mark.parametrize("name", ["napoleon", "nap"])
def test_make_rules_napoleon_and_alias(name: str) -> None:
    rules = make_rules(name)
    assert rules.game == "napoleon"
    assert rules.players == 4
    assert rules.option_values() == NAP_DEFAULTS
    assert set(rules.option_values()) == set(type(rules.options).model_fields)
    assert rules.digest == make_rules("napoleon", options=dict(NAP_DEFAULTS)).digest


@needs_napoleon
@pytest.mark.parametrize("n", range(3, 11))
def test_napoleon_players_three_to_ten(n: int) -> None:
    by_option = make_rules("nap", options={"players": n})
    by_names = make_rules("nap", players=n)
    both = make_rules("nap", options={"players": n}, players=n)
    assert by_option.players == by_names.players == both.players == n
    assert by_option.option_values()["players"] == n
    assert by_option.option_values()["deals"] == 2 * n  # RULES.md 6: deals = 2 × players
    assert by_option.digest == by_names.digest == both.digest


@needs_napoleon
@pytest.mark.parametrize(
    ("options", "players"),
    [
        ({"players": 2}, None),
        ({"players": 11}, None),
        ({}, 2),
        ({}, 11),
        ({"players": 0}, None),
    ],
)
def test_napoleon_players_out_of_range(options: dict[str, Any], players: int | None) -> None:
    err = rules_error("napoleon", options=options, players=players)
    assert "'players'" in str(err)
    assert "3 to 10" in str(err)
    assert err.key == "players"


@needs_napoleon
@pytest.mark.parametrize(("option", "names"), [(4, 5), (5, 4), (3, 10)])
def test_napoleon_players_option_must_agree_with_names(option: int, names: int) -> None:
    err = rules_error("nap", options={"players": option}, players=names)
    assert "'players'" in str(err)
    assert str(option) in str(err)
    assert str(names) in str(err)
    assert err.key == "players"


@needs_napoleon
def test_napoleon_short_deck_and_scoring_values() -> None:
    rules = make_rules("nap", options={"short_deck": True, "scoring": "stakes"})
    values = rules.option_values()
    assert values["short_deck"] is True
    assert values["scoring"] == "stakes"
    assert rules.digest != make_rules("nap").digest
    assert make_rules("nap", options={"misere_trump": "first_card"}).digest != (
        make_rules("nap").digest
    )


@needs_napoleon
@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("short_deck", "yes", "true, false"),
        ("short_deck", 1, "true, false"),
        ("players", "4", "integer"),
        ("players", True, "integer"),
        ("scoring", "double", "seed_points, stakes"),
        ("misere_trump", "hearts", "none, first_card"),
        ("stop_when_decided", "no", "true, false"),
    ],
)
def test_napoleon_bad_values(key: str, value: Any, expected: str) -> None:
    err = rules_error("napoleon", options={key: value})
    assert repr(key) in str(err)
    assert expected in str(err)
    assert err.key == key


@needs_napoleon
def test_napoleon_unknown_option_and_ruleset() -> None:
    err = rules_error("nap", options={"trumps": "hearts"})
    assert "'trumps'" in str(err)
    for key in NAP_DEFAULTS:
        assert key in str(err)
    err = rules_error("nap", "moderne")
    assert "'moderne'" in str(err)
    assert err.key == "ruleset"


@needs_napoleon
def test_napoleon_digest_follows_deals() -> None:
    base = make_rules("nap")
    assert base.digest == make_rules("nap", options={"deals": 8}).digest
    assert base.digest != make_rules("nap", options={"deals": 9}).digest
    assert base.digest != make_rules("nap", players=5).digest


# --- one typed value, one way to change it, one parser of KEY=VALUE ------------------------


def test_parse_option() -> None:
    assert parse_option("end_threshold=20") == ("end_threshold", 20)
    assert parse_option("short_deck=true") == ("short_deck", True)
    assert parse_option("moon_mode=subtract_self") == ("moon_mode", "subtract_self")
    with pytest.raises(ValueError):
        parse_option("novalue")


def test_enum_options_are_members_that_equal_their_words() -> None:
    rules = make_rules("hearts", None, {"moon_mode": "subtract_self"})
    assert rules.options.moon_mode is MoonMode.SUBTRACT_SELF  # type: ignore[attr-defined]
    assert rules.options.moon_mode == "subtract_self"  # type: ignore[attr-defined]
    assert rules.option_values()["moon_mode"] == "subtract_self"
    assert make_rules("hearts", None, {"moon_mode": MoonMode.SUBTRACT_SELF}) == rules
    academie = make_rules("imperiale", "academie", {"imperiale_tombee": True})
    assert academie.options.point_rule is PointRule.COUNT_THEN_PIPS  # type: ignore[attr-defined]
    assert academie.options.tombee_mode is TombeeMode.END_OF_COUP  # type: ignore[attr-defined]
    # A member of another option's enum is not a word of this one.
    with pytest.raises(RulesError) as info:
        make_rules("imperiale", "moderne", {"tombee_mode": PointRule.PIPS})
    assert info.value.key == "tombee_mode"


def test_choices_keep_each_ruleset_order() -> None:
    model = find_game("imperiale").rulesets
    assert choices(model["moderne"], "point_rule") == ["pips", "count_then_pips"]
    assert choices(model["academie"], "point_rule") == ["count_then_pips", "pips"]
    assert choices(model["academie"], "packet") == []
    assert choices(find_game("triomphe").rulesets["individuelle"], "regime") == [
        "forcee",
        "forcat",
        "plaisant",
    ]


def test_with_changes_validates_and_returns_new_rules() -> None:
    rules = make_rules("hearts")
    changed = rules.with_changes({"moon_mode": "subtract_self"}, end_threshold=50)
    assert changed == make_rules(
        "hearts", None, {"moon_mode": "subtract_self", "end_threshold": 50}
    )
    assert changed.digest != rules.digest and rules == make_rules("hearts")
    assert rules.with_changes() == rules
    with pytest.raises(RulesError) as info:
        rules.with_changes(moon_mode="double")
    assert info.value.key == "moon_mode" and "allowed: add_to_others, subtract_self" in str(
        info.value
    )
    with pytest.raises(RulesError) as info:
        rules.with_changes(no_such_option=1)
    assert "unknown option" in str(info.value)
    # The number of players stays; the other options keep their effective values.
    nap = make_rules("napoleon", None, {"players": 5})
    assert nap.with_changes(scoring="stakes").option_values()["deals"] == 10
    with pytest.raises(RulesError) as info:
        nap.with_changes(players=6)
    assert info.value.key == "players"
    # Combination rules hold on the result.
    with pytest.raises(RulesError) as info:
        make_rules("triomphe", None, {"players": 2}).with_changes(regime="plaisant")
    assert info.value.key == "regime"
