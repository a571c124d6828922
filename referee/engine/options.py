"""Typed, validated options: one pydantic model per game and ruleset.

Each model is frozen, forbids unknown keys and is strict about types. A failure becomes a
`RulesError` that names the key and, where the values are a closed list, the allowed values.
"""

from __future__ import annotations

import typing
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from referee.engine.errors import RulesError

__all__ = ["GameOptions", "validate_options"]


class GameOptions(BaseModel):
    """Base of every option model."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    def check(self, players: int) -> None:
        """Combination rules (override); raise `RulesError` naming the key."""


OptionsT = TypeVar("OptionsT", bound=GameOptions)


def _allowed(model: type[GameOptions], key: str) -> str:
    field = model.model_fields.get(key)
    if field is None:
        return ""
    ann = field.annotation
    args = typing.get_args(ann)
    literal_args: list[Any] = []
    if typing.get_origin(ann) is Literal:
        literal_args = list(args)
    else:
        for a in args:
            if typing.get_origin(a) is Literal:
                literal_args += list(typing.get_args(a))
    if literal_args:
        return "; allowed: " + ", ".join(str(v).lower() for v in literal_args)
    if ann is bool:
        return "; allowed: true, false"
    if ann is int or int in args:
        return "; expected an integer"
    return ""


def validate_options(model: type[OptionsT], options: dict[str, Any], where: str) -> OptionsT:
    """Build `model` from `options`; raise `RulesError` naming the first bad key."""
    if not isinstance(options, dict):
        raise RulesError(f"options for {where} must be an object of key: value")
    unknown = sorted(k for k in options if k not in model.model_fields)
    if unknown:
        known = ", ".join(sorted(model.model_fields))
        raise RulesError(
            f"unknown option {unknown[0]!r} for {where}; known options: {known}", key=unknown[0]
        )
    try:
        return model(**options)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "?"
        value = options.get(key)
        raise RulesError(
            f"option {key!r} of {where}: {value!r} is not allowed{_allowed(model, key)}",
            key=key,
        ) from None
