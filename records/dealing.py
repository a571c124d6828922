"""Fair dealing: every deal of a refereed table derives from one secret seed.

The referee draws a 32-byte seed when a table opens and publishes its SHA-256 (the
commitment); the final record reveals the seed, so anyone can recompute every deal.

Algorithm `tapis-deal/1` (stable: a new algorithm gets a new name):
- A stream of 32-bit words for a label: for counter 0, 1, 2, ... the 32 bytes of
  HMAC-SHA256(key = seed, message = "tapis-deal/1|<label>|<counter>"), read as eight
  big-endian 32-bit words.
- A uniform integer below n: the next word w, rejected while w >= 2**32 - (2**32 mod n),
  then w mod n.
- The first dealer: of the seats the rules allow to deal first (all seats, or in the team
  Triomphe the last seat of each team), in ascending order, the one at a uniform index from
  label "dealer".
- The pack of hand number k (1-based, as in the record): the game's cards in ascending id
  order, shuffled by Fisher-Yates (for i from the last index down to 1, swap i with a uniform
  j below i + 1) with the stream of label "hand/<k>"; the result is the pack top first, dealt
  by the game's own dealing procedure (RULES.md 7).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Callable, Iterator

from referee.engine.cards import iter_cards

__all__ = ["ALGORITHM", "commitment", "first_dealer", "new_seed", "shuffled_pack"]

ALGORITHM = "tapis-deal/1"


def new_seed() -> bytes:
    """A fresh secret seed (32 bytes from the operating system's CSPRNG)."""
    return os.urandom(32)


def commitment(seed: bytes) -> bytes:
    """The SHA-256 of the seed, published before the first deal."""
    return hashlib.sha256(seed).digest()


_WORDS = struct.Struct(">8I").unpack  # a block: eight big-endian 32-bit words


def _words(seed: bytes, label: str) -> Callable[[], int]:
    """The next word of the stream of `label` (a function: the shuffle calls it per card)."""
    prefix = f"{ALGORITHM}|{label}|".encode()

    def blocks() -> Iterator[int]:
        counter = 0
        while True:
            yield from _WORDS(hmac.digest(seed, prefix + str(counter).encode(), "sha256"))
            counter += 1

    return blocks().__next__


def _below(next_word: Callable[[], int], n: int) -> int:
    """A uniform integer below n: words at or over the largest multiple of n are rejected."""
    limit = (1 << 32) - (1 << 32) % n
    w = next_word()
    while w >= limit:
        w = next_word()
    return w % n


def first_dealer(seed: bytes, choices: tuple[int, ...]) -> int:
    """The dealer of the first hand, among the seats allowed to deal it."""
    return choices[_below(_words(seed, "dealer"), len(choices))]


def shuffled_pack(seed: bytes, hand_number: int, pack: int) -> list[int]:
    """The pack (a card mask) of hand `hand_number`, shuffled, top card first."""
    cards = list(iter_cards(pack))
    next_word = _words(seed, f"hand/{hand_number}")
    for i in range(len(cards) - 1, 0, -1):
        j = _below(next_word, i + 1)
        cards[i], cards[j] = cards[j], cards[i]
    return cards
