"""Heuristic bots against random bots: win rates per game.

    PYTHONPATH=. python scripts/bot_winrates.py [-n 200] [--game G ...]

In-process, without gRPC (clients/arena.py): each match is held in the referee's own Table
(the same dealing from a seed, the same engine) and each bot gets the SeatView the referee
would send it. One heuristic seat against random seats (its seat rotates from match to
match; the team game: one team of heuristic bots against a team of random bots); a shared
win counts as a fraction. Deterministic: match g is dealt from the seed "<game>-<g>".
Games not registered in the engine are skipped.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from tapis_cartes.clients.arena import play_local
from tapis_cartes.clients.bots import Bot, HeuristicBot, RandomBot
from tapis_cartes.referee.engine import GAMES, make_rules, new_match


@dataclass(frozen=True)
class Setup:
    game: str
    ruleset: str
    players: int
    note: str = ""


SETUPS = (
    Setup("dame-de-pique", "standard", 4, "1 heuristic v 3 random"),
    Setup("napoleon", "standard", 4, "1 heuristic v 3 random"),
    Setup("imperiale", "academie", 2),
    Setup("imperiale", "moderne", 2),
    Setup("triomphe", "individuelle", 2),
    Setup("triomphe", "equipe", 4, "2 heuristic v 2 random"),
    Setup("triomphe", "as-qui-pille", 3, "1 heuristic v 2 random"),
)


def measure(setup: Setup, matches: int) -> tuple[float, float, float, int]:
    """(heuristic win rate, chance rate, the heuristic seat's score change per hand minus a
    random seat's in the first unit, hands played)."""
    n = setup.players
    rules = make_rules(setup.game, setup.ruleset, {"players": n} if _has_players(setup) else {}, n)
    teams = new_match(rules)
    wins = 0.0
    edge = 0.0
    hands = 0
    for g in range(matches):
        h = g % n
        mine = {s for s in range(n) if teams.team_of(s) == teams.team_of(h)}
        if setup.ruleset != "equipe":
            mine = {h}
        bots: list[Bot] = [
            HeuristicBot(setup.game, setup.ruleset) if i in mine else RandomBot(1000 * g + i)
            for i in range(n)
        ]
        options = {"players": n} if _has_players(setup) else {}
        result = play_local(setup.game, bots, f"{setup.game}-{g}", setup.ruleset, options)
        hands += result.hands
        winners = set(result.winners)
        if winners:
            wins += len(winners & mine) / len(winners)
        for d in result.hand_deltas:
            others = [d[i] for i in range(n) if i not in mine]
            edge += d[h] - sum(others) / len(others)
    chance = (n // 2 if setup.ruleset == "equipe" else 1) / n
    return wins / matches, chance, edge / max(hands, 1), hands


def _has_players(setup: Setup) -> bool:
    return setup.game != "dame-de-pique"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--matches", type=int, default=200, help="matches per game")
    parser.add_argument("--game", action="append", help="only these games (repeatable)")
    args = parser.parse_args(argv)
    print(f"{args.matches} matches per line; in-process (engine + referee views, no gRPC)")
    print(f"{'game':<14} {'ruleset':<13} {'seats':<24} {'heuristic':>9} {'chance':>7} "
          f"{'edge/hand':>10} {'hands':>6} {'time':>7}")  # fmt: skip
    for setup in SETUPS:
        if setup.game not in GAMES or (args.game and setup.game not in args.game):
            continue
        t0 = time.perf_counter()
        rate, chance, edge, hands = measure(setup, args.matches)
        seats = setup.note or "1 heuristic v 1 random"
        print(
            f"{setup.game:<14} {setup.ruleset:<13} {seats:<24} {rate:>9.1%} {chance:>7.0%} "
            f"{edge:>+10.2f} {hands:>6} {time.perf_counter() - t0:>6.1f}s",
            flush=True,
        )
    print(
        "heuristic: its share of the match wins; chance: the share of a seat (a team) if all "
        "played alike;\nedge/hand: its score change per hand minus a random seat's, in the "
        "first unit (Dame de Pique: penalty points, lower is better; L'Impériale: fiches)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
