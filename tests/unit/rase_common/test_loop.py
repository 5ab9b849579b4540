"""Wakeup: the services' loops wake on work, from paho's thread or their own,
and no set() is lost between a last look at the queue and the wait."""

import asyncio
import threading
import time

from rase_common.clock import ManualClock, ScaledClock
from rase_device.schedule import Schedule
import pytest

from rase_common import service
from rase_common.loop import Wakeup, seconds_to_next_boundary, within


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


# -- within: a timeout that never eats a cancellation -------------------------------

def _cancel_as_result_arrives(wait) -> bool:
    """Cancel a task in the same loop turn as the result it awaits arrives
    (a PUBACK landing as SIGTERM does); True if the cancellation reached it."""
    async def main():
        inner = asyncio.get_running_loop().create_future()
        after = asyncio.Event()

        async def publisher():
            await wait(inner)
            after.set()                 # a task whose cancellation was dropped goes on
            await asyncio.sleep(3600)

        task = asyncio.ensure_future(publisher())
        await asyncio.sleep(0.01)
        inner.set_result(None)
        task.cancel()
        try:
            await asyncio.wait_for(task, 1.0)     # the test's own bound, not the code under test
        except asyncio.CancelledError:
            return not after.is_set()
        except asyncio.TimeoutError:
            return False
        return False

    return asyncio.run(main())


def test_within_passes_on_a_cancellation_that_arrives_with_the_result():
    assert _cancel_as_result_arrives(lambda fut: within(fut, 10.0, cancel=False))
    assert _cancel_as_result_arrives(lambda fut: within(fut, 10.0))


def test_within_returns_the_result_or_raises_timeout_and_cancels_only_when_asked():
    async def main():
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        done.set_result(7)
        assert await within(done, 1.0) == 7
        kept, dropped = loop.create_future(), loop.create_future()
        for fut, cancel in ((kept, False), (dropped, True)):
            with pytest.raises(asyncio.TimeoutError):
                await within(fut, 0.01, cancel=cancel)
        return kept.cancelled(), dropped.cancelled()

    assert asyncio.run(main()) == (False, True)


def test_run_owned_cancels_again_a_task_that_ate_its_cancellation(monkeypatch):
    monkeypatch.setattr(service, "STOP_GRACE_S", 0.05)

    async def stubborn():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass                            # the bug: the first cancellation is dropped
        await asyncio.sleep(3600)

    async def ends():
        await asyncio.sleep(0.01)

    async def main():
        await asyncio.wait_for(service.run_owned([stubborn(), ends()], "test"), 5.0)

    asyncio.run(main())
