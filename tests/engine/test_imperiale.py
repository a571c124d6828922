"""L'Impériale (RULES.md sections 1, 2 and 7): the worked examples 000-A and 001-B, one
scripted deal per event and per option, refusals with their rule ids, the deal checks, the
options, and random playouts of both rulesets and both player counts against an independent
scorer written from RULES.md's pseudo-code."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from tapis_cartes.records.codec import (
    Provenance,
    build_record,
    canonical_bytes,
    decode_record,
    envelope,
)
from tapis_cartes.records.score import score_json
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.engine.actions import BID, PLAY, encode
from tapis_cartes.referee.engine.base import Deal, HandResult, ScoreLine, Start
from tapis_cartes.referee.engine.cards import R1, iter_cards, parse_card
from tapis_cartes.referee.engine.errors import (
    DealError,
    IllegalAction,
    InvalidAction,
    NotYourTurn,
    RulesError,
)
from tapis_cartes.referee.engine.imperiale import (
    PACK_32,
    PACK_36,
    Combo,
    ImperialeHand,
    ImperialeMatch,
    best_disjoint,
    point_of,
)
from tapis_cartes.referee.engine.options import ImperialeAcademieOptions, ImperialeModerneOptions
from tapis_cartes.referee.engine.registry import find_game, make_rules, new_match
from tapis_cartes.referee.engine.tricks import Regime, TrickRules
from tests.cards import mask, play
from tests.engine.playing import assert_record_round_trips, assert_replay_equals_live, one_to_act

# --- helpers ------------------------------------------------------------------------------

Line = tuple[int, str, tuple[int, int], str]


def deal2(e: str, d: str, retourne: str) -> Deal:
    """A two-player deal (seat 0 = E, seat 1 = D); the talon is the seven cards left."""
    hands = (mask(e), mask(d))
    r = parse_card(retourne)
    assert hands[0].bit_count() == hands[1].bit_count() == 12 and not hands[0] & hands[1]
    rest = PACK_32 & ~hands[0] & ~hands[1] & ~(1 << r)
    return Deal(hands, r, tuple(iter_cards(rest)))


def deal3(e: str, m: str, d: str, retourne: str) -> Deal:
    """A three-player deal, seat 2 dealing: the retourne is in the dealer's hand."""
    hands = (mask(e), mask(m), mask(d))
    assert sum(hands) == PACK_36 and all(h.bit_count() == 12 for h in hands)
    return Deal(hands, parse_card(retourne))


def match_of(
    ruleset: str = "academie",
    options: dict[str, Any] | None = None,
    start: Sequence[tuple[int, int]] | None = None,
) -> ImperialeMatch:
    players = (options or {}).get("players", 2)
    m = new_match(
        make_rules("imperiale", ruleset, options or {}, players),
        Start(1, tuple(start) if start else None),
    )
    assert isinstance(m, ImperialeMatch)
    return m


def keys(lines: Sequence[ScoreLine]) -> list[Line]:
    return [(x.seat, x.kind, x.delta, x.rule) for x in lines]


def lines_of(m: ImperialeMatch) -> list[Line]:
    hand = m.hand
    assert hand is not None
    return keys(hand.lines)


def run(m: ImperialeMatch, script: Sequence[tuple[int, str]]) -> None:
    for seat, c in script:
        m.apply(seat, play(c))


def play_out(m: ImperialeMatch, prefer: str = "") -> None:
    """Finish the hand: each seat plays the first card of `prefer` it may, else its lowest
    legal card."""
    wanted = [play(c) for c in prefer.split()]
    while m.to_act():
        (seat,) = m.to_act()
        legal = m.legal_actions(seat)
        m.apply(seat, next((a for a in wanted if a in legal), legal[0]))


def hand_of(m: ImperialeMatch) -> ImperialeHand:
    assert isinstance(m.hand, ImperialeHand)
    return m.hand


# --- example 000-A (RULES.md 1.3, moderne) -------------------------------------------------

A_DEAL = deal2(
    "KH 9H 7H AS KS 10S 8S QD 9D JC 10C 8C", "AH JH 8H QS 7S KD JD 10D 8D AC 9C 7C", "QH"
)
A_PLAY = [
    (0, "KS"), (1, "7S"), (0, "AS"), (1, "QS"), (1, "AH"), (0, "KH"),
    (0, "10S"), (1, "8H"), (1, "KD"), (0, "9D"), (1, "JD"), (0, "QD"),
    (0, "7H"), (1, "JH"), (1, "10D"), (0, "9H"), (0, "8S"), (1, "7C"),
    (0, "JC"), (1, "9C"), (0, "10C"), (1, "AC"), (1, "8D"), (0, "8C"),
]  # fmt: skip
# Each follower's legal set in the example's table (trick number: (seat, cards)).
A_LEGAL = {1: "QS 7S", 2: "QS", 3: "KH", 4: "JH 8H", 5: "QD 9D", 6: "QD", 7: "JH", 8: "9H"}


def test_example_000a() -> None:
    m = match_of("moderne")
    assert m.deal_rule == "IMP-M.RETOURNE" and m.rules_end_rule() == "IMP-M.END"
    m.start_hand(1, A_DEAL)
    # Announcements: the retourne Q♥ for D, the couleur 39 to 38 for E, no impériale.
    assert lines_of(m) == [
        (1, "retourne", (0, 1), "IMP-M.RETOURNE"),
        (0, "couleur", (0, 1), "IMP-M.COULEUR"),
    ]
    for number, pair in enumerate(zip(A_PLAY[::2], A_PLAY[1::2], strict=True), 1):
        (lead_seat, lead), (seat, follow) = pair
        m.apply(lead_seat, play(lead))
        if number in A_LEGAL:
            assert m.legal_actions(seat) == sorted(play(c) for c in A_LEGAL[number].split())
        m.apply(seat, play(follow))
    result = m.results[-1]
    assert [t.winner for t in result.tricks] == [0, 1, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1]
    assert keys(result.lines) == [
        (1, "retourne", (0, 1), "IMP-M.RETOURNE"),
        (0, "couleur", (0, 1), "IMP-M.COULEUR"),
        (0, "imperiale-tombee", (1, 0), "IMP-M.TOMBEE"),  # trick 3: K♥ takes A♥
        (1, "honneurs", (0, 2), "IMP-M.HONNEURS"),  # trick 7: 7♥ and J♥
        (0, "cartes", (0, 1), "IMP-M.CARTES"),  # 6-6, E first to six (trick 10)
    ]
    assert [x.at for x in result.lines] == [0, 0, 6, 14, 24]
    assert result.lines[2].note == "trick 3: KH takes AH; now 1F 1J"
    assert result.lines[4].note == "6-6, first to six tricks; now 1F 2J"
    assert m.scores == [(1, 2), (0, 3)]  # E 1F 2J (32 points), D 0F 3J (12 points)
    assert not m.finished and m.expected_dealer() == 0  # E deals next


def test_example_000a_with_effacement() -> None:
    # Variant check: E's fiche at trick 3 erases D's single jeton.
    m = match_of("moderne", {"effacement": True})
    m.start_hand(1, A_DEAL)
    run(m, A_PLAY)
    assert keys(m.results[-1].lines)[2:5] == [
        (0, "imperiale-tombee", (1, 0), "IMP-M.TOMBEE"),
        (1, "effacement", (0, -1), "IMP-A.EFFACEMENT"),
        (1, "honneurs", (0, 2), "IMP-M.HONNEURS"),
    ]
    assert m.scores == [(1, 2), (0, 2)]


# --- example 001-B (RULES.md 2.4, academie) ------------------------------------------------

B_DEAL = deal2("KH QH JH AH 7H KS QS 10S KC QC 8C 9D", "QD JD AD 10D 8D 7D AS JS 9S 8S AC 9H", "7S")
B_PLAY = [
    (0, "KS"), (1, "8S"), (0, "QS"), (1, "9S"), (0, "10S"), (1, "AS"),
    (1, "JS"), (0, "8C"), (1, "QD"), (0, "9D"), (1, "AC"), (0, "QC"),
    (0, "KC"), (1, "7D"), (0, "KH"), (1, "9H"), (0, "QH"), (1, "8D"),
    (0, "JH"), (1, "10D"), (0, "AH"), (1, "AD"), (0, "7H"), (1, "JD"),
]  # fmt: skip
B_LEGAL = {1: "AS JS 9S 8S", 2: "AS JS 9S", 3: "AS JS", 5: "9D", 6: "KC QC", 8: "9H"}
B_START = ((0, 0), (1, 3))


def b_lines(protected: bool) -> list[Line]:
    return [
        (1, "retourne", (0, 1), "IMP-A.E1"),  # D 1F 4J, the retourne jeton protected
        (0, "quatrieme-majeure", (1, 0), "IMP-A.E2"),  # E 1F 0J
        (1, "effacement", (0, -3 if protected else -4), "IMP-A.EFFACEMENT"),
        (1, "point", (0, 1), "IMP-A.E5"),  # D by count, 6 diamonds to 5 hearts
        (0, "honneurs", (0, 1), "IMP-A.E6"),  # K♠
        (0, "honneurs", (0, 1), "IMP-A.E6"),  # Q♠
        (1, "honneurs", (0, 1), "IMP-A.E6"),  # A♠
        (1, "honneurs", (0, 1), "IMP-A.E6"),  # J♠
        (0, "cartes", (0, 3), "IMP-A.E8"),  # 9 tricks: 3 above 6
    ]


def test_example_001b() -> None:
    m = match_of(start=B_START)
    assert m.deal_rule == "IMP-A.E1" and m.rules_end_rule() == "IMP-A.TARGET"
    m.start_hand(1, B_DEAL)
    assert lines_of(m) == b_lines(True)[:4]
    hand = hand_of(m)
    assert hand.protected == [0, 0]  # lapsed at the Point
    assert m.view(0) is not None and m.view(0).scores == ((1, 0), (1, 2))  # type: ignore[union-attr]
    for number, pair in enumerate(zip(B_PLAY[::2], B_PLAY[1::2], strict=True), 1):
        (lead_seat, lead), (seat, follow) = pair
        m.apply(lead_seat, play(lead))
        if number in B_LEGAL:
            assert m.legal_actions(seat) == sorted(play(c) for c in B_LEGAL[number].split())
        m.apply(seat, play(follow))
    result = m.results[-1]
    assert keys(result.lines) == b_lines(True)
    assert [x.at for x in result.lines] == [0, 0, 0, 0, 2, 4, 6, 8, 24]
    assert result.lines[2].note == (
        "seat 0 won an impériale; the retourne jeton is protected; now 1F 1J"
    )
    assert result.lines[3].note == (
        "6 diamonds worth 56, against seat 0: 5 hearts worth 48; now 1F 2J"
    )
    assert hand.won == [9, 3]
    assert m.scores == [(1, 5), (1, 4)]  # E 1F 5J, D 1F 4J
    # Summing the lines gives the scores.
    for seat in (0, 1):
        got = [sum(x.delta[i] for x in result.lines if x.seat == seat) for i in (0, 1)]
        assert tuple(a + b for a, b in zip(B_START[seat], got, strict=True)) == m.scores[seat]


