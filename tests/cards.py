"""Cards, actions and deals written as text, for the scripted tests of every game: one copy of
the helpers each game's tests once wrote again."""

from __future__ import annotations

from tapis_cartes.referee.engine.actions import PLAY, encode
from tapis_cartes.referee.engine.base import Deal
from tapis_cartes.referee.engine.cards import mask_of, parse_card

__all__ = ["deal_of", "mask", "play"]


def mask(text: str) -> int:
    """The set of cards (a mask) written as `"QS 10H 7C"`."""
    return mask_of(parse_card(t) for t in text.split())


def play(text: str) -> int:
    """The action of playing the card written `text`."""
    return encode(PLAY, parse_card(text))


def deal_of(*hands: str) -> Deal:
    """A deal of these hands, one text per seat (no retourne, no talon)."""
    return Deal(tuple(mask(h) for h in hands))
