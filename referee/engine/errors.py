"""The engine's errors: re-exported from the one tree of Tapis, `referee/errors.py` (a plain
module, importable without the server or the records), which documents each class with its
gRPC status and exit code (`docs/errors.md`).

- `InvalidAction`: the action cannot be parsed or does not exist in this game.
- `IllegalAction`: the action exists but breaks a rule; carries a stable code, the rule id of
  `RULES.md` and the legal set.
- `NotYourTurn`: a seat acted out of turn (a kind of `IllegalAction`).
- `DealError`: a deal that is malformed (wrong card count, duplicate or foreign card, wrong
  dealer); also an `IllegalAction`, since it names the rule it breaks.
- `RulesError`: bad options (unknown key, wrong type, forbidden combination).
- `RecordError`: a bad or tampered record, with the position of the first fault.
- `TranscriptError`: a transcript that does not follow `TRANSCRIPT.md`.
"""

from __future__ import annotations

from tapis_cartes.referee.errors import (
    QUOTE_LIMIT,
    DealError,
    IllegalAction,
    InvalidAction,
    NotYourTurn,
    RecordError,
    RulesError,
    TapisError,
    TranscriptError,
    quoted,
)

__all__ = [
    "QUOTE_LIMIT",
    "DealError",
    "IllegalAction",
    "InvalidAction",
    "NotYourTurn",
    "RecordError",
    "RulesError",
    "TapisError",
    "TranscriptError",
    "quoted",
]
