"""`tapis games [GAME] [--json]`: the games, rulesets and options this Tapis runs, with each
option's type, range or choices, default (per number of players where it depends on it) and
meaning, and the time controls a table may have. No referee is needed: it is the catalogue a
referee answers ListGames with (referee/catalog.py), printed."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from google.protobuf import json_format

from tapis_cartes.referee.catalog import games_catalog
from tapis_cartes.referee.engine import find_game
from tapis_cartes.referee.errors import RulesError, terminal_json
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb

__all__ = ["add_games_parser"]


def _value(option: rpb.Option) -> str:
    which = option.WhichOneof("value")
    if which is None:
        return "-"
    value = getattr(option, which)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _kind(info: pb.OptionInfo) -> str:
    if info.type == "enum":
        return " | ".join(info.allowed)
    if info.type == "int" and info.HasField("min_value"):
        return f"int {info.min_value}..{info.max_value}"
    return info.type


def _default(info: pb.OptionInfo) -> str:
    if not info.defaults or info.key == "players":  # the number of seats: its usual one
        return _value(info.default_value)
    return ", ".join(f"{_value(d.value)} ({d.players} players)" for d in info.defaults)


def games_text(catalog: pb.ListGamesResponse) -> str:
    """The catalogue for a person."""
    lines = []
    for game in catalog.games:
        aliases = f"; also {', '.join(game.aliases)}" if game.aliases else ""
        lines.append(f"{game.name}: {game.title}{aliases} (scored in {', '.join(game.units)})")
        for ruleset in game.rulesets:
            counts = list(ruleset.player_counts)
            players = str(counts[0]) if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
            lines.append(f"  ruleset {ruleset.name}: {players} players")
            width = max((len(o.key) for o in ruleset.options), default=0)
            for info in ruleset.options:
                lines.append(
                    f"    {info.key.ljust(width)}  {_kind(info)}; default {_default(info)}"
                )
                if info.description:
                    lines.append(f"    {' ' * width}  {info.description}")
        lines.append("")
    tc = catalog.time_control
    lines.append(
        "clocks (tapis table create --action-time/--budget/--increment/--on-timeout): "
        f"per action {tc.action_ms_min / 1000:g} s to {tc.action_ms_max / 3_600_000:g} h, "
        f"budget {tc.budget_ms_min / 1000:g} s to {tc.budget_ms_max / 86_400_000:g} days, "
        f"increment up to {tc.increment_ms_max / 60_000:g} min; on timeout forfeit or autoplay"
    )
    return "\n".join(lines)


def cmd_games(args: argparse.Namespace) -> int:
    catalog = games_catalog()
    if args.game is not None:
        try:
            name = find_game(args.game).name
        except RulesError as exc:
            print(f"tapis games: {exc}", file=sys.stderr)
            return 2
        only = pb.ListGamesResponse()
        only.CopyFrom(catalog)
        del only.games[:]
        only.games.extend(g for g in catalog.games if g.name == name)
        catalog = only
    if args.json:
        print(terminal_json(json_format.MessageToJson(catalog, ensure_ascii=False)))
    else:
        print(games_text(catalog))
    return 0


def add_games_parser(sub: Any) -> None:
    p = sub.add_parser(
        "games", help="the games, rulesets and options (ranges, defaults), without a referee"
    )
    p.add_argument("game", nargs="?", metavar="GAME", help="only this game (a name or alias)")
    p.add_argument("--json", action="store_true", help="as ListGamesResponse's JSON")
    p.set_defaults(func=cmd_games)