def test_example_001b_without_protection() -> None:
    m = match_of(options={"protect_retourne": False}, start=B_START)
    m.start_hand(1, B_DEAL)
    run(m, B_PLAY)
    assert keys(m.results[-1].lines) == b_lines(False)
    assert m.scores == [(1, 5), (1, 3)]


def test_example_001b_sixth_jeton_after_the_point_erases_everything() -> None:
    # E starts with 4 jetons: K♠ and Q♠ make his sixth at trick 2; the conversion erases
    # D's jetons, the retourne one included (the protection lapsed at the Point).
    m = match_of(start=((0, 4), (1, 3)))
    m.start_hand(1, B_DEAL)
    run(m, B_PLAY)
    assert keys(m.results[-1].lines)[4:8] == [
        (0, "honneurs", (0, 1), "IMP-A.E6"),
        (0, "honneurs", (0, 1), "IMP-A.E6"),
        (0, "conversion", (1, -6), "IMP-A.E6"),
        (1, "effacement", (0, -2), "IMP-A.EFFACEMENT"),
    ]
    assert m.scores == [(2, 3), (1, 2)]


def test_example_001b_won_in_the_middle_of_the_play() -> None:
    # E 3F 4J: the quatrième makes 4F, the sixth jeton at trick 2 the fifth fiche: the match
    # ends after action 4; nothing after it is scored or accepted.
    m = match_of(start=((3, 4), (1, 3)))
    m.start_hand(1, B_DEAL)
    run(m, B_PLAY[:4])
    assert m.finished and m.winners == (0,)
    assert m.end_reason == "seat 0 reached 5 impériales"
    result = m.results[-1]
    assert len(result.actions) == 4
    assert keys(result.lines)[-3:] == [
        (0, "honneurs", (0, 1), "IMP-A.E6"),
        (0, "conversion", (1, -6), "IMP-A.E6"),
        (1, "effacement", (0, -2), "IMP-A.EFFACEMENT"),
    ]
    assert m.scores == [(5, 0), (1, 0)]
    assert m.to_act() == () and m.legal_actions(0) == []
    assert "after trick 2" in " ".join(result.hand.describe())
    with pytest.raises(IllegalAction) as exc:
        m.apply(0, play("10S"))
    assert exc.value.code == "match-over" and exc.value.rule == "IMP-A.TARGET"
    with pytest.raises(IllegalAction) as exc:
        m.start_hand(0, B_DEAL)
    assert exc.value.code == "match-over"


# --- E1: the retourne ----------------------------------------------------------------------

# E holds no figure at all (cartes blanches); D holds three sevens, the fourth is turned.
BLANCHES = deal2(
    "AS 10S 9S 8S AH 10H 9H 8H AD 10D 9D 8D", "KS QS JS 7S KH QH JH 7H KD QD JD 7D", "7C"
)


@pytest.mark.parametrize(
    ("retourne", "jeton"),
    [("7C", True), ("AC", True), ("KC", True), ("QC", True), ("JC", True), ("10C", False)],
)
def test_e1_retourne_honour(retourne: str, jeton: bool) -> None:
    # The same hands with another club turned (it swaps places with 7♣ in the talon).
    r = parse_card(retourne)
    talon = tuple(BLANCHES.retourne if c == r else c for c in BLANCHES.talon)
    deal = Deal(BLANCHES.hands, r, talon)
    m = match_of(options={"cartes_blanches": False})
    m.start_hand(1, deal)
    lines = lines_of(m)
    assert (lines[0] == (1, "retourne", (0, 1), "IMP-A.E1")) is jeton
    assert hand_of(m).trump == 3
    if jeton:
        assert lines[0][0] == 1 and "is an honour" in hand_of(m).lines[0].note


def test_e1_sixth_jeton_converts_erases_and_is_not_protected() -> None:
    m = match_of(options={"cartes_blanches": False}, start=((0, 3), (0, 5)))
    m.start_hand(1, BLANCHES)
    assert lines_of(m)[:3] == [
        (1, "retourne", (0, 1), "IMP-A.E1"),
        (1, "conversion", (1, -6), "IMP-A.E1"),
        (0, "effacement", (0, -3), "IMP-A.EFFACEMENT"),
    ]
    assert hand_of(m).protected == [0, 0]


# --- E2-E4: cartes blanches ----------------------------------------------------------------


def test_cartes_blanches_stop_the_coup() -> None:
    m = match_of(start=((0, 2), (0, 3)))
    m.start_hand(1, BLANCHES)
    # E1 D 0F 4J (protected); E2 E +2F, effacement leaves D the retourne jeton; E4: no
    # Point, no play.
    assert keys(m.results[-1].lines) == [
        (1, "retourne", (0, 1), "IMP-A.E1"),
        (0, "cartes-blanches", (2, 0), "IMP-A.E2"),
        (1, "effacement", (0, -3), "IMP-A.EFFACEMENT"),
    ]
    assert m.scores == [(2, 2), (0, 1)]
    assert m.hand is not None and m.hand.over and m.to_act() == ()
    assert m.results[-1].actions == [] and not m.finished
    assert "cartes blanches: the coup is not played" in m.results[-1].hand.describe()
    view = m.view(1)
    assert view is not None and view.phase == "over"
    assert view.known == {0: BLANCHES.hands[0]}  # the twelve blank cards were shown
    assert m.expected_dealer() == 0  # the deal passes on


def test_cartes_blanches_options() -> None:
    m = match_of(options={"blanches_erase": False}, start=((0, 2), (0, 3)))
    m.start_hand(1, BLANCHES)
    assert [k for _, k, _, _ in lines_of(m)] == ["retourne", "cartes-blanches"]
    assert m.scores == [(2, 2), (0, 4)]
    m = match_of(options={"cartes_blanches": False}, start=((0, 2), (0, 3)))
    m.start_hand(1, BLANCHES)
    # No impériale: the Point (E by pips, 4 spades 38 to 37) and then the play.
    assert lines_of(m) == [
        (1, "retourne", (0, 1), "IMP-A.E1"),
        (0, "point", (0, 1), "IMP-A.E5"),
    ]
    assert m.to_act() == (0,)


def test_imperiale_de_retourne_stands_when_blanches_stop() -> None:
    # 2.3.4: the dealer's impériale de retourne (7♣ completes his sevens) still counts; it
    # erases E's jetons (optional_erase) ...
    m = match_of(options={"imperiale_de_retourne": True}, start=((0, 2), (0, 3)))
    m.start_hand(1, BLANCHES)
    assert keys(m.results[-1].lines)[3:] == [
        (1, "imperiale-de-retourne", (1, 0), "IMP-A.E3"),
        (0, "effacement", (0, -2), "IMP-A.EFFACEMENT"),
    ]
    assert m.scores == [(2, 0), (1, 1)]
    # ... unless optional_erase = false.
    m = match_of(
        options={"imperiale_de_retourne": True, "optional_erase": False}, start=((0, 2), (0, 3))
    )
    m.start_hand(1, BLANCHES)
    assert keys(m.results[-1].lines)[3:] == [(1, "imperiale-de-retourne", (1, 0), "IMP-A.E3")]
    assert m.scores == [(2, 2), (1, 1)]


# --- E2, E3: impériales en main ------------------------------------------------------------

# E: the hearts quatrième, four kings (K♥ in both) and four sevens.
KINDS_E = "JH QH KH AH KS KD KC 7S 7H 7D 7C 8S"
KINDS_D = "AS QS JS 10S 9S AD QD JD 10D 8D AC QC"


@pytest.mark.parametrize(
    ("retourne", "options", "expected"),
    [
        ("9D", {}, [("quatrieme-majeure", 1), ("carre", 1), ("carre", 1)]),
        ("9D", {"allow_overlap": False}, [("quatrieme-majeure", 1), ("carre", 1)]),
        ("9H", {}, [("quatrieme-majeure", 2), ("carre", 1), ("carre", 1)]),
        ("9H", {"trump_major_value": 1}, [("quatrieme-majeure", 1), ("carre", 1), ("carre", 1)]),
        ("9H", {"allow_overlap": False}, [("quatrieme-majeure", 2), ("carre", 1)]),
    ],
)
def test_quatriemes_and_carres(
    retourne: str, options: dict[str, Any], expected: list[tuple[str, int]]
) -> None:
    m = match_of(options=options)
    m.start_hand(1, deal2(KINDS_E, KINDS_D, retourne))
    lines = lines_of(m)
    assert [(k, d[0]) for s, k, d, r in lines if r == "IMP-A.E2"] == expected
    assert all(s == 0 for s, _, _, r in lines if r == "IMP-A.E2")
    notes = [x.note for x in hand_of(m).lines]
    assert notes[0].startswith("J Q K A of hearts" + (" (trump)" if retourne == "9H" else ""))
    assert notes[-2].startswith("four sevens")
    # Nothing for D (E3); the Point to D's five spades (50) over E's five hearts (48).
    assert lines[-1] == (1, "point", (0, 1), "IMP-A.E5")


# E: four jacks, four queens and K♠ A♠: the spades quatrième shares J♠ Q♠ with the carrés.
OVERLAP_E = "JS JH JD JC QS QH QD QC KS AS 7H 8H"


@pytest.mark.parametrize(
    ("d", "retourne", "options", "expected"),
    [
        ("KH KD KC AH AD AC 10S 9S 8S 10H 9H 10D", "9D", {}, ["JQKA", "J", "Q"]),
        # Without overlap the two carrés (2 fiches) beat the plain quatrième (1) ...
        ("KH KD KC AH AD AC 10S 9S 8S 10H 9H 10D", "9D", {"allow_overlap": False}, ["J", "Q"]),
        # ... but at equal worth (the quatrième in trump is 2) the earlier one is kept.
        ("KH KD KC AH AD AC 10S 9S 7S 10H 9H 10D", "8S", {"allow_overlap": False}, ["JQKA"]),
    ],
)
def test_overlap_choice(
    d: str, retourne: str, options: dict[str, Any], expected: list[str]
) -> None:
    m = match_of(options=options)
    m.start_hand(1, deal2(OVERLAP_E, d, retourne))
    names = {"quatrieme-majeure": "JQKA", "carre": ""}
    got = []
    for x in hand_of(m).lines:
        if x.rule == "IMP-A.E2":
            got.append(names[x.kind] or x.note.split(";")[0].split()[1][0].upper())
    assert got == expected


