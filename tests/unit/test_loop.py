"""Wakeup: the services' loops wake on work, from paho's thread or their own,
and no set() is lost between a last look at the queue and the wait."""

import asyncio
import threading
import time

from rase_common.clock import ManualClock, ScaledClock
from edge_agent.schedule import Schedule
from rase_common.loop import Wakeup, seconds_to_next_boundary


def test_set_from_another_thread_wakes_the_loop_at_once():
    async def main():
        w, stop = Wakeup(), asyncio.Event()
        w.bind()
        threading.Timer(0.05, w.set).start()
        t0 = time.monotonic()
        assert await w.wait(stop, 5.0) is False
        return time.monotonic() - t0

    assert asyncio.run(main()) < 2.0


def test_a_set_before_wait_is_not_lost_and_many_sets_wake_once():
    async def main():
        w, stop = Wakeup(), asyncio.Event()
        w.bind()
        for _ in range(100):
            w.set()
        await w.wait(stop, 5.0)            # returns at once: the sets came before
        t0 = time.monotonic()
        await w.wait(stop, 0.2)            # nothing new: times out
        return time.monotonic() - t0

    assert asyncio.run(main()) >= 0.19


def test_stop_ends_the_wait():
    async def main():
        w, stop = Wakeup(), asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, stop.set)
        return await w.wait(stop, 5.0)

    assert asyncio.run(main()) is True


def test_seconds_to_next_boundary_table():
    assert seconds_to_next_boundary(ScaledClock(1000.0, 1.0), Schedule(8.0, 0.0)) <= 1.0
    c = ScaledClock(1003.0, 4.0)   # 5 simulated s to the boundary at 1008 = 1.25 wall s, capped at 1
    assert seconds_to_next_boundary(c, Schedule(8.0, 0.0), cap_s=10.0) <= 1.25
    assert seconds_to_next_boundary(ManualClock(5.0), Schedule(8.0, 0.0)) == 1.0


def test_binding_again_keeps_a_wakeup_set_from_another_thread():
    """A set() from another thread between two bind() calls on the same loop
    is not lost (a task that binds as it starts must still be woken)."""
    import asyncio
    import threading

    from rase_common.loop import Wakeup

    async def scenario() -> bool:
        w = Wakeup()
        w.bind()
        t = threading.Thread(target=w.set)
        t.start()
        t.join()
        w.bind()                       # e.g. the waiting task binds on start
        await asyncio.wait_for(w.wait(None, None), 1.0)    # woken by that set(), not a timeout
        w.set()                        # and later set()s still wake it
        return await asyncio.wait_for(w.wait(None, None), 1.0) is False

    assert asyncio.run(scenario())
