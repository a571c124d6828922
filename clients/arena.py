"""Bots against each other in-process, without gRPC: for measuring bots quickly
(`play_local`), or to make a record (`play_match`).

A match is held in the referee's own `Table` (referee/server/tables.py: the same dealing from
a seed, the same engine), and each bot is given the `SeatView` the referee would send it
(referee/server/service.py builds it), so a bot sees exactly what it would see over gRPC.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tapis_cartes.clients.bots import Bot, make_bot
from tapis_cartes.clients.corpus import NAMES, play_record
from tapis_cartes.records.library import Record
from tapis_cartes.referee.engine import RulesError, find_game, make_rules, new_match
from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.referee.server.service import seat_view
from tapis_cartes.referee.server.tables import Seat, Table, token_hash

__all__ = ["LocalResult", "play_local", "play_match"]


@dataclass(frozen=True)
class LocalResult:
    scores: tuple[tuple[int, ...], ...]  # per seat, in the game's units
    winners: tuple[int, ...]
    hands: int
    hand_deltas: tuple[tuple[int, ...], ...]  # per hand: each seat's change in the first unit


def play_local(
    game: str,
    bots: Sequence[Bot],
    seed: bytes | str,
    ruleset: str = "",
    options: Mapping[str, Option] | None = None,
) -> LocalResult:
    """Play one match of `game` with one bot per seat (in seat order); `seed` gives the deals
    (any bytes or text: the same seed, the same deals)."""
    seed_bytes = hashlib.sha256(seed.encode() if isinstance(seed, str) else seed).digest()
    opts = dict(options or {})
    rules = make_rules(game, ruleset or None, opts, len(bots))
    table = Table(
        id="local",
        rules=rules,
        options=opts,
        seed=seed_bytes,
        created=0.0,
        creator="local",
        seats=[Seat(f"{bot.name} {i}", False) for i, bot in enumerate(bots)],
        match=new_match(rules),
    )
    for i, taken in enumerate(table.seats):
        table.take(i, taken.name, token_hash(str(i)))
    match = table.match
    while not match.finished:
        seat = match.to_act()[0]
        view = seat_view(table, seat, match.view(seat))
        table.apply(seat, bots[seat].choose(view))
    deltas = []
    before = match.start_scores
    for result in match.results:
        deltas.append(tuple(a[0] - b[0] for a, b in zip(result.scores_after, before, strict=True)))
        before = result.scores_after
    return LocalResult(tuple(match.scores), match.winners, len(match.results), tuple(deltas))


def play_match(
    game: str,
    bots: str | Sequence[str | Bot] = "heuristic",
    seed: str = "tapis",
    ruleset: str = "",
    options: Mapping[str, Option] | None = None,
    names: Sequence[str] = NAMES,
    played_at: str = "",
) -> Record:
    """Play one match of `game` in this process, bots in every seat, and return its record
    (unsigned; its deals come from `seed`, revealed in the record: the same seed, the same
    deals). `bots`: a kind for every seat ("heuristic" or "random"), or one kind or `Bot` per
    seat, in seat order; `names`: the seats' names; `played_at` (an RFC 3339 date-time): now
    unless given. `RulesError` for rules or options that do not hold, `RecordError` for names
    or a `played_at` that no record may hold (an empty name, a control character in one, a
    date that is no RFC 3339 date-time)."""
    spec = find_game(game)
    if not isinstance(seed, str):
        raise RulesError(f"seed is {quoted(seed)} ({type(seed).__name__}), not text", "seed")
    opts = dict(options or {})
    # One bot a seat: as many seats as bots, or as the rules say (RulesError: no such count).
    seated = None if isinstance(bots, str) else len(bots)
    players = make_rules(spec.name, ruleset or None, opts, seated).players
    if isinstance(bots, str):
        bots = [bots] * players
    if names is NAMES:  # the default names, as many as the seats
        names = [*NAMES, *(f"Player {i + 1}" for i in range(len(NAMES), players))][:players]
    elif len(names) != players:
        raise RulesError(f"{len(names)} names for {players} seats", "names")
    seats = [
        make_bot(b, spec.name, ruleset, i, opts) if isinstance(b, str) else b
        for i, b in enumerate(bots)
    ]
    for i, bot in enumerate(seats):
        made_for = getattr(bot, "game", spec.name)  # (a heuristic bot plays one game)
        if made_for != spec.name:
            raise RulesError(f"bots[{i}] plays {quoted(made_for)}, not {spec.name}", "bots")
    env = play_record(spec.name, seats, seed, ruleset, opts, names, played_at)
    return Record.from_envelope(env)
