"""The games, by name and alias, with their rulesets and option models.

`make_rules(game, ruleset, options, players)` is the one way to build `Rules`: it resolves
aliases, validates options (unknown key, wrong type, forbidden combination: `RulesError`
naming the key and the allowed values) and settles the number of players.
`Rules.with_changes(...)` makes rules with some options changed, validated the same way.
`new_match(rules, start)` makes the match.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tapis_cartes.referee.engine import imperiale, napoleon, triomphe
from tapis_cartes.referee.engine.base import Match, Rules, Start
from tapis_cartes.referee.engine.dame_de_pique import DamePiqueMatch
from tapis_cartes.referee.engine.errors import RulesError, quoted
from tapis_cartes.referee.engine.options import DamePiqueOptions, GameOptions, validate_options

__all__ = ["GAMES", "GameSpec", "find_game", "make_rules", "new_match"]


@dataclass(frozen=True)
class GameSpec:
    """One game: its canonical name, aliases, rulesets (the first is the default) and the
    seats it allows when `players` is not an option."""

    name: str
    title: str
    aliases: tuple[str, ...]
    rulesets: dict[str, type[GameOptions]]
    match_class: type[Match]
    units: tuple[str, ...]
    fixed_players: int | None  # None: `players` is an option of each ruleset
    seed: str

    @property
    def default_ruleset(self) -> str:
        return next(iter(self.rulesets))


GAMES: dict[str, GameSpec] = {}
_ALIASES: dict[str, str] = {}


def register(spec: GameSpec) -> None:
    GAMES[spec.name] = spec
    for alias in (spec.name, *spec.aliases):
        _ALIASES[alias] = spec.name


register(
    GameSpec(
        name="dame-de-pique",
        title="Dame de Pique",
        aliases=("hearts",),
        rulesets={"standard": DamePiqueOptions},
        match_class=DamePiqueMatch,
        units=("points",),
        fixed_players=4,
        seed="003",
    )
)


def register_module(module: Any, match_class: type[Match]) -> None:
    """Register a game module that names itself with module constants (NAME, TITLE,
    ALIASES, RULESETS, UNITS, FIXED_PLAYERS, SEED)."""
    register(
        GameSpec(
            name=module.NAME,
            title=module.TITLE,
            aliases=module.ALIASES,
            rulesets=module.RULESETS,
            match_class=match_class,
            units=module.UNITS,
            fixed_players=module.FIXED_PLAYERS,
            seed=module.SEED,
        )
    )


register_module(napoleon, napoleon.NapoleonMatch)
register_module(imperiale, imperiale.ImperialeMatch)
register_module(triomphe, triomphe.TriompheMatch)


def find_game(name: str) -> GameSpec:
    """The game of a name or alias (`hearts` -> `dame-de-pique`)."""
    if not isinstance(name, str) or name.lower() not in _ALIASES:
        known = ", ".join(sorted(_ALIASES))
        raise RulesError(f"unknown game {quoted(name)}; known games: {known}", key="game")
    return GAMES[_ALIASES[name.lower()]]


def make_rules(
    game: str,
    ruleset: str | None = None,
    options: dict[str, Any] | None = None,
    players: int | None = None,
) -> Rules:
    """Validated rules. `players` is the number of named seats, when known: it must agree
    with the `players` option where there is one, and with the game's fixed count."""
    spec = find_game(game)
    ruleset = ruleset or spec.default_ruleset
    if not isinstance(ruleset, str) or ruleset not in spec.rulesets:
        allowed = ", ".join(spec.rulesets)
        raise RulesError(
            f"unknown ruleset {quoted(ruleset)} for {spec.name}; allowed: {allowed}",
            key="ruleset",
        )
    model = spec.rulesets[ruleset]
    if options is not None and not isinstance(options, dict):
        raise RulesError("options must be an object of key: value", key="options")
    opts = dict(options or {})
    where = f"{spec.name}" + (f" ({ruleset})" if len(spec.rulesets) > 1 else "")
    if "players" in model.model_fields:
        if "players" in opts and players is not None and opts["players"] != players:
            raise RulesError(
                f"option 'players' is {quoted(opts['players'])} but {quoted(players)} players "
                "are named",
                key="players",
            )
        if "players" not in opts and players is not None:
            opts["players"] = players
    validated = validate_options(model, opts, where)
    if spec.fixed_players is not None:
        count = spec.fixed_players
        if players is not None and players != count:
            raise RulesError(
                f"{spec.title} is played by exactly {count} players; {quoted(players)} are named",
                key="players",
            )
    else:
        count = int(getattr(validated, "players"))  # noqa: B009 (not on GameOptions)
    validated.check(count)
    return Rules(spec.name, ruleset, count, validated)


def new_match(rules: Rules, start: Start | None = None, log_events: bool = True) -> Match:
    """A new match of these rules, starting as `start` says (first hand 1, scores 0;
    `RulesError` for a start out of bounds, options.py). `log_events=False` (replay) keeps
    score lines and tricks but builds no event objects."""
    return GAMES[rules.game].match_class(rules, start, log_events)
