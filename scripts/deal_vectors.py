"""Write docs/deal-vectors.json: test vectors of `tapis-deal/1` (docs/deal.md) for every
game, ruleset, pack and number of players, made by records/dealing.py and the engine's
dealing procedures. tests/records/test_deal_vectors.py checks them against both and against
an implementation of its own written from docs/deal.md.

Regenerate only when the algorithm's published behaviour is meant to change (it is not:
a new behaviour gets a new algorithm name), or to add vectors:

    python scripts/deal_vectors.py [--out docs/deal-vectors.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from tapis_cartes.records.dealing import ALGORITHM, commitment, first_dealer, shuffled_pack
from tapis_cartes.referee.engine import GAMES, make_rules, new_match
from tapis_cartes.referee.engine.cards import iter_cards
from tapis_cartes.referee.engine.errors import RulesError

ROOT = Path(__file__).resolve().parents[1]
HANDS = (1, 2, 3, 1000)  # hand numbers of each vector (1000: a label of four digits)

# Options that change the pack or the dealing procedure, beside each ruleset's defaults.
VARIANTS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("napoleon", "standard"): [{"short_deck": True}],
    ("imperiale", "academie"): [{"packet": 4}],
    ("triomphe", "individuelle"): [{"hand_size": 3}, {"hand_size": 7}],
    ("triomphe", "equipe"): [{"hand_size": 7}],
}


def _cards(mask: int) -> list[int]:
    return list(iter_cards(mask))


def vector(index: int, game: str, ruleset: str, players: int, options: dict[str, Any]) -> Any:
    rules = make_rules(game, ruleset, options, players)
    match = new_match(rules)
    seed = bytes(range(32)) if index == 0 else hashlib.sha256(f"vector {index}".encode()).digest()
    choices = match.first_dealers()
    first = first_dealer(seed, choices)
    hands = []
    for k, number in enumerate(HANDS):
        # Each later hand dealt by the next of the seats that may deal (the rotation when
        # no deal is thrown in, RULES.md 7): the deal is a function of the dealer and the pack.
        dealer = choices[(choices.index(first) + k) % len(choices)]
        pack = shuffled_pack(seed, number, match.pack)
        deal = match.deal_deck(dealer, pack)
        hands.append(
            {
                "number": number,
                "dealer": dealer,
                "pack": pack,
                "hands": [_cards(h) for h in deal.hands],
                "retourne": deal.retourne if deal.retourne >= 0 else None,
                "talon": list(deal.talon),
            }
        )
    return {
        "game": game,
        "ruleset": ruleset,
        "players": players,
        "options": options,
        "seed": seed.hex(),
        "commitment": commitment(seed).hex(),
        "cards": _cards(match.pack),
        "first_dealer_choices": list(choices),
        "first_dealer": first,
        "hands": hands,
    }


def vectors() -> dict[str, Any]:
    out = []
    for name, spec in GAMES.items():
        for ruleset in spec.rulesets:
            for options in [{}, *VARIANTS.get((name, ruleset), [])]:
                for players in range(2, 11):
                    try:
                        make_rules(name, ruleset, options, players)
                    except RulesError:
                        continue
                    out.append(vector(len(out), name, ruleset, players, options))
    return {"algorithm": ALGORITHM, "spec": "docs/deal.md", "vectors": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "deal-vectors.json")
    args = parser.parse_args()
    doc = vectors()
    text = json.dumps(doc, indent=1, separators=(",", ": "))
    # One line per list of cards: readable, and diffs stay small.
    args.out.write_text(_compact(text) + "\n", encoding="utf-8")
    print(f"{len(doc['vectors'])} vectors written to {args.out}")


def _compact(text: str) -> str:
    """Lists of numbers on one line each."""
    return re.sub(
        r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]",
        lambda m: "[" + ", ".join(re.split(r",\s*", m.group(1))) + "]",
        text,
    )


if __name__ == "__main__":
    main()