def test_carres_order_and_both_seats() -> None:
    # E holds the kings, D the jacks, queens and aces: E2 before E3, carrés J Q K A.
    m = match_of()
    m.start_hand(
        1,
        deal2(
            "KS KH KD KC 10S 10H 10D 10C 9S 9H 9D 9C", "JS JH JD JC QS QH QD QC AS AH AD AC", "8S"
        ),
    )
    lines = hand_of(m).lines
    assert [(x.seat, x.kind, x.delta, x.rule, x.note.split(";")[0]) for x in lines[:4]] == [
        (0, "carre", (1, 0), "IMP-A.E2", "four kings"),
        (1, "carre", (1, 0), "IMP-A.E3", "four jacks"),
        (1, "carre", (1, 0), "IMP-A.E3", "four queens"),
        (1, "carre", (1, 0), "IMP-A.E3", "four aces"),
    ]
    view = m.view(0)
    assert view is not None and view.known == {1: mask("JS JH JD JC QS QH QD QC AS AH AD AC")}


def test_best_disjoint() -> None:
    a = Combo("a", mask("JS QS KS AS"), 1, "")
    b = Combo("b", mask("JS JH JD JC"), 1, "")
    c = Combo("c", mask("QS QH QD QC"), 1, "")
    d = Combo("d", mask("7S 7H 7D 7C"), 1, "")
    assert best_disjoint([a, b, c, d]) == [b, c, d]
    assert best_disjoint([a, b, d]) == [a, d]  # equal worth: the earlier
    assert best_disjoint([a._replace(value=3), b, c]) == [a._replace(value=3)]
    assert best_disjoint([]) == []


# --- E3 (c): the impériale de retourne -----------------------------------------------------

# D holds Q♠ J♠ A♠ and K♥ K♦ K♣; the turned K♠ completes both: one fiche, never two.
RETOURNE_D = "QS JS AS 10S 9S KH KD KC 8D 8C 9C 10C"
RETOURNE_E = "QH JH AH 10H 9H 8H 7H QD JD AD 10D 9D"


def test_imperiale_de_retourne() -> None:
    m = match_of(options={"imperiale_de_retourne": True}, start=((0, 2), (0, 0)))
    m.start_hand(1, deal2(RETOURNE_E, RETOURNE_D, "KS"))
    lines = hand_of(m).lines
    assert keys(lines) == [
        (1, "retourne", (0, 1), "IMP-A.E1"),
        (1, "imperiale-de-retourne", (1, 0), "IMP-A.E3"),
        (0, "effacement", (0, -2), "IMP-A.EFFACEMENT"),
        (0, "point", (0, 1), "IMP-A.E5"),  # E's seven hearts
    ]
    assert lines[1].note.startswith("KS completes")
    off = match_of(start=((0, 2), (0, 0)))
    off.start_hand(1, deal2(RETOURNE_E, RETOURNE_D, "KS"))
    assert [k for _, k, _, _ in lines_of(off)] == ["retourne", "point"]


def test_imperiale_de_retourne_without_overlap() -> None:
    # D: four queens and J♠ A♠, K♠ turned. With overlap: the carré and the impériale de
    # retourne; without, Q♠ is used by the carré and the retourne completes nothing.
    e = "JH AH KH 7H JD AD KD 7D JC AC KC 10C"
    d = "QS QH QD QC JS AS 10H 9H 8H 10D 9D 8D"
    for overlap, kinds in ((True, ["carre", "imperiale-de-retourne"]), (False, ["carre"])):
        m = match_of(options={"imperiale_de_retourne": True, "allow_overlap": overlap})
        m.start_hand(1, deal2(e, d, "KS"))
        assert [x.kind for x in hand_of(m).lines if x.rule == "IMP-A.E3"] == kinds


# --- E5: the Point -------------------------------------------------------------------------


def test_point_of() -> None:
    # With 32 cards more cards always means more points; with 36 it need not.
    assert point_of(mask("AS KS QS 7H 8H 9H 10H"), True) == (4, 34, 1)
    assert point_of(mask("AS KS QS 7H 8H 9H 10H"), False) == (4, 34, 1)
    assert point_of(mask("6H 7H 8H 9H AS KS QS"), True) == (4, 30, 1)
    assert point_of(mask("6H 7H 8H 9H AS KS QS"), False) == (3, 31, 0)


def test_point_tie_goes_to_e() -> None:
    e = "AC KC QC 8C 7S 8S 9S 10S 7H 8H 9H JD"
    d = "AD KD QD 8D JS QS KS JH QH KH 7C 9C"
    for rule in ("count_then_pips", "pips"):
        m = match_of(options={"point_rule": rule})
        m.start_hand(1, deal2(e, d, "AS"))
        assert lines_of(m)[-1] == (0, "point", (0, 1), "IMP-A.E5")
        assert hand_of(m).lines[-1].note.startswith("4 clubs worth 39, against seat 1: 4 diamonds")


def test_imperiales_after_the_point() -> None:
    # imperiales_before_point = false: the Point follows E1 and the protection has lapsed
    # before E's quatrième, which erases the retourne jeton too.
    m = match_of(options={"imperiales_before_point": False}, start=B_START)
    m.start_hand(1, B_DEAL)
    assert lines_of(m) == [
        (1, "retourne", (0, 1), "IMP-A.E1"),
        (1, "point", (0, 1), "IMP-A.E5"),
        (0, "quatrieme-majeure", (1, 0), "IMP-A.E2"),
        (1, "effacement", (0, -5), "IMP-A.EFFACEMENT"),
    ]


# --- E6-E8: the play, the impériale tombée, the cards and capot ---------------------------

# E holds K♠ Q♠ J♠, D the A♠ alone: E's tricks hold the four (a captured tombée).
TOMBEE = deal2(
    "KS QS JS 10H 9H 8H 7H 10D 9D 8D 7D 10C", "AS KH QH JH KD QD JD KC QC JC 9C 8C", "8S"
)
TOMBEE_PLAY = [
    (0, "KS"), (1, "AS"), (0, "QS"), (1, "JH"), (0, "JS"), (1, "QH"),
    (0, "7H"), (1, "KH"), (1, "JD"), (0, "7D"), (1, "QD"), (0, "8D"),
    (1, "KD"), (0, "9D"), (1, "8C"), (0, "10C"), (0, "8H"), (1, "9C"),
    (0, "9H"), (1, "JC"), (0, "10H"), (1, "QC"), (0, "10D"), (1, "KC"),
]  # fmt: skip


def test_honours_are_captured_and_tombee_off() -> None:
    m = match_of()
    m.start_hand(1, TOMBEE)
    run(m, TOMBEE_PLAY)
    assert hand_of(m).won == [8, 4]
    assert keys(m.results[-1].lines) == [
        (1, "point", (0, 1), "IMP-A.E5"),  # D's five clubs
        (0, "honneurs", (0, 2), "IMP-A.E6"),  # K♠ and the captured A♠
        (0, "honneurs", (0, 1), "IMP-A.E6"),
        (0, "honneurs", (0, 1), "IMP-A.E6"),
        (0, "cartes", (0, 2), "IMP-A.E8"),  # 8 tricks
        (0, "conversion", (1, -6), "IMP-A.E8"),
        (1, "effacement", (0, -1), "IMP-A.EFFACEMENT"),
    ]
    assert m.results[-1].lines[1].note == "trick 1: KS AS; now 0F 2J"
    assert m.scores == [(1, 0), (0, 0)]


def test_imperiale_tombee_after_trick_twelve() -> None:
    m = match_of(options={"imperiale_tombee": True})
    m.start_hand(1, TOMBEE)
    run(m, TOMBEE_PLAY)
    assert keys(m.results[-1].lines)[4:] == [
        (0, "imperiale-tombee", (1, 0), "IMP-A.E7"),  # before the cards
        (1, "effacement", (0, -1), "IMP-A.EFFACEMENT"),
        (0, "cartes", (0, 2), "IMP-A.E8"),
        (0, "conversion", (1, -6), "IMP-A.E8"),
    ]
    assert m.results[-1].lines[4].at == 24
    assert m.scores == [(2, 0), (0, 0)]
    # optional_erase = false: the tombée leaves D's jeton; the conversion erases it.
    quiet = match_of(options={"imperiale_tombee": True, "optional_erase": False})
    quiet.start_hand(1, TOMBEE)
    run(quiet, TOMBEE_PLAY)
    assert keys(quiet.results[-1].lines)[4:] == [
        (0, "imperiale-tombee", (1, 0), "IMP-A.E7"),
        (0, "cartes", (0, 2), "IMP-A.E8"),
        (0, "conversion", (1, -6), "IMP-A.E8"),
        (1, "effacement", (0, -1), "IMP-A.EFFACEMENT"),
    ]


# E holds seven trumps and the top of every other suit he has: he takes all twelve tricks.
CAPOT = deal2("KS QS JS AS 10S 9S 8S KH QH KD KC QC", "JH AH 10H 9H 8H 7H QD JD AD 10D JC AC", "7S")
CAPOT_ANNOUNCE: list[Line] = [
    (1, "retourne", (0, 1), "IMP-A.E1"),
    (0, "quatrieme-majeure", (2, 0), "IMP-A.E2"),  # in trump: double
    (0, "carre", (1, 0), "IMP-A.E2"),  # the kings; the protected jeton stays
    (0, "point", (0, 1), "IMP-A.E5"),
    *[(0, "honneurs", (0, 1), "IMP-A.E6")] * 4,  # K♠ Q♠ J♠ A♠ (7♠ is turned)
]


def capot_match(options: dict[str, Any]) -> ImperialeMatch:
    m = match_of(options=options)
    m.start_hand(1, CAPOT)
    play_out(m, "KS QS JS AS 10S 9S 8S KH QH KD KC QC")
    assert hand_of(m).won == [12, 0]
    return m


def test_capot_wins_the_match() -> None:
    # E 3F 5J before the capot: +2 fiches reach the target 5 at E8.
    m = capot_match({})
    assert keys(m.results[-1].lines) == [
        *CAPOT_ANNOUNCE,
        (0, "capot", (2, 0), "IMP-A.E8"),
        (1, "effacement", (0, -1), "IMP-A.EFFACEMENT"),
    ]
    assert m.finished and m.winners == (0,) and m.scores == [(5, 5), (0, 0)]


def test_capot_options() -> None:
    m = capot_match({"target_fiches": 10, "capot_fiches": 3})
    assert keys(m.results[-1].lines)[-2] == (0, "capot", (3, 0), "IMP-A.E8")
    assert not m.finished and m.scores == [(6, 5), (0, 0)]
    # capot_fiches = 0: no capot; twelve tricks are six card jetons.
    m = capot_match({"target_fiches": 10, "capot_fiches": 0})
    assert keys(m.results[-1].lines)[len(CAPOT_ANNOUNCE) :] == [
        (0, "cartes", (0, 6), "IMP-A.E8"),
        (0, "conversion", (1, -6), "IMP-A.E8"),
        (1, "effacement", (0, -1), "IMP-A.EFFACEMENT"),
    ]
    assert m.scores == [(4, 5), (0, 0)]


