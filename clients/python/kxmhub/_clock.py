from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """The time the library keeps (renewals, when a lease counts as lost, back-off), in seconds.

    Tests pass their own, moved together with the hub's clock.
    """

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
