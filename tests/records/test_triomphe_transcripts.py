"""La Triomphe through transcripts and records: example TR-2 and an As qui pille match import
and score exactly as RULES.md section 3 says, golden bytes, `show`, transcripts of every
ruleset × regime × player count written from played matches, tampered records, and the
refusals with their place, reason and rule id."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from tapis_cartes.records.codec import decode_record, encode_file, envelope, read_envelopes
from tapis_cartes.records.render import render_record
from tapis_cartes.records.score import score_json
from tapis_cartes.records.transcript import import_transcript
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.engine import make_rules, new_match
from tapis_cartes.referee.engine.actions import action_to_json, encode
from tapis_cartes.referee.engine.cards import card_str, iter_cards, parse_card
from tapis_cartes.referee.engine.triomphe import PACK, TriompheMatch
from tests.commands import DATA
from tests.records.transcripts import load, refused

GOLDEN = ("triomphe-tr2", "triomphe-as-qui-pille")


# --- example TR-2 -------------------------------------------------------------------------


def test_tr2_scores() -> None:
    rec = decode_record(import_transcript(load("triomphe-tr2")))
    scores = score_json(rec)
    assert scores["game"] == "triomphe" and scores["ruleset"] == "equipe"
    assert scores["hands"] == [
        {
            "number": 1,
            "dealer": 1,
            "lines": [
                {"seat": 2, "kind": "vole-failed", "points": -2, "rule": "TRI.VOLE"},
                {"seat": 3, "kind": "vole-failed", "points": -2, "rule": "TRI.VOLE"},
            ],
            "scores_after": [{"points": 2}, {"points": 2}, {"points": -1}, {"points": -1}],
        }
    ]
    # X (A, B) unchanged at 2; Y (C, D) 1 - 2 = -1.
    assert scores["scores"] == [{"points": 2}, {"points": 2}, {"points": -1}, {"points": -1}]
    assert scores["finished"] is False and scores["winners"] == []
    assert [s.team for s in rec.seats] == [0, 0, 1, 1]
    assert [s.points for s in rec.start.scores] == [2, 2, 1, 1]


def test_tr2_stopped_instead() -> None:
    doc = load("triomphe-tr2")
    actions = doc["hands"][0]["actions"]
    assert actions[12] == {"seat": 2, "vole": "continue"}
    actions[12] = {"seat": 2, "vole": "stop"}
    del actions[13:]
    scores = score_json(decode_record(import_transcript(doc)))
    assert scores["hands"][0]["lines"] == [
        {"seat": 2, "kind": "vole-stop", "points": 1, "rule": "TRI.VOLE"},
        {"seat": 3, "kind": "vole-stop", "points": 1, "rule": "TRI.VOLE"},
    ]
    assert [s["points"] for s in scores["scores"]] == [2, 2, 2, 2]


def test_tr2_next_coup_is_dealt_by_d() -> None:
    doc = load("triomphe-tr2")
    second = copy.deepcopy(doc["hands"][0])
    second["dealer"] = 3
    # Same cards; A (0) leads now and offers at once; C, the first of Y after A, accepts.
    second["actions"] = [{"seat": 0, "abandon": "offer"}, {"seat": 2, "abandon": "accept"}]
    doc["hands"].append(second)
    scores = score_json(decode_record(import_transcript(doc)))
    assert scores["hands"][1]["lines"] == [
        {"seat": 2, "kind": "abandon", "points": 1, "rule": "TRI.ABANDON"},
        {"seat": 3, "kind": "abandon", "points": 1, "rule": "TRI.ABANDON"},
    ]
    assert [s["points"] for s in scores["scores"]] == [2, 2, 0, 0]


def test_tr2_show() -> None:
    data = import_transcript(load("triomphe-tr2"))
    text = render_record(decode_record(data), data)
    assert text.startswith("La Triomphe (equipe): A, B, C, D\n")
    for expected in [
        "Hand 1, dealer B",
        "  trump diamonds (retourne 9D); order K Q J A 10 9 8 7",
        "  teams: team 0 (A, B) v team 1 (C, D); team 0 deals, team 1 leads",
        "  vole: team 1 (C, D) won the first 3 tricks; C continues: the vole is engaged",
        "  talon AS 10S 8S 7S JH 10H 9H 10D JC 8C 7C",
        "   1. C KS   D QD   A 8D   B 9S  -> D",
        "  C: vole continue",
        "   5. C 7H   D 8H   A KH   B AH  -> A",
        "      C: vole-failed -2 points (vole engaged; trick 5 lost to A) [TRI.VOLE]",
        "      D: vole-failed -2 points (vole engaged; trick 5 lost to A) [TRI.VOLE]",
        "start          2      2      1        1",
        "1      B       . = 2  . = 2  -2 = -1  -2 = -1",
    ]:
        assert expected in text.splitlines(), expected


# --- L'As qui pille -----------------------------------------------------------------------


def test_as_qui_pille_scores_and_pillage() -> None:
    rec = decode_record(import_transcript(load("triomphe-as-qui-pille")))
    scores = score_json(rec)
    assert [h["lines"] for h in scores["hands"]] == [
        [{"seat": 1, "kind": "point", "points": 1, "rule": "TRI.POINT"}],
        [{"seat": 0, "kind": "vole-stop", "points": 1, "rule": "TRI.VOLE"}],
    ]
    assert [s["points"] for s in scores["scores"]] == [1, 1, 0]
    assert [h["dealer"] for h in scores["hands"]] == [2, 0]
    # Hand 2 came as a pack: the record keeps it, and the deal it gives.
    assert len(rec.hands[1].deal.deck) == 32
    assert card_str(rec.hands[1].deal.retourne) == "AS"
    assert all(s.team == 0 for s in rec.seats)


def test_as_qui_pille_show() -> None:
    data = import_transcript(load("triomphe-as-qui-pille"))
    text = render_record(decode_record(data), data)
    for expected in [
        "  trump hearts (retourne 9H); order A K Q J 10 9 8 7",
        "  pillage by Bob: shows the trump ace AH; takes 9H, discards 7D; takes 8H, "
        "discards 8C; turns 9S, not a trump",
        "  Bob: pille 7D",
        "  pillage by Ann: turned the trump ace; takes AS, discards 7C; leaves 7S",
        "  Ann: pille stop",
        "  vole: Ann won the first 3 tricks and stops",
        "      Ann: vole-stop +1 point (stopped at 3 tricks to none) [TRI.VOLE]",
    ]:
        assert expected in text.splitlines(), expected


def test_as_qui_pille_deal_and_deck_give_the_same_record_hands() -> None:
    doc = load("triomphe-as-qui-pille")
    rec = decode_record(import_transcript(doc))
    hand2 = rec.hands[1].deal
    # Rebuild the pack of hand 1 from its deal (2 then 3 from the seat after dealer 2).
    deal = doc["hands"][0]["deal"]
    order = [0, 1, 2]
    deck = [c for seat in order for c in deal["hands"][seat][:2]]
    deck += [c for seat in order for c in deal["hands"][seat][2:]]
    deck += [deal["retourne"], *deal["talon"]]
    with_deck = copy.deepcopy(doc)
    del with_deck["hands"][0]["deal"]
    with_deck["hands"][0]["deck"] = deck
    rec2 = decode_record(import_transcript(with_deck))
    assert rec2.hands[0].deal.hands == rec.hands[0].deal.hands
    assert rec2.hands[0].deal.talon == rec.hands[0].deal.talon
    assert score_json(rec2)["scores"] == score_json(rec)["scores"]
    assert list(hand2.talon)[:2] == [parse_card("7S"), parse_card("10D")]


# --- golden bytes and tampering -----------------------------------------------------------


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_bytes(name: str) -> None:
    path = DATA / f"{name}.tapis"
    (env,) = read_envelopes(path)
    assert env.record == import_transcript(load(name), f"{name}.json")
    assert encode_file([env]) == path.read_bytes()
    result = verify_envelope(env)
    assert result.ok and result.hands == len(load(name)["hands"])


def tampered(name: str, mutate: Any) -> Any:
    rec = decode_record(import_transcript(load(name)))
    mutate(rec)
    return verify_envelope(envelope(rec.SerializeToString(deterministic=True)))


def test_tampered_vole_decision_is_caught() -> None:
    def stop_instead(rec: Any) -> None:
        rec.hands[0].actions[12] = encode(3, 0)  # vole continue -> stop

    result = tampered("triomphe-tr2", stop_instead)
    assert not result.ok and result.error is not None
    # The coup ends at the stop: the recorded play that follows has no hand to go to.
    assert result.error.code == "action:no-hand" and str(result.error).endswith("[TRI.END]")
    assert result.error.hand == 1 and result.error.action == 14


def test_tampered_score_line_and_rule_are_caught() -> None:
    def rule(rec: Any) -> None:
        rec.hands[0].lines[0].rule = "TRI.POINT"

    result = tampered("triomphe-tr2", rule)
    assert result.error is not None and result.error.code == "score-lines"

    def discard(rec: Any) -> None:
        rec.hands[0].actions[0] = encode(5, parse_card("QD"))  # a card Bob does not hold

    result = tampered("triomphe-as-qui-pille", discard)
    assert result.error is not None and result.error.code == "action:not-held"
    assert result.error.hand == 1 and result.error.action == 1


# --- every ruleset, regime and player count, as transcripts --------------------------------

COMBOS = [
    *(("individuelle", r, n) for r in ("forcee", "forcat") for n in range(2, 7)),
    *(("individuelle", "plaisant", n) for n in range(3, 7)),
    *(("equipe", r, n) for r in ("forcee", "forcat") for n in (4, 6)),
    *(("as-qui-pille", r, n) for r in ("forcee", "forcat", "plaisant") for n in range(3, 7)),
]


def played_transcript(ruleset: str, regime: str, n: int, seed: str) -> tuple[dict[str, Any], Any]:
    """A random match, written as a transcript (half the hands as `deal`, half as `deck`)."""
    rng = random.Random(seed)
    m = new_match(make_rules("triomphe", ruleset, {"players": n, "regime": regime, "target": 3}))
    assert isinstance(m, TriompheMatch)
    hands = []
    while not m.finished:
        dealer = m.expected_dealer()
        if dealer is None:
            dealer = m.dealers[1] if m.is_team else rng.randrange(n)
        deck = list(iter_cards(PACK))
        rng.shuffle(deck)
        deal = m.deal_deck(dealer, deck)
        m.start_hand(dealer, deal)
        actions = []
        while m.to_act():
            (seat,) = m.to_act()
            action = rng.choice(m.legal_actions(seat))
            m.apply(seat, action)
            actions.append({"seat": seat, **action_to_json(action)})
        entry: dict[str, Any] = {"dealer": dealer, "actions": actions}
        if len(hands) % 2:
            entry["deck"] = [card_str(c) for c in deck]
        else:
            entry["deal"] = {
                "hands": [[card_str(c) for c in iter_cards(h)] for h in deal.hands],
                "retourne": card_str(deal.retourne),
                "talon": [card_str(c) for c in deal.talon],
            }
        hands.append(entry)
    doc = {
        "format": "tapis-transcript/1",
        "game": "triomphe",
        "ruleset": ruleset,
        "options": {"regime": regime, "target": 3},
        "players": [f"P{i}" for i in range(n)],
        "hands": hands,
    }
    return doc, m


@pytest.mark.parametrize(("ruleset", "regime", "n"), COMBOS)
def test_transcripts_of_every_combination(ruleset: str, regime: str, n: int) -> None:
    doc, m = played_transcript(ruleset, regime, n, f"{ruleset}-{regime}-{n}")
    data = import_transcript(json.loads(json.dumps(doc)))
    rec = decode_record(data)
    scores = score_json(rec)
    assert [s["points"] for s in scores["scores"]] == [s[0] for s in m.scores]
    assert scores["finished"] is True and scores["winners"] == list(m.winners)
    assert all(line["rule"].startswith("TRI.") for h in scores["hands"] for line in h["lines"])
    result = verify_envelope(envelope(data))
    assert result.ok, result.error
    text = render_record(rec, data)
    assert text.count("\nHand ") == len(doc["hands"])
    assert text.splitlines()[-1].endswith("reached 3 points).")


# --- refusals -----------------------------------------------------------------------------


def test_illegal_card_names_hand_action_seat_reason_and_rule() -> None:
    doc = load("triomphe-tr2")
    doc["hands"][0]["actions"][3] = {"seat": 1, "play": "7D"}  # B holds 9S: must follow
    assert refused(doc) == (
        "hand 1, action 4 (seat 1, play 7D): seat 1 must follow spades; legal: 9S [TRI.FORCEE]"
    )
    doc = load("triomphe-tr2")
    doc["hands"][0]["actions"][2] = {"seat": 0, "play": "AC"}  # A must undertrump
    assert refused(doc) == (
        "hand 1, action 3 (seat 0, play AC): seat 0 cannot overtrump QD: must undertrump; "
        "legal: abandon offer, play 8D, play JD [TRI.FORCEE]"
    )


def test_vole_decision_by_the_wrong_seat() -> None:
    doc = load("triomphe-tr2")
    doc["hands"][0]["actions"][12] = {"seat": 3, "vole": "continue"}
    assert refused(doc) == (
        "hand 1, action 13 (seat 3, vole continue): seat 3 may not act now; waiting for "
        "seat 2 [TRI.VOLE]"
    )


def test_card_instead_of_the_vole_decision() -> None:
    doc = load("triomphe-tr2")
    del doc["hands"][0]["actions"][12]
    assert refused(doc) == (
        "hand 1, action 13 (seat 2, play JS): seat 2 first decides the vole: stop or continue; "
        "legal: vole stop, vole continue [TRI.VOLE]"
    )


def test_abandon_in_a_three_player_game() -> None:
    doc = load("triomphe-as-qui-pille")
    doc["hands"][0]["actions"].insert(2, {"seat": 0, "abandon": "offer"})
    assert refused(doc) == (
        "hand 1, action 3 (seat 0, abandon offer): the abandon du point exists only between "
        "two sides (one against one or team against team); this game has 3; "
        "legal: QS KS 9D 10D 7C [TRI.ABANDON]"
    )


def test_pillage_refusals() -> None:
    doc = load("triomphe-as-qui-pille")
    doc["hands"][0]["actions"][0] = {"seat": 0, "play": "KS"}
    assert refused(doc) == (
        "hand 1, action 1 (seat 0, play KS): the pillage comes first: seat 1 takes 9H or "
        "stops [TRI.PILLE]"
    )
    doc["hands"][0]["actions"][0] = {"seat": 0, "pille": "KS"}
    assert refused(doc) == (
        "hand 1, action 1 (seat 0, pille KS): seat 0 may not act now; waiting for seat 1 "
        "[TRI.PILLE]"
    )
    doc = load("triomphe-as-qui-pille")
    doc["hands"][0]["actions"][0] = {"seat": 1, "pille": "QD"}
    assert refused(doc).startswith(
        "hand 1, action 1 (seat 1, pille QD): seat 1 may discard a card of his hand or 9H, "
        "not QD; legal: pille JS, pille 9H, pille AH, pille 7D, pille 8C, pille 10C, pille stop"
    )
    doc = load("triomphe-tr2")
    doc["hands"][0]["actions"][0] = {"seat": 2, "pille": "KS"}
    assert refused(doc).startswith("hand 1, action 1 (seat 2, pille KS): there is no pillage")


def test_deal_refusals() -> None:
    doc = load("triomphe-tr2")
    del doc["hands"][0]["deal"]["retourne"]
    assert refused(doc) == (
        "hand 1, deal: La Triomphe turns a retourne after the deal: give 'retourne' [TRI.DEAL]"
    )
    doc = load("triomphe-tr2")
    doc["hands"][0]["deal"]["talon"].pop()
    assert refused(doc) == (
        "hand 1, deal: the talon has 10 cards, expected 11: the hands, the retourne and the "
        "talon are the whole of the 32-card pack [TRI.DEAL]"
    )
    doc = load("triomphe-tr2")
    doc["hands"][0]["deal"]["talon"][0] = "6S"
    assert refused(doc) == "hand 1, deal: 6S (the talon) is not in the 32-card pack [TRI.DEAL]"
    doc = load("triomphe-tr2")
    doc["hands"][0]["deal"]["retourne"] = "KS"
    assert refused(doc) == ("hand 1, deal: KS is dealt twice (seat 2 and the retourne) [TRI.DEAL]")


def test_dealer_refusals() -> None:
    doc = load("triomphe-tr2")
    doc["hands"][0]["dealer"] = 0
    assert refused(doc) == (
        "hand 1, dealer: in the team game the dealer is a team's last seat (seat 1 or 3), so "
        "that the other team leads; not seat 0 [TRI.EQUIPE]"
    )
    doc = load("triomphe-tr2")
    doc["hands"].append(copy.deepcopy(doc["hands"][0]))  # dealt by B again
    assert refused(doc) == (
        "hand 2, dealer: the dealer of hand 2 must be seat 3, not seat 1 [TRI.DEAL]"
    )


def test_option_and_start_refusals() -> None:
    doc = load("triomphe-as-qui-pille")
    doc["ruleset"] = "individuelle"
    doc["players"] = ["Ann", "Bob"]
    doc["options"] = {"regime": "plaisant"}
    assert refused(doc) == (
        "options: option 'regime' of triomphe (individuelle): 'plaisant' is not allowed; "
        "plaisant needs three or more players (3.2)"
    )
    doc = load("triomphe-tr2")
    doc["players"] = ["A", "B", "C"]
    assert refused(doc).startswith(
        "players: option 'players' of triomphe (equipe): 3 is not allowed"
    )
    doc = load("triomphe-tr2")
    doc["start"]["scores"][1] = {"points": 3}
    assert refused(doc) == (
        "start.scores: seats 0, 1 are partners and must start with the same score, not 2 and 3"
    )
    doc["start"]["scores"] = [{"points": 5}, {"points": 5}, {"points": 1}, {"points": 1}]
    assert refused(doc) == (
        "start: seat 0 starts with 5 points, at or above the target of 5: the match would be over"
    )


def test_unfinished_hand_and_actions_after_the_end() -> None:
    doc = load("triomphe-tr2")
    del doc["hands"][0]["actions"][12:]
    assert refused(doc) == (
        "hand 1: the hand is not finished after 12 actions (waiting for seat 2)"
    )
    doc = load("triomphe-as-qui-pille")
    doc["hands"][1]["actions"].append({"seat": 0, "play": "JD"})
    assert refused(doc) == ("hand 2, action 13: the hand is already over: no further action in it")
