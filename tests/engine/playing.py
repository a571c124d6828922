"""Shared by the engine suites that run over every game × ruleset: the configurations to
play (each ruleset at the ends of its `players` range), a seeded random legal play, a match
that can be copied by replaying what was done to it, and the checks every random playout
makes at its end (replay equals live play; the record round-trips and verifies)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

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
    Deal,
    Match,
    Rules,
    Start,
    View,
    make_rules,
    new_match,
)
from tapis_cartes.referee.engine.cards import iter_cards
from tapis_cartes.referee.engine.errors import RulesError
from tapis_cartes.referee.engine.options import int_range
from tapis_cartes.v1 import record_pb2 as pb

Config = tuple[str, str, int, dict[str, Any]]


def configurations(extra: bool = True) -> list[Config]:
    """Every game × ruleset at the least and the greatest number of players it allows, and
    (with `extra`) a few option sets that open other phases and refusals."""
    out: list[Config] = []
    for name, spec in GAMES.items():
        for ruleset, model in spec.rulesets.items():
            bounds = int_range(model, "players")
            counts = [spec.fixed_players] if bounds is None else sorted(set(bounds))
            for players in counts:
                assert players is not None
                try:
                    make_rules(name, ruleset, {}, players)
                except RulesError:
                    continue
                out.append((name, ruleset, players, {}))
    if extra:
        out += [
            ("dame-de-pique", "standard", 4, {"qs_counts_as_heart_for_lead": True}),
            ("napoleon", "standard", 4, {"short_deck": True, "stop_when_decided": True}),
            ("imperiale", "academie", 3, {"three_player_first_lead_trump": True}),
            ("triomphe", "individuelle", 3, {"regime": "plaisant"}),
            ("triomphe", "individuelle", 2, {"regime": "forcat"}),
            ("triomphe", "equipe", 4, {"regime": "forcat", "hand_size": 6}),
        ]
    return out


def config_id(config: Config) -> str:
    name, ruleset, players, options = config
    extra = "-".join(f"{k}={v}" for k, v in sorted(options.items()))
    return f"{name}-{ruleset}-{players}p" + (f"-{extra}" if extra else "")


def rules_of(config: Config) -> Rules:
    name, ruleset, players, options = config
    return make_rules(name, ruleset, options, players)


class Played:
    """A match and everything done to it (deals and actions), so that a copy in the same
    state can be rebuilt by replay (compiled engine classes cannot be deep-copied)."""

    def __init__(self, rules: Rules, start: Start | None = None) -> None:
        self.rules = rules
        self.start = start
        self.match = new_match(rules, start, log_events=False)
        self.ops: list[tuple[str, int, Any]] = []

    def deal(self, rng: random.Random) -> None:
        dealer, deal = deal_next(self.match, rng)
        self.ops.append(("deal", dealer, deal))

    def step(self, seat: int, action: int) -> None:
        self.match.step(seat, action)
        self.ops.append(("step", seat, action))

    def random_step(self, rng: random.Random) -> None:
        """A random legal action of a random seat to act (dealing when no hand is on)."""
        m = self.match
        to_act = m.to_act()
        if not to_act:
            self.deal(rng)
            return
        seat = rng.choice(to_act)
        self.step(seat, rng.choice(m.legal_actions(seat)))

    def copy(self) -> Match:
        again = new_match(self.rules, self.start, log_events=False)
        for op, seat_or_dealer, arg in self.ops:
            if op == "deal":
                again.start_hand(seat_or_dealer, arg)
            else:
                again.step(seat_or_dealer, arg)
        return again


def deal_next(match: Match, rng: random.Random) -> tuple[int, Deal]:
    """Start the next hand: the dealer the rotation wants (a random one first), a shuffled
    pack dealt by the rules. Returns the dealer and the deal."""
    dealer = match.expected_dealer()
    if dealer is None:
        dealer = rng.choice(match.first_dealers())
    deck = list(iter_cards(match.pack))
    rng.shuffle(deck)
    deal = match.deal_deck(dealer, deck)
    match.start_hand(dealer, deal)
    return dealer, deal


def play_to_end(match: Match, rng: random.Random, max_hands: int) -> int:
    """Random legal play until the match ends or `max_hands` hands have been played; the
    number of hands played."""
    hands = 0
    while not match.finished and hands < max_hands:
        deal_next(match, rng)
        hands += 1
        while to_act := match.to_act():
            seat = rng.choice(to_act)
            match.step(seat, rng.choice(match.legal_actions(seat)))
    return hands


def one_to_act(m: Match) -> tuple[int, list[int], View]:
    """In a game where one seat acts at a time: that seat, its legal actions and its view,
    once the legal set is sorted, without repeats and not empty, no other seat has a legal
    action, and the view shows the same legal set and seat to act."""
    to_act = m.to_act()
    assert len(to_act) == 1
    (seat,) = to_act
    legal = m.legal_actions(seat)
    assert legal and legal == sorted(set(legal))
    assert all(m.legal_actions(s) == [] for s in range(m.players) if s != seat)
    view = m.view(seat)
    assert view is not None and view.legal == tuple(legal) and view.to_act == (seat,)
    return seat, legal, view


def replay_of(
    match: Match,
    deals: Sequence[tuple[int, Deal]],
    actions: Sequence[tuple[int, int]],
    log_events: bool,
    start: Start | None = None,
) -> Match:
    """A new match of `match`'s rules given the same deals and (seat, action) list, hand by
    hand: one `apply` at a time (events built) with `log_events`, else `step_many` (the fast
    path of a replay)."""
    again = new_match(match.rules, start, log_events)
    assert type(again) is type(match)
    i = 0
    for dealer, deal in deals:
        hand = len(again.results)
        again.start_hand(dealer, deal)  # may end the hand (and the match) at once
        count = len(match.results[hand].actions)
        chunk = actions[i : i + count]
        if log_events:
            for seat, action in chunk:
                again.apply(seat, action)
        else:
            again.step_many([s for s, _ in chunk], [a for _, a in chunk])
        i += count
    assert i == len(actions)
    return again


def assert_replay_equals_live(
    match: Match,
    deals: Sequence[tuple[int, Deal]],
    actions: Sequence[tuple[int, int]],
    start: Start | None = None,
) -> None:
    """Replaying the deals and actions, live and by the fast path, gives the same match:
    scores, winners, end and every score line."""
    for log_events in (True, False):
        again = replay_of(match, deals, actions, log_events, start)
        assert again.scores == match.scores and again.winners == match.winners
        assert again.finished == match.finished
        assert [r.lines for r in again.results] == [r.lines for r in match.results]


def assert_record_round_trips(match: Match, reference: str) -> tuple[pb.GameRecord, bytes]:
    """The match's record: its bytes decode to the same record and encode to the same bytes,
    and it verifies (every hand replayed). Returns the decoded record and its bytes."""
    names = [f"P{i}" for i in range(match.players)]
    record = build_record(match, names, Provenance("test", reference))
    data = canonical_bytes(record)
    back = decode_record(data)
    assert back == record and canonical_bytes(back) == data
    result = verify_envelope(envelope(data))
    assert result.ok, result.error
    assert result.hands == len(match.results)
    return back, data
