"""Clocks handed to services, so simulations run faster than real time and
tests are deterministic. now() returns unix seconds (float)."""

from __future__ import annotations

import asyncio
import logging
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

    @classmethod
    def anchored(cls, anchor: tuple[float, float] | None, speedup: float) -> "ScaledClock":
        """A scaled clock that reads anchor[0] at the wall-clock time anchor[1]: processes given
        the same anchor read the same simulated time (None: it starts at the wall clock now)."""
        if anchor is None:
            return cls(WallClock().now(), speedup)
        sim, wall = anchor
        return cls(sim + (WallClock().now() - wall) * speedup, speedup)

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


class SteadyClock:
    """Wall time that a step of the system clock cannot move: monotonic time
    anchored to the wall clock (the fog judges lateness against it, and a
    +-60 s NTP step must not make it refuse a minute of reports).

    Small differences from the wall clock (< step_s: NTP slewing, drift) are
    followed gently, at most `slew` seconds per second. A larger difference is
    a step: it is logged and held off; only if it persists for hold_s (a real
    correction, not a transient) does the clock adopt it, logging again.
    `wall` and `mono` are injectable for tests."""

    speedup = 1.0

    def __init__(self, *, step_s: float = 1.0, hold_s: float = 30.0, slew: float = 0.01, check_every_s: float = 1.0,
                 wall=time.time, mono=time.monotonic, log=None):  # noqa: ANN001
        if not (step_s > 0 and hold_s >= 0 and 0 <= slew < 1):
            raise ValueError("SteadyClock needs step_s > 0, hold_s >= 0 and slew in [0, 1)")
        self.step_s, self.hold_s, self.slew, self.check_every_s = step_s, hold_s, slew, check_every_s
        self._wall, self._mono = wall, mono
        self._log = log or logging.getLogger(__name__)
        self._anchor_mono = mono()
        self._anchor_wall = wall()
        self._checked = self._anchor_mono
        self._step_since: float | None = None
        self.steps_held = 0          # steps seen and held off
        self.steps_adopted = 0

    def now(self) -> float:
        m = self._mono()
        if m - self._checked >= self.check_every_s:
            self._check(m)
        return self._anchor_wall + (m - self._anchor_mono)

    def _check(self, m: float) -> None:
        ours = self._anchor_wall + (m - self._anchor_mono)
        off = self._wall() - ours
        elapsed = m - self._checked
        self._checked = m
        if abs(off) < self.step_s:
            if self._step_since is not None:
                self._log.warning("the wall clock is back in line with this service's clock")
                self._step_since = None
            limit = self.slew * elapsed
            self._anchor_wall += max(-limit, min(limit, off))
            return
        if self._step_since is None:
            self._step_since = m
            self.steps_held += 1
            self._log.warning("the wall clock jumped by %+.1f s; keeping monotonic time for now (a step that lasts "
                              "%g s is adopted)", off, self.hold_s)
        elif m - self._step_since >= self.hold_s:
            self._anchor_wall, self._anchor_mono = ours + off, m
            self._step_since = None
            self.steps_adopted += 1
            self._log.warning("adopting the wall clock's step of %+.1f s (it lasted %g s)", off, self.hold_s)

    async def sleep_until(self, unix_s: float) -> None:
        await asyncio.sleep(max(0.0, unix_s - self.now()))
