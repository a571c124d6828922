"""`tapis-deal/1`'s draws: the keyed word stream, uniform integers, the shuffle (see
records/dealing.py for the algorithm as published). Deterministic: the same seed gives the
same packs, so a record's deals can be recomputed. In the engine so that it is compiled with
it (setup.py): verifying a refereed record recomputes every pack."""

from __future__ import annotations

import hmac
import struct
from collections.abc import Iterable

from tapis_cartes.referee.engine.cards import iter_cards

__all__ = ["ALGORITHM", "first_dealer", "shuffled_pack"]

ALGORITHM = "tapis-deal/1"

_WORDS = struct.Struct(">8I")  # a block: eight big-endian 32-bit words


def _draws(seed: bytes, label: str, bounds: Iterable[int]) -> list[int]:
    """Uniform integers, one below each bound in turn, from the stream of `label`: each
    takes the next word, rejected while at or over the largest multiple of its bound."""
    prefix = f"{ALGORITHM}|{label}|".encode()
    words: list[int] = []
    out: list[int] = []
    k = 0
    for n in bounds:
        limit = (1 << 32) - (1 << 32) % n
        while True:
            if k == len(words):  # the next block (the counter is the number of blocks so far)
                block = hmac.digest(seed, prefix + str(len(words) // 8).encode(), "sha256")
                words.extend(_WORDS.unpack(block))
            w = words[k]
            k += 1
            if w < limit:
                break
        out.append(w % n)
    return out


def first_dealer(seed: bytes, choices: tuple[int, ...]) -> int:
    """The dealer of the first hand, among the seats allowed to deal it."""
    return choices[_draws(seed, "dealer", (len(choices),))[0]]


def shuffled_pack(seed: bytes, hand_number: int, pack: int) -> list[int]:
    """The pack (a card mask) of hand `hand_number`, shuffled, top card first."""
    cards = list(iter_cards(pack))
    n = len(cards)
    swaps = _draws(seed, f"hand/{hand_number}", range(n, 1, -1))
    for i in range(n - 1, 0, -1):
        j = swaps[n - 1 - i]
        cards[i], cards[j] = cards[j], cards[i]
    return cards