def test_tombee_requires_capture() -> None:
    # E was dealt K Q J A of trump: no tombée by default, one without the requirement.
    m = capot_match({"target_fiches": 10, "imperiale_tombee": True})
    assert "imperiale-tombee" not in [x.kind for x in m.results[-1].lines]
    m = capot_match(
        {"target_fiches": 10, "imperiale_tombee": True, "tombee_requires_capture": False}
    )
    assert keys(m.results[-1].lines)[len(CAPOT_ANNOUNCE) :] == [
        (0, "imperiale-tombee", (1, 0), "IMP-A.E7"),
        (1, "effacement", (0, -1), "IMP-A.EFFACEMENT"),
        (0, "capot", (2, 0), "IMP-A.E8"),
    ]


def test_effacement_off() -> None:
    m = match_of(options={"effacement": False}, start=B_START)
    m.start_hand(1, B_DEAL)
    run(m, B_PLAY)
    assert "effacement" not in [x.kind for x in m.results[-1].lines]
    # D: 3 jetons, +1 retourne, +1 Point, +1 A♠ (the sixth: a fiche), +1 J♠.
    assert keys(m.results[-1].lines)[5:7] == [
        (1, "honneurs", (0, 1), "IMP-A.E6"),
        (1, "conversion", (1, -6), "IMP-A.E6"),
    ]
    assert m.scores == [(1, 5), (2, 1)]


# --- the target: the match ends at the very event --------------------------------------------

JQA_E = "KS KH KD KC 10S 10H 10D 10C 9S 9H 9D 9C"
JQA_D = "JS JH JD JC QS QH QD QC AS AH AD AC"


def test_won_in_the_announcements_by_primaute() -> None:
    # Both would reach 5 fiches with their carrés; E's come first (E2 before E3).
    m = match_of(start=((4, 0), (4, 0)))
    m.start_hand(1, deal2(JQA_E, JQA_D, "8S"))
    assert keys(m.results[-1].lines) == [(0, "carre", (1, 0), "IMP-A.E2")]
    assert m.finished and m.winners == (0,)
    assert m.results[-1].actions == [] and m.to_act() == ()
    assert "seat 0 reaches 5 impériales in the announcements" in m.results[-1].hand.describe()


def test_dealer_wins_at_the_retourne() -> None:
    # D 4F 5J and the 7♠ turned: his sixth jeton is his fifth fiche, before E's carré.
    m = match_of(start=((4, 0), (4, 5)))
    m.start_hand(1, deal2(JQA_E, JQA_D, "7S"))
    assert keys(m.results[-1].lines) == [
        (1, "retourne", (0, 1), "IMP-A.E1"),
        (1, "conversion", (1, -6), "IMP-A.E1"),
    ]
    assert m.finished and m.winners == (1,) and m.scores == [(4, 0), (5, 0)]


def test_start_scores_must_be_a_position_of_the_game() -> None:
    for start in (((0, 6), (0, 0)), ((5, 0), (0, 0)), ((0, -1), (0, 0))):
        with pytest.raises(RulesError) as exc:
            match_of(start=start)
        assert exc.value.key == "start"
    with pytest.raises(RulesError):
        match_of("moderne", start=((3, 0), (0, 0)))
    assert match_of("moderne", start=((2, 5), (0, 0))).scores == [(2, 5), (0, 0)]


# --- moderne: impériales, options ----------------------------------------------------------

# Retourne K♥ (trump hearts). E: four queens, K Q J A of spades, and Q♥ J♥ A♥ (tournée).
MOD_E = "QH JH AH KS QS JS AS QD QC 7D 8D 9D"
MOD_D = "10S 9S 8S 7S 10H 9H 8H 7H KD JD AD 10D"


def test_moderne_impériales_win_in_the_announcements() -> None:
    m = match_of("moderne")
    m.start_hand(1, deal2(MOD_E, MOD_D, "KH"))
    assert keys(m.results[-1].lines) == [
        (1, "retourne", (0, 1), "IMP-M.RETOURNE"),
        (0, "couleur", (0, 1), "IMP-M.COULEUR"),  # 41 each: E scores on equality
        (0, "imperiale-des-honneurs", (1, 0), "IMP-M.IMPERIALES"),
        (0, "imperiale-de-couleur", (1, 0), "IMP-M.IMPERIALES"),
        (0, "imperiale-tournee", (1, 0), "IMP-M.IMPERIALES"),  # the third: target 3
    ]
    assert m.finished and m.winners == (0,) and m.scores == [(3, 1), (0, 1)]
    assert m.end_reason == "seat 0 reached 3 impériales"


@pytest.mark.parametrize(
    ("options", "kinds"),
    [
        ({"allow_overlap": False}, ["imperiale-de-couleur", "imperiale-tournee"]),
        ({"tournee_holder": "dealer"}, ["imperiale-des-honneurs", "imperiale-de-couleur"]),
    ],
)
def test_moderne_imperiales_options(options: dict[str, Any], kinds: list[str]) -> None:
    m = match_of("moderne", options)
    m.start_hand(1, deal2(MOD_E, MOD_D, "KH"))
    assert [x.kind for x in hand_of(m).lines if x.rule == "IMP-M.IMPERIALES"] == kinds
    assert not m.finished and m.to_act() == (0,)


def test_moderne_imperiales_before_point_and_effacement() -> None:
    m = match_of("moderne", {"imperiales_before_point": True, "target_fiches": 5})
    m.start_hand(1, deal2(MOD_E, MOD_D, "KH"))
    assert [x.rule for x in hand_of(m).lines] == [
        "IMP-M.RETOURNE",
        *["IMP-M.IMPERIALES"] * 3,
        "IMP-M.COULEUR",
    ]
    m = match_of("moderne", {"effacement": True, "target_fiches": 5})
    m.start_hand(1, deal2(MOD_E, MOD_D, "KH"))
    # No retourne protection in moderne (RULES.md 7).
    assert keys(hand_of(m).lines)[2:4] == [
        (0, "imperiale-des-honneurs", (1, 0), "IMP-M.IMPERIALES"),
        (1, "effacement", (0, -1), "IMP-A.EFFACEMENT"),
    ]


@pytest.mark.parametrize(
    ("options", "tail", "scores"),
    [
        (
            {},
            [
                (0, "imperiale-tombee", (1, 0), "IMP-M.TOMBEE"),  # K♠ takes A♠: no jetons
                (0, "honneurs", (0, 1), "IMP-M.HONNEURS"),
                (0, "honneurs", (0, 1), "IMP-M.HONNEURS"),
                (0, "cartes", (0, 1), "IMP-M.CARTES"),  # 8 tricks: one jeton
            ],
            [(1, 3), (0, 1)],
        ),
        (
            {"tombee_mode": "off"},
            [
                (0, "honneurs", (0, 2), "IMP-M.HONNEURS"),
                (0, "honneurs", (0, 1), "IMP-M.HONNEURS"),
                (0, "honneurs", (0, 1), "IMP-M.HONNEURS"),
                (0, "cartes", (0, 1), "IMP-M.CARTES"),
            ],
            [(0, 5), (0, 1)],
        ),
        (
            {"tombee_mode": "end_of_coup"},
            [
                (0, "honneurs", (0, 2), "IMP-M.HONNEURS"),
                (0, "honneurs", (0, 1), "IMP-M.HONNEURS"),
                (0, "honneurs", (0, 1), "IMP-M.HONNEURS"),
                (0, "imperiale-tombee", (1, 0), "IMP-M.TOMBEE"),
                (0, "cartes", (0, 1), "IMP-M.CARTES"),
            ],
            [(1, 5), (0, 1)],
        ),
        (
            {"cards_scoring": "per_trick"},
            [
                (0, "imperiale-tombee", (1, 0), "IMP-M.TOMBEE"),
                (0, "honneurs", (0, 1), "IMP-M.HONNEURS"),
                (0, "honneurs", (0, 1), "IMP-M.HONNEURS"),
                (0, "cartes", (0, 2), "IMP-M.CARTES"),  # 8 tricks: two above six
            ],
            [(1, 4), (0, 1)],
        ),
        (
            {"honour_timing": "end_of_coup"},
            [
                (0, "imperiale-tombee", (1, 0), "IMP-M.TOMBEE"),
                (0, "cartes", (0, 1), "IMP-M.CARTES"),
                (0, "honneurs", (0, 1), "IMP-M.HONNEURS"),
                (0, "honneurs", (0, 1), "IMP-M.HONNEURS"),
            ],
            [(1, 3), (0, 1)],
        ),
    ],
)
def test_moderne_play_options(
    options: dict[str, Any], tail: list[Line], scores: list[tuple[int, int]]
) -> None:
    m = match_of("moderne", options)
    m.start_hand(1, TOMBEE)
    run(m, TOMBEE_PLAY)
    lines = keys(m.results[-1].lines)
    assert lines == [(1, "couleur", (0, 1), "IMP-M.COULEUR"), *tail]
    assert m.scores == scores
    if options.get("honour_timing") == "end_of_coup":
        assert [x.at for x in m.results[-1].lines] == [0, 2, 24, 24, 24]


def test_moderne_000a_options() -> None:
    # Per-trick cards: 6-6 scores nothing; tombée off: trick 3's K♥ A♥ are two honours.
    m = match_of("moderne", {"cards_scoring": "per_trick"})
    m.start_hand(1, A_DEAL)
    run(m, A_PLAY)
    assert "cartes" not in [x.kind for x in m.results[-1].lines]
    assert m.scores == [(1, 1), (0, 3)]
    m = match_of("moderne", {"tombee_mode": "off"})
    m.start_hand(1, A_DEAL)
    run(m, A_PLAY)
    assert keys(m.results[-1].lines)[2] == (0, "honneurs", (0, 2), "IMP-M.HONNEURS")
    assert m.scores == [(0, 4), (0, 3)]


# --- three players (IMP-A.3P) --------------------------------------------------------------

# Seat 2 deals; 6♠ is his last card, turned and kept. E: the spades quatrième and four aces;
# M: four sevens (no carré with 36 cards); D: four sixes (the low carré).
P3_E = "KS QS JS AS 10S 9S 8S AH AD AC KC 10C"
P3_M = "7S 7H 7D 7C JH QH KH JD QD KD JC 9C"
P3_D = "6S 6H 6D 6C 8H 9H 10H 8D 9D 10D 8C QC"
P3 = deal3(P3_E, P3_M, P3_D, "6S")


