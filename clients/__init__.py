"""Tapis clients: the `tapis` command line, the Python SDK of a running referee
(clients/sdk.py), bots (clients/bots.py) and matches played in this process
(clients/arena.py). The library's names (docs/python.md) are importable from here, each
loaded when first used (the command line does not load the SDK it does not need)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clients.arena import play_match
    from clients.bots import Bot, HeuristicBot, RandomBot, SeatResult, make_bot, play_seat
    from clients.sdk import (
        ActionRefused,
        CreatedTable,
        RefereeClient,
        RefereeError,
        SeatHandle,
        StaleAction,
    )

_FROM = {
    "play_match": "clients.arena",
    "Bot": "clients.bots",
    "HeuristicBot": "clients.bots",
    "RandomBot": "clients.bots",
    "SeatResult": "clients.bots",
    "make_bot": "clients.bots",
    "play_seat": "clients.bots",
    "ActionRefused": "clients.sdk",
    "CreatedTable": "clients.sdk",
    "RefereeClient": "clients.sdk",
    "RefereeError": "clients.sdk",
    "SeatHandle": "clients.sdk",
    "StaleAction": "clients.sdk",
}

__all__ = [
    "ActionRefused",
    "Bot",
    "CreatedTable",
    "HeuristicBot",
    "RandomBot",
    "RefereeClient",
    "RefereeError",
    "SeatHandle",
    "SeatResult",
    "StaleAction",
    "make_bot",
    "play_match",
    "play_seat",
]


def __getattr__(name: str) -> Any:
    module = _FROM.get(name)
    if module is None:
        raise AttributeError(f"module 'clients' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
