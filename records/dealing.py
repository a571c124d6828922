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

The draws and the shuffle are in referee/engine/shuffle.py, compiled with the engine (every
pack is recomputed when a refereed record is verified); this module is the published face,
which checks what it is given (the referee and the verifier call the engine's own).
"""

from __future__ import annotations

import hashlib
import os

from tapis_cartes.referee.engine import shuffle
from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.referee.engine.shuffle import ALGORITHM

__all__ = ["ALGORITHM", "commitment", "first_dealer", "new_seed", "shuffled_pack"]

_CARDS = 1 << 52  # a pack is a mask of the 52 cards' ids (0 to 51)


def shuffled_pack(seed: bytes, hand_number: int, pack: int) -> list[int]:
    """The pack (a card mask: the game's `Match.pack`) of hand `hand_number` (1-based),
    shuffled, top card first. `ValueError` for a hand number or a pack that is none."""
    if type(hand_number) is not int or hand_number < 1:
        raise ValueError(f"hand_number: {quoted(hand_number, 40)} is no hand number (1, 2, ...)")
    if type(pack) is not int or not 0 < pack < _CARDS:
        raise ValueError(
            f"pack: {quoted(pack, 40)} is no pack (a mask of some of the 52 cards, as a game's"
            " `Match.pack`)"
        )
    return shuffle.shuffled_pack(seed, hand_number, pack)


def first_dealer(seed: bytes, choices: tuple[int, ...]) -> int:
    """The dealer of the first hand, among the seats allowed to deal it (`choices`, the
    game's `Match.first_dealers()`, in ascending order). `ValueError` when there are none."""
    if not isinstance(choices, tuple) or not choices:
        raise ValueError(f"choices: {quoted(choices, 40)} are no seats to choose from (a tuple)")
    return shuffle.first_dealer(seed, choices)


def new_seed() -> bytes:
    """A fresh secret seed (32 bytes from the operating system's CSPRNG)."""
    return os.urandom(32)


def commitment(seed: bytes) -> bytes:
    """The SHA-256 of the seed, published before the first deal."""
    return hashlib.sha256(seed).digest()
