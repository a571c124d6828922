"""The referee's time: where the clocks of timed tables read the time and set their alarms.

The referee measures time only through a `TimeSource`, so that tests drive the clocks by hand
(`tests/server/util.py`'s `ManualTime`) and never sleep. `SystemTime` is the real one: a
monotonic clock (a change of the wall clock never charges a seat) and the event loop's timers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["SYSTEM_TIME", "Alarm", "SystemTime", "TimeSource"]


class Alarm(Protocol):
    """A callback to come, which may be called off."""

    def cancel(self) -> None: ...


class TimeSource(Protocol):
    """Milliseconds on a monotonic clock, and alarms on it."""

    def now(self) -> float: ...

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> Alarm: ...


class SystemTime:
    """The machine's monotonic clock and the running event loop's timers."""

    def now(self) -> float:
        return time.monotonic() * 1000.0

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> Alarm:
        return asyncio.get_running_loop().call_later(max(0.0, delay_ms) / 1000.0, callback)


SYSTEM_TIME = SystemTime()