def test_three_players_announcements() -> None:
    m = match_of(options={"players": 3, "target_fiches": 10}, start=((0, 0), (0, 3), (0, 2)))
    assert m.pack == PACK_36
    m.start_hand(2, P3)
    hand = hand_of(m)
    assert hand.order == (0, 1, 2) and hand.trump == 0
    assert lines_of(m) == [
        (2, "retourne", (0, 1), "IMP-A.E1"),  # the 6 is an honour with 36 cards
        (0, "quatrieme-majeure", (2, 0), "IMP-A.E2"),
        (1, "effacement", (0, -3), "IMP-A.EFFACEMENT"),  # both opponents erased
        (2, "effacement", (0, -2), "IMP-A.EFFACEMENT"),  # the dealer keeps the retourne's
        (0, "carre", (1, 0), "IMP-A.E2"),  # four aces
        (2, "carre", (1, 0), "IMP-A.E3"),  # four sixes, the turned one in hand: en main
        (0, "point", (0, 1), "IMP-A.E5"),  # E's seven spades
    ]
    assert hand.lines[4].note.startswith("four aces")
    assert hand.lines[5].note.startswith("four sixes")
    view = m.view(1)
    assert view is not None and view.known[2] & mask("6S")  # the turned card is seen
    # Trick 1: K♠ led, M and D must trump with their only trumps; K♠ takes the 6♠ honour.
    m.apply(0, play("KS"))
    assert m.legal_actions(1) == [play("7S")]
    m.apply(1, play("7S"))
    assert m.legal_actions(2) == [play("6S")]
    m.apply(2, play("6S"))
    assert lines_of(m)[-1] == (0, "honneurs", (0, 2), "IMP-A.E6")
    assert hand.lines[-1].note == "trick 1: 6S KS; now 3F 3J"
    play_out(m)
    # Cards: a jeton per trick above four, from E round the table.
    won = hand.won
    cards = [(s, won[s] - 4) for s in (0, 1, 2) if won[s] > 4]
    assert [(x.seat, x.delta[1]) for x in hand.lines if x.kind == "cartes"] == cards
    assert all(x.rule == "IMP-A.E8" for x in hand.lines if x.kind == "cartes")


def test_three_players_sevens_are_not_honours() -> None:
    # M holds the sixes, the dealer the sevens and turns 7♠: no jeton, no carré of sevens.
    m = match_of(options={"players": 3})
    m.start_hand(2, deal3(P3_E, P3_D, P3_M, "7S"))
    assert lines_of(m) == [
        (0, "quatrieme-majeure", (2, 0), "IMP-A.E2"),
        (0, "carre", (1, 0), "IMP-A.E2"),  # aces
        (1, "carre", (1, 0), "IMP-A.E2"),  # sixes
        (0, "point", (0, 1), "IMP-A.E5"),
    ]


def test_three_players_cartes_blanches_of_the_dealer() -> None:
    # The dealer holds no figure: his cartes blanches, then his carré of sixes (the turned
    # 6♠ among them); the coup stops after E3.
    m = match_of(options={"players": 3, "target_fiches": 10}, start=((0, 4), (0, 0), (0, 0)))
    m.start_hand(
        2,
        deal3(
            P3_E,
            "7S 7H 7D 7C JH QH KH JD QD KD JC QC",
            "6S 6H 6D 6C 8H 9H 10H 8D 9D 10D 8C 9C",
            "6S",
        ),
    )
    assert keys(m.results[-1].lines) == [
        (2, "retourne", (0, 1), "IMP-A.E1"),
        (0, "quatrieme-majeure", (2, 0), "IMP-A.E2"),  # the dealer keeps his protected jeton
        (0, "carre", (1, 0), "IMP-A.E2"),
        (2, "cartes-blanches", (2, 0), "IMP-A.E3"),
        (0, "effacement", (0, -4), "IMP-A.EFFACEMENT"),
        (2, "carre", (1, 0), "IMP-A.E3"),
    ]
    assert m.results[-1].actions == [] and m.to_act() == ()
    assert m.scores == [(3, 0), (0, 0), (3, 1)] and m.expected_dealer() == 0


# E: 9♥ 10♥ and all the clubs; M: no hearts, no clubs, four trumps with K♠; D: hearts on
# both sides of 10♥ and the other trumps (8♠ turned).
P3_PLAY_E = "9H 10H 6C 7C 8C 9C 10C JC QC KC AC 6D"
P3_PLAY_M = "KS 6S 7S 9S 7D 8D 9D 10D JD QD KD AD"
P3_PLAY_D = "8S 10S JS QS AS 6H 7H 8H JH QH KH AH"


@pytest.mark.parametrize(
    ("options", "lead", "ruff", "legal"),
    [
        ({}, "10H", "6S", "6H 7H 8H JH QH KH AH"),  # ruffed: any heart
        ({"force_after_ruff": True}, "10H", "6S", "JH QH KH AH"),  # ... or beat 10♥
        ({}, "AC", "6S", "8S 10S JS QS AS"),  # must overtrump
        ({}, "AC", "KS", P3_PLAY_D),  # cannot overtrump: free
        ({"undertrump_duty": True}, "AC", "KS", "8S 10S JS QS AS"),  # ... or undertrump
    ],
)
def test_three_player_obligations(
    options: dict[str, Any], lead: str, ruff: str, legal: str
) -> None:
    m = match_of(options={"players": 3, **options})
    m.start_hand(2, deal3(P3_PLAY_E, P3_PLAY_M, P3_PLAY_D, "8S"))
    m.apply(0, play(lead))
    assert m.legal_actions(1) == sorted(play(c) for c in ["KS", "6S", "7S", "9S"])  # must trump
    m.apply(1, play(ruff))
    assert m.legal_actions(2) == sorted(play(c) for c in legal.split())


def test_three_player_refusals() -> None:
    m = match_of(options={"players": 3})
    m.start_hand(2, deal3(P3_PLAY_E, P3_PLAY_M, P3_PLAY_D, "8S"))
    m.apply(0, play("AC"))
    with pytest.raises(IllegalAction) as exc:
        m.apply(1, play("7D"))
    assert (exc.value.code, exc.value.rule) == ("must-trump", "IMP-A.PLAY")
    assert exc.value.reason == "seat 1 is void in clubs and must trump; legal: 6S 7S 9S KS"
    m.apply(1, play("6S"))
    with pytest.raises(IllegalAction) as exc:
        m.apply(2, play("6H"))
    assert (exc.value.code, exc.value.rule) == ("must-overtrump", "IMP-A.PLAY")


def test_three_player_first_lead_trump() -> None:
    m = match_of(options={"players": 3, "three_player_first_lead_trump": True})
    m.start_hand(2, P3)
    assert m.legal_actions(0) == sorted(
        play(c) for c in ["KS", "QS", "JS", "AS", "10S", "9S", "8S"]
    )
    with pytest.raises(IllegalAction) as exc:
        m.apply(0, play("AH"))
    assert (exc.value.code, exc.value.rule) == ("first-lead-trump", "IMP-A.3P")
    m.apply(0, play("8S"))
    m.apply(1, play("7S"))
    m.apply(2, play("6S"))
    # Later leads are free: E took the trick and may lead any of his eleven cards.
    assert m.to_act() == (0,) and len(m.legal_actions(0)) == 11
    # Without trumps the first lead is free.
    m = match_of(options={"players": 3, "three_player_first_lead_trump": True})
    m.start_hand(2, deal3(P3_PLAY_E, P3_PLAY_M, P3_PLAY_D, "8S"))
    assert len(m.legal_actions(0)) == 12


def test_three_player_point_by_count_or_pips() -> None:
    # With 36 cards four low cards (6 7 8 9: 30) beat three high ones (A K Q: 31) by count
    # but not by pips. E and D tie at four cards worth 30: E, the earlier seat, wins.
    e = "6H 7H 8H 9H 9S 10S JS 9C 10C JC 10D AD"
    mm = "AS KS QS 10H JH QH JD QD KD QC KC AC"
    d = "6D 7D 8D 9D KH AH 6S 7S 8S 6C 7C 8C"
    for rule, seat, note in (
        ("count_then_pips", 0, "4 hearts worth 30, against seat 1: 3 spades worth 31, "
         "seat 2: 4 diamonds worth 30"),
        ("pips", 1, "3 spades worth 31, against seat 0: 4 hearts worth 30, "
         "seat 2: 4 diamonds worth 30"),
    ):  # fmt: skip
        m = match_of(options={"players": 3, "point_rule": rule})
        m.start_hand(2, deal3(e, mm, d, "8S"))
        point = [x for x in hand_of(m).lines if x.kind == "point"]
        assert [(x.seat, x.rule) for x in point] == [(seat, "IMP-A.E5")]
        assert point[0].note.startswith(note)


# --- refusals -------------------------------------------------------------------------------


def test_refusals_name_their_rule() -> None:
    m = match_of(start=B_START)
    m.start_hand(1, B_DEAL)
    with pytest.raises(NotYourTurn) as nyt:
        m.apply(1, play("AS"))
    assert nyt.value.rule == "IMP-A.PLAY"
    m.apply(0, play("10S"))
    cases = [
        ("9H", "must-follow", "seat 1 must follow spades (trump led)"),
        ("9S", "must-beat", "seat 1 must play a trump above 10S when able"),
        ("KH", "not-held", "seat 1 does not hold KH"),
    ]
    for card, code, reason in cases:
        with pytest.raises(IllegalAction) as exc:
            m.apply(1, play(card))
        assert (exc.value.code, exc.value.rule) == (code, "IMP-A.PLAY")
        assert exc.value.reason == f"{reason}; legal: JS AS"
        assert exc.value.legal == (play("JS"), play("AS"))
        assert str(exc.value).endswith("[IMP-A.PLAY]")
    m.apply(1, play("AS"))
    m.apply(1, play("9S"))  # D won with A♠ and leads
    with pytest.raises(IllegalAction) as exc:
        m.apply(0, play("9D"))
    assert exc.value.code == "must-follow"
    assert exc.value.reason == "seat 0 must follow spades (trump led); legal: QS KS"


def test_moderne_refusals() -> None:
    m = match_of("moderne")
    m.start_hand(1, A_DEAL)
    m.apply(0, play("AS"))
    with pytest.raises(IllegalAction) as exc:
        m.apply(1, play("7S"))
    assert (exc.value.code, exc.value.rule) == ("must-beat", "IMP-M.PLAY")
    assert exc.value.reason == "seat 1 must beat AS when able; legal: QS"
    m.apply(1, play("QS"))
    m.apply(1, play("KD"))
    with pytest.raises(IllegalAction) as exc:
        m.apply(0, play("8S"))
    assert (exc.value.code, exc.value.rule) == ("must-follow", "IMP-M.PLAY")
    m = match_of("moderne")
    m.start_hand(1, A_DEAL)
    run(m, A_PLAY[:6])
    m.apply(0, play("10S"))  # D is void in spades and holds J♥ 8♥
    with pytest.raises(IllegalAction) as exc:
        m.apply(1, play("KD"))
    assert (exc.value.code, exc.value.rule) == ("must-trump", "IMP-M.PLAY")
    assert exc.value.reason == "seat 1 is void in spades and must trump; legal: 8H JH"


def test_other_actions_and_payloads() -> None:
    m = match_of(start=B_START)
    m.start_hand(1, B_DEAL)
    with pytest.raises(IllegalAction) as exc:
        m.apply(0, encode(BID, 1))
    assert (exc.value.code, exc.value.rule) == ("wrong-action", "IMP-A.PLAY")
    with pytest.raises(InvalidAction):
        m.apply(0, encode(PLAY, 60))


