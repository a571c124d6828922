"""L'Impériale transcripts (TRANSCRIPT.md): the worked examples 000-A and 001-B import, score
and verify event by event as RULES.md says; three-player transcripts dealt from a whole pack;
a match won in the middle of a hand; refusals with the hand, the action and the rule id."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tapis_cartes.records.codec import decode_record, envelope, read_envelopes
from tapis_cartes.records.render import render_record
from tapis_cartes.records.score import score_json
from tapis_cartes.records.transcript import import_transcript
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.engine import TapisError, make_rules, new_match
from tapis_cartes.referee.engine.actions import action_to_json
from tapis_cartes.referee.engine.cards import card_str, iter_cards
from tapis_cartes.referee.engine.imperiale import PACK_36
from tests.commands import DATA
from tests.records.transcripts import load, refused


def lines(doc: dict[str, Any], hand: int = 0) -> list[tuple[int, str, int, int, str]]:
    scores = score_json(decode_record(import_transcript(doc)))
    return [
        (x["seat"], x["kind"], x["imperiales"], x["jetons"], x["rule"])
        for x in scores["hands"][hand]["lines"]
    ]


def fj(*pairs: tuple[int, int]) -> list[dict[str, int]]:
    return [{"imperiales": f, "jetons": j} for f, j in pairs]


# --- the worked examples --------------------------------------------------------------------


def test_000a_scores_event_by_event() -> None:
    doc = load("imperiale-000a")
    assert doc["ruleset"] == "moderne" and doc["start"]["scores"] == fj((0, 0), (0, 0))
    assert lines(doc) == [
        (1, "retourne", 0, 1, "IMP-M.RETOURNE"),
        (0, "couleur", 0, 1, "IMP-M.COULEUR"),
        (0, "imperiale-tombee", 1, 0, "IMP-M.TOMBEE"),
        (1, "honneurs", 0, 2, "IMP-M.HONNEURS"),
        (0, "cartes", 0, 1, "IMP-M.CARTES"),
    ]
    scores = score_json(decode_record(import_transcript(doc)))
    assert scores["game"] == "imperiale" and scores["ruleset"] == "moderne"
    assert scores["hands"][0]["scores_after"] == fj((1, 2), (0, 3))
    assert scores["scores"] == fj((1, 2), (0, 3))
    assert scores["finished"] is False and scores["winners"] == []


def test_000a_with_effacement() -> None:
    doc = load("imperiale-000a")
    doc["options"] = {"effacement": True}
    assert lines(doc)[2:4] == [
        (0, "imperiale-tombee", 1, 0, "IMP-M.TOMBEE"),
        (1, "effacement", 0, -1, "IMP-A.EFFACEMENT"),
    ]
    assert score_json(decode_record(import_transcript(doc)))["scores"] == fj((1, 2), (0, 2))


def test_001b_scores_event_by_event() -> None:
    doc = load("imperiale-001b")
    assert doc.get("ruleset", "academie") == "academie"
    assert doc["start"]["scores"] == fj((0, 0), (1, 3))
    assert lines(doc) == [
        (1, "retourne", 0, 1, "IMP-A.E1"),
        (0, "quatrieme-majeure", 1, 0, "IMP-A.E2"),
        (1, "effacement", 0, -3, "IMP-A.EFFACEMENT"),
        (1, "point", 0, 1, "IMP-A.E5"),
        (0, "honneurs", 0, 1, "IMP-A.E6"),
        (0, "honneurs", 0, 1, "IMP-A.E6"),
        (1, "honneurs", 0, 1, "IMP-A.E6"),
        (1, "honneurs", 0, 1, "IMP-A.E6"),
        (0, "cartes", 0, 3, "IMP-A.E8"),
    ]
    scores = score_json(decode_record(import_transcript(doc)))
    assert scores["scores"] == fj((1, 5), (1, 4))
    assert scores["hands"][0]["scores_after"] == fj((1, 5), (1, 4))


def test_001b_without_protection() -> None:
    doc = load("imperiale-001b")
    doc["options"] = {"protect_retourne": False}
    assert lines(doc)[2] == (1, "effacement", 0, -4, "IMP-A.EFFACEMENT")
    assert score_json(decode_record(import_transcript(doc)))["scores"] == fj((1, 5), (1, 3))


@pytest.mark.parametrize("name", ["imperiale-000a", "imperiale-001b"])
def test_golden_records_verify_and_show(name: str) -> None:
    data = import_transcript(load(name), f"{name}.json")
    (env,) = read_envelopes(DATA / f"{name}.tapis")
    assert env.record == data  # the stored bytes, exactly
    assert verify_envelope(envelope(data)).ok
    text = render_record(decode_record(data), data)
    # `show`: the retourne and talon, every trick and each score line with its rule id and
    # the seat's score after it.
    assert "  retourne " in text and "  talon " in text and " 12. " in text
    if name == "imperiale-001b":
        assert "D: retourne +1 jeton (7S is an honour; now 1F 4J) [IMP-A.E1]" in text
        assert (
            "D: effacement -3 jetons (E won an impériale; the retourne jeton is "
            "protected; now 1F 1J) [IMP-A.EFFACEMENT]"
        ) in text
        assert "E: cartes +3 jetons (9 tricks, 3 above 6; now 1F 5J) [IMP-A.E8]" in text
    else:
        assert "E: imperiale-tombee +1 imperiale (trick 3: KH takes AH; now 1F 1J)" in text


# --- refusals ---------------------------------------------------------------------------------


def test_illegal_card_message() -> None:
    doc = load("imperiale-001b")
    doc["hands"][0]["actions"][1] = {"seat": 1, "play": "9H"}
    assert refused(doc) == (
        "hand 1, action 2 (seat 1, play 9H): seat 1 must follow spades (trump led); "
        "legal: 8S 9S JS AS [IMP-A.PLAY]"
    )
    doc = load("imperiale-001b")
    doc["hands"][0]["actions"][5] = {"seat": 1, "play": "9S"}  # played at trick 2
    assert refused(doc) == (
        "hand 1, action 6 (seat 1, play 9S): seat 1 does not hold 9S; legal: JS AS [IMP-A.PLAY]"
    )
    doc = load("imperiale-000a")
    doc["hands"][0]["actions"][1] = {"seat": 1, "play": "8H"}
    assert refused(doc) == (
        "hand 1, action 2 (seat 1, play 8H): seat 1 must follow spades; legal: 7S QS [IMP-M.PLAY]"
    )


def test_other_refusals() -> None:
    doc = load("imperiale-001b")
    doc["hands"][0]["actions"][0] = {"seat": 1, "play": "8S"}
    assert refused(doc) == (
        "hand 1, action 1 (seat 1, play 8S): seat 1 may not act now; waiting for seat 0 "
        "[IMP-A.PLAY]"
    )
    doc = load("imperiale-001b")
    doc["hands"][0]["actions"][0] = {"seat": 0, "bid": "two"}
    assert refused(doc).endswith("[IMP-A.PLAY]")
    doc = load("imperiale-001b")
    doc["hands"][0]["deal"]["talon"] = doc["hands"][0]["deal"]["talon"][:6]
    assert refused(doc).startswith("hand 1, deal: two players are dealt 12 cards each")
    assert refused(doc).endswith("[IMP-A.E1]")
    doc = load("imperiale-000a")
    del doc["hands"][0]["deal"]["retourne"]
    assert refused(doc).endswith("no retourne) [IMP-M.RETOURNE]")
    doc = load("imperiale-001b")
    doc["hands"][0]["actions"] = doc["hands"][0]["actions"][:20]
    assert refused(doc) == "hand 1: the hand is not finished after 20 actions (waiting for seat 0)"


def test_start_scores_out_of_the_game() -> None:
    doc = load("imperiale-001b")
    doc["start"]["scores"] = fj((0, 6), (1, 3))
    with pytest.raises(TapisError) as exc:
        import_transcript(doc)
    assert "a match under way holds 0 to 5 jetons" in str(exc.value)
    doc["start"]["scores"] = [{"points": 3}, {"imperiales": 0}]
    assert refused(doc) == (
        "start.scores[0]: unknown key 'points'; this game keeps imperiales, jetons"
    )


# --- a match won in the middle of a hand --------------------------------------------------------


def test_match_won_mid_hand_has_no_further_actions() -> None:
    doc = load("imperiale-001b")
    doc["start"]["scores"] = fj((3, 4), (1, 3))
    hand = doc["hands"][0]
    # E: 3F + the quatrième = 4F; K♠ and Q♠ bring his sixth jeton at trick 2: 5F.
    assert refused(copy.deepcopy(doc)) == (
        "hand 1, action 5: the match is already over (seat 0 reached 5 impériales)"
    )
    hand["actions"] = hand["actions"][:4]
    scores = score_json(decode_record(import_transcript(doc)))
    assert scores["finished"] is True and scores["winners"] == [0]
    assert scores["scores"] == fj((5, 0), (1, 0))
    assert [(x["kind"], x["rule"]) for x in scores["hands"][0]["lines"]][-3:] == [
        ("honneurs", "IMP-A.E6"),
        ("conversion", "IMP-A.E6"),
        ("effacement", "IMP-A.EFFACEMENT"),
    ]
    assert verify_envelope(envelope(import_transcript(doc))).ok
    extra = copy.deepcopy(doc)
    extra["hands"].append({"dealer": 0, "deal": doc["hands"][0]["deal"], "actions": []})
    assert refused(extra).startswith("hand 2: the match is already over")


def test_match_won_in_the_announcements() -> None:
    doc = load("imperiale-001b")
    doc["start"]["scores"] = fj((4, 0), (1, 3))
    doc["hands"][0]["actions"] = []
    scores = score_json(decode_record(import_transcript(doc)))
    assert scores["finished"] is True and scores["winners"] == [0]
    # The effacement belongs to the event that reaches the target; nothing follows it.
    assert [x["kind"] for x in scores["hands"][0]["lines"]] == [
        "retourne",
        "quatrieme-majeure",
        "effacement",
    ]
    assert scores["scores"] == fj((5, 0), (1, 1))


# --- three players ----------------------------------------------------------------------------


def three_player_doc(packet: int) -> tuple[dict[str, Any], Any]:
    """A two-hand three-player transcript dealt from whole packs, with the actions of a
    live match (each seat playing its lowest legal card), and that match."""
    rules = make_rules("imperiale", "academie", {"packet": packet}, 3)
    m = new_match(rules)
    deck = list(iter_cards(PACK_36))
    hands = []
    for number in range(2):
        dealer = 2 if number == 0 else 0
        pack = deck[number * 7 :] + deck[: number * 7]  # another cut for hand 2
        m.start_hand(dealer, m.deal_deck(dealer, pack))
        actions = []
        while m.to_act():
            (seat,) = m.to_act()
            action = m.legal_actions(seat)[0]
            m.apply(seat, action)
            actions.append({"seat": seat, **action_to_json(action)})
        hands.append({"dealer": dealer, "deck": [card_str(c) for c in pack], "actions": actions})
        if m.finished:
            break
    doc = {
        "format": "tapis-transcript/1",
        "game": "imperiale",
        "options": {"packet": packet},
        "players": ["Ann", "Bob", "Cat"],
        "hands": hands,
    }
    return doc, m


@pytest.mark.parametrize("packet", [3, 4])
def test_three_players_from_a_deck(packet: int) -> None:
    doc, m = three_player_doc(packet)
    data = import_transcript(doc)
    rec = decode_record(data)
    assert rec.rules.players == 3
    first = rec.hands[0]
    # The dealer's twelve cards include the retourne (the 36th card); no talon.
    assert first.deal.retourne == list(iter_cards(PACK_36))[35]
    assert first.deal.hands[2] >> first.deal.retourne & 1 and first.deal.talon == b""
    scores = score_json(rec)
    got = [
        [(x["seat"], x["kind"], (x["imperiales"], x["jetons"]), x["rule"]) for x in h["lines"]]
        for h in scores["hands"]
    ]
    want = [[(x.seat, x.kind, x.delta, x.rule) for x in r.lines] for r in m.results]
    assert got == want and len(got) == len(doc["hands"])
    assert scores["scores"] == [{"imperiales": f, "jetons": j} for f, j in m.scores]
    assert verify_envelope(envelope(data)).ok
    assert render_record(rec, data).count("\nHand ") == len(doc["hands"])


def test_three_players_deal_with_a_talon_is_refused() -> None:
    doc, _ = three_player_doc(3)
    rules = make_rules("imperiale", "academie", {}, 3)
    deal = new_match(rules).deal_deck(2, list(iter_cards(PACK_36)))
    hand = doc["hands"][0]
    del hand["deck"]
    hand["deal"] = {
        "hands": [[card_str(c) for c in iter_cards(h)] for h in deal.hands],
        "retourne": card_str(deal.retourne),
        "talon": ["6S"],
    }
    assert refused(copy.deepcopy(doc)).endswith("[IMP-A.3P]")
    hand["deal"]["talon"] = []
    hand["deal"]["retourne"] = card_str(next(iter_cards(deal.hands[0])))
    assert refused(doc) == (
        "hand 1, deal: the retourne 6S is not in the dealer's hand (seat 2): with three "
        "players it is his last card [IMP-A.3P]"
    )
