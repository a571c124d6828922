"""The engine on any int (issue 10, hostile records): every public entry (`step`, `apply`,
`step_many`, `refusal`, `legal_actions`, `view`, `start_hand`, `begin_hand`, `deal_deck`,
`new_match` with a `Start`, `make_rules`) either works or raises a `TapisError`, for every
game, whatever ints it is given (negative, beyond the pack, 2**34, 2**64 - 1, thousands of
bits, dealers and seats out of range, sequences of any length). Hypothesis draws the values;
each call runs under `tracemalloc` with a peak bound, and a subprocess replays the reported
records' values under an address-space limit."""

from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
import textwrap
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tapis_cartes.referee.engine import GAMES, Deal, Match, Start, make_rules, new_match
from tapis_cartes.referee.engine.errors import TapisError
from tapis_cartes.referee.engine.options import int_range
from tests.engine.playing import (
    Config,
    Played,
    config_id,
    configurations,
    deal_next,
    rules_of,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = configurations(extra=False)
PEAK_LIMIT = 4 << 20  # bytes a call may allocate at its peak (the inputs are a few KB)
TIME_LIMIT = 2.0  # seconds a call may take (microseconds when all is well)

HOSTILE = [
    -1,
    -(2**63),
    52,
    53,
    63,
    64,
    2**31 - 1,
    2**32 - 1,  # the retourne of the hostile record
    2**34,  # its card id
    2**53,  # its action payload
    2**63 - 1,
    2**64 - 1,
    2**100,
    2**4096,
    -(2**4096),
    2**20000,  # more digits than Python writes (4300)
]
ints = st.one_of(
    st.integers(-64, 64),
    st.integers(-(2**70), 2**70),
    st.sampled_from(HOSTILE),
)
actions = st.one_of(
    ints,
    st.sampled_from(HOSTILE).map(lambda c: abs(c) << 3),  # a card play of a hostile card id
    st.builds(
        lambda p, k: p << 3 | k,
        st.sampled_from(HOSTILE[2:]) | st.integers(0, 80),
        st.integers(0, 7),
    ),
)
seats = st.one_of(st.integers(-3, 12), st.sampled_from(HOSTILE))
T = TypeVar("T")


def bounded(call: Callable[[], T]) -> T | TapisError:
    """Run `call`: it returns, or raises a `TapisError` (returned), within the peak and time
    bounds. Anything else (MemoryError, IndexError, KeyError, AssertionError, OverflowError,
    ValueError...) fails the test."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        result: T | TapisError = call()
    except TapisError as exc:
        result = exc
    finally:
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < PEAK_LIMIT, f"peak {peak} bytes"
    assert elapsed < TIME_LIMIT, f"{elapsed:.2f} s"
    if isinstance(result, TapisError):
        str(result)  # the message can be written
        assert len(str(result)) < 1000
    return result


def state(config: Config, seed: int, depth: int) -> Played:
    """A match of `config` after `depth` random legal steps (deals included)."""
    rng = random.Random(seed)
    played = Played(rules_of(config))
    for _ in range(depth):
        if played.match.finished:
            break
        played.random_step(rng)
    return played


HYPOTHESIS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
@HYPOTHESIS
@given(seed=st.integers(0, 2**16), depth=st.integers(0, 120), seat=seats, action=actions)
def test_one_action_on_any_ints(
    config: Config, seed: int, depth: int, seat: int, action: int
) -> None:
    played = state(config, seed, depth)
    m = played.match
    refusal = bounded(lambda: m.refusal(seat, action))
    assert refusal is None or isinstance(refusal, TapisError)
    legal = bounded(lambda: m.legal_actions(seat))
    assert isinstance(legal, list)
    bounded(lambda: m.view(seat))
    outcome = bounded(lambda: m.apply(seat, action))
    assert isinstance(outcome, TapisError) == (refusal is not None)


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
@settings(HYPOTHESIS, max_examples=60)
@given(
    seed=st.integers(0, 2**16),
    keep=st.integers(0, 12),
    tail_seats=st.lists(seats, max_size=8),
    tail=st.lists(actions, max_size=8),
    on_turn=st.booleans(),
)
def test_a_replay_on_any_ints(
    config: Config, seed: int, keep: int, tail_seats: list[int], tail: list[int], on_turn: bool
) -> None:
    """`step_many`: a hand's real actions, then anything (or lists of unequal lengths); with
    `on_turn` the first hostile action comes from the seat the hand waits for, so that it
    reaches the fast path of card play."""
    played = state(config, seed, 0)
    rng = random.Random(seed)
    played.deal(rng)
    for _ in range(keep):
        if not played.match.to_act():
            break
        played.random_step(rng)
    hand = played.match.hand
    assert hand is not None
    again = new_match(played.rules, log_events=False)
    again.start_hand(hand.dealer, hand.deal)
    if on_turn and tail_seats and played.match.to_act():
        tail_seats[0] = played.match.to_act()[0]
    seat_run = [*hand.action_seats, *tail_seats]
    action_run = [*hand.actions, *tail]
    bounded(lambda: again.step_many(seat_run, action_run))


def mutated_deal(
    m: Match, rng: random.Random, choice: int, value: int, more: Sequence[int]
) -> tuple[int, Deal]:
    """A real deal of `m` with one part replaced by hostile values."""
    dealer = m.expected_dealer()
    if dealer is None:
        dealer = rng.choice(m.first_dealers())
    deck = [c for c in range(52) if m.pack >> c & 1]
    rng.shuffle(deck)
    deal = m.deal_deck(dealer, deck)
    hands = list(deal.hands)
    retourne, talon = deal.retourne, list(deal.talon)
    what = choice % 8
    if what == 0:
        dealer = value
    elif what == 1:
        hands[rng.randrange(len(hands))] = value
    elif what == 2:
        hands[rng.randrange(len(hands))] |= value if value > 0 else 1
    elif what == 3:
        retourne = value
    elif what == 4:
        talon.append(value)
    elif what == 5:
        talon = [*talon, *more] if more else [value] * (1 + choice % 300)
    elif what == 6:
        hands = [*hands, *more] if more else hands[:-1]
    else:
        hands = [value] * len(hands)
    return dealer, Deal(tuple(hands), retourne, tuple(talon))


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
@HYPOTHESIS
@given(
    seed=st.integers(0, 2**16),
    choice=st.integers(0, 2**10),
    value=ints,
    more=st.lists(ints, max_size=6),
    begin=st.booleans(),
)
def test_a_deal_of_any_ints(
    config: Config, seed: int, choice: int, value: int, more: list[int], begin: bool
) -> None:
    """`start_hand` and `begin_hand` with a deal or dealer made hostile, then play on."""
    rng = random.Random(seed)
    m = new_match(rules_of(config))
    dealer, deal = mutated_deal(m, rng, choice, value, more)
    result = bounded(lambda: m.begin_hand(dealer, deal) if begin else m.start_hand(dealer, deal))
    if not isinstance(result, TapisError) and m.to_act():
        seat = m.to_act()[0]
        bounded(lambda: m.step(seat, m.legal_actions(seat)[0]))


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
@HYPOTHESIS
@given(
    seed=st.integers(0, 2**16),
    dealer=st.one_of(st.integers(-1, 10), ints),
    position=st.integers(0, 60),
    value=ints,
    extra=st.lists(ints, max_size=60),
    truncate=st.booleans(),
)
def test_a_deck_of_any_ints(
    config: Config,
    seed: int,
    dealer: int,
    position: int,
    value: int,
    extra: list[int],
    truncate: bool,
) -> None:
    m = new_match(rules_of(config))
    deck = [c for c in range(52) if m.pack >> c & 1]
    random.Random(seed).shuffle(deck)
    if position < len(deck):
        deck[position] = value
    deck += extra
    if truncate:
        deck = deck[: position % 40]
    result = bounded(lambda: m.deal_deck(dealer, deck))
    if not isinstance(result, TapisError):
        assert isinstance(result, Deal) and 0 <= dealer < m.players


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
@HYPOTHESIS
@given(
    number=st.one_of(st.integers(-2, 2**20), ints),
    shape=st.integers(0, 3),
    value=ints,
    count=st.integers(0, 12),
)
def test_a_start_of_any_ints(
    config: Config, number: int, shape: int, value: int, count: int
) -> None:
    rules = rules_of(config)
    units = 2 if rules.game == "imperiale" else 1
    scores: tuple[tuple[int, ...], ...] | None
    if shape == 0:
        scores = None
    elif shape == 1:
        scores = tuple((value,) * units for _ in range(rules.players))
    elif shape == 2:
        scores = tuple((value,) * units for _ in range(count))
    else:
        scores = tuple((0,) * count for _ in range(rules.players))
    result = bounded(lambda: new_match(rules, Start(number, scores)))
    if not isinstance(result, TapisError):
        assert isinstance(result, Match) and 1 <= number <= 10**6
        rng = random.Random(number)
        bounded(lambda: deal_next(result, rng))


@pytest.mark.parametrize(
    ("game", "ruleset", "key"),
    [
        (name, ruleset, key)
        for name, spec in GAMES.items()
        for ruleset, model in spec.rulesets.items()
        for key in model.model_fields
        if int_range(model, key) is not None
    ],
)
@settings(max_examples=40, deadline=None, derandomize=True)
@given(value=ints)
def test_an_option_of_any_int(game: str, ruleset: str, key: str, value: int) -> None:
    result = bounded(lambda: make_rules(game, ruleset, {key: value}))
    if not isinstance(result, TapisError):
        model = type(result.options)
        bounds = int_range(model, key)
        assert bounds is not None and bounds[0] <= value <= bounds[1]


# --- the hostile record's values, under an address-space limit -------------------------------

PROBE = textwrap.dedent(
    """
    import random, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (__LIMIT__, __LIMIT__))
    from tapis_cartes.referee.engine import Deal, GAMES, TapisError, make_rules, new_match
    from tapis_cartes.referee.engine.actions import encode

    failures = []

    def attempt(what, call):
        try:
            call()
        except TapisError:
            pass
        except BaseException as exc:  # MemoryError above all
            failures.append(f"{what}: {type(exc).__name__}")

    for name, spec in GAMES.items():
        for ruleset in spec.rulesets:
            rules = make_rules(name, ruleset)
            m = new_match(rules, log_events=False)
            deck = [c for c in range(52) if m.pack >> c & 1]
            random.Random(1).shuffle(deck)
            dealer = m.first_dealers()[0]
            deal = m.deal_deck(dealer, deck)
            for bad in (2**34, 2**53, 2**32 - 1):
                where = f"{name} {ruleset} {bad}"
                shapes = (
                    Deal(deal.hands, bad, deal.talon),
                    Deal(deal.hands, deal.retourne, (*deal.talon[:-1], bad)),
                    Deal((*deal.hands[:-1], 1 << 40 | deal.hands[-1]), deal.retourne, deal.talon),
                )
                for shape in shapes:
                    attempt(f"{where} deal", lambda: new_match(rules).start_hand(dealer, shape))
                attempt(f"{where} deck", lambda: m.deal_deck(dealer, [*deck[:-1], bad]))
                attempt(f"{where} dealer", lambda: m.deal_deck(bad, deck))
            for bad_action in (encode(0, 2**34), encode(0, 2**53), 2**53, encode(5, 2**34)):
                def replay():
                    # Legal actions up to the card play, then the hostile one in a replay.
                    again = new_match(rules, log_events=False)
                    again.start_hand(dealer, deal)
                    while again.to_act():
                        turn = again.to_act()[0]
                        legal = again.legal_actions(turn)
                        if legal[-1] & 7 == 0:
                            break
                        again.step(turn, legal[-1])  # the highest bid, a pass, pille stop
                    else:
                        return  # (the announcements ended the match)
                    attempt(f"{name} {ruleset} refusal", lambda: again.refusal(turn, bad_action))
                    again.step_many([turn], [bad_action])

                attempt(f"{name} {ruleset} action {bad_action}", replay)
    print("\\n".join(failures) or "ok")
    """
)


@pytest.mark.skipif(
    not Path("/proc/self/status").exists() or not hasattr(resource, "RLIMIT_AS"),
    reason="needs Linux's /proc and RLIMIT_AS",
)
def test_the_hostile_records_values_under_an_address_space_limit() -> None:
    """A card id of 2**34, an action payload of 2**53, a retourne of 2**32 - 1 (issue 10):
    with 256 MB of address space above what the interpreter and the engine use, every game
    refuses each with a `TapisError` (a single mask built from 2**34 would take 2 GB)."""
    base = int(_vm_size_kb() * 1024)
    limit = base + (256 << 20)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE.replace("__LIMIT__", str(limit))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "ok", result.stdout[-2000:]


def _vm_size_kb() -> int:
    """The address space a fresh interpreter with the engine imported takes (kB)."""
    probe = "import tapis_cartes.referee.engine.registry;print(open('/proc/self/status').read())"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("VmPeak:"))
    return int(line.split()[1])


@pytest.mark.parametrize("value", [-1, -(2**70), 2**52, 2**200])
def test_a_mask_that_is_no_set_of_cards_is_refused_when_shown(value: int) -> None:
    """`mask_str(-1)` never returned (the bits of a negative int never end), growing; larger
    masks were an IndexError."""
    from tapis_cartes.referee.engine import InvalidAction, mask_str

    with pytest.raises(InvalidAction, match="is not a set of cards"):
        mask_str(value)


@pytest.mark.parametrize("value", [-1, 7, 2**40, 2**70])
def test_an_int_of_no_kind_of_action_is_refused_when_shown(value: int) -> None:
    from tapis_cartes.referee.engine import InvalidAction, action_str

    with pytest.raises(InvalidAction, match="is not an action"):
        action_str(value)


def test_a_dame_de_pique_start_at_its_threshold_is_refused() -> None:
    """Such a match was played one hand, then won: the other games refuse a start that is
    already the end (`TRI.END`, Napoléon's deals, L'Impériale's points)."""
    from tapis_cartes.referee.engine import RulesError

    rules = make_rules("hearts", None, {"end_threshold": 50}, 4)
    new_match(rules, Start(1, ((49,), (0,), (0,), (0,))))  # below: a match to play
    with pytest.raises(RulesError, match="at or above the end_threshold of 50"):
        new_match(rules, Start(1, ((0,), (0,), (50,), (0,))))