# --- dealing -------------------------------------------------------------------------------


def test_deal_deck_two_players() -> None:
    deck = list(iter_cards(PACK_32))
    for packet in (3, 4):
        m = match_of(options={"packet": packet})
        deal = m.deal_deck(1, deck)
        # Packets alternately from seat 0 (after dealer 1); the 25th card is the retourne.
        for i in range(24):
            seat = (i // packet) % 2
            assert deal.hands[seat] >> deck[i] & 1
        assert deal.retourne == deck[24] and deal.talon == tuple(deck[25:])
        m.start_hand(1, deal)
    with pytest.raises(DealError) as exc:
        match_of().deal_deck(0, deck[:31])
    assert (exc.value.code, exc.value.rule) == ("deck-size", "IMP-A.E1")
    with pytest.raises(DealError) as exc:
        match_of("moderne").deal_deck(0, list(iter_cards(PACK_36)))
    assert (exc.value.code, exc.value.rule) == ("card-not-in-pack", "IMP-M.RETOURNE")
    with pytest.raises(DealError) as exc:
        match_of().deal_deck(2, deck)
    assert exc.value.code == "bad-dealer"


def test_deal_deck_three_players() -> None:
    deck = list(iter_cards(PACK_36))
    for packet in (3, 4):
        m = match_of(options={"players": 3, "packet": packet})
        for dealer in (0, 1, 2):
            deal = m.deal_deck(dealer, deck)
            for i in range(36):
                assert deal.hands[(dealer + 1 + i // packet) % 3] >> deck[i] & 1
            # The 36th card is the dealer's last, his retourne; no talon.
            assert deal.retourne == deck[35] and deal.hands[dealer] >> deck[35] & 1
            assert deal.talon == ()
        m.start_hand(2, m.deal_deck(2, deck))
        assert hand_of(m).trump == deck[35] // 13


def test_deal_checks_two_players() -> None:
    good = B_DEAL
    bad = [
        (Deal(good.hands, -1, (*good.talon, good.retourne)), "deal-shape"),
        (Deal(good.hands, good.retourne, good.talon[:6]), "deal-shape"),
        (Deal(good.hands, good.retourne, (*good.talon[:6], good.talon[0])), "duplicate-card"),
        (Deal(good.hands, good.retourne, (*good.talon[:6], parse_card("6S"))), "card-not-in-pack"),
        (Deal((good.hands[0], good.hands[1] ^ mask("9H")), good.retourne, good.talon), "hand-size"),
        (Deal(good.hands[:1], good.retourne, good.talon), "deal-hands"),
    ]
    for deal, code in bad:
        with pytest.raises(DealError) as exc:
            match_of().start_hand(1, deal)
        assert (exc.value.code, exc.value.rule) == (code, "IMP-A.E1"), code
    with pytest.raises(DealError) as exc:
        match_of("moderne").start_hand(1, Deal(good.hands, good.retourne, good.talon[:6]))
    assert exc.value.rule == "IMP-M.RETOURNE"
    assert "talon of 7 cards (6 given)" in exc.value.message


def test_deal_checks_three_players() -> None:
    m = match_of(options={"players": 3})
    with pytest.raises(DealError) as exc:
        m.start_hand(1, P3)  # 6♠ is seat 2's card, not the dealer's
    assert (exc.value.code, exc.value.rule) == ("retourne-not-dealers", "IMP-A.3P")
    with pytest.raises(DealError) as exc:
        m.start_hand(2, Deal(P3.hands, P3.retourne, (parse_card("6S"),)))
    assert (exc.value.code, exc.value.rule) == ("deal-shape", "IMP-A.3P")
    with pytest.raises(DealError) as exc:
        m.start_hand(2, Deal(P3.hands))
    assert exc.value.code == "deal-shape"
    with pytest.raises(DealError) as exc:
        m.start_hand(2, Deal((P3.hands[0], P3.hands[1], P3.hands[2] ^ mask("QC")), P3.retourne))
    assert exc.value.code == "hand-size"
    m.start_hand(2, P3)
    assert m.hand is not None and m.hand.dealer == 2


def test_dealer_rotation_rule_ids() -> None:
    for ruleset, rule in (("academie", "IMP-A.E1"), ("moderne", "IMP-M.RETOURNE")):
        m = match_of(ruleset, start=((0, 0), (0, 0)))
        m.start_hand(1, A_DEAL)
        run(m, A_PLAY)
        with pytest.raises(DealError) as exc:
            m.start_hand(1, A_DEAL)
        assert (exc.value.code, exc.value.rule) == ("dealer-rotation", rule)
        m.start_hand(0, Deal((A_DEAL.hands[1], A_DEAL.hands[0]), A_DEAL.retourne, A_DEAL.talon))


# --- options and the registry --------------------------------------------------------------

ACADEMIE_DEFAULTS = {
    "players": 2,
    "target_fiches": 5,
    "point_rule": "count_then_pips",
    "imperiales_before_point": True,
    "trump_major_value": 2,
    "imperiale_de_retourne": False,
    "imperiale_tombee": False,
    "tombee_requires_capture": True,
    "cartes_blanches": True,
    "effacement": True,
    "protect_retourne": True,
    "blanches_erase": True,
    "optional_erase": True,
    "capot_fiches": 2,
    "packet": 3,
    "undertrump_duty": False,
    "force_after_ruff": False,
    "three_player_first_lead_trump": False,
    "allow_overlap": True,
}
MODERNE_DEFAULTS = {
    "players": 2,
    "target_fiches": 3,
    "point_rule": "pips",
    "imperiales_before_point": False,
    "tournee_holder": "any",
    "tombee_mode": "per_trick",
    "cards_scoring": "flat_first_to_six",
    "effacement": False,
    "allow_overlap": True,
    "honour_timing": "per_trick",
}


def test_registry_and_defaults() -> None:
    spec = find_game("imperiale")
    assert spec.title == "L'Impériale" and spec.seed == "001" and spec.fixed_players is None
    assert list(spec.rulesets) == ["academie", "moderne"] and spec.default_ruleset == "academie"
    assert spec.units == ("imperiales", "jetons") and ImperialeMatch.units == spec.units
    assert find_game("impériale") is spec
    rules = make_rules("imperiale")
    assert rules.ruleset == "academie" and rules.players == 2
    assert rules.option_values() == ACADEMIE_DEFAULTS
    assert make_rules("imperiale", "moderne").option_values() == MODERNE_DEFAULTS
    assert make_rules("imperiale", players=3).players == 3
    assert isinstance(rules.options, ImperialeAcademieOptions)
    assert isinstance(make_rules("imperiale", "moderne").options, ImperialeModerneOptions)
    m = match_of(options={"undertrump_duty": True, "players": 3})
    assert m.trick_rules == TrickRules(Regime.IMPERIALE_1725, R1, True, False)
    assert match_of("moderne").trick_rules == TrickRules(Regime.FORCEE, R1)


@pytest.mark.parametrize(
    ("ruleset", "options", "key"),
    [
        ("academie", {"players": 4}, "players"),
        ("academie", {"players": 1}, "players"),
        ("moderne", {"players": 3}, "players"),
        ("academie", {"target_fiches": 0}, "target_fiches"),
        ("moderne", {"target_fiches": 0}, "target_fiches"),
        ("academie", {"trump_major_value": 3}, "trump_major_value"),
        ("academie", {"trump_major_value": True}, "trump_major_value"),
        ("academie", {"packet": 2}, "packet"),
        ("academie", {"capot_fiches": -1}, "capot_fiches"),
        ("academie", {"three_player_first_lead_trump": True}, "three_player_first_lead_trump"),
        ("academie", {"players": 3, "imperiale_de_retourne": True}, "imperiale_de_retourne"),
        ("academie", {"point_rule": "count"}, "point_rule"),
        ("academie", {"effacement": "yes"}, "effacement"),
        ("academie", {"tombee_mode": "off"}, "tombee_mode"),
        ("moderne", {"imperiale_tombee": True}, "imperiale_tombee"),
        ("moderne", {"tombee_mode": "sometimes"}, "tombee_mode"),
        ("moderne", {"packet": 4}, "packet"),
    ],
)
def test_bad_options(ruleset: str, options: dict[str, Any], key: str) -> None:
    with pytest.raises(RulesError) as exc:
        make_rules("imperiale", ruleset, options)
    assert exc.value.key == key and key in str(exc.value)


def test_players_must_agree_with_the_names() -> None:
    with pytest.raises(RulesError) as exc:
        make_rules("imperiale", "academie", {"players": 2}, 3)
    assert exc.value.key == "players"
    with pytest.raises(RulesError):
        make_rules("imperiale", "moderne", None, 3)


# --- views and the deal's description ---------------------------------------------------------


def test_view_and_describe() -> None:
    m = match_of(start=B_START)
    m.start_hand(1, B_DEAL)
    view = m.view(1)
    assert view is not None
    assert view.phase == "play" and view.to_act == (0,) and view.legal == ()
    assert view.trump == 0 and view.hand == B_DEAL.hands[1]
    assert view.public["retourne"] == "7S"
    assert view.public["point"] == 1 and view.public["trick_number"] == 1
    # E's hearts quatrième was shown; D saw it, and E sees D's diamonds (the Point).
    assert view.known == {0: mask("JH QH KH AH")}
    view0 = m.view(0)
    assert view0 is not None and view0.known == {1: mask("QD JD AD 10D 8D 7D")}
    assert view0.legal == tuple(sorted(play(c) for c in B_DEAL_E))
    spectator = m.view(None)
    assert spectator is not None and spectator.hand == 0 and spectator.legal == ()
    assert set(spectator.known) == {0, 1}
    m.apply(0, play("KS"))
    view = m.view(1)
    assert view is not None and view.trick == ((0, parse_card("KS")),)
    assert view.known[0] == mask("JH QH KH AH")  # K♠ was never shown
    run(m, B_PLAY[1:])
    assert hand_of(m).describe() == [
        "retourne 7S: trump spades",
        "the point: seat 1",
        "tricks: seat 0 9, seat 1 3",
    ]


B_DEAL_E = ["KH", "QH", "JH", "AH", "7H", "KS", "QS", "10S", "KC", "QC", "8C", "9D"]


# --- random playouts ---------------------------------------------------------------------------


def reference_legal(hand: int, trick: Sequence[tuple[int, int]], trump: int, opts: Any) -> int:
    """LEGAL_IMP1725 (RULES.md 2.1), written apart from the engine: the R1 strength of a
    card is its position in `R1_ORDER`."""
    if not trick:
        return hand
    led = trick[0][1] // 13

    def suit(s: int) -> list[int]:
        return [c for c in iter_cards(hand) if c // 13 == s]

    def strength(c: int) -> int:
        return R1_ORDER.index(c % 13)

    def above(cards: list[int], best: int | None) -> list[int]:
        return cards if best is None else [c for c in cards if strength(c) > strength(best)]

    def best_of(s: int) -> int | None:
        on = [c for _, c in trick if c // 13 == s]
        return max(on, key=strength) if on else None

    hl, ht = suit(led), suit(trump)
    whole = list(iter_cards(hand))
    if led == trump:
        out = (above(ht, best_of(trump)) or ht) if ht else whole
    elif hl:
        ruffed = best_of(trump) is not None
        if ruffed and not opts.get("force_after_ruff", False):
            out = hl
        else:
            out = above(hl, best_of(led)) or hl
    elif ht:
        if best_of(trump) is None:
            out = ht
        else:
            up = above(ht, best_of(trump))
            out = up or (ht if opts.get("undertrump_duty", False) else whole)
    else:
        out = whole
    return sum(1 << c for c in out)


R1_ORDER = [0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 9, 10, 11]  # ranks low to high: ... 10 A J Q K


class Reference:
    """The score keeping of RULES.md 2.1 (`award_jetons`, `award_fiches`) and the event
    order of sections 1.1, 2.1 and 7, for the default options of each ruleset (plus
    `effacement` and `protect_retourne`), written apart from the engine."""

    def __init__(self, moderne: bool, players: int, opts: dict[str, Any]) -> None:
        self.moderne = moderne
        self.n = players
        self.opts = opts
        self.target = opts.get("target_fiches", 3 if moderne else 5)
        self.effacement = opts.get("effacement", not moderne)
        self.protect = opts.get("protect_retourne", True) and not moderne

    def score(self, result: HandResult, start: Sequence[tuple[int, int]]) -> list[Line]:
        n, deal, dealer = self.n, result.deal, result.dealer
        self.fiches = [f for f, _ in start]
        self.jetons = [j for _, j in start]
        self.protected = [0] * n
        self.pre_point = True
        self.lines: list[Line] = []
        self.won_by = -1
        m = self.moderne
        trump = deal.retourne // 13
        low = 4 if n == 3 else 5  # rank index of the 6 or the 7
        honours = [trump * 13 + r for r in (low, 9, 10, 11, 12)]
        majors = honours[1:]
        order = [(dealer + 1 + k) % n for k in range(n)]
        ids = (
            ("IMP-M.RETOURNE", "IMP-M.IMPERIALES", "IMP-M.COULEUR", "IMP-M.HONNEURS")
            if m
            else ("IMP-A.E1", "IMP-A.E2", "IMP-A.E5", "IMP-A.E6")
        )

        def events() -> None:
            # E1 / retourne
            if deal.retourne in honours:
                before = self.fiches[dealer]
                self.jet(dealer, 1, "retourne", ids[0])
                if self.protect and self.fiches[dealer] == before:
                    self.protected[dealer] = 1
                if self.won_by >= 0:
                    return
            steps = ["point", "imp"] if m else ["imp", "point"]
            blanches = False
            for step in steps:
                if step == "imp":
                    for seat in order:
                        h = deal.hands[seat]
                        rule = ids[1] if m or seat != dealer else "IMP-A.E3"
                        if not m and not any(c % 13 in (9, 10, 11) for c in iter_cards(h)):
                            blanches = True
                            self.fic(seat, 2, "cartes-blanches", rule)
                            if self.won_by >= 0:
                                return
                        for kind, value in self.imperiales(h, trump, low, deal.retourne):
                            self.fic(seat, value, kind, rule)
                            if self.won_by >= 0:
                                return
                    if blanches:
                        return
                else:
                    self.pre_point = False
                    self.protected = [0] * n
                    best, who = (-1, -1), -1
                    for seat in order:
                        per_suit = [
                            [c for c in iter_cards(deal.hands[seat]) if c // 13 == s]
                            for s in range(4)
                        ]
                        keys_ = [
                            (len(cs), sum(min(10, c % 13 + 2) + (c % 13 == 12) for c in cs))
                            for cs in per_suit
                        ]
                        key = max(keys_) if not m else (0, max(k[1] for k in keys_))
                        if key > best:
                            best, who = key, seat
                    self.jet(who, 1, "couleur" if m else "point", ids[2])
                    if self.won_by >= 0:
                        return
            # the play
            tricks_won = [0] * n
            first_six = -1
            for t in result.tricks:
                tricks_won[t.winner] += 1
                if tricks_won[t.winner] == 6 and first_six < 0:
                    first_six = t.winner
                win_card = t.cards[t.seats.index(t.winner)]
                in_majors = [c for c in t.cards if c in majors]
                if m and win_card in majors and len(in_majors) >= 2:
                    self.fic(t.winner, 1, "imperiale-tombee", "IMP-M.TOMBEE")
                else:
                    count = sum(1 for c in t.cards if c in honours)
                    if count:
                        self.jet(t.winner, count, "honneurs", ids[3])
                if self.won_by >= 0:
                    return
            if len(result.tricks) < 12:
                return
            if m:
                seat = next((s for s in order if tricks_won[s] > 6), first_six)
                self.jet(seat, 1, "cartes", "IMP-M.CARTES")
                return
            capot = [s for s in order if tricks_won[s] == 12]
            if capot:
                self.fic(capot[0], 2, "capot", "IMP-A.E8")
                return
            par = 4 if n == 3 else 6
            for seat in order:
                if tricks_won[seat] > par:
                    self.jet(seat, tricks_won[seat] - par, "cartes", "IMP-A.E8")
                    if self.won_by >= 0:
                        return

        events()
        return self.lines

    def imperiales(self, h: int, trump: int, low: int, retourne: int) -> list[tuple[str, int]]:
        held = set(iter_cards(h))
        out: list[tuple[str, int]] = []
        quatriemes = [s for s in range(4) if all(s * 13 + r in held for r in (9, 10, 11, 12))]

        def carre(r: int) -> bool:
            return all(s * 13 + r in held for s in range(4))

        if self.moderne:
            out += [("imperiale-des-honneurs", 1) for r in (11, 10, 9, 12, 5) if carre(r)]
            out += [("imperiale-de-couleur", 1) for _ in quatriemes]
            r = retourne % 13
            rest = [trump * 13 + x for x in (9, 10, 11, 12) if x != r]
            if r in (9, 10, 11, 12) and all(c in held for c in rest):
                out.append(("imperiale-tournee", 1))
            return out
        out += [("quatrieme-majeure", 2 if s == trump else 1) for s in quatriemes]
        out += [("carre", 1) for r in (9, 10, 11, 12, low) if carre(r)]
        return out

    def add(self, seat: int, kind: str, delta: tuple[int, int], rule: str) -> None:
        self.lines.append((seat, kind, delta, rule))
        self.fiches[seat] += delta[0]
        self.jetons[seat] += delta[1]

    def jet(self, p: int, count: int, kind: str, rule: str) -> None:
        self.add(p, kind, (0, count), rule)
        if self.jetons[p] >= 6:
            k = self.jetons[p] // 6
            self.protected[p] = 0
            self.add(p, "conversion", (k, -6 * k), rule)
            self.won(p)

    def fic(self, p: int, k: int, kind: str, rule: str) -> None:
        self.add(p, kind, (k, 0), rule)
        self.won(p)

    def won(self, p: int) -> None:
        if self.effacement:
            for step in range(1, self.n):
                o = (p + step) % self.n
                keep = self.protected[o] if (self.protect and self.pre_point) else 0
                if self.jetons[o] > keep:
                    self.add(o, "effacement", (0, keep - self.jetons[o]), "IMP-A.EFFACEMENT")
        if self.fiches[p] >= self.target and self.won_by < 0:
            self.won_by = p


# (ruleset, players, options); the first ones are checked line by line by `Reference`.
PLAYOUTS: list[tuple[str, int, dict[str, Any]]] = [
    ("academie", 2, {}),
    ("academie", 3, {}),
    ("academie", 2, {"protect_retourne": False, "target_fiches": 3}),
    ("academie", 3, {"effacement": False, "target_fiches": 2}),
    ("moderne", 2, {}),
    ("moderne", 2, {"effacement": True, "target_fiches": 5}),
    # Every other option: invariants only.
    ("academie", 2, {"imperiale_tombee": True, "imperiale_de_retourne": True, "packet": 4}),
    ("academie", 2, {"allow_overlap": False, "imperiales_before_point": False}),
    ("academie", 2, {"point_rule": "pips", "trump_major_value": 1, "capot_fiches": 0}),
    ("academie", 2, {"cartes_blanches": False, "blanches_erase": False, "optional_erase": False}),
    (
        "academie",
        3,
        {
            "undertrump_duty": True,
            "force_after_ruff": True,
            "three_player_first_lead_trump": True,
            "imperiale_tombee": True,
            "tombee_requires_capture": False,
            "packet": 4,
        },
    ),
    ("moderne", 2, {"tombee_mode": "end_of_coup", "honour_timing": "end_of_coup"}),
    (
        "moderne",
        2,
        {"tombee_mode": "off", "cards_scoring": "per_trick", "point_rule": "count_then_pips"},
    ),
    (
        "moderne",
        2,
        {"imperiales_before_point": True, "tournee_holder": "dealer", "allow_overlap": False},
    ),
]
CHECKED_BY_REFERENCE = 6
EVENT_ORDER = {
    "IMP-A.E1": 1,
    "IMP-A.E2": 2,
    "IMP-A.E3": 3,
    "IMP-A.E5": 5,
    "IMP-A.E6": 6,
    "IMP-A.E7": 7,
    "IMP-A.E8": 8,
}


def check_hand(
    m: ImperialeMatch, result: HandResult, before: list[tuple[int, int]], opts: dict[str, Any]
) -> None:
    n = m.players
    target = m.opts.target_fiches
    hand = result.hand
    assert isinstance(hand, ImperialeHand)
    # Each card played once, by the seat that held it.
    seen = 0
    for t in result.tricks:
        for s, c in zip(t.seats, t.cards, strict=True):
            assert result.deal.hands[s] >> c & 1 and not seen >> c & 1
            seen |= 1 << c
    # Jetons 0-5 between events (a line may reach 6 only when a conversion follows),
    # fiches never decrease, effacement only removes jetons, nobody passes the target
    # before the last fiche line.
    scores = [list(s) for s in before]
    lines = result.lines
    for i, x in enumerate(lines):
        assert x.delta[0] >= 0
        if x.kind == "effacement":
            assert x.delta[0] == 0 and x.delta[1] < 0 and x.rule == "IMP-A.EFFACEMENT"
        if any(s[0] >= target for s in scores):
            assert x.kind == "effacement", "scored after the target"
        scores[x.seat][0] += x.delta[0]
        scores[x.seat][1] += x.delta[1]
        nxt = lines[i + 1] if i + 1 < len(lines) else None
        if scores[x.seat][1] >= 6:
            assert nxt is not None and nxt.kind == "conversion" and nxt.seat == x.seat
        else:
            assert all(0 <= s[1] <= 5 for s in scores)
        if x.kind == "conversion":
            assert x.delta == (1, -6)
    assert [tuple(s) for s in scores] == list(result.scores_after)
    # Académie events strictly in order (with the default announcement order).
    if m.rules.ruleset == "academie" and opts.get("imperiales_before_point", True):
        events = [EVENT_ORDER[x.rule] for x in lines if x.rule in EVENT_ORDER]
        assert events == sorted(events)
    # The target: the hand stops at it, and only then early.
    reached = [s for s in range(n) if scores[s][0] >= target]
    if reached:
        assert reached == [hand.winner] and m.finished and m.winners == (hand.winner,)
        last_fiche = max(i for i, x in enumerate(lines) if x.delta[0] > 0)
        assert lines[last_fiche].seat == hand.winner
        assert all(x.kind == "effacement" for x in lines[last_fiche + 1 :])
    else:
        assert hand.winner < 0 and not m.finished
        assert len(result.tricks) == 12 or hand.blanches
    if hand.blanches:
        # E4: no play; no Point either, unless it came before the impériales.
        assert result.actions == [] and result.tricks == []
        if opts.get("imperiales_before_point", True):
            assert not any(x.rule == "IMP-A.E5" for x in lines)


def random_match(
    ruleset: str, players: int, opts: dict[str, Any], rng: random.Random
) -> tuple[ImperialeMatch, list[tuple[int, Deal]], list[list[tuple[int, int]]]]:
    m = match_of(ruleset, {**opts, "players": players} if ruleset == "academie" else opts)
    pack = list(iter_cards(m.pack))
    deals: list[tuple[int, Deal]] = []
    plays: list[list[tuple[int, int]]] = []
    reference = Reference(ruleset == "moderne", players, opts)
    while not m.finished:
        dealer = m.expected_dealer()
        dealer = rng.randrange(players) if dealer is None else dealer
        rng.shuffle(pack)
        deal = m.deal_deck(dealer, pack)
        before = list(m.scores)
        deals.append((dealer, deal))
        m.start_hand(dealer, deal)
        actions: list[tuple[int, int]] = []
        while m.to_act():
            seat, legal, view = one_to_act(m)
            got = sum(1 << (a >> 3) for a in legal)
            hand = hand_of(m)
            if not (hand.tricks == [] and not view.trick and hand.first_lead_trump):
                assert got == reference_legal(view.hand, view.trick, view.trump, opts)
            action = rng.choice(legal)
            m.apply(seat, action)
            actions.append((seat, action))
        plays.append(actions)
        result = m.results[-1]
        check_hand(m, result, before, opts)
        if PLAYOUTS.index((ruleset, players, opts)) < CHECKED_BY_REFERENCE:
            assert keys(result.lines) == reference.score(result, before)
        assert len(m.results) < 200
    return m, deals, plays


@pytest.mark.parametrize("index", range(len(PLAYOUTS)))
def test_random_playouts(index: int) -> None:
    ruleset, players, opts = PLAYOUTS[index]
    rng = random.Random(f"imperiale-{index}")
    for _ in range(5):
        m, deals, plays = random_match(ruleset, players, opts, rng)
        assert m.finished and len(m.winners) == 1
        (w,) = m.winners
        assert m.scores[w][0] >= m.opts.target_fiches
        assert all(s[0] < m.opts.target_fiches for i, s in enumerate(m.scores) if i != w)
        # Replay: live with events, then the fast path without.
        assert [len(actions) for actions in plays] == [len(r.actions) for r in m.results]
        assert_replay_equals_live(m, deals, [a for actions in plays for a in actions])
        # The record round-trips byte for byte and verifies.
        back, _ = assert_record_round_trips(m, "imperiale playout")
        doc = score_json(back)
        assert doc["finished"] is True and doc["winners"] == list(m.winners)
        assert [(s["imperiales"], s["jetons"]) for s in doc["scores"]] == m.scores


def test_playout_reference_agrees_on_the_examples() -> None:
    # The independent scorer reproduces the worked examples too.
    m = match_of(start=B_START)
    m.start_hand(1, B_DEAL)
    run(m, B_PLAY)
    assert Reference(False, 2, {}).score(m.results[-1], list(B_START)) == b_lines(True)
    m = match_of("moderne")
    m.start_hand(1, A_DEAL)
    run(m, A_PLAY)
    assert Reference(True, 2, {}).score(m.results[-1], [(0, 0), (0, 0)]) == keys(
        m.results[-1].lines
    )


# --- only the carrés RULES.md names are impériales (2.1 E2 (b), E3 (c)) -------------------

RANKS_32 = ("7", "8", "9", "10", "J", "Q", "K", "A")
RANKS_36 = ("6", *RANKS_32)
MAJORS = {s: mask(f"J{s} Q{s} K{s} A{s}") for s in "SHDC"}


def four_of(rank: str) -> int:
    return mask(" ".join(f"{rank}{s}" for s in "SHDC"))


def groups_in(hand: int) -> set[int]:
    """The carrés of any rank and the J Q K A of any suit that `hand` holds whole (found
    here, not by the engine)."""
    groups = [four_of(r) for r in RANKS_36] + list(MAJORS.values())
    return {g for g in groups if hand & g == g}


def deal_around(
    seed: str, pack: int, fixed: Sequence[int], keep_out: int = 0
) -> tuple[list[int], list[int]]:
    """Twelve cards for each seat, `fixed[seat]` among them, the others from `pack` at random
    so that no seat holds a carré or a J Q K A but those of its fixed cards, nor three cards of
    `keep_out`; and the cards left, in order."""
    rng = random.Random(seed)
    rest = list(iter_cards(pack & ~sum(fixed)))
    while True:
        rng.shuffle(rest)
        hands, at = [], 0
        for f in fixed:
            n = 12 - f.bit_count()
            hands.append(f | sum(1 << c for c in rest[at : at + n]))
            at += n
        if all(
            groups_in(h) == groups_in(f) and (h & keep_out).bit_count() < 3
            for h, f in zip(hands, fixed, strict=True)
        ):
            return hands, rest[at:]


@pytest.mark.parametrize("suit", ["S", "H", "D", "C"])
@pytest.mark.parametrize("rank", RANKS_32)
def test_imperiale_de_retourne_only_for_a_carre_that_is_an_imperiale(rank: str, suit: str) -> None:
    # D holds the three other cards of the retourne's rank and no other three of an
    # impériale; E has 2 jetons that the impériale de retourne's fiche erases.
    retourne = parse_card(f"{rank}{suit}")
    three = four_of(rank) & ~(1 << retourne)
    (e, d), rest = deal_around(rank + suit, PACK_32 & ~(1 << retourne), [0, three], MAJORS[suit])
    m = match_of(options={"imperiale_de_retourne": True}, start=((0, 2), (0, 0)))
    m.start_hand(1, Deal((e, d), retourne, tuple(rest)))
    lines = lines_of(m)
    is_imperiale = rank in ("J", "Q", "K", "A", "7")
    fiche = [(1, "imperiale-de-retourne", (1, 0), "IMP-A.E3")]
    erased = [(0, "effacement", (0, -2), "IMP-A.EFFACEMENT")]
    assert [x for x in lines if x[1] == "imperiale-de-retourne"] == (fiche if is_imperiale else [])
    assert [x for x in lines if x[1] == "effacement"] == (erased if is_imperiale else [])
    assert not [x for x in lines if x[1] in ("carre", "quatrieme-majeure")]


@pytest.mark.parametrize("rank", RANKS_32)
def test_imperiale_de_retourne_by_the_trump_quatrieme(rank: str) -> None:
    # D holds three of the trump J Q K A: the three others when the retourne is one of them,
    # else J Q K. Only a turned J, Q, K or A completes the quatrième, and it scores once.
    retourne = parse_card(f"{rank}H")
    majors = MAJORS["H"]
    three = majors & ~(1 << retourne) if majors >> retourne & 1 else mask("JH QH KH")
    keep_out = four_of(rank) & ~(1 << retourne)
    (e, d), rest = deal_around(rank, PACK_32 & ~(1 << retourne), [0, three], keep_out)
    m = match_of(options={"imperiale_de_retourne": True})
    m.start_hand(1, Deal((e, d), retourne, tuple(rest)))
    scored = [x for x in lines_of(m) if x[1] == "imperiale-de-retourne"]
    fiche = [(1, "imperiale-de-retourne", (1, 0), "IMP-A.E3")]
    assert scored == (fiche if rank in ("J", "Q", "K", "A") else [])


@pytest.mark.parametrize(
    ("ruleset", "players", "ranks", "kind"),
    [
        ("academie", 2, RANKS_32, "carre"),
        ("moderne", 2, RANKS_32, "imperiale-des-honneurs"),
        ("academie", 3, RANKS_36, "carre"),
    ],
)
def test_carres_en_main_only_of_the_named_ranks(
    ruleset: str, players: int, ranks: Sequence[str], kind: str
) -> None:
    # E (seat 0) holds four of each rank in turn: J Q K A and the 7 (the 6 with 36 cards)
    # make an impériale, once; the others nothing.
    named = ("J", "Q", "K", "A", "6" if players == 3 else "7")
    pack = PACK_36 if players == 3 else PACK_32
    for rank in ranks:
        fixed = [four_of(rank)] + [0] * (players - 1)
        hands, rest = deal_around(ruleset + rank, pack, fixed)
        if players == 3:  # the dealer's last card is the retourne, kept in his hand
            deal = Deal(tuple(hands), next(iter_cards(hands[2])))
        else:
            deal = Deal(tuple(hands), rest[0], tuple(rest[1:]))
        m = match_of(ruleset, {"players": 3} if players == 3 else {})
        m.start_hand(players - 1, deal)
        got = [x for x in lines_of(m) if x[1] == kind]
        assert [(x[0], x[2]) for x in got] == ([(0, (1, 0))] if rank in named else []), rank


def test_a_record_with_a_carre_of_tens_completed_scores_no_imperiale_de_retourne() -> None:
    # D holds 10H 10D 10C and 10S is turned, imperiale_de_retourne on: the match is played to
    # its end and recorded; the record verifies and its score has no impériale de retourne.
    e = "JS QS KS 7H 8H 9H JH 7D 8D 9D JD 7S"
    d = "10H 10D 10C QH KH AH QD KD AD 7C 8C 9C"
    m = match_of(options={"imperiale_de_retourne": True, "target_fiches": 1})
    m.start_hand(1, deal2(e, d, "10S"))
    play_out(m)
    rng = random.Random(16)
    while not m.finished:
        dealer = m.expected_dealer()
        assert dealer is not None
        deck = list(iter_cards(PACK_32))
        rng.shuffle(deck)
        m.start_hand(dealer, m.deal_deck(dealer, deck))
        play_out(m)
    assert "imperiale-de-retourne" not in [x.kind for x in m.results[0].lines]
    data = canonical_bytes(build_record(m, ["E", "D"], Provenance("test", "carré of tens")))
    result = verify_envelope(envelope(data))
    assert result.ok, result.error
    assert "imperiale-de-retourne" not in str(score_json(decode_record(data)))
