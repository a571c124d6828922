"""docs/facts.md lists every public fact key of every game, with its TypedFact field and who
sees it: checked against what the engine gives in random play of every game and ruleset,
as the referee types it (service.add_facts), both ways."""

from __future__ import annotations

import random
import re
from collections import defaultdict
from pathlib import Path

from tapis_cartes.referee.engine import GAMES, new_match
from tapis_cartes.referee.server.service import add_facts
from tapis_cartes.v1 import referee_pb2 as pb
from tests.engine.playing import configurations, deal_next, rules_of

DOC = Path(__file__).resolve().parents[2] / "docs" / "facts.md"
ROW = re.compile(r"^\| `([a-z_]+)` \| `([a-z_]+)` \| (all|own seat) \| .+ \|$")
LISTS = {"numbers", "flags", "words", "groups", "seat_words", "cards", "card_groups"}


def documented() -> dict[str, dict[str, tuple[str, str]]]:
    """Per game (its `## name` section): key -> (TypedFact field, who sees it)."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    game = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            game = line[3:].strip()
            assert game not in out, game
            out[game] = {}
        elif (m := ROW.match(line)) is not None:
            assert game is not None, line
            key, field, seen = m.groups()
            assert key not in out[game], (game, key)
            assert field in pb.TypedFact.DESCRIPTOR.fields_by_name, (game, key, field)
            out[game][key] = (field, seen)
    return out


def played() -> dict[str, dict[str, set[tuple[str, str]]]]:
    """Per game: key -> the (field, viewer kind) it came in, over random play of every
    game and ruleset, each view of every seat and of a spectator at every step."""
    out: dict[str, dict[str, set[tuple[str, str]]]] = defaultdict(lambda: defaultdict(set))
    for config in configurations():
        game = config[0]
        for seed in range(4):
            rng = random.Random(f"{seed} {config}")
            match = new_match(rules_of(config), log_events=False)
            for _ in range(5):
                if match.finished:
                    break
                deal_next(match, rng)
                while to_act := match.to_act():
                    for viewer in (None, *range(match.players)):
                        view = match.view(viewer)
                        assert view is not None
                        message = pb.SeatView()
                        add_facts(message, view.public, view.cards)
                        assert [f.key for f in message.facts] == [
                            f.key for f in message.typed_facts
                        ]
                        for fact in message.typed_facts:
                            field = fact.WhichOneof("value")
                            assert field is not None, (game, fact.key)
                            if field == "numbers" and not fact.numbers.values:
                                field = "empty list"
                            kind = "spectator" if viewer is None else "seat"
                            out[game][fact.key].add((field, kind))
                    seat = rng.choice(to_act)
                    match.step(seat, rng.choice(match.legal_actions(seat)))
    return out


def test_every_fact_key_the_engine_gives_is_documented_and_vice_versa() -> None:
    doc = documented()
    seen = played()
    assert sorted(doc) == sorted(GAMES) == sorted(seen)
    for game, keys in seen.items():
        assert sorted(keys) == sorted(doc[game]), game
        for key, got in keys.items():
            field, who = doc[game][key]
            fields = {f for f, _ in got}
            # (A rare list may have been seen empty only, e.g. cartes_blanches.)
            assert fields - {"empty list"} <= {field}, (game, key, fields)
            if "empty list" in fields:
                assert field in LISTS, (game, key)
            viewers = {v for _, v in got}
            # "own seat": never in a spectator's view; "all": spectators see it too.
            assert viewers == ({"seat"} if who == "own seat" else {"seat", "spectator"}), (
                game,
                key,
                viewers,
            )
