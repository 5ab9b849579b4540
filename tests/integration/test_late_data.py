"""Late data is data: agents whose broker is down for 60 s (simulated; 7.5 s
of wall time at 8x) queue their reports and deliver them afterwards, and the
fog takes them into their timestamps' windows (a window that opens behind
time stays open as long as one on time); reports that come after their
window closed form a late batch (held to k_min and shuffled like any window)
and the fusion center publishes a revised aggregate. Every report made is in
the final revision of its aggregate."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from edge_agent.config import AgentConfig
from edge_agent.service import AgentService
from fog_shuffler.config import FogConfig
from fog_shuffler.service import FogService
from fusion_center.config import FusionConfig
from fusion_center.service import FusionService
from rase_common.clock import ScaledClock
from rase_common.protocol.aggregate import Aggregate
from rase_common.protocol.window import WindowMessage
from tests.mqtt_helpers import Recorder, ServiceThread, publish_once

pytestmark = pytest.mark.integration
DEVICES = [f"late{i}" for i in range(10)]
LATECOMERS = [f"latecomer{i}" for i in range(5)]     # registered, report once, long after their t
SPEEDUP = 8.0
EPOCH0 = 1_700_000_000.0


class RecordingSource:
    """A steady reading; remembers when it was read (one report each)."""

    def __init__(self) -> None:
        self.reads: list[float] = []

    def read(self, now: float) -> float:
        self.reads.append(now)
        return 250.0


def test_reports_queued_through_a_broker_outage_reach_revised_aggregates(own_mosquitto, tmp_path):
    clock = ScaledClock(EPOCH0, SPEEDUP)
    broker = {"port": own_mosquitto.port}
    fusion = ServiceThread(FusionService(FusionConfig.load(
        None, name="late", regions=["r1"], merge_deadline_s=16.0, bootstrap_b=50, store_path=tmp_path / "f.sqlite",
        precision={"period_s": 8.0, "epoch0": EPOCH0, "mechanism": "br"}, broker=broker), clock=clock))
    fog_svc = FogService(FogConfig.load(None, name="late", regions={"r1": {"devices": DEVICES + LATECOMERS}},
                                        period_s=8.0, epoch0=EPOCH0, k_min=5, lateness_periods=3,
                                        allowed_lateness_s=600.0, device_mechanism="br",   # latecomers send 250 W
                                        journal_path=tmp_path / "fog.sqlite", broker=broker), clock=clock)
    fog = ServiceThread(fog_svc)
    rec = Recorder(own_mosquitto.port, ["rase/v1/aggregates/t/#", "rase/v1/windows/#"], client_id="late-rec")
    sources, agents = [], []
    try:
        deadline = time.monotonic() + 20
        while not fog_svc.subscribed and time.monotonic() < deadline:
            time.sleep(0.05)
        for d in DEVICES:
            src = RecordingSource()
            sources.append(src)
            cfg = AgentConfig.load(None, device=d, region="r1", period_s=8.0, epoch0=EPOCH0,
                                   ledger_path=tmp_path / f"{d}.json", broker=broker)
            agents.append(ServiceThread(AgentService(cfg, source=src, clock=clock)))
        assert rec.wait_for(lambda: len(rec.on("rase/v1/aggregates/t/")) >= 3, timeout_s=30)
        own_mosquitto.stop()                     # the broker is down for 60 s of simulated time
        time.sleep(60.0 / SPEEDUP)
        own_mosquitto.start()
        time.sleep(4.0)                          # agents reconnect and deliver what they queued
        for a in agents:
            a.stop()
        agents = []
        made: Counter[int] = Counter(int((now - EPOCH0) // 8.0) for s in sources for now in s.reads)
        last_t = max(made)
        # Five more devices report for an early t whose window closed long ago: a late batch, a revision.
        revised_t = min(made) + 1
        for i, d in enumerate(LATECOMERS):
            publish_once(own_mosquitto.port, f"rase/v1/reports/r1/{d}",
                         json.dumps({"v": 1, "t": revised_t, "y": 250.0, "eps": 1.0, "seq": 1}))
        made[revised_t] += len(LATECOMERS)

        def final() -> dict[int, Aggregate]:
            out: dict[int, Aggregate] = {}
            for m in rec.on("rase/v1/aggregates/t/"):
                a = Aggregate.model_validate_json(m.payload)
                if a.t not in out or a.revision > out[a.t].revision:
                    out[a.t] = a
            return out
        first_full = min(t for t, c in made.items() if c == len(DEVICES))
        want = {t: c for t, c in made.items() if t >= first_full}
        assert rec.wait_for(lambda: {t: a.n for t, a in final().items() if t >= first_full} == want,
                            timeout_s=40), [(t, c, final().get(t) and (final()[t].n, final()[t].revision))
                                            for t, c in sorted(want.items())
                                            if t not in final() or final()[t].n != c]
    finally:
        for a in agents:
            a.stop()
        fog.stop()
        fusion.stop()
        rec.close()
    assert final()[revised_t].revision >= 1, "the latecomers' late batch revised that aggregate"
    late = [WindowMessage.model_validate_json(m.payload) for m in rec.on("rase/v1/windows/")]
    assert all(w.n >= 5 for w in late), "every batch, late or not, holds at least k_min reports"
    assert fog_svc.metrics.value("reports_rejected", reason="t_out_of_range") == 0
    assert fog_svc.metrics.value("late_batches") >= 1 and last_t >= max(final())
