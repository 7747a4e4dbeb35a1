from __future__ import annotations

import asyncio
import random as _random
import time
from collections.abc import Callable
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


def jittered(seconds: float, random: Callable[[], float] = _random.random) -> float:
    """A back-off pause with "equal jitter": half of it, and up to the other half at random.

    The clients a hub restart cut off then come back spread over the pause, not all at once at
    each of its doublings.
    """
    return seconds / 2 + random() * (seconds / 2)
