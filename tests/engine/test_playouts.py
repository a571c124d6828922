"""Random-playout invariants for every game × ruleset × a sample of option sets (OpenSpiel's
first test layer): seeded random legal play, checked at every step and at the end.

At every step: each seat's legal set is sorted and without repeats, non-empty exactly for the
seats to act while the match is on; no card is played twice in a hand; at sampled steps,
`refusal` is None exactly for the legal actions among candidate actions. At the end (the
match over, or `MAX_HANDS` hands played): the deals and actions replayed (live, and by the
fast path) give the same match, and the record round-trips byte for byte and verifies.
One match of each configuration ends in a resignation.

The configurations: every ruleset at the least and the greatest number of players it allows
and a few option sets (tests/engine/playing.py), then each option of each ruleset set to
each of its other values (an int option to the low end of its range), one at a time. The
game-specific checks of random play (independent scorers, the trick module's legal sets, the
dealer's rotation) stay in each game's test module."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tapis_cartes.referee.engine import GAMES, Deal, make_rules
from tapis_cartes.referee.engine.actions import (
    ABANDON,
    BID,
    PILLE,
    PILLE_STOP,
    PLAY,
    RESIGN,
    encode,
)
from tapis_cartes.referee.engine.cards import iter_cards
from tapis_cartes.referee.engine.errors import RulesError
from tapis_cartes.referee.engine.options import choices, int_range
from tests.engine.playing import (
    Config,
    Played,
    assert_record_round_trips,
    assert_replay_equals_live,
    config_id,
    configurations,
    rules_of,
)

MAX_HANDS = 10  # a longer match is cut here (between hands): its record is a stopped match's
REFUSAL_EVERY = 7  # steps between two refusal samples


def other_values(model: Any, key: str) -> list[bool | int | str]:
    """The values of an option other than its default: the other bool, the other choices,
    the low end of an int's range."""
    field = model.model_fields[key]
    default = field.default
    if field.annotation is bool:
        return [not default]
    words = choices(model, key)
    if words:
        return [w for w in words if w != getattr(default, "value", default)]
    bounds = int_range(model, key)
    if bounds is not None and bounds[0] != default:
        return [bounds[0]]
    return []


def option_samples() -> list[Config]:
    """Each option of each ruleset at each of its other values, one at a time, at the
    ruleset's default number of players (a combination the rules refuse is left out)."""
    out: list[Config] = []
    for name, spec in GAMES.items():
        for ruleset, model in spec.rulesets.items():
            default = make_rules(name, ruleset, {})
            for key in model.model_fields:
                if key == "players":
                    continue
                for value in other_values(model, key):
                    try:
                        make_rules(name, ruleset, {key: value}, default.players)
                    except RulesError:
                        continue
                    out.append((name, ruleset, default.players, {key: value}))
    return out


CONFIGS = list({config_id(c): c for c in configurations() + option_samples()}.values())


def check_refusals(played: Played, rng: random.Random) -> None:
    """`refusal` is None exactly for the legal actions, on a sample of candidates for every
    seat: its legal actions, playing a few cards of the pack, a few bids."""
    m = played.match
    pack = list(iter_cards(m.pack))
    for seat in range(m.players):
        legal = m.legal_actions(seat)
        candidates = {*legal, *(encode(PLAY, c) for c in rng.sample(pack, 6))}
        candidates |= {encode(BID, b) for b in rng.sample(range(8), 2)}
        for action in candidates:
            assert action & 7 != RESIGN
            refusal = m.refusal(seat, action)
            assert (refusal is None) == (action in legal), (seat, action, refusal)


def play_out(
    played: Played, rng: random.Random, resign_at: int | None = None
) -> list[tuple[int, Deal]]:
    """Random legal play to the end of the match or of `MAX_HANDS` hands (or, with
    `resign_at`, until a random seat resigns at that step), checking every step; returns the
    deals (dealer, deal) in order."""
    m = played.match
    deals: list[tuple[int, Deal]] = []
    steps = 0
    while not m.finished and len(m.results) < MAX_HANDS:
        played.deal(rng)
        _, dealer, deal = played.ops[-1]
        deals.append((dealer, deal))
        cards_played = 0
        while to_act := m.to_act():
            for seat in range(m.players):
                legal = m.legal_actions(seat)
                assert legal == sorted(set(legal)), (seat, legal)
                assert bool(legal) == (seat in to_act), (seat, to_act, legal)
                # CLOCK.AUTOPLAY: the default action is the smallest legal one but an offer
                # to concede (a pillage's stop first), never a resignation, and -1 for a
                # seat that may not act.
                default = m.default_action(seat)
                if encode(PILLE, PILLE_STOP) in legal:
                    assert default == encode(PILLE, PILLE_STOP)
                else:
                    chosen = [a for a in legal if a != encode(ABANDON, 0)]
                    assert default == (chosen[0] if chosen else -1)
            if steps % REFUSAL_EVERY == 0:
                check_refusals(played, rng)
            if steps == resign_at:
                played.step(rng.randrange(m.players), encode(RESIGN))
                assert m.finished and m.resigned is not None and not m.to_act()
                assert all(m.legal_actions(s) == [] for s in range(m.players))
                return deals
            seat = rng.choice(to_act)
            action = rng.choice(m.legal_actions(seat))
            if action & 7 == PLAY:
                card = action >> 3
                assert not cards_played >> card & 1, f"{card} played twice in a hand"
                cards_played |= 1 << card
            played.step(seat, action)
            steps += 1
        if not m.finished:
            assert m.hand is not None and m.hand.over  # a hand ends only when no seat may act
    return deals


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_random_playout_invariants(config: Config) -> None:
    rules = rules_of(config)
    rng = random.Random(config_id(config))
    # Two matches played out, and one a seat resigns.
    for resign_at in (None, None, rng.randrange(60)):
        played = Played(rules)
        deals = play_out(played, rng, resign_at)
        m = played.match
        assert m.finished or len(m.results) == MAX_HANDS
        assert [(r.dealer, r.deal) for r in m.results] == deals
        actions = [(s, a) for op, s, a in played.ops if op == "step"]
        assert_replay_equals_live(m, deals, actions)
        assert_record_round_trips(m, config_id(config))


def test_the_sample_covers_every_ruleset_and_option() -> None:
    covered = {(name, ruleset) for name, ruleset, _, _ in CONFIGS}
    assert covered == {(name, r) for name, spec in GAMES.items() for r in spec.rulesets}
    flipped = {(name, ruleset, key) for name, ruleset, _, opts in CONFIGS for key in opts}
    for name, spec in GAMES.items():
        for ruleset, model in spec.rulesets.items():
            for key in model.model_fields:
                if key != "players" and other_values(model, key):
                    assert (name, ruleset, key) in flipped, (name, ruleset, key)
