"""The fog service wired to in-memory sources and sinks: no broker. Ingest,
acknowledgement, closing, forwarding, and its policy over the control message."""

from __future__ import annotations

import asyncio
import json
import time

from fog_shuffler.config import FogConfig
from fog_shuffler.service import FogService
from rase_common.channels import MemorySink, MemorySource
from rase_common.clock import ManualClock
from rase_common.protocol.control import ControlMessage
from rase_common.protocol.window import WindowMessage

DEVICES = [f"d{i}" for i in range(10)]


def report(t: int, i: int, eps: float = 1.0) -> str:
    return json.dumps({"v": 1, "t": t, "y": float(10 * i), "eps": eps, "seq": t})


class Harness:
    def __init__(self, tmp_path, **cfg):
        self.cfg = FogConfig.load(None, name="mem", device_mechanism="br", regions={"r1": {"devices": DEVICES}}, period_s=8.0, k_min=5,
                                  lateness_periods=1, journal_path=tmp_path / "fog.sqlite", **cfg)
        self.clock = ManualClock(0.0)
        self.source = MemorySource()
        self.sink = MemorySink()
        self.fog = FogService(self.cfg, clock=self.clock, source=self.source, sink=self.sink)
        self.source.wakeup = self.fog.arrived.set

    async def until(self, pred, timeout_s: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while not pred() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return pred()

    async def put(self, topic: str, payload: str) -> None:
        before = len(self.source.acked)
        self.source.put(topic, payload)
        assert await self.until(lambda: len(self.source.acked) > before), "not acknowledged"

    def windows(self) -> list[WindowMessage]:
        return [WindowMessage.model_validate_json(p) for _, p in self.sink.sent]


def run(harness: Harness, scenario) -> None:
    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(harness.fog.run(stop))
        try:
            await scenario(harness)
        finally:
            stop.set()
            await task
    asyncio.run(main())


def control(**fields) -> str:
    return ControlMessage(**{"mechanism": "br", **fields}).model_dump_json()


def test_reports_are_journaled_acked_closed_and_forwarded(tmp_path):
    async def scenario(h: Harness) -> None:
        h.clock.set(5 * 8.0 + 1)
        for i, d in enumerate(DEVICES):
            await h.put(f"rase/v1/reports/r1/{d}", report(5, i))
        assert await h.until(lambda: len(h.sink.sent) == 1)
        (w,) = h.windows()
        assert (w.t, w.n, sorted(w.values)) == (5, 10, [float(10 * i) for i in range(10)])

    run(Harness(tmp_path), scenario)


def test_a_control_message_outside_the_fogs_policy_changes_nothing(tmp_path):
    """A retained control message with a 1 ms period (every agent refuses it)
    is refused by the fog too: counted, and its reports keep being accepted."""
    h = Harness(tmp_path)

    async def scenario(h: Harness) -> None:
        h.clock.set(5 * 8.0 + 1)
        await h.put("rase/v1/control/precision", control(period_s=0.001))
        await h.put("rase/v1/control/precision", control(eps_levels=[50.0]))       # above eps_max below
        for i, d in enumerate(DEVICES):
            await h.put(f"rase/v1/reports/r1/{d}", report(5, i))
        assert await h.until(lambda: len(h.sink.sent) == 1)

    h = Harness(tmp_path, control_policy={"eps_max": 10.0})
    run(h, scenario)
    assert h.fog.ctx.gate.current.period_s == 8.0 and h.fog.ctx.gate.current.eps_levels == (1.0,)
    assert h.fog.metrics.value("reports_rejected", reason="control_refused") == 2
    assert h.fog.metrics.value("reports_accepted") == 10


def test_a_control_message_within_policy_is_followed(tmp_path):
    async def scenario(h: Harness) -> None:
        h.clock.set(5 * 8.0 + 1)
        await h.put("rase/v1/control/precision", control(period_s=8.0, eps_levels=[0.5]))
        for i, d in enumerate(DEVICES):
            await h.put(f"rase/v1/reports/r1/{d}", report(5, i, eps=0.5))
        assert await h.until(lambda: len(h.sink.sent) == 1)

    h = Harness(tmp_path)
    run(h, scenario)
    assert h.fog.ctx.gate.current.eps_levels == (0.5,)
    assert h.windows()[0].batches[0].eps == 0.5


def test_a_sink_that_does_not_return_never_holds_up_acknowledgement(tmp_path):
    """While the sink sits on the first window, the reports of the next
    windows are journaled and acknowledged; released, the windows go out in order."""
    async def scenario(h: Harness) -> None:
        h.sink.hold = asyncio.Event()
        for t in (5, 6, 7):
            h.clock.set(t * 8.0 + 1)
            for i, d in enumerate(DEVICES):
                await h.put(f"rase/v1/reports/r1/{d}", report(t, i))
        assert len(h.source.acked) == 30 and h.sink.sent == []
        assert await h.until(lambda: h.fog.ctx.outbox.size == 3)
        h.sink.hold.set()
        assert await h.until(lambda: len(h.sink.sent) == 3)
        assert [w.t for w in h.windows()] == [5, 6, 7]

    run(Harness(tmp_path), scenario)
