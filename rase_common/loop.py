"""Small helpers for the services' asyncio loops."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(aw: Awaitable[T], timeout_s: float | None, *, cancel: bool = True) -> T:
    """Await `aw` for at most `timeout_s` seconds, else raise asyncio.TimeoutError.

    Not asyncio.wait_for: before Python 3.12, when the awaited result and the
    caller's cancellation arrive in the same loop turn, wait_for returns the
    result and drops the cancellation, so a service's task never ends and
    SIGTERM does nothing (seen: the fusion center publishing aggregates).
    Here a cancellation always propagates. With cancel=False, `aw` is left
    running on a timeout or a cancellation (a PUBACK that may still come)."""
    fut = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({fut}, timeout=timeout_s)
    except asyncio.CancelledError:
        if cancel:
            fut.cancel()
        raise
    if done:
        return fut.result()
    if cancel:
        fut.cancel()
        await asyncio.wait({fut})          # let it clean up; a cancellation of ours still propagates
        if not fut.cancelled():
            fut.exception()                # retrieved: what it ended with does not matter after a timeout
    raise asyncio.TimeoutError(f"not done within {timeout_s} s")


async def wait_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep up to `seconds`, waking early when `stop` is set; True if stopping."""
    try:
        await within(stop.wait(), seconds)
    except asyncio.TimeoutError:
        pass
    return stop.is_set()


class Wakeup:
    """Wakes a service's asyncio loop when work arrives, from paho's network
    thread or from the loop itself: the loops wait on this, not on a tick.

    set() after work was queued; the loop calls wait() when it has nothing
    left to do. A set() between the loop's last look at its queue and wait()
    is not lost: wait() then returns at once."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event = asyncio.Event()     # replaced by bind(), on the loop that waits
        self._thread: int | None = None
        self._pending = False       # one scheduled wake-up at a time, however many set() calls

    def bind(self) -> None:
        """Attach to the running loop (call from inside it, before waiting).
        Binding again on the same loop keeps the event: a set() already
        scheduled for it must not be lost."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        self._loop = loop
        self._event = asyncio.Event()
        self._thread = threading.get_ident()
        self._pending = False

    def set(self) -> None:
        if self._pending or self._loop is None:
            return
        self._pending = True
        if threading.get_ident() == self._thread:
            self._event.set()
            return
        try:
            self._loop.call_soon_threadsafe(self._set_now)
        except RuntimeError:
            pass  # the loop has closed: the service is stopping

    def _set_now(self) -> None:
        self._event.set()

    async def wait(self, stop: asyncio.Event | None = None, timeout_s: float | None = None) -> bool:
        """Until set(), `stop` (if given) or timeout_s (None: no timeout);
        True if stopping."""
        if self._loop is None:
            self.bind()
        if not self._event.is_set() and not (stop is not None and stop.is_set()):
            tasks = {asyncio.ensure_future(self._event.wait())}
            if stop is not None:
                tasks.add(asyncio.ensure_future(stop.wait()))
            try:
                await asyncio.wait(tasks, timeout=None if timeout_s is None else max(0.0, timeout_s),
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
        # Cleared before the caller looks at its queues, so work queued from
        # now on schedules a new wake-up.
        self._event.clear()
        self._pending = False
        return stop is not None and stop.is_set()


class Wakeups:
    """Several tasks' wake-ups behind one set()."""

    def __init__(self, *wakeups: Wakeup):
        self.wakeups = wakeups

    def set(self) -> None:
        for w in self.wakeups:
            w.set()


def seconds_to_next_boundary(clock, schedule, cap_s: float = 1.0) -> float:
    """Wall seconds until the clock crosses the schedule's next period
    boundary (rase_device.schedule: when windows may come due), at most cap_s.
    A manual clock (speedup inf) is moved by its driver, which wakes the
    service itself."""
    speedup = getattr(clock, "speedup", 1.0)
    if speedup == float("inf"):
        return cap_s
    now = clock.now()
    return min(cap_s, max(0.0005, (schedule.end_of(schedule.t_of(now)) - now) / speedup))
