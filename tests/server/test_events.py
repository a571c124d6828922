"""Each viewer's copy of the engine's card events, and typed facts, as the referee sends them
(service.py's `event_message` and `seat_view` on a `Table`, in-process): each seat is sent its
cards after every action (ActionTaken.hand; a spectator none), cards passed or discarded face
down reach only who may see them, and every text fact has its typed twin."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tapis_cartes.referee.engine import make_rules, new_match
from tapis_cartes.referee.engine.actions import PLAY
from tapis_cartes.referee.engine.cards import iter_cards, parse_card
from tapis_cartes.referee.server.service import add_facts, event_message, seat_view
from tapis_cartes.referee.server.tables import ActionEvent, Seat, Table, token_hash
from tapis_cartes.v1 import referee_pb2 as pb

GAMES: list[tuple[str, str, dict[str, Any], int]] = [
    ("dame-de-pique", "", {"end_threshold": 30}, 4),
    ("triomphe", "as-qui-pille", {"target": 5}, 4),
    ("imperiale", "academie", {"target_fiches": 3, "players": 3}, 3),
    ("napoleon", "", {"deals": 4}, 4),
]


def _table(game: str, ruleset: str, options: dict[str, Any], players: int) -> Table:
    rules = make_rules(game, ruleset or None, options, players)
    table = Table(
        id="t",
        rules=rules,
        options=options,
        seed=bytes(32),
        created=0.0,
        creator="test",
        seats=[Seat(f"P{i}", False) for i in range(players)],
        match=new_match(rules),
    )
    for i in range(players):
        table.take(i, f"P{i}", token_hash(str(i)))
    return table


def _same(text: pb.Fact, fact: pb.TypedFact) -> bool:
    """Whether a typed fact says what its text does (tapis_cartes.records.render's `fact_text`)."""
    kind = fact.WhichOneof("value")
    if kind == "cards":
        # Card texts ("9H", "7D 8C", "9H, 10H" turned in that order).
        said = [parse_card(c) for c in text.value.replace(",", " ").split()]
        ordered = text.key == "turned"
        return said == list(fact.cards.cards) if ordered else set(said) == set(fact.cards.cards)
    if kind == "card_groups":
        groups = text.value.split(", ")
        return [{parse_card(c) for c in g.split()} for g in groups] == [
            set(g.cards) for g in fact.card_groups.groups
        ]
    return _typed_text(fact) == text.value


def _typed_text(fact: pb.TypedFact) -> str:
    """The text a typed fact other than cards has in SeatView.facts."""
    kind = fact.WhichOneof("value")
    if kind == "flag":
        return "true" if fact.flag else "false"
    if kind == "number":
        return str(fact.number)
    if kind == "word":
        return fact.word
    if kind == "numbers":
        return ", ".join(map(str, fact.numbers.values))
    if kind == "flags":
        return ", ".join("true" if v else "false" for v in fact.flags.values)
    if kind == "words":
        return ", ".join(fact.words.values)
    if kind == "seat_words":
        return ", ".join(f"{v.seat} {v.word}" for v in fact.seat_words.values)
    assert kind == "groups", kind
    return ", ".join(" ".join(map(str, g.values)) for g in fact.groups.groups)


@pytest.mark.parametrize(("game", "ruleset", "options", "players"), GAMES)
def test_each_viewer_gets_what_it_may_see(
    game: str, ruleset: str, options: dict[str, Any], players: int
) -> None:
    table = _table(game, ruleset, options, players)
    match = table.match
    rng = random.Random(game)
    viewers = [None, *range(players)]
    kinds: set[str] = set()
    while not table.finished:
        hand = match.hand
        assert hand is not None
        seat = rng.choice(match.to_act())
        for s in range(players):
            engine_view = match.view(s)
            view = seat_view(table, s, engine_view)
            # The facts merged from their parts made once (service._fact_part) are the facts
            # made afresh.
            fresh = pb.SeatView()
            add_facts(fresh, engine_view.public, engine_view.cards)
            assert list(view.facts) == list(fresh.facts)
            assert list(view.typed_facts) == list(fresh.typed_facts)
            # Every text fact has its typed twin, same key, same order, same value.
            assert [f.key for f in view.typed_facts] == [f.key for f in view.facts]
            for text, typed in zip(view.facts, view.typed_facts, strict=True):
                assert _same(text, typed), (text, typed)
                kinds.add(f"fact {text.key}: {typed.WhichOneof('value')}")
        action = rng.choice(table.legal(seat))
        before = list(hand.held)
        first = len(table.events)
        table.apply(seat, action)
        after = list(hand.held)
        if not hand.over:  # the cards each seat sees in its hand now
            assert after == [v.hand for v in map(match.view, range(players)) if v is not None]
        if action & 7 == PLAY:  # a card played leaves the player's hand, no other
            assert after[seat] == before[seat] & ~(1 << (action >> 3))
        for index in range(first, len(table.events)):
            event = table.events[index]
            for viewer in viewers:
                out = event_message(table, index, event, viewer)
                kind = out.WhichOneof("event")
                assert kind is not None
                kinds.add(kind)
                if isinstance(event, ActionEvent):
                    # Every seat is sent its cards after each action; a spectator none.
                    mine = after[viewer] if viewer is not None else 0
                    assert list(out.action_taken.hand) == list(iter_cards(mine))
                elif kind == "cards_passed":
                    p = out.cards_passed
                    sees = viewer in (p.seat, p.to_seat)
                    assert p.count == 3 and len(p.cards) == (3 if sees else 0)
                elif kind == "cards_taken":
                    t = out.cards_taken
                    assert t.HasField("discarded") == (viewer == t.seat)
                    if viewer == t.seat:
                        assert t.discarded == action >> 3
                elif kind == "cards_shown":
                    assert out.cards_shown.cards and out.cards_shown.rule
    expected = {
        "dame-de-pique": "cards_passed",
        "triomphe": "cards_taken",
        "imperiale": "cards_shown",
        "napoleon": "trick_completed",
    }
    assert expected[game] in kinds
    cards = {
        "dame-de-pique": ("given", "received"),
        "triomphe": ("retourne", "face_up", "turned", "discarded"),
        "imperiale": ("retourne",),
        "napoleon": (),
    }
    for key in cards[game]:
        assert f"fact {key}: cards" in kinds, key
    if game == "imperiale":
        assert "fact shown: card_groups" in kinds
