"""La Triomphe (RULES.md section 3): options and rulesets, the legal-set vectors V1-V8 played
in real coups under each regime, example TR-2, one scripted deal per rule and option (vole,
abandon, primauté, pillage, dealers, game end, views, deals, refusals), and random-playout
invariants for every ruleset × regime × player count, checked against an independent
reference of the scoring rules."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from tapis_cartes.records.render import render_record
from tapis_cartes.referee.engine.actions import (
    ABANDON,
    BID,
    PILLE,
    PILLE_STOP,
    PLAY,
    RESIGN,
    VOLE,
    action_str,
    encode,
    parse_action,
)
from tapis_cartes.referee.engine.base import Deal, HandResult, Note, ScoreLine, Start, TrickWon
from tapis_cartes.referee.engine.cards import (
    HEARTS,
    R1,
    R2,
    SUIT_MASK,
    card_str,
    iter_cards,
    mask_of,
    parse_card,
)
from tapis_cartes.referee.engine.errors import DealError, IllegalAction, NotYourTurn, RulesError
from tapis_cartes.referee.engine.options import (
    TriompheAsQuiPilleOptions,
    TriompheEquipeOptions,
    TriompheIndividuelleOptions,
)
from tapis_cartes.referee.engine.registry import find_game, make_rules, new_match
from tapis_cartes.referee.engine.tricks import Regime, TrickRules, legal_cards
from tapis_cartes.referee.engine.triomphe import PACK, PILLE_HIDDEN, TriompheHand, TriompheMatch
from tests.cards import mask
from tests.engine.playing import assert_record_round_trips, assert_replay_equals_live, one_to_act

# --- helpers ------------------------------------------------------------------------------


def act(text: str) -> int:
    """`KS` is a card play; `vole stop`, `abandon offer`, `pille 7D` are the other actions."""
    word, _, rest = text.partition(" ")
    if not rest:
        return encode(PLAY, parse_card(word))
    return parse_action({word: rest})


def match_of(
    ruleset: str = "individuelle",
    options: dict[str, Any] | None = None,
    start: Start | None = None,
) -> TriompheMatch:
    m = new_match(make_rules("triomphe", ruleset, options or {}), start)
    assert isinstance(m, TriompheMatch)
    return m


def deal_of(hands: Sequence[str], retourne: str, talon: str | None = None) -> Deal:
    """A deal; the talon defaults to every card left, in card-id order."""
    held = [mask(h) for h in hands]
    r = parse_card(retourne)
    if talon is None:
        used = sum(held) | 1 << r
        rest = tuple(c for c in iter_cards(PACK) if not used >> c & 1)
    else:
        rest = tuple(parse_card(t) for t in talon.split())
    return Deal(tuple(held), r, rest)


def run(m: TriompheMatch, script: Sequence[tuple[int, str]]) -> list[Any]:
    events: list[Any] = []
    for seat, text in script:
        events += m.apply(seat, act(text))
    return events


def lines(m: TriompheMatch, hand: int = -1) -> list[tuple[int, str, int, str]]:
    return [(x.seat, x.kind, x.delta[0], x.rule) for x in m.results[hand].lines]


def totals(m: TriompheMatch) -> list[int]:
    return [s[0] for s in m.scores]


def hand_of(m: TriompheMatch) -> TriompheHand:
    h = m.hand
    assert isinstance(h, TriompheHand)
    return h


def plays(m: TriompheMatch, seat: int) -> list[str]:
    return [card_str(a >> 3) for a in m.legal_actions(seat) if a & 7 == PLAY]


def refusal(m: TriompheMatch, seat: int, text: str) -> IllegalAction:
    with pytest.raises(IllegalAction) as exc:
        m.apply(seat, act(text))
    return exc.value


# --- options and rulesets (RULES.md 6) ----------------------------------------------------

DEFAULTS = {
    "regime": "forcee",
    "hand_size": 5,
    "vole_value": 2,
    "vole_fail_penalty": -2,
    "abandon_allowed": True,
    "refused_abandon_vole_value": 2,
}


def test_registry_entry() -> None:
    spec = find_game("triomphe")
    assert spec.name == "triomphe" and spec.title == "La Triomphe" and spec.seed == "002"
    assert list(spec.rulesets) == ["individuelle", "equipe", "as-qui-pille"]
    assert spec.default_ruleset == "individuelle" and spec.fixed_players is None
    assert spec.units == ("points",) and spec.match_class is TriompheMatch
    assert spec.rulesets["equipe"] is TriompheEquipeOptions


@pytest.mark.parametrize(
    ("ruleset", "players", "expected"),
    [
        ("individuelle", None, {"players": 2, "rank_order": "R1", "target": 5}),
        ("individuelle", 6, {"players": 6, "rank_order": "R1", "target": 5}),
        ("equipe", None, {"players": 4, "target": 5, "partners_see_hands": True}),
        ("equipe", 6, {"players": 6, "target": 7, "partners_see_hands": True}),
        (
            "as-qui-pille",
            None,
            {"players": 3, "rank_order": "R2", "as_pille": True, "pillage_continues": True},
        ),
    ],
)
def test_defaults_per_ruleset(ruleset: str, players: int | None, expected: dict[str, Any]) -> None:
    rules = make_rules("triomphe", ruleset, {}, players)
    values = rules.option_values()
    assert values.items() >= {**DEFAULTS, **expected}.items()
    assert rules.players == expected["players"] and rules.ruleset == ruleset


def test_model_per_ruleset_and_explicit_target() -> None:
    assert isinstance(make_rules("triomphe").options, TriompheIndividuelleOptions)
    assert isinstance(make_rules("triomphe", "as-qui-pille").options, TriompheAsQuiPilleOptions)
    six = make_rules("triomphe", "equipe", {"players": 6, "target": 9})
    assert six.option_values()["target"] == 9
    # The effective target is in the digest: 6 players with 7 = 6 players by default.
    assert make_rules("triomphe", "equipe", {"target": 7}, 6).digest == (
        make_rules("triomphe", "equipe", {}, 6).digest
    )
    assert make_rules("triomphe").digest != make_rules("triomphe", "equipe", {}, 4).digest
    assert make_rules("triomphe", "individuelle", {"regime": "plaisant"}, 3).players == 3
    assert make_rules("triomphe", "as-qui-pille", {"regime": "plaisant"}).players == 3


@pytest.mark.parametrize(
    ("ruleset", "options", "key", "text"),
    [
        ("individuelle", {"players": 1}, "players", "allowed: 2 to 6"),
        ("individuelle", {"players": 7}, "players", "allowed: 2 to 6"),
        ("equipe", {"players": 5}, "players", "2 v 2 or 3 v 3"),
        ("equipe", {"players": 2}, "players", "allowed: 4 to 6"),
        ("equipe", {"players": 8}, "players", "allowed: 4 to 6"),
        ("as-qui-pille", {"players": 2}, "players", "allowed: 3 to 6"),
        ("as-qui-pille", {"players": 7}, "players", "allowed: 3 to 6"),
        ("individuelle", {"regime": "plaisant"}, "regime", "three or more players"),
        ("equipe", {"regime": "plaisant"}, "regime", "only for the individual game"),
        ("equipe", {"regime": "plaisant", "players": 6}, "regime", "individual game"),
        ("individuelle", {"hand_size": 0}, "hand_size", "allowed: 1 to 15"),
        ("individuelle", {"hand_size": 16}, "hand_size", "allowed: 1 to 15"),
        ("individuelle", {"players": 3, "hand_size": 11}, "hand_size", "1 to 10 each"),
        ("as-qui-pille", {"players": 6, "hand_size": 6}, "hand_size", "1 to 5 each"),
        ("equipe", {"target": 0}, "target", "allowed: 1 to 100"),
        ("individuelle", {"regime": "au-plaisant"}, "regime", "allowed: forcee, forcat"),
        ("individuelle", {"rank_order": "R3"}, "rank_order", "allowed: R1, R2"),
        ("individuelle", {"vole_value": "2"}, "vole_value", "expected an integer"),
        ("individuelle", {"partners_see_hands": True}, "partners_see_hands", "unknown option"),
        ("equipe", {"as_pille": False}, "as_pille", "unknown option"),
        ("individuelle", {"pillage_continues": False}, "pillage_continues", "unknown option"),
    ],
)
def test_forbidden_options(ruleset: str, options: dict[str, Any], key: str, text: str) -> None:
    with pytest.raises(RulesError) as exc:
        make_rules("triomphe", ruleset, options)
    assert exc.value.key == key
    assert key in str(exc.value) and text in str(exc.value)


def test_players_option_agrees_with_names() -> None:
    with pytest.raises(RulesError) as exc:
        make_rules("triomphe", "equipe", {"players": 6}, 4)
    assert exc.value.key == "players"


# --- V1-V8 (RULES.md 3.2), played in real coups -------------------------------------------

# (id, trick so far, hand, forcée, forçat, plaisant not last, plaisant last, rank order)
VECTORS = [
    ("V1", "KS", "8S JH 7D", "8S", "JH", "8S", "JH", "R1"),
    ("V2", "KS JH", "9S AS QH 8H", "9S AS", "QH", "9S AS", "QH", "R1"),
    ("V3", "KS JH", "QD 8H", "8H", "QD 8H", "QD 8H", "QD 8H", "R1"),
    ("V4", "9H", "7H AH KS", "AH", "AH", "7H AH", "AH", "R1"),
    ("V5", "QD", "9D 7H", "9D", "7H", "9D", "7H", "R1"),
    ("V6", "QD 7H", "9D KD", "9D KD", "9D KD", "9D KD", "9D KD", "R1"),
    ("V7", "QD", "KD 9D 8H", "KD", "KD", "KD 9D", "KD", "R1"),
    ("V8", "AS", "QS 10S", "QS", "QS", "QS 10S", "QS", "R1"),
    ("V8'", "AS", "QS 10S", "QS 10S", "QS 10S", "QS 10S", "QS 10S", "R2"),
]


def vector_cases() -> list[Any]:
    """Every cell a real coup can show: a seat plays last only when it is the n-th card, and
    plaisant needs three players, so with one card on the trick its `last` column is left to
    tests/engine/test_tricks.py."""
    cases = []
    for vid, trick, hand, forcee, forcat, p_not_last, p_last, order in VECTORS:
        before = len(trick.split())
        for regime, expected, counts in [
            ("forcee", forcee, (before + 1, before + 2)),
            ("forcat", forcat, (before + 1, before + 2)),
            ("plaisant", p_not_last, (before + 2,) if before + 2 >= 3 else ()),
            ("plaisant", p_last, (before + 1,) if before + 1 >= 3 else ()),
        ]:
            for n in counts:
                if n < 2:
                    continue
                cases.append(
                    pytest.param(trick, hand, regime, n, expected, order, id=f"{vid}-{regime}-{n}p")
                )
    return cases


def vector_position(trick: str, hand: str, regime: str, n: int, order: str) -> TriompheMatch:
    """Trump hearts; seats 0.. play `trick` (dealer n-1), then it is seat len(trick)'s turn
    holding `hand`. The other cards are neither of the led suit nor trumps."""
    trick_cards = [parse_card(t) for t in trick.split()]
    held = mask(hand)
    size = held.bit_count()
    tested = len(trick_cards)
    led = trick_cards[0] // 13
    used = held | mask_of(trick_cards)
    pool = [c for c in iter_cards(PACK) if not used >> c & 1 and c // 13 not in (led, HEARTS)]
    hands = [0] * n
    hands[tested] = held
    for seat in range(n):
        if seat < tested:
            hands[seat] = 1 << trick_cards[seat]
        while seat != tested and hands[seat].bit_count() < size:
            hands[seat] |= 1 << pool.pop()
    dealt = sum(hands)
    retourne = next(c for c in iter_cards(SUIT_MASK[HEARTS] & PACK) if not dealt >> c & 1)
    talon = tuple(c for c in iter_cards(PACK) if not (dealt | 1 << retourne) >> c & 1)
    options = {"players": n, "regime": regime, "hand_size": size, "rank_order": order}
    m = match_of("individuelle", {**options, "abandon_allowed": False})
    m.start_hand(n - 1, Deal(tuple(hands), retourne, talon))
    run(m, [(s, card_str(c)) for s, c in enumerate(trick_cards)])
    assert m.to_act() == (tested,)
    return m


@pytest.mark.parametrize(("trick", "hand", "regime", "n", "expected", "order"), vector_cases())
def test_legal_set_vectors_in_a_coup(
    trick: str, hand: str, regime: str, n: int, expected: str, order: str
) -> None:
    m = vector_position(trick, hand, regime, n, order)
    tested = len(trick.split())
    assert sorted(plays(m, tested)) == sorted(expected.split())
    view = m.view(tested)
    assert view is not None and view.trump == HEARTS and len(view.trick) == tested
    # The refused cards carry the regime's rule id.
    for c in set(hand.split()) - set(expected.split()):
        assert refusal(m, tested, c).rule == f"TRI.{regime.upper()}"


def test_vector_cases_cover_each_regime() -> None:
    ids = [p.id for p in vector_cases()]
    assert sum("-plaisant-" in i for i in ids) == 12  # 6 one-card rows + 3 × 2 two-card rows
    assert sum("-forcee-" in i for i in ids) == 18 and sum("-forcat-" in i for i in ids) == 18


# --- example TR-2 (RULES.md 3.7) ----------------------------------------------------------

TR2_DEAL = deal_of(
    ["JD 8D KH QH AC", "9S 7D AH KC QC", "KS QS JS KD 7H", "QD AD 8H 9C 10C"],
    "9D",
    "AS 10S 8S 7S JH 10H 9H 10D JC 8C 7C",
)
TR2_TRICKS = [
    [(2, "KS"), (3, "QD"), (0, "8D"), (1, "9S")],
    [(3, "AD"), (0, "JD"), (1, "7D"), (2, "KD")],
    [(2, "QS"), (3, "9C"), (0, "AC"), (1, "QC")],
    [(2, "JS"), (3, "10C"), (0, "QH"), (1, "KC")],
    [(2, "7H"), (3, "8H"), (0, "KH"), (1, "AH")],
]
# The restricted legal sets of the TR-2 table (seat, legal set before its card).
TR2_LEGAL = {
    (1, 3): "QD AD",  # void in spades: must trump
    (1, 0): "JD 8D",  # cannot overtrump QD: must undertrump
    (1, 1): "9S",  # must follow spades although ruffed
    (2, 0): "JD",  # J beats A: must go above
    (2, 1): "7D",
    (2, 2): "KD",  # must go above JD although partner led
    (5, 3): "8H",
    (5, 0): "KH",
    (5, 1): "AH",
}


def tr2_match() -> TriompheMatch:
    # Ring A B C D = seats 0..3; X = {A, B}, Y = {C, D}; X deals, so the dealer is B.
    m = match_of("equipe", start=Start(1, ((2,), (2,), (1,), (1,))))
    m.start_hand(1, TR2_DEAL)
    return m


def test_tr2_vole_engaged_and_lost() -> None:
    m = tr2_match()
    assert m.to_act() == (2,)  # C, the premier en cartes
    events: list[Any] = []
    for number, trick in enumerate(TR2_TRICKS, 1):
        for seat, c in trick:
            if (number, seat) in TR2_LEGAL:
                assert sorted(plays(m, seat)) == sorted(TR2_LEGAL[number, seat].split())
            if number == 3 and seat != 2:
                # Trick 3: no spades, no trumps left: every card is free.
                assert plays(m, seat) == [card_str(x) for x in iter_cards(hand_of(m).held[seat])]
            events += run(m, [(seat, c)])
        if number == 3:
            # Y leads 3-0: C decides.
            assert hand_of(m).phase.value == "vole" and m.to_act() == (2,)
            assert m.legal_actions(2) == [act("vole stop"), act("vole continue")]
            events += run(m, [(2, "vole continue")])
    winners = [e.winner for e in events if isinstance(e, TrickWon)]
    assert winners == [3, 2, 2, 2, 0]
    assert lines(m) == [(2, "vole-failed", -2, "TRI.VOLE"), (3, "vole-failed", -2, "TRI.VOLE")]
    assert totals(m) == [2, 2, -1, -1]  # Y -2 -> -1; X unchanged at 2
    assert not m.finished
    # Next coup: team Y deals with its fixed dealer D; the premier en cartes is A.
    assert m.expected_dealer() == 3
    m.start_hand(3, TR2_DEAL)
    assert m.to_act() == (0,)


def test_tr2_had_y_stopped() -> None:
    m = tr2_match()
    run(m, [sc for trick in TR2_TRICKS[:3] for sc in trick])
    events = run(m, [(2, "vole stop")])
    assert lines(m) == [(2, "vole-stop", 1, "TRI.VOLE"), (3, "vole-stop", 1, "TRI.VOLE")]
    assert totals(m) == [2, 2, 2, 2]
    assert any(isinstance(e, Note) and e.kind == "vole" for e in events)
    assert len(m.results[-1].tricks) == 3 and m.to_act() == ()


def test_tr2_abandon_is_offered_before_each_sides_first_card() -> None:
    m = tr2_match()
    assert m.legal_actions(2)[0] == act("abandon offer")  # Y's first card
    run(m, [(2, "KS")])
    assert act("abandon offer") not in m.legal_actions(3)  # Y has played
    run(m, [(3, "QD")])
    assert m.legal_actions(0) == [act("abandon offer"), act("8D"), act("JD")]  # X's first card
    run(m, [(0, "8D")])
    assert m.legal_actions(1) == [act("9S")]


# --- TRI.VOLE: stop, continue and made, continue and failed ---------------------------------

# Two players, seat 1 deals, seat 0 leads; trump hearts (R1: K Q J A 10 9 8 7).
VOLE_DEAL = deal_of(["KH QH JH AH KS", "10H 9H 8H QS JS"], "7H")  # seat 0 takes all five
FAIL_DEAL = deal_of(["KH QH JH 8S 9S", "AH 10H 9H KS QC"], "7H")  # seat 1 takes trick 4
THREE_TRICKS = [(0, "KH"), (1, "8H"), (0, "QH"), (1, "9H"), (0, "JH"), (1, "10H")]
FAIL_THREE = [(0, "KH"), (1, "9H"), (0, "QH"), (1, "10H"), (0, "JH"), (1, "AH")]


def two_player(deal: Deal, options: dict[str, Any] | None = None) -> TriompheMatch:
    m = match_of("individuelle", options)
    m.start_hand(1, deal)
    return m


def test_vole_stop_scores_one_and_ends_the_coup() -> None:
    m = two_player(VOLE_DEAL)
    run(m, THREE_TRICKS)
    assert m.to_act() == (0,) and m.legal_actions(1) == []
    events = run(m, [(0, "vole stop")])
    assert lines(m) == [(0, "vole-stop", 1, "TRI.VOLE")]
    assert m.results[-1].lines[0].note == "stopped at 3 tricks to none"
    assert next(e.text for e in events if isinstance(e, Note)).endswith("stops")
    assert totals(m) == [1, 0]
    with pytest.raises(IllegalAction) as exc:
        m.apply(0, act("AH"))
    assert exc.value.code == "no-hand"


@pytest.mark.parametrize(("options", "value"), [({}, 2), ({"vole_value": 5}, 5)])
def test_vole_continued_and_made(options: dict[str, Any], value: int) -> None:
    m = two_player(VOLE_DEAL, options)
    run(m, [*THREE_TRICKS, (0, "vole continue"), (0, "AH"), (1, "QS")])
    assert hand_of(m).bound == 0 and not hand_of(m).bound_by_abandon
    run(m, [(0, "KS"), (1, "JS")])
    assert lines(m) == [(0, "vole", value, "TRI.VOLE")]
    assert totals(m) == [value, 0]


@pytest.mark.parametrize(("options", "penalty"), [({}, -2), ({"vole_fail_penalty": -3}, -3)])
def test_vole_failed_loses_at_once(options: dict[str, Any], penalty: int) -> None:
    m = two_player(FAIL_DEAL, options)
    run(m, [*FAIL_THREE, (0, "vole continue"), (0, "8S")])
    assert plays(m, 1) == ["KS"]  # must follow spades and beat 8S
    events = run(m, [(1, "KS")])
    assert [e.winner for e in events if isinstance(e, TrickWon)] == [1]
    # The engaged side loses at once; nobody else scores, even with the most tricks.
    assert lines(m) == [(0, "vole-failed", penalty, "TRI.VOLE")]
    assert totals(m) == [penalty, 0]  # scores may be negative
    assert len(m.results[-1].tricks) == 4 and m.to_act() == ()
    assert "trick 4 lost to seat 1" in m.results[-1].lines[0].note


def test_vole_decision_refusals() -> None:
    m = two_player(FAIL_DEAL)
    e = refusal(m, 0, "vole continue")
    assert e.code == "no-vole-decision" and e.rule == "TRI.VOLE"
    run(m, FAIL_THREE)
    with pytest.raises(NotYourTurn) as exc:
        m.apply(1, act("vole stop"))
    assert exc.value.rule == "TRI.VOLE" and "waiting for seat 0" in exc.value.reason
    e = refusal(m, 0, "8S")
    assert e.code == "vole-decision-first" and e.rule == "TRI.VOLE"
    assert e.legal == (act("vole stop"), act("vole continue"))
    e = refusal(m, 0, "abandon offer")
    assert e.code == "vole-decision-first"


def test_no_vole_decision_without_every_trick() -> None:
    m = two_player(FAIL_DEAL, {"abandon_allowed": False})
    run(m, [(0, "8S"), (1, "KS"), (1, "QC"), (0, "KH")])  # 1-1 after two tricks
    run(m, [(0, "QH"), (1, "AH"), (0, "JH"), (1, "9H")])  # seat 0 leads 3-1: no decision
    assert hand_of(m).phase.value == "play" and m.to_act() == (0,)
    run(m, [(0, "9S"), (1, "10H")])
    assert lines(m) == [(0, "point", 1, "TRI.POINT")]
    assert m.results[-1].lines[0].note == "3 tricks"


# --- TRI.ABANDON --------------------------------------------------------------------------


def test_abandon_accepted_before_the_first_card() -> None:
    m = two_player(FAIL_DEAL)
    assert m.legal_actions(0)[0] == act("abandon offer")
    run(m, [(0, "abandon offer")])
    assert m.to_act() == (1,) and m.legal_actions(1) == [
        act("abandon accept"),
        act("abandon refuse"),
    ]
    e = refusal(m, 1, "KS")
    assert e.code == "abandon-answer-first" and e.rule == "TRI.ABANDON"
    run(m, [(1, "abandon accept")])
    assert lines(m) == [(1, "abandon", 1, "TRI.ABANDON")]
    assert m.results[-1].actions == [act("abandon offer"), act("abandon accept")]
    assert totals(m) == [0, 1]


def test_autoplay_never_offers_to_concede_nor_robs_the_talon() -> None:
    """CLOCK.AUTOPLAY made the smallest code, and an offer to concede is below most cards: a
    seat out of time gave up its coup, the other accepting for its own seat (a referee's
    probe saw every autoplayed coup end so). The seat plays its lowest card; answering an
    offer it accepts (+1 for its side, binding it to no vole); robbing the talon, it stops."""
    m = two_player(FAIL_DEAL)
    legal = m.legal_actions(0)
    assert legal[0] == act("abandon offer") and legal[1] & 7 == PLAY
    assert m.default_action(0) == legal[1]
    run(m, [(0, "abandon offer")])
    assert m.default_action(1) == act("abandon accept")
    p = pille_match()
    assert act("pille stop") in p.legal_actions(1)
    assert p.default_action(1) == act("pille stop")
    assert p.default_action(0) == -1


def test_abandon_by_the_second_side_leaves_its_card_unplayed() -> None:
    m = two_player(FAIL_DEAL)
    run(m, [(0, "KH")])
    assert m.legal_actions(1)[0] == act("abandon offer")
    run(m, [(1, "abandon offer"), (0, "abandon accept")])
    assert lines(m) == [(0, "abandon", 1, "TRI.ABANDON")]
    assert m.results[-1].tricks == [] and hand_of(m).held[1] == mask("AH 10H 9H KS QC")


@pytest.mark.parametrize(("options", "value"), [({}, 2), ({"refused_abandon_vole_value": 3}, 3)])
def test_abandon_refused_and_vole_made(options: dict[str, Any], value: int) -> None:
    m = two_player(VOLE_DEAL, options)
    run(m, [(0, "KH"), (1, "abandon offer"), (0, "abandon refuse")])
    assert hand_of(m).bound == 0 and hand_of(m).bound_by_abandon
    assert m.to_act() == (1,) and act("abandon offer") not in m.legal_actions(1)
    run(m, [(1, "8H"), (0, "QH"), (1, "9H"), (0, "JH"), (1, "10H")])
    # Already bound: no vole decision after 3-0.
    assert hand_of(m).phase.value == "play"
    run(m, [(0, "AH"), (1, "QS"), (0, "KS"), (1, "JS")])
    assert lines(m) == [(0, "vole", value, "TRI.ABANDON")]


def test_abandon_refused_and_vole_failed() -> None:
    m = two_player(FAIL_DEAL)
    run(m, [(0, "KH"), (1, "abandon offer"), (0, "abandon refuse")])
    run(m, [(1, "9H"), *FAIL_THREE[2:], (0, "8S"), (1, "KS")])
    assert lines(m) == [(0, "vole-failed", -2, "TRI.ABANDON")]
    assert "bound by refusing the abandon" in m.results[-1].lines[0].note


def test_refusing_the_first_offer_binds_the_second_side() -> None:
    m = two_player(VOLE_DEAL)
    run(m, [(0, "abandon offer"), (1, "abandon refuse"), (0, "KH"), (1, "8H")])
    # Seat 1 refused, so it had to win every trick: it lost trick 1.
    assert lines(m) == [(1, "vole-failed", -2, "TRI.ABANDON")]
    assert totals(m) == [0, -2]


def test_abandon_refusals() -> None:
    m = two_player(FAIL_DEAL)
    with pytest.raises(NotYourTurn) as exc:
        m.apply(1, act("abandon offer"))
    assert exc.value.rule == "TRI.ABANDON"
    e = refusal(m, 0, "abandon accept")
    assert e.code == "no-abandon-offer" and e.rule == "TRI.ABANDON"
    run(m, [(0, "abandon offer")])
    with pytest.raises(NotYourTurn) as exc:
        m.apply(0, act("abandon refuse"))  # the offerer cannot answer
    assert exc.value.rule == "TRI.ABANDON" and "waiting for seat 1" in exc.value.reason
    e = refusal(m, 1, "abandon offer")
    assert e.code == "abandon-once"
    run(m, [(1, "abandon refuse"), (0, "KH")])
    e = refusal(m, 1, "abandon offer")
    assert e.code == "abandon-once" and "one offer per coup" in e.reason
    # After its side's first card, a side may not offer.
    m2 = match_of("equipe")
    m2.start_hand(1, TR2_DEAL)
    run(m2, [(2, "KS"), (3, "QD"), (0, "8D"), (1, "9S")])
    e = refusal(m2, 3, "abandon offer")
    assert e.code == "abandon-too-late" and e.rule == "TRI.ABANDON"


def test_no_abandon_with_three_sides_or_when_off() -> None:
    m = match_of("individuelle", {"players": 3})
    m.start_hand(2, deal_of(["KH QH JH AH KS", "10H 9H 8H QS JS", "KD QD JD AD 10D"], "7H"))
    assert act("abandon offer") not in m.legal_actions(0)
    e = refusal(m, 0, "abandon offer")
    assert e.code == "abandon-two-sides" and e.rule == "TRI.ABANDON"
    assert "this game has 3" in e.reason
    off = two_player(FAIL_DEAL, {"abandon_allowed": False})
    assert act("abandon offer") not in off.legal_actions(0)
    e = refusal(off, 0, "abandon offer")
    assert e.code == "abandon-not-allowed" and e.rule == "TRI.ABANDON"


def test_team_abandon_answered_by_the_other_sides_next_seat() -> None:
    m = tr2_match()
    run(m, [(2, "abandon offer")])
    assert m.to_act() == (0,)  # after C (2): D (3) is Y, A (0) is X
    run(m, [(0, "abandon accept")])
    assert lines(m) == [(0, "abandon", 1, "TRI.ABANDON"), (1, "abandon", 1, "TRI.ABANDON")]
    assert totals(m) == [3, 3, 1, 1]
    # X offers before its first card (A, after C and D): C answers for Y.
    m = tr2_match()
    run(m, [(2, "KS"), (3, "QD"), (0, "abandon offer")])
    assert m.to_act() == (2,)
    run(m, [(2, "abandon refuse")])
    assert m.to_act() == (0,) and hand_of(m).bound == 1
    run(m, [(0, "8D"), (1, "9S")])  # D takes trick 1 for Y
    run(m, [(3, "AD"), (0, "JD"), (1, "7D"), (2, "KD")])  # C takes trick 2
    run(m, [(2, "QS"), (3, "9C"), (0, "AC"), (1, "QC"), (2, "JS"), (3, "10C"), (0, "QH")])
    run(m, [(1, "KC"), (2, "7H"), (3, "8H"), (0, "KH"), (1, "AH")])  # A takes trick 5
    assert lines(m) == [
        (2, "vole-failed", -2, "TRI.ABANDON"),
        (3, "vole-failed", -2, "TRI.ABANDON"),
    ]


def test_six_player_team_abandon_answer() -> None:
    m = match_of("equipe", {"players": 6})
    deck = list(iter_cards(PACK))
    m.start_hand(2, m.deal_deck(2, deck))
    assert m.to_act() == (3,)
    run(m, [(3, "abandon offer")])
    assert m.to_act() == (0,)  # after 3: 4 and 5 are team 1; 0 is the first of team 0


# --- TRI.POINT: most tricks, primauté -----------------------------------------------------


def test_primaute_three_players_dealer_worst_placed() -> None:
    # Dealer 0: the order of trick 1 is 1, 2, 0. Seats 0 and 2 take two tricks each.
    m = match_of("individuelle", {"players": 3})
    m.start_hand(0, deal_of(["QS 10S QH 9H JD", "KH KD 9D KC 10C", "KS 7S 10H 8H 7C"], "AS"))
    script = "1 10C 2 7C 0 10S 0 9H 1 KH 2 10H 1 9D 2 7S 0 JD 2 KS 0 QS 1 KC 2 8H 0 QH 1 KD"
    words = script.split()
    run(m, [(int(words[i]), words[i + 1]) for i in range(0, len(words), 2)])
    assert hand_of(m).won == [2, 1, 2]
    assert lines(m) == [(2, "point", 1, "TRI.POINT")]
    assert m.results[-1].lines[0].note == "2 tricks, primauté over seat 0"


def test_primaute_even_hand_size_two_players() -> None:
    m = match_of("individuelle", {"hand_size": 4, "abandon_allowed": False})
    m.start_hand(1, deal_of(["JS KH JD AD", "10S 10H QD 7C"], "AC"))
    run(m, [(0, "KH"), (1, "10H"), (0, "AD"), (1, "QD"), (1, "7C"), (0, "JD")])
    run(m, [(1, "10S"), (0, "JS")])
    assert hand_of(m).won == [2, 2]
    assert lines(m) == [(0, "point", 1, "TRI.POINT")]  # seats[0], not the dealer


def test_primaute_teams_go_to_the_non_dealing_team() -> None:
    m = match_of("equipe", {"hand_size": 4})
    m.start_hand(1, deal_of(["JD KC QC AC", "7S KD 7D 10C", "QS 10S KH 7C", "KS JH 9D 8D"], "10H"))
    script = "2 KH 3 JH 0 KC 1 7D 2 QS 3 KS 0 JD 1 7S 3 9D 0 AC 1 KD 2 7C 1 10C 2 10S 3 8D 0 QC"
    words = script.split()
    run(m, [(int(words[i]), words[i + 1]) for i in range(0, len(words), 2)])
    assert hand_of(m).side_won == [2, 2]
    assert lines(m) == [(2, "point", 1, "TRI.POINT"), (3, "point", 1, "TRI.POINT")]
    assert "primauté over team 0 (seats 0, 1)" in m.results[-1].lines[0].note


# --- TRI.PILLE: L'As qui pille ------------------------------------------------------------

# Three players, seat 2 deals; trump hearts (retourne 9H); seat 1 holds the trump ace.
PILLE_DEAL = deal_of(
    ["KS QS 10D 9D 7C", "AH JS 10C 8C 7D", "AS 10S KD QD JC"],
    "9H",
    "8H 9S KH QH JH 10H 7H 8S 7S AD JD 8D AC KC QC 9C",
)


def pille_match(options: dict[str, Any] | None = None) -> TriompheMatch:
    m = match_of("as-qui-pille", options)
    m.start_hand(2, PILLE_DEAL)
    return m


def test_pillage_by_the_ace_holder() -> None:
    m = pille_match()
    hand = hand_of(m)
    assert hand.phase.value == "pillage" and m.to_act() == (1,) and hand.robber == 1
    legal = m.legal_actions(1)
    assert legal == sorted(legal) and legal[-1] == encode(PILLE, PILLE_STOP)
    assert {card_str(a >> 3) for a in legal[:-1]} == {"AH", "JS", "10C", "8C", "7D", "9H"}
    # The ace is shown: everybody sees it; the face-up card is public.
    view = m.view(0)
    assert view is not None and view.known == {1: mask("AH")}
    assert view.public["face_up"] == "9H" and view.public["robber"] == 1
    e = refusal(m, 0, "KS")
    assert e.code == "pillage-first" and e.rule == "TRI.PILLE"
    with pytest.raises(NotYourTurn) as exc:
        m.apply(0, act("pille KS"))
    assert exc.value.rule == "TRI.PILLE"
    e = refusal(m, 1, "pille QD")
    assert e.code == "not-held" and e.rule == "TRI.PILLE"
    run(m, [(1, "pille 7D")])  # takes 9H, discards 7D; 8H is turned: a trump
    assert hand.held[1] == mask("AH 9H JS 10C 8C") and hand.face_up == parse_card("8H")
    assert m.to_act() == (1,)
    run(m, [(1, "pille 8C")])  # takes 8H, discards 8C; 9S is turned: the pillage ends
    assert hand.phase.value == "play" and m.to_act() == (0,)
    assert hand.held[1] == mask("AH 9H 8H JS 10C")
    assert hand.turned == [parse_card("8H"), parse_card("9S")]
    view0, view1 = m.view(0), m.view(1)
    assert view0 is not None and view1 is not None
    assert view0.known == {1: mask("AH 9H 8H")}  # shown and taken face up
    assert view0.public["discards"] == 2 and "discarded" not in view0.public
    assert view1.public["discarded"] == "7D 8C"
    assert any("pillage by seat 1: shows the trump ace AH" in d for d in hand.describe())
    e = refusal(m, 1, "pille 10C")
    assert e.code == "no-pillage" and "the pillage is over" in e.reason


def test_pillage_discards_are_face_down_for_the_others() -> None:
    m = pille_match()
    take = act("pille 7D")
    assert m.public_action(take) == encode(PILLE, PILLE_HIDDEN)
    # The hidden form the protocol gives (docs/protocol.md, action codes: "62 in another
    # seat's copy"), which no card has: it was 0, the code of 2S.
    assert PILLE_HIDDEN == 62 and m.public_action(take) >> 3 == 62
    assert action_str(m.public_action(take)) == "pille hidden"
    assert not PACK >> PILLE_HIDDEN & 1  # no card of the pack
    assert m.public_action(act("pille stop")) == act("pille stop")
    assert m.public_action(act("KS")) == act("KS")
    assert m.public_action(act("vole continue")) == act("vole continue")


def test_pillage_discarded_cards_are_dead_and_taken_ones_play() -> None:
    m = pille_match()
    run(m, [(1, "pille 7D"), (1, "pille 8C")])
    run(m, [(0, "KS"), (1, "JS"), (2, "AS"), (2, "KD"), (0, "9D")])
    assert plays(m, 1) == ["8H", "9H", "AH"]  # void in diamonds: any trump, taken ones too
    e = refusal(m, 1, "8C")
    assert e.code == "not-held"


def test_pillage_stop_and_discarding_the_card_taken() -> None:
    m = pille_match()
    run(m, [(1, "pille 9H")])  # allowed, pointless: takes 9H and throws it away
    assert hand_of(m).held[1] == mask("AH JS 10C 8C 7D")
    run(m, [(1, "pille stop")])  # declines 8H
    hand = hand_of(m)
    assert hand.phase.value == "play" and hand.turned == [parse_card("8H")]
    assert any(d.endswith("takes 9H, discards 9H; leaves 8H") for d in hand.describe())


def test_pillage_continues_off_ends_after_one_take() -> None:
    m = pille_match({"pillage_continues": False})
    run(m, [(1, "pille 7D")])
    hand = hand_of(m)
    assert hand.phase.value == "play" and hand.turned == []
    assert m.to_act() == (0,)


def test_pillage_declined_at_once() -> None:
    m = pille_match()
    run(m, [(1, "pille stop")])
    assert list(hand_of(m).held) == list(PILLE_DEAL.hands) and m.to_act() == (0,)


def test_as_pille_off_and_other_rulesets_have_no_pillage() -> None:
    m = pille_match({"as_pille": False})
    assert hand_of(m).phase.value == "play" and m.to_act() == (0,)
    e = refusal(m, 1, "pille 7D")
    assert e.code == "no-pillage" and "as_pille is off" in e.reason
    ind = match_of("individuelle", {"players": 3})
    ind.start_hand(2, PILLE_DEAL)
    e = refusal(ind, 1, "pille 7D")
    assert e.code == "no-pillage" and "only in as-qui-pille" in e.reason


def test_pillage_by_the_dealer_who_turned_the_ace() -> None:
    m = match_of("as-qui-pille")
    deal = deal_of(
        ["KD QD JD 7C 8C", "KS 10H 9H 8H 7H", "AH KH 7D 8D 9D"],
        "AS",
        "7S 10D JS 10S 9S 8S QS QH JH AD AC KC QC JC 10C 9C",
    )
    m.start_hand(0, deal)
    assert m.to_act() == (0,) and hand_of(m).robber == 0 and hand_of(m).ace_shown == -1
    run(m, [(0, "pille 7C")])  # takes AS; 7S is turned: a trump
    assert m.to_act() == (0,) and hand_of(m).face_up == parse_card("7S")
    run(m, [(0, "pille 8C")])  # takes 7S; 10D is turned: not a trump
    assert hand_of(m).held[0] == mask("AS 7S KD QD JD")
    assert m.to_act() == (1,)
    # R2: the ace of trumps is the highest card.
    run(m, [(1, "KS"), (2, "7D")])
    assert plays(m, 0) == ["AS"]


def test_trump_ace_in_the_talon_no_pillage() -> None:
    m = match_of("as-qui-pille")
    deal = deal_of(["KS QS 10D 9D 7C", "KH JS 10C 8C 7D", "AS 10S KD QD JC"], "9H")
    hand = m.start_hand(2, deal)
    assert isinstance(hand, TriompheHand) and deal.talon.count(parse_card("AH")) == 1
    assert hand.robber == -1 and hand.phase.value == "play" and m.to_act() == (0,)
    assert "no pillage: the trump ace AH is in the talon" in hand.describe()
    # The note is made when the coup is dealt (the driver reads it from the hand's events).
    assert [(e.kind, e.text) for e in hand.events if isinstance(e, Note)] == [
        ("pillage", "no pillage: the trump ace AH is in the talon")
    ]


def test_pillage_ends_when_the_talon_is_empty() -> None:
    # Six players: 30 cards dealt, the retourne, one talon card (a trump).
    m = match_of("as-qui-pille", {"players": 6})
    hands = ["AH KS QS JS 10S", "9S 8S 7S KD QD", "JD AD 10D 9D 8D", "7D KC QC JC AC",
             "10C 9C 8C 7C KH", "QH JH 10H 9H AS"]  # fmt: skip
    m.start_hand(5, deal_of(hands, "8H", "7H"))
    assert hand_of(m).robber == 0
    run(m, [(0, "pille 10S"), (0, "pille JS")])
    hand = hand_of(m)
    assert hand.phase.value == "play" and hand.held[0] == mask("AH 8H 7H KS QS")
    assert any(d.endswith("the talon is empty") for d in hand.describe())


# --- dealers, rotation, the game end ------------------------------------------------------


def finish_quickly(m: TriompheMatch) -> None:
    """Play the current coup out: the lowest card each time, stop at any vole decision."""
    while m.to_act():
        (seat,) = m.to_act()
        legal = [a for a in m.legal_actions(seat) if a & 7 != ABANDON]
        m.apply(seat, legal[0])


def test_team_dealers_alternate_and_the_other_team_leads() -> None:
    m = match_of("equipe")
    with pytest.raises(DealError) as exc:
        m.start_hand(0, TR2_DEAL)
    assert exc.value.code == "bad-dealer" and exc.value.rule == "TRI.EQUIPE"
    assert "seat 1 or 3" in exc.value.reason
    dealers = []
    for _ in range(4):
        dealer = m.expected_dealer()
        dealer = 3 if dealer is None else dealer
        m.start_hand(dealer, TR2_DEAL)
        assert m.team_of(m.to_act()[0]) != m.team_of(dealer)  # the non-dealing team leads
        dealers.append(dealer)
        finish_quickly(m)
        if m.finished:
            break
    assert dealers[:4] == [3, 1, 3, 1][: len(dealers)]
    m = match_of("equipe")
    m.start_hand(1, TR2_DEAL)
    finish_quickly(m)
    with pytest.raises(DealError) as exc:
        m.start_hand(1, TR2_DEAL)
    assert exc.value.code == "dealer-rotation" and exc.value.rule == "TRI.DEAL"


def test_first_dealers_for_the_referee_draw() -> None:
    assert match_of("equipe").first_dealers() == (1, 3)
    assert match_of("equipe", {"players": 6}).first_dealers() == (2, 5)
    assert match_of("individuelle", {"players": 3}).first_dealers() == (0, 1, 2)
    assert match_of("as-qui-pille", {"players": 4}).first_dealers() == (0, 1, 2, 3)


def test_six_player_team_dealers() -> None:
    m = match_of("equipe", {"players": 6})
    assert m.dealers == (2, 5) and [m.team_of(s) for s in range(6)] == [0, 0, 0, 1, 1, 1]
    deck = list(iter_cards(PACK))
    m.start_hand(5, m.deal_deck(5, deck))
    assert m.to_act() == (0,)
    finish_quickly(m)
    assert m.expected_dealer() == 2
    m.start_hand(2, m.deal_deck(2, deck))
    assert m.to_act() == (3,)


def test_individual_dealer_passes_to_the_next_seat() -> None:
    m = match_of("individuelle", {"players": 4})
    deck = list(iter_cards(PACK))
    m.start_hand(3, m.deal_deck(3, deck))
    finish_quickly(m)
    assert m.expected_dealer() == 0
    m.start_hand(0, m.deal_deck(0, deck))
    assert m.to_act() == (1,)


def test_match_ends_at_the_target_for_the_whole_team() -> None:
    m = match_of("equipe", start=Start(1, ((4,), (4,), (0,), (0,))))
    m.start_hand(3, TR2_DEAL)  # team 1 deals; A (0) leads
    run(m, [(0, "abandon offer"), (2, "abandon accept")])
    assert not m.finished and totals(m) == [4, 4, 1, 1]
    m.start_hand(1, TR2_DEAL)
    events = run(m, [(2, "abandon offer"), (0, "abandon accept")])
    assert m.finished and m.winners == (0, 1) and totals(m) == [5, 5, 1, 1]
    assert m.end_reason == "team 0 reached 5 points"
    assert events[-1].winners == (0, 1)
    with pytest.raises(IllegalAction) as exc:
        m.start_hand(3, TR2_DEAL)
    assert exc.value.code == "match-over" and exc.value.rule == "TRI.END"


def test_individual_match_end_and_target_option() -> None:
    m = match_of("individuelle", {"target": 1})
    m.start_hand(1, VOLE_DEAL)
    run(m, [*THREE_TRICKS, (0, "vole stop")])
    assert m.finished and m.winners == (0,) and m.end_reason == "seat 0 reached 1 point"


def test_start_scores_must_agree_within_a_team_and_be_below_target() -> None:
    with pytest.raises(RulesError) as exc:
        match_of("equipe", start=Start(1, ((2,), (1,), (0,), (0,))))
    assert exc.value.key == "scores" and "partners" in str(exc.value)
    with pytest.raises(RulesError) as exc:
        match_of("individuelle", start=Start(1, ((5,), (0,))))
    assert exc.value.key == "target"
    match_of("individuelle", start=Start(1, ((-4,), (4,))))  # negative scores are fine


def test_resign_in_a_team_game_gives_the_other_team_the_match() -> None:
    m = tr2_match()
    m.apply(3, encode(RESIGN))
    assert m.finished and m.winners == (0, 1) and m.resigned == 3
    ind = match_of("individuelle", {"players": 3}, Start(1, ((1,), (3,), (2,))))
    ind.start_hand(2, PILLE_DEAL)
    ind.apply(1, encode(RESIGN))
    assert ind.winners == (2,)


# --- views --------------------------------------------------------------------------------


def test_partners_see_each_others_hands() -> None:
    m = tr2_match()
    view = m.view(0)
    assert view is not None and view.known == {1: mask("9S 7D AH KC QC")}
    assert view.hand == mask("JD 8D KH QH AC") and view.to_act == (2,) and view.legal == ()
    assert view.public["sides"] == ((0, 1), (2, 3))
    spectator = m.view(None)
    assert spectator is not None and spectator.known == {} and spectator.hand == 0
    hidden = match_of("equipe", {"partners_see_hands": False})
    hidden.start_hand(1, TR2_DEAL)
    assert hidden.view(0).known == {}  # type: ignore[union-attr]
    ind = two_player(VOLE_DEAL)
    assert ind.view(0).known == {}  # type: ignore[union-attr]


def test_view_during_a_vole_decision() -> None:
    m = tr2_match()
    run(m, [sc for trick in TR2_TRICKS[:3] for sc in trick])
    view = m.view(2)
    assert view is not None
    assert view.phase == "vole" and view.legal == (act("vole stop"), act("vole continue"))
    assert view.public["side_tricks"] == (0, 3) and view.public["trick_number"] == 4
    run(m, [(2, "vole continue")])
    assert m.view(0).public["vole_engaged"] is True  # type: ignore[union-attr]
    assert m.view(0).public["bound"] == (2, 3)  # type: ignore[union-attr]


# --- deals (TRI.DEAL) ---------------------------------------------------------------------


def test_deal_deck_two_then_three_then_retourne_and_talon() -> None:
    m = match_of("individuelle", {"players": 3})
    deck = list(iter_cards(PACK))
    deal = m.deal_deck(0, deck)
    # From seat 1: 2 each (seats 1, 2, 0), then 3 each; card 15 is the retourne.
    assert deal.hands[1] == mask_of(deck[0:2] + deck[6:9])
    assert deal.hands[2] == mask_of(deck[2:4] + deck[9:12])
    assert deal.hands[0] == mask_of(deck[4:6] + deck[12:15])
    assert deal.retourne == deck[15] and deal.talon == tuple(deck[16:])
    four = match_of("individuelle", {"hand_size": 4}).deal_deck(1, deck)
    assert four.hands[0] == mask_of(deck[0:2] + deck[4:6]) and four.retourne == deck[8]
    with pytest.raises(DealError) as exc:
        m.deal_deck(0, deck[:-1])
    assert exc.value.code == "deck-size" and exc.value.rule == "TRI.DEAL"
    with pytest.raises(DealError) as exc:
        m.deal_deck(0, [*deck[:-1], parse_card("6S")])
    assert exc.value.code == "card-not-in-pack" and "32-card pack" in exc.value.reason
    with pytest.raises(DealError) as exc:
        m.deal_deck(3, deck)
    assert exc.value.code == "bad-dealer"


@pytest.mark.parametrize(
    ("deal", "code"),
    [
        (Deal(VOLE_DEAL.hands, -1, VOLE_DEAL.talon), "deal-shape"),
        (Deal(VOLE_DEAL.hands, VOLE_DEAL.retourne, VOLE_DEAL.talon[:-1]), "deal-talon"),
        (Deal(VOLE_DEAL.hands, VOLE_DEAL.retourne, (*VOLE_DEAL.talon, 0)), "card-not-in-pack"),
        (Deal(VOLE_DEAL.hands, parse_card("KH"), VOLE_DEAL.talon), "duplicate-card"),
        (deal_of(["KH QH JH AH", "10H 9H 8H QS JS"], "7H"), "hand-size"),
        (deal_of(["KH QH JH AH 6S", "10H 9H 8H QS JS"], "7H"), "card-not-in-pack"),
    ],
)
def test_deal_checks(deal: Deal, code: str) -> None:
    m = match_of()
    with pytest.raises(DealError) as exc:
        m.start_hand(1, deal)
    assert exc.value.code == code and exc.value.rule == "TRI.DEAL"


# --- play refusals: each duty named -------------------------------------------------------


@pytest.mark.parametrize(
    ("regime", "trick", "hand", "card", "code", "text"),
    [
        ("forcee", "KS", "8S JH 7D", "JH", "must-follow", "must follow spades"),
        ("forcee", "9S", "10S 8S JH", "8S", "must-beat", "must follow spades and beat 9S"),
        ("forcee", "QD", "KS JH 8H", "KS", "must-trump", "void in diamonds: must trump"),
        ("forcat", "KS", "8S JH 7D", "8S", "must-trump", "cannot beat KS in spades"),
        ("forcee", "KS JH", "QD 8H", "QD", "must-undertrump", "cannot overtrump JH"),
        ("forcee", "KS JH", "QD QH 8H", "8H", "must-overtrump", "must overtrump JH"),
        ("forcee", "9H", "7H AH KS", "7H", "must-beat", "trump above 9H"),
        ("forcee", "9H", "KS 7H 8H", "KS", "must-follow", "must follow hearts (trumps led)"),
        ("plaisant", "KS JH", "8S QH 7D", "8S", "must-overtrump", "last to play is under forçat"),
    ],
)
def test_play_refusal_reasons(
    regime: str, trick: str, hand: str, card: str, code: str, text: str
) -> None:
    n = max(len(trick.split()) + 1, 3 if regime == "plaisant" else 2)
    m = vector_position(trick, hand, regime, n, "R1")
    e = refusal(m, len(trick.split()), card)
    assert e.code == code and e.rule == f"TRI.{regime.upper()}"
    assert text in e.reason and "legal: " in e.reason


def test_not_held_and_out_of_turn_cards() -> None:
    m = two_player(VOLE_DEAL)
    e = refusal(m, 0, "7S")
    assert e.code == "not-held" and e.rule == "TRI.FORCEE"
    with pytest.raises(NotYourTurn) as exc:
        m.apply(1, act("8H"))
    assert exc.value.rule == "TRI.FORCEE"
    with pytest.raises(IllegalAction) as exc2:
        m.apply(0, encode(BID, 1))
    assert (
        exc2.value.code == "wrong-action"
        and "only play, vole, abandon and pille" in exc2.value.reason
    )


# --- random playouts ----------------------------------------------------------------------

REGIMES = {"forcee": Regime.FORCEE, "forcat": Regime.FORCAT, "plaisant": Regime.PLAISANT}
# Independent strength tables (RULES.md 0.3): rank letters low to high.
STRENGTH = {
    "R1": {r: i for i, r in enumerate(["7", "8", "9", "10", "A", "J", "Q", "K"])},
    "R2": {r: i for i, r in enumerate(["7", "8", "9", "10", "J", "Q", "K", "A"])},
}


def reference_winner(trick: list[tuple[int, int]], trump: int, order: str) -> int:
    """CARD.WIN (0.4), written independently of the engine."""
    led = trick[0][1] // 13
    strength = STRENGTH[order]

    def key(c: int) -> int:
        return strength[card_str(c)[:-1]]

    trumps = [(key(c), s) for s, c in trick if c // 13 == trump]
    if trumps:
        return max(trumps)[1]
    return max((key(c), s) for s, c in trick if c // 13 == led)[1]


def reference_lines(
    result: HandResult, values: dict[str, Any], ruleset: str, n: int
) -> list[tuple[int, str, int, str]]:
    """The score lines RULES.md 3.1-3.5 give for this coup's actions, written independently
    of the engine; asserts that every action came from the right seat at the right time."""
    teams = ruleset == "equipe"
    side = [s // (n // 2) for s in range(n)] if teams else list(range(n))
    members = [[s for s in range(n) if side[s] == t] for t in sorted(set(side))]
    deal = result.deal
    held = list(deal.hands)
    trump = deal.retourne // 13
    acts = list(zip(result.action_seats, result.actions, strict=True))
    i = 0
    if ruleset == "as-qui-pille" and values["as_pille"]:
        ace = 12 + 13 * trump
        robber = result.dealer if deal.retourne == ace else -1
        if robber < 0:
            robber = next((s for s in range(n) if held[s] >> ace & 1), -1)
        face, t = deal.retourne, 0
        while robber >= 0:
            seat, action = acts[i]
            i += 1
            assert seat == robber and action & 7 == PILLE
            if action >> 3 == PILLE_STOP:
                break
            assert (held[robber] | 1 << face) >> (action >> 3) & 1
            held[robber] = (held[robber] | 1 << face) & ~(1 << (action >> 3))
            if not values["pillage_continues"] or t >= len(deal.talon):
                break
            face, t = deal.talon[t], t + 1
            if face // 13 != trump:
                break
    hs = values["hand_size"]
    won = [0] * len(members)
    bound, by_abandon, offered = -1, False, False
    started: set[int] = set()
    turn = (result.dealer + 1) % n
    trick: list[tuple[int, int]] = []
    out: list[tuple[int, str, int, str]] = []

    def score(s: int, kind: str, points: int, rule: str) -> None:
        out.extend((m, kind, points, rule) for m in members[s])

    k = 0
    while i < len(acts):
        seat, action = acts[i]
        i += 1
        assert seat == turn, (seat, turn)
        if action & 7 == ABANDON:
            assert action >> 3 == 0 and len(members) == 2 and values["abandon_allowed"]
            assert not offered and side[seat] not in started
            offered = True
            answerer = next(
                (seat + j) % n for j in range(1, n) if side[(seat + j) % n] != side[seat]
            )
            seat2, answer = acts[i]
            i += 1
            assert seat2 == answerer and answer & 7 == ABANDON
            if answer >> 3 == 1:
                score(side[answerer], "abandon", 1, "TRI.ABANDON")
                break
            bound, by_abandon = side[answerer], True
            continue
        assert action & 7 == PLAY
        c = action >> 3
        assert held[seat] >> c & 1, f"{card_str(c)} not held by seat {seat}"
        held[seat] &= ~(1 << c)
        started.add(side[seat])
        trick.append((seat, c))
        turn = (seat + 1) % n
        if len(trick) < n:
            continue
        winner = reference_winner(trick, trump, values["rank_order"])
        w = side[winner]
        won[w] += 1
        k += 1
        trick = []
        turn = winner
        if bound >= 0 and w != bound:
            rule = "TRI.ABANDON" if by_abandon else "TRI.VOLE"
            score(bound, "vole-failed", values["vole_fail_penalty"], rule)
            break
        if k == hs:
            if bound >= 0:
                value = values["refused_abandon_vole_value" if by_abandon else "vole_value"]
                score(bound, "vole", value, "TRI.ABANDON" if by_abandon else "TRI.VOLE")
            else:
                best = max(won)
                order = [(result.dealer + j) % n for j in range(1, n + 1)]
                first = next(side[s] for s in order if won[side[s]] == best)
                score(first, "point", 1, "TRI.POINT")
            break
        if bound < 0 and won[w] == k and k > hs - k:
            seat, decision = acts[i]
            i += 1
            assert seat == winner and decision & 7 == VOLE
            if decision >> 3 == 0:
                score(w, "vole-stop", 1, "TRI.VOLE")
                break
            bound = w
    assert i == len(acts), "actions after the end of the coup"
    return out


def choose(rng: random.Random, legal: list[int]) -> int:
    kinds = {a & 7 for a in legal}
    if ABANDON in kinds and PLAY in kinds:
        return legal[0] if rng.random() < 0.2 else rng.choice(legal[1:])  # offer sometimes
    if PILLE in kinds:
        return legal[-1] if rng.random() < 0.25 else rng.choice(legal[:-1])
    return rng.choice(legal)


PLAYOUTS: list[tuple[str, str, int, dict[str, Any]]] = [
    *(("individuelle", r, n, {}) for r in ("forcee", "forcat") for n in range(2, 7)),
    *(("individuelle", "plaisant", n, {}) for n in range(3, 7)),
    *(("equipe", r, n, {}) for r in ("forcee", "forcat") for n in (4, 6)),
    *(("as-qui-pille", r, n, {}) for r in ("forcee", "forcat", "plaisant") for n in range(3, 7)),
    # Options of RULES.md 6 beyond the regime.
    ("individuelle", "forcee", 2, {"hand_size": 4, "rank_order": "R2", "target": 3}),
    ("individuelle", "forcat", 3, {"hand_size": 7, "vole_value": 3, "vole_fail_penalty": -4}),
    ("individuelle", "forcee", 2, {"refused_abandon_vole_value": 5, "abandon_allowed": True}),
    ("individuelle", "forcee", 2, {"abandon_allowed": False}),
    ("equipe", "forcee", 4, {"partners_see_hands": False, "hand_size": 6}),
    ("equipe", "forcat", 6, {"rank_order": "R2", "target": 3}),
    ("as-qui-pille", "forcee", 3, {"pillage_continues": False}),
    ("as-qui-pille", "forcee", 4, {"as_pille": False, "rank_order": "R1"}),
    ("as-qui-pille", "plaisant", 6, {"hand_size": 3}),
]


def random_match(
    ruleset: str, options: dict[str, Any], n: int, rng: random.Random
) -> tuple[TriompheMatch, list[tuple[int, Deal]], list[tuple[int, int]]]:
    m = match_of(ruleset, {**options, "players": n})
    values = m.rules.option_values()
    trick_rules = TrickRules(REGIMES[values["regime"]], R1 if values["rank_order"] == "R1" else R2)
    pack = list(iter_cards(PACK))
    deals: list[tuple[int, Deal]] = []
    actions: list[tuple[int, int]] = []
    while not m.finished and len(m.results) < 60:
        dealer = m.expected_dealer()
        if dealer is None:
            dealer = rng.choice(m.dealers) if m.is_team else rng.randrange(n)
        rng.shuffle(pack)
        deal = m.deal_deck(dealer, pack)
        deals.append((dealer, deal))
        m.start_hand(dealer, deal)
        seen = 0
        while m.to_act():
            seat, legal, view = one_to_act(m)
            cards = [a >> 3 for a in legal if a & 7 == PLAY]
            if cards:
                # The regime's set from the shared trick module, on what the view shows.
                led = view.trick[0][1] // 13 if view.trick else -1
                on = mask_of(c for _, c in view.trick)
                is_last = len(view.trick) == n - 1
                expected = legal_cards(trick_rules, view.hand, view.trump, led, on, is_last)
                assert mask_of(cards) == expected
            if m.is_team and values["partners_see_hands"]:
                partners = [p for p in range(n) if m.team_of(p) == m.team_of(seat) and p != seat]
                assert view.known == {p: hand_of(m).held[p] for p in partners}
            else:
                assert all(
                    known & ~hand_of(m).held[s] == 0 and s == hand_of(m).robber
                    for s, known in view.known.items()
                )
            action = choose(rng, legal)
            if action & 7 == PLAY:
                assert not seen >> (action >> 3) & 1, "a card played twice"
                seen |= 1 << (action >> 3)
            m.apply(seat, action)
            actions.append((seat, action))
        result = m.results[-1]
        assert [(x.seat, x.kind, x.delta[0], x.rule) for x in result.lines] == reference_lines(
            result, values, ruleset, n
        )
        scorers = {m.team_of(x.seat) if m.is_team else x.seat for x in result.lines}
        assert len(scorers) == 1  # exactly one side scores per coup
        if m.is_team:
            for team in m.members:
                assert len({m.scores[s] for s in team}) == 1
    return m, deals, actions


@pytest.mark.parametrize(
    ("ruleset", "regime", "n", "options"),
    [pytest.param(*p, id=f"{p[0]}-{p[1]}-{p[2]}p-{i}") for i, p in enumerate(PLAYOUTS)],
)
def test_random_playouts(ruleset: str, regime: str, n: int, options: dict[str, Any]) -> None:
    rng = random.Random(f"triomphe-{ruleset}-{regime}-{n}-{sorted(options.items())}")
    for _ in range(2):
        m, deals, actions = random_match(ruleset, {**options, "regime": regime}, n, rng)
        assert m.finished
        target = m.opts.target
        assert all(m.scores[s][0] >= target for s in m.winners)
        assert [(r.dealer, r.deal) for r in m.results] == deals
        assert_replay_equals_live(m, deals, actions)
        back, data = assert_record_round_trips(m, "triomphe playout")
        assert [s.team for s in back.seats] == [m.team_of(s) for s in range(n)]
        assert render_record(back, data).count("\nHand ") == len(m.results)


def test_playouts_reach_every_kind_of_end() -> None:
    """The random policy really exercises the rules: over a few matches of each kind every
    score kind appears."""
    kinds: set[str] = set()
    rng = random.Random(7)
    for ruleset, n in (("individuelle", 2), ("equipe", 4), ("as-qui-pille", 3)):
        for _ in range(6):
            m, _, _ = random_match(ruleset, {}, n, rng)
            kinds |= {x.kind for r in m.results for x in r.lines}
    assert kinds == {"point", "vole", "vole-stop", "vole-failed", "abandon"}


def test_score_line_type() -> None:
    m = two_player(VOLE_DEAL)
    run(m, [*THREE_TRICKS, (0, "vole stop")])
    line = m.results[-1].lines[0]
    assert isinstance(line, ScoreLine) and line.at == 7
