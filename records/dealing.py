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
pack is recomputed when a refereed record is verified); this module is the published face.
"""

from __future__ import annotations

import hashlib
import os

from tapis_cartes.referee.engine.shuffle import ALGORITHM, first_dealer, shuffled_pack

__all__ = ["ALGORITHM", "commitment", "first_dealer", "new_seed", "shuffled_pack"]


def new_seed() -> bytes:
    """A fresh secret seed (32 bytes from the operating system's CSPRNG)."""
    return os.urandom(32)


def commitment(seed: bytes) -> bytes:
    """The SHA-256 of the seed, published before the first deal."""
    return hashlib.sha256(seed).digest()
