"""Tapis clients: the `tapis` command line, the Python SDK of a running referee
(clients/sdk.py), bots (clients/bots.py) and matches played in this process
(clients/arena.py). The library's names (docs/python.md) are importable from here, each
loaded when first used (the command line does not load the SDK it does not need)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tapis_cartes.lazy import load

if TYPE_CHECKING:
    from tapis_cartes.clients.arena import play_match
    from tapis_cartes.clients.bots import (
        Bot,
        HeuristicBot,
        RandomBot,
        SeatResult,
        make_bot,
        play_seat,
    )
    from tapis_cartes.clients.sdk import (
        ActionRefused,
        CreatedTable,
        RefereeClient,
        RefereeError,
        SeatHandle,
        StaleAction,
    )

_FROM = {
    "play_match": "tapis_cartes.clients.arena",
    "Bot": "tapis_cartes.clients.bots",
    "HeuristicBot": "tapis_cartes.clients.bots",
    "RandomBot": "tapis_cartes.clients.bots",
    "SeatResult": "tapis_cartes.clients.bots",
    "make_bot": "tapis_cartes.clients.bots",
    "play_seat": "tapis_cartes.clients.bots",
    "ActionRefused": "tapis_cartes.clients.sdk",
    "CreatedTable": "tapis_cartes.clients.sdk",
    "RefereeClient": "tapis_cartes.clients.sdk",
    "RefereeError": "tapis_cartes.clients.sdk",
    "SeatHandle": "tapis_cartes.clients.sdk",
    "StaleAction": "tapis_cartes.clients.sdk",
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
    return load(__name__, name, _FROM)
