"""Every bound of the referee, in one place (documented for clients in referee.proto).

`Limits` holds what `tapis serve` may change; the field bounds below are part of the contract.
A table's size is bounded (hands, actions), so that its record and every reply stay far below
the size a gRPC client accepts by default (4 MiB).
"""

from __future__ import annotations

from dataclasses import dataclass

from tapis_cartes.records.codec import MAX_NAME
from tapis_cartes.referee.errors import TooMany

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_ID",
    "MAX_NAME",
    "MAX_OPTIONS",
    "MAX_OPTION_TEXT",
    "MAX_SEATS",
    "Limits",
    "Slot",
    "StreamCount",
]

MAX_ID = 64  # characters of a table id, request id, game or ruleset name
# MAX_NAME: characters of a player's name, the records' own bound (tapis_cartes.records.codec)
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


class StreamCount:
    """The streams each client has open, at most `limit` at once (counted by the client's
    address): `open(client)` takes a `Slot`, or raises `TooMany`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def open(self, client: str) -> Slot:
        streams = self._open.get(client, 0)
        if streams >= self.limit:
            raise TooMany(f"this client already has {streams} streams open (limit {self.limit})")
        self._open[client] = streams + 1
        return Slot(self, client)

    def _release(self, client: str) -> None:
        left = self._open[client] - 1
        if left:
            self._open[client] = left
        else:
            del self._open[client]


class Slot:
    """One stream counted for its client: `release()` gives it back, once however often it
    is called."""

    __slots__ = ("client", "count", "released")

    def __init__(self, count: StreamCount, client: str) -> None:
        self.count = count
        self.client = client
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.count._release(self.client)
