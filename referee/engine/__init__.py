"""The rules of every Tapis game: pure Python, no I/O, no clock, no randomness, no protobuf.

The public facade: build `Rules` with `make_rules` (the range of an int option:
`int_range`), start a `Match` with `new_match`, deal hands with `Match.start_hand` (or
`Match.deal_deck`), then `to_act`, `legal_actions`, `refusal` (why an action would be
refused, changing nothing), `apply`/`step` and `view`.
"""

from tapis_cartes.referee.engine._native import COMPILED  # first: picks compiled or pure modules
from tapis_cartes.referee.engine.actions import action_str, action_to_json, parse_action
from tapis_cartes.referee.engine.base import (
    Deal,
    Event,
    Hand,
    Match,
    Rules,
    ScoreLine,
    Start,
    TrickWon,
    View,
)
from tapis_cartes.referee.engine.cards import card_str, mask_str, parse_card
from tapis_cartes.referee.engine.errors import (
    DealError,
    IllegalAction,
    InvalidAction,
    NotYourTurn,
    RecordError,
    RulesError,
    TapisError,
    TranscriptError,
)
from tapis_cartes.referee.engine.options import int_range
from tapis_cartes.referee.engine.registry import GAMES, find_game, make_rules, new_match

__all__ = [
    "COMPILED",
    "GAMES",
    "Deal",
    "DealError",
    "Event",
    "Hand",
    "IllegalAction",
    "InvalidAction",
    "Match",
    "NotYourTurn",
    "RecordError",
    "Rules",
    "RulesError",
    "ScoreLine",
    "Start",
    "TapisError",
    "TranscriptError",
    "TrickWon",
    "View",
    "action_str",
    "action_to_json",
    "card_str",
    "find_game",
    "int_range",
    "make_rules",
    "mask_str",
    "new_match",
    "parse_action",
    "parse_card",
]
