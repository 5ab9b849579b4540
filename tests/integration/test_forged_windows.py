"""A fog credential must not be able to steer aggregates: a window forged for
an unknown region, for a future t, or a second, different window for a
(region, t) already stored changes no published aggregate; each is
quarantined with its reason, the conflict raises the alarm metric."""

from __future__ import annotations

import asyncio
import time

import pytest

from fusion_center.config import FusionConfig
from fusion_center.service import FusionService
from rase_common.channels import MemorySource
from rase_common.clock import ManualClock
from rase_common.protocol.window import WindowMessage

pytestmark = pytest.mark.integration
EPOCH0 = 1_700_000_000.0


def window(region: str, t: int, value: float) -> str:
    return WindowMessage.uniform(region, t, [value] * 10, kind="br").model_dump_json()


def test_forged_windows_change_no_aggregate(mosquitto, tmp_path):
    cfg = FusionConfig.load(None, name="forge", regions=["r1", "r2"], merge_deadline_s=30.0, bootstrap_b=50,
                            store_path=tmp_path / "f.sqlite", precision={"period_s": 8.0, "epoch0": EPOCH0, "mechanism": "br"},
                            broker={"port": mosquitto.port})
    clock = ManualClock(EPOCH0 + 100 * 8.0 + 1)        # t = 100
    source = MemorySource()
    fusion = FusionService(cfg, clock=clock, source=source)

    async def scenario() -> None:
        source.wakeup = fusion.ctx.arrived.set
        stop = asyncio.Event()
        task = asyncio.create_task(fusion.run(stop))

        async def until(pred, timeout_s: float = 10.0) -> bool:
            deadline = time.monotonic() + timeout_s
            while not pred() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            return pred()
        try:
            source.put("rase/v1/windows/zz", window("zz", 99, 5000.0))        # an unknown region
            source.put("rase/v1/windows/r1", window("r1", 150, 5000.0))       # far in the future
            source.put("rase/v1/windows/r1", window("r1", 99, 10.0))
            source.put("rase/v1/windows/r2", window("r2", 99, 30.0))
            assert await until(lambda: fusion.store is not None and fusion.store.count() == 1)
            source.put("rase/v1/windows/r1", window("r1", 99, 5000.0))        # a second, different (r1, 99)
            source.put("rase/v1/windows/r1", window("r1", 99, 10.0))          # the same one again: a duplicate
            assert await until(lambda: len(source.acked) == 6)
            await asyncio.sleep(0.3)
        finally:
            stop.set()
            await task

    asyncio.run(scenario())
    from fusion_center.store import AggregateStore

    (agg,) = AggregateStore(tmp_path / "f.sqlite", readonly=True).recent("all", 0, 1000)
    assert (agg["t"], agg["n"], agg["regions"], agg["complete"], agg["revision"]) == (99, 20, ["r1", "r2"], True, 0)
    assert agg["estimates"]["se"]["value"] == pytest.approx(20.0)
    value = fusion.metrics.registry.get_sample_value
    for reason in ("unknown_region", "t_implausible", "conflicting_window"):
        assert value("rase_fusion_windows_rejected_total", {"reason": reason}) == 1, reason
    assert value("rase_fusion_windows_conflicting_total") == 1
    assert value("rase_fusion_windows_duplicate_total") == 1
