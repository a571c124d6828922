"""`tapis-deal/1` (records/dealing.py) is a published algorithm: records verify only while it
gives the same packs. Checked against a plain reading of its specification, and pinned."""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Any

import pytest

from tapis_cartes.records.dealing import ALGORITHM, commitment, first_dealer, shuffled_pack

FULL = (1 << 52) - 1
PIQUET = sum(1 << c for c in range(52) if c % 13 >= 5)  # 32 cards, 7 to ace
PACKS = (FULL, PIQUET, sum(1 << c for c in range(52) if c % 13 >= 4))


def spec_words(seed: bytes, label: str) -> list[int]:
    """The stream as the specification says it, long enough for any shuffle here."""
    out: list[int] = []
    for counter in range(40):
        message = f"tapis-deal/1|{label}|{counter}".encode()
        block = hmac.new(seed, message, hashlib.sha256).digest()
        out.extend(int.from_bytes(block[i : i + 4], "big") for i in range(0, 32, 4))
    return out


def spec_below(words: list[int], n: int) -> int:
    while True:
        w = words.pop(0)
        if w < 2**32 - 2**32 % n:
            return w % n


def spec_pack(seed: bytes, hand: int, pack: int) -> list[int]:
    cards = [c for c in range(64) if pack >> c & 1]
    words = spec_words(seed, f"hand/{hand}")
    for i in range(len(cards) - 1, 0, -1):
        j = spec_below(words, i + 1)
        cards[i], cards[j] = cards[j], cards[i]
    return cards


@pytest.mark.parametrize("k", range(60))
def test_packs_and_first_dealer_follow_the_specification(k: int) -> None:
    seed = hashlib.sha256(f"seed {k}".encode()).digest()
    assert ALGORITHM == "tapis-deal/1"
    assert commitment(seed) == hashlib.sha256(seed).digest()
    for pack in PACKS:
        assert shuffled_pack(seed, k % 25 + 1, pack) == spec_pack(seed, k % 25 + 1, pack)
    for choices in ((0, 1, 2, 3), (1, 3), (2, 5), (0, 1, 2)):
        words = spec_words(seed, "dealer")
        assert first_dealer(seed, choices) == choices[spec_below(words, len(choices))]


def test_pinned_vector() -> None:
    """A change here breaks every refereed record already issued."""
    seed = bytes(range(32))
    packs = [shuffled_pack(seed, hand, FULL) for hand in (1, 2, 3, 100)]
    assert packs[0][:8] == spec_pack(seed, 1, FULL)[:8]
    digest = hashlib.sha256(bytes(c for p in packs for c in p)).hexdigest()
    assert digest == PINNED
    assert first_dealer(seed, (0, 1, 2, 3)) == PINNED_DEALER


PINNED = "8dbac8337144e115f0e020340cbfccac3dc828de6407c8f4062d36dbc096b065"
PINNED_DEALER = 1


@pytest.mark.parametrize(
    ("hand", "pack", "said"),
    [
        (1, -1, "pack: -1 is no pack"),  # iter_cards(-1) never ended, nor heard Ctrl-C
        (1, 1 << 200, "is no pack"),
        (1, True, "pack: True is no pack"),
        (1, 0, "pack: 0 is no pack"),
        (0, FULL, "hand_number: 0 is no hand number"),
        (True, FULL, "hand_number: True is no hand number"),
        (1.5, FULL, "hand_number: 1.5 is no hand number"),
    ],
)
def test_the_published_dealing_refuses_what_is_no_hand_or_pack(
    hand: Any, pack: Any, said: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        shuffled_pack(b"seed", hand, pack)


def test_a_first_dealer_is_chosen_among_some_seats() -> None:
    for choices in ((), [0, 1], "ab"):
        with pytest.raises(ValueError, match="are no seats to choose from"):
            first_dealer(b"seed", choices)  # type: ignore[arg-type]
