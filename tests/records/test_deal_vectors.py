"""docs/deal-vectors.json, the test vectors of `tapis-deal/1` (docs/deal.md): Tapis gives
them (records/dealing.py, the engine's dealing procedures), and so does a second
implementation below, written from docs/deal.md alone and used by nothing else."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from tapis_cartes.records.dealing import ALGORITHM, commitment, first_dealer, shuffled_pack
from tapis_cartes.referee.engine import GAMES, make_rules, new_match
from tapis_cartes.referee.engine.cards import iter_cards
from tapis_cartes.referee.engine.errors import RulesError

VECTORS = Path(__file__).resolve().parents[2] / "docs" / "deal-vectors.json"
DOC = json.loads(VECTORS.read_text(encoding="utf-8"))


def _id(v: dict[str, Any]) -> str:
    extra = "-".join(f"{k}={x}" for k, x in sorted(v["options"].items()))
    return f"{v['game']}-{v['ruleset']}-{v['players']}p" + (f"-{extra}" if extra else "")


# --- the specification, implemented again (docs/deal.md, sections 1 to 5) --------------------


class Stream:
    """Section 1: the words of a label; section 2: uniform draws from them."""

    def __init__(self, seed: bytes, label: str) -> None:
        self.seed = seed
        self.label = label
        self.counter = 0
        self.words: list[int] = []

    def word(self) -> int:
        if not self.words:
            message = f"tapis-deal/1|{self.label}|{self.counter}".encode()
            block = hmac.new(self.seed, message, hashlib.sha256).digest()
            self.words = [int.from_bytes(block[4 * i : 4 * i + 4], "big") for i in range(8)]
            self.counter += 1
        return self.words.pop(0)

    def below(self, n: int) -> int:
        while True:
            w = self.word()
            if w < 2**32 - 2**32 % n:
                return w % n


def spec_cards(game: str, ruleset: str, n: int, options: dict[str, Any]) -> list[int]:
    """Section 4's table."""
    if game == "napoleon" and options.get("short_deck"):
        lowest = 13 - (n + 3)
    elif game in ("dame-de-pique", "napoleon"):
        lowest = 0
    elif game == "imperiale" and n == 3:
        lowest = 4
    else:
        lowest = 5
    return [s * 13 + r for s in range(4) for r in range(lowest, 13)]


def spec_choices(game: str, ruleset: str, n: int) -> list[int]:
    """Section 3."""
    if (game, ruleset) == ("triomphe", "equipe"):
        return [n // 2 - 1, n - 1]
    return list(range(n))


def spec_pack(seed: bytes, number: int, cards: list[int]) -> list[int]:
    """Section 4: Fisher-Yates with the stream of hand/<number>."""
    stream = Stream(seed, f"hand/{number}")
    pack = list(cards)
    for i in range(len(pack) - 1, 0, -1):
        j = stream.below(i + 1)
        pack[i], pack[j] = pack[j], pack[i]
    return pack


def spec_deal(
    game: str, ruleset: str, n: int, options: dict[str, Any], d: int, pack: list[int]
) -> tuple[list[list[int]], int | None, list[int]]:
    """Section 5: the hands (each sorted), the retourne and the talon."""
    hands: list[list[int]] = [[] for _ in range(n)]
    retourne: int | None = None
    talon: list[int] = []
    if game in ("dame-de-pique", "napoleon"):
        count = 52 if game == "dame-de-pique" else 5 * n
        for i in range(count):
            hands[(d + 1 + i) % n].append(pack[i])
    elif game == "imperiale":
        p = options.get("packet", 3)
        for i in range(12 * n):
            hands[(d + 1 + i // p) % n].append(pack[i])
        if n == 2:
            retourne, talon = pack[24], pack[25:]
        else:
            retourne = pack[35]
    else:
        s = options.get("hand_size", 5)
        pos = 0
        for packet in (s // 2, s - s // 2):
            for k in range(1, n + 1):
                hands[(d + k) % n].extend(pack[pos : pos + packet])
                pos += packet
        retourne, talon = pack[pos], pack[pos + 1 :]
    return [sorted(h) for h in hands], retourne, talon


# --- the checks --------------------------------------------------------------------------------


def test_the_vectors_cover_every_game_ruleset_and_number_of_players() -> None:
    assert DOC["algorithm"] == ALGORITHM == "tapis-deal/1"
    covered = {(v["game"], v["ruleset"], v["players"]) for v in DOC["vectors"]}
    for name, spec in GAMES.items():
        for ruleset in spec.rulesets:
            for n in range(2, 11):
                try:
                    make_rules(name, ruleset, {}, n)
                except RulesError:
                    assert (name, ruleset, n) not in covered
                    continue
                assert (name, ruleset, n) in covered, (name, ruleset, n)
    # Every pack size and option that changes the dealing has vectors.
    assert {len(v["cards"]) for v in DOC["vectors"]} >= {24, 28, 32, 36, 40, 44, 48, 52}
    assert {k for v in DOC["vectors"] for k in v["options"]} == {
        "short_deck",
        "packet",
        "hand_size",
    }


@pytest.mark.parametrize("v", DOC["vectors"], ids=_id)
def test_tapis_gives_the_vectors(v: dict[str, Any]) -> None:
    seed = bytes.fromhex(v["seed"])
    assert commitment(seed).hex() == v["commitment"]
    match = new_match(make_rules(v["game"], v["ruleset"], v["options"], v["players"]))
    assert list(iter_cards(match.pack)) == v["cards"]
    assert list(match.first_dealers()) == v["first_dealer_choices"]
    assert first_dealer(seed, match.first_dealers()) == v["first_dealer"]
    assert v["hands"][0]["dealer"] == v["first_dealer"]
    for hand in v["hands"]:
        pack = shuffled_pack(seed, hand["number"], match.pack)
        assert pack == hand["pack"]
        deal = match.deal_deck(hand["dealer"], pack)
        assert [list(iter_cards(h)) for h in deal.hands] == hand["hands"]
        assert (deal.retourne if deal.retourne >= 0 else None) == hand["retourne"]
        assert list(deal.talon) == hand["talon"]


@pytest.mark.parametrize("v", DOC["vectors"], ids=_id)
def test_the_specification_alone_gives_the_vectors(v: dict[str, Any]) -> None:
    game, ruleset, n, options = v["game"], v["ruleset"], v["players"], v["options"]
    seed = bytes.fromhex(v["seed"])
    assert hashlib.sha256(seed).hexdigest() == v["commitment"]
    cards = spec_cards(game, ruleset, n, options)
    assert cards == v["cards"]
    choices = spec_choices(game, ruleset, n)
    assert choices == v["first_dealer_choices"]
    assert choices[Stream(seed, "dealer").below(len(choices))] == v["first_dealer"]
    for hand in v["hands"]:
        pack = spec_pack(seed, hand["number"], cards)
        assert pack == hand["pack"]
        hands, retourne, talon = spec_deal(game, ruleset, n, options, hand["dealer"], pack)
        assert hands == hand["hands"]
        assert retourne == hand["retourne"]
        assert talon == hand["talon"]
