"""The catalogue of what a referee runs: games, rulesets, options with their types, ranges and
defaults (per number of players where they depend on it), the time controls, the version.

One source for `ListGames` (referee/server/service.py), `tapis games` (clients/
games_cmd.py) and a Python program (`games()`: the same catalogue as typed values), read from
the engine's rules models: nothing here is written twice.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tapis_cartes.records.clocks import ACTION_MS, BUDGET_MS, INCREMENT_MS
from tapis_cartes.referee import __version__
from tapis_cartes.referee.engine import GAMES, find_game, int_range, make_rules
from tapis_cartes.referee.engine.options import Option, choices
from tapis_cartes.referee.errors import RulesError
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb

__all__ = ["Game", "OptionSpec", "Ruleset", "games", "games_catalog"]


def games_catalog() -> pb.ListGamesResponse:
    """The games, rulesets and options (the same for the referee's whole life), as the
    referee's ListGames gives them: a message of the caller's own (changing it changes nothing
    else)."""
    out = pb.ListGamesResponse()
    out.CopyFrom(catalog())
    return out


@functools.cache
def catalog() -> pb.ListGamesResponse:
    """`games_catalog`, made once, shared: not to be changed."""
    games = []
    for spec in GAMES.values():
        games.append(
            pb.GameInfo(
                name=spec.name,
                title=spec.title,
                aliases=list(spec.aliases),
                units=list(spec.units),
                rulesets=[_ruleset_info(spec.name, r) for r in spec.rulesets],
            )
        )
    return pb.ListGamesResponse(
        games=games,
        version=__version__,
        time_control=pb.TimeControlInfo(
            action_ms_min=ACTION_MS[0],
            action_ms_max=ACTION_MS[1],
            budget_ms_min=BUDGET_MS[0],
            budget_ms_max=BUDGET_MS[1],
            increment_ms_max=INCREMENT_MS[1],
            policies=[rpb.TIMEOUT_POLICY_FORFEIT, rpb.TIMEOUT_POLICY_AUTOPLAY],
        ),
    )


def _ruleset_info(game: str, ruleset: str) -> pb.RulesetInfo:
    counts = _player_counts(game, ruleset)
    return pb.RulesetInfo(
        name=ruleset, options=_options_info(game, ruleset, counts), player_counts=counts
    )


def _options_info(game: str, ruleset: str, counts: Sequence[int]) -> list[pb.OptionInfo]:
    """The options of a ruleset with their defaults: the values the rules take for an
    omitted option, for each number of players in `counts` (the engine fills some in from
    the number of players: Napoléon `deals`, the team Triomphe's `target`, `players`)."""
    model = find_game(game).rulesets[ruleset]
    by_count = [make_rules(game, ruleset, {}, n).option_values() for n in counts]
    # default_value: the default at the ruleset's usual number of players (the engine's when
    # none is given), e.g. four at Napoléon.
    usual = make_rules(game, ruleset, {}).players
    at = counts.index(usual) if usual in counts else 0
    out = []
    for key, fld in sorted(model.model_fields.items()):
        allowed = choices(model, key)
        kind = "enum" if allowed else "bool" if fld.annotation is bool else "int"
        values = [defaults.get(key) for defaults in by_count]
        info = pb.OptionInfo(
            key=key,
            type=kind,
            default_value=_option(key, values[at]),
            allowed=allowed,
            description=fld.description or "",
        )
        if any(v != values[0] for v in values):
            info.defaults.extend(
                pb.PlayersDefault(players=n, value=_option(key, v))
                for n, v in zip(counts, values, strict=True)
            )
        bounds = int_range(model, key)
        if bounds is not None:
            info.min_value, info.max_value = bounds
        out.append(info)
    return out


def _option(key: str, value: object) -> rpb.Option:
    out = rpb.Option(key=key)
    if isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif value is not None:
        out.string_value = str(value)
    return out


def _player_counts(game: str, ruleset: str) -> list[int]:
    counts = []
    for n in range(2, 11):
        try:
            make_rules(game, ruleset, {}, n)
        except RulesError:
            continue
        counts.append(n)
    return counts


# --- the catalogue for a Python program ------------------------------------------------------


@dataclass(frozen=True)
class OptionSpec:
    """An option of a ruleset: its type, default, and the values it takes."""

    key: str
    type: str  # "int", "bool" or "enum"
    default: Option | None  # at the ruleset's usual number of players
    allowed: tuple[str, ...]  # the words of an enum
    min: int | None  # the range of an int
    max: int | None
    description: str
    defaults: Mapping[int, Option]  # by number of players, where the default depends on it


@dataclass(frozen=True)
class Ruleset:
    """A ruleset of a game: the numbers of players it is played by, and its options."""

    name: str
    players: tuple[int, ...]
    options: tuple[OptionSpec, ...]


@dataclass(frozen=True)
class Game:
    """A game: its name (`make_rules(name, ...)`), title, aliases, score units, rulesets."""

    name: str
    title: str
    aliases: tuple[str, ...]
    units: tuple[str, ...]
    rulesets: tuple[Ruleset, ...]


@functools.cache
def games() -> tuple[Game, ...]:
    """Every game, its rulesets and their options (`games_catalog`, as typed values)."""
    return tuple(
        Game(
            g.name,
            g.title,
            tuple(g.aliases),
            tuple(g.units),
            tuple(
                Ruleset(r.name, tuple(r.player_counts), tuple(_spec(o) for o in r.options))
                for r in g.rulesets
            ),
        )
        for g in catalog().games
    )


def _spec(o: pb.OptionInfo) -> OptionSpec:
    return OptionSpec(
        o.key,
        o.type,
        _value(o.default_value),
        tuple(o.allowed),
        o.min_value if o.HasField("min_value") else None,
        o.max_value if o.HasField("max_value") else None,
        o.description,
        {d.players: v for d in o.defaults if (v := _value(d.value)) is not None},
    )


def _value(option: rpb.Option) -> Option | None:
    which = option.WhichOneof("value")
    return None if which is None else getattr(option, which)
