"""Clocks handed to services, so simulations run faster than real time and
tests are deterministic. now() returns unix seconds (float)."""

from __future__ import annotations

import asyncio
import time


class WallClock:
    speedup = 1.0

    def now(self) -> float:
        return time.time()

    async def sleep_until(self, unix_s: float) -> None:
        await asyncio.sleep(max(0.0, unix_s - self.now()))


class ScaledClock:
    """Simulated time starting at start_unix and running `speedup` times faster."""

    def __init__(self, start_unix: float, speedup: float = 1.0):
        if speedup <= 0:
            raise ValueError(f"speedup must be > 0, got {speedup!r}")
        self.start_unix = start_unix
        self.speedup = speedup
        self._m0 = time.monotonic()

    def now(self) -> float:
        return self.start_unix + (time.monotonic() - self._m0) * self.speedup

    async def sleep_until(self, unix_s: float) -> None:
        await asyncio.sleep(max(0.0, (unix_s - self.now()) / self.speedup))


class ManualClock:
    """Time moves only when told to (tests, --fast replay)."""

    speedup = float("inf")

    def __init__(self, start_unix: float = 0.0):
        self.t = start_unix

    def now(self) -> float:
        return self.t

    def set(self, unix_s: float) -> None:
        self.t = max(self.t, unix_s)

    async def sleep_until(self, unix_s: float) -> None:
        self.set(unix_s)
        await asyncio.sleep(0)


class SharedManualClock(ManualClock):
    """A manual clock whose time lives in shared memory (a multiprocessing
    Value of type 'd'), so services in other processes follow the driver's
    time (the --fast replay's fusion center)."""

    def __init__(self, value) -> None:  # noqa: ANN001 - multiprocessing Value('d')
        self._value = value

    def now(self) -> float:
        return self._value.value

    def set(self, unix_s: float) -> None:
        self._value.value = max(self._value.value, unix_s)
