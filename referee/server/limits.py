"""Every bound of the referee, in one place (documented for clients in referee.proto).

`Limits` holds what `tapis serve` may change; the field bounds below are part of the contract.
A table's size is bounded (hands, actions), so that its record and every reply stay far below
the size a gRPC client accepts by default (4 MiB).
"""

from __future__ import annotations

from dataclasses import dataclass

from records.codec import MAX_NAME

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_ID",
    "MAX_NAME",
    "MAX_OPTIONS",
    "MAX_OPTION_TEXT",
    "MAX_SEATS",
    "Limits",
]

MAX_ID = 64  # characters of a table id, request id, game or ruleset name
# MAX_NAME: characters of a player's name, the records' own bound (records.codec)
MAX_OPTION_TEXT = 64  # characters of an option key or string value
MAX_OPTIONS = 64  # options in one request
MAX_SEATS = 10  # seats of a table (the most any game allows)


@dataclass(frozen=True)
class Limits:
    """The referee's limits (`tapis serve` options)."""

    max_message_bytes: int = 1 << 20  # a request (and the send limit is four times this)
    max_tables_per_client: int = 1000  # tables open at once (neither finished nor closed)
    max_streams_per_client: int = 256  # WatchTable streams at once
    open_seat_ttl: float = 3600.0  # seconds a table waits for its open seats, then expires
    max_hands: int = 1000  # hands of one match: then the referee stops it
    max_actions: int = 100_000  # actions of one match: then the referee stops it
    max_loaded_finished: int = 1000  # finished tables kept in memory once asked for


DEFAULT_LIMITS = Limits()
