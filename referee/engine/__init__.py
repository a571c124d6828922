"""The rules of every Tapis game: pure Python, no I/O, no clock, no randomness, no protobuf.

The public facade: build `Rules` with `make_rules` (the range of an int option:
`int_range`), start a `Match` with `new_match`, deal hands with `Match.start_hand` (or
`Match.deal_deck`), then `to_act`, `legal_actions`, `refusal` (why an action would be
refused, changing nothing), `apply`/`step` and `view`.
"""

from referee.engine._native import COMPILED  # first: picks compiled or pure modules
from referee.engine.actions import action_str, action_to_json, parse_action
from referee.engine.base import Deal, Event, Hand, Match, Rules, ScoreLine, Start, TrickWon, View
from referee.engine.cards import card_str, mask_str, parse_card
from referee.engine.errors import (
    DealError,
    IllegalAction,
    InvalidAction,
    NotYourTurn,
    RecordError,
    RulesError,
    TapisError,
    TranscriptError,
)
from referee.engine.options import int_range
from referee.engine.registry import GAMES, find_game, make_rules, new_match

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
