"""The one exception tree of Tapis.

Every error a caller can act on is a `TapisError`. A broken internal invariant is an
`assert`, never one of these.

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

import reprlib
from typing import Any

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

QUOTE_LIMIT = 40  # characters of a value from outside that a message quotes


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """`repr(value)` for a message, cut to about `limit` characters: an error names what it
    was given without echoing a megabyte of it (`'aaaa…' (100000 characters)`). An int too
    long to show is named by its size (`<an integer of 4000 bits>`): Python refuses to write
    one of more than 4300 digits, and a message must never fail. Never raises."""
    if isinstance(value, str | bytes) and len(value) > limit:
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:limit]!r}… ({len(value)} {unit})"
    try:
        text = repr(value) if isinstance(value, str | bytes) else _SHORT.repr(value)
    except Exception:  # a repr that fails: name the type only
        return f"<{type(value).__name__}>"
    if len(text) > limit:
        return f"{text[:limit]}… ({len(text)} characters)"
    return text


def _int_text(value: int) -> str:
    # 2**128 has 39 digits: anything longer is shown by its size.
    if value.bit_length() > 128:
        sign = "a negative" if value < 0 else "an"
        return f"<{sign} integer of {value.bit_length()} bits>"
    return repr(value)


class _ShortRepr(reprlib.Repr):
    """`reprlib`'s bounded repr (a few items of a container, a cut string), with ints too
    long to show named by their size."""

    def repr_int(self, x: int, level: int) -> str:
        return _int_text(x)


_SHORT = _ShortRepr()
_SHORT.maxstring = QUOTE_LIMIT
_SHORT.maxother = QUOTE_LIMIT


class TapisError(Exception):
    """Root of every error Tapis raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with its fields as they are, not by calling `__init__` again with `args`
        # (most subclasses take other arguments): errors cross process pools.
        return (_unpickle, (type(self), self.args), self.__dict__)


def _unpickle(cls: type[TapisError], args: tuple[Any, ...]) -> TapisError:
    return cls.__new__(cls, *args)


class InvalidAction(TapisError):
    """An action that cannot be parsed, or that has no meaning in this game."""


class IllegalAction(TapisError):
    """An action that breaks a rule.

    `code` is stable (for programs), `message` is for a person (it names the action, the
    phase and the legal set), `reason` the same without the action (for callers that print
    the action themselves), `rule` the `RULES.md` id, `legal` the legal actions of the seat at
    that moment (empty for deal errors).
    """

    def __init__(
        self,
        code: str,
        message: str,
        rule: str,
        *,
        seat: int | None = None,
        legal: tuple[int, ...] = (),
        reason: str | None = None,
    ) -> None:
        super().__init__(f"{message} [{rule}]")
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else message
        self.rule = rule
        self.seat = seat
        self.legal = legal


class NotYourTurn(IllegalAction):
    """A seat acted while it was not one of the seats to act."""


class DealError(IllegalAction):
    """A deal that is not a possible deal of this game (or a dealer out of rotation)."""


class RulesError(TapisError):
    """Bad rules: unknown game or ruleset, unknown option key, wrong type, forbidden combination."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class RecordError(TapisError):
    """A record that cannot be decoded, or whose content does not follow from the rules.

    `code` is stable; `hand` and `action` (1-based, None when not applicable) give the
    position of the first fault.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        hand: int | None = None,
        action: int | None = None,
    ) -> None:
        where = ""
        if hand is not None:
            where = f"hand {hand}" + (f", action {action}" if action is not None else "") + ": "
        super().__init__(where + message)
        self.code = code
        self.message = message
        self.hand = hand
        self.action = action


class TranscriptError(TapisError):
    """A transcript that does not follow TRANSCRIPT.md; the message names the place."""
