"""Real agents -> Mosquitto -> fog -> fusion -> a subscriber; the precision
broadcast reaches running agents and recalibrates them."""

import json
from collections import defaultdict

import numpy as np
import pytest

from edge_agent.config import AgentConfig
from edge_agent.service import AgentService
from fog_shuffler.config import FogConfig
from fog_shuffler.service import FogService
from fusion_center.config import FusionConfig
from rase_common.protocol.aggregate import Aggregate
from rase_common.protocol.control import ControlMessage
from fusion_center.service import FusionService
from rase_common.clock import ScaledClock
from simulators.refit import RefitColumnSource, bundled_dir, epoch0_of, load_house
from tests.mqtt_helpers import Recorder, ServiceThread, publish_retained

pytestmark = pytest.mark.integration
HOUSES = (1, 2)


def test_end_to_end_aggregates_and_precision_broadcast(mosquitto, tmp_path):
    houses = [load_house(bundled_dir(), h) for h in HOUSES]
    epoch0 = epoch0_of(houses, 8.0)
    clock = ScaledClock(epoch0 + 8 * 3600, 80.0)
    broker = {"port": mosquitto.port}
    # The fusion center broadcasts a precision the agents do not have locally:
    # range 0..3000 W, grid 2 W, eps menu [0.5].
    precision = ControlMessage(x_min=0.0, x_max=3000.0, gamma=2.0, period_s=8.0, epoch0=epoch0,
                                 eps_levels=[0.5], mechanism="br")
    fusion_cfg = FusionConfig.load(None, name="e2e", regions=["r1"], merge_deadline_s=40.0,
                                   store_path=tmp_path / "fusion.sqlite", precision=precision.model_dump(),
                                   windows_w=[4], broker=broker)
    fog_cfg = FogConfig.load(None, name="e2e", regions={"r1": {"refit_houses": list(HOUSES)}}, period_s=8.0,
                             epoch0=epoch0, k_min=10, lateness_periods=2, eps_levels=[0.5], x_max=3000.0,
                             journal_path=tmp_path / "fog.sqlite", broker=broker, device_mechanism="br")
    rec = Recorder(mosquitto.port, ["rase/v1/aggregates/#", "rase/v1/reports/#", "rase/v1/control/#"],
                   persistent=False)
    fusion_svc = FusionService(fusion_cfg, clock=clock)
    fusion = ServiceThread(fusion_svc)
    fog = ServiceThread(FogService(fog_cfg, clock=clock))
    agents = []
    try:
        # The precision is retained before the agents start: they calibrate from it from their first report.
        assert rec.wait_for(lambda: any(m.payload for m in rec.on("rase/v1/control/")), timeout_s=30)
        for h in houses:
            for dev in h.device_ids():
                cfg = AgentConfig.load(None, device=dev, region="r1", eps=1.0, period_s=8.0, epoch0=epoch0,
                                       ledger_path=tmp_path / f"{dev}.json", broker=broker, mechanism="br")
                agents.append(ServiceThread(AgentService(cfg, source=RefitColumnSource(h, dev), clock=clock)))
        assert rec.wait_for(lambda: len(rec.on("rase/v1/aggregates/t/")) >= 12, timeout_s=60)
    finally:
        for a in agents:
            a.stop()
        fog.stop()
        fusion.stop()
        publish_retained(mosquitto.port, "rase/v1/control/precision", b"")
        publish_retained(mosquitto.port, "rase/v1/aggregates/latest", b"")
    rec.close()
    # Agents recalibrated from the broadcast: eps 0.5 (largest menu level <= 1.0), grid 2, range 0..3000.
    reports = [json.loads(m.payload) for m in rec.on("rase/v1/reports/")]
    assert reports and all(r["eps"] == 0.5 for r in reports)
    assert all(0 <= r["y"] <= 3000 and r["y"] % 2 == 0 for r in reports)
    by_t = defaultdict(list)
    for r in reports:
        by_t[r["t"]].append(r["y"])
    aggs = [Aggregate.model_validate_json(m.payload) for m in rec.on("rase/v1/aggregates/t/")]
    assert len({a.t for a in aggs}) == len(aggs)
    full = [a for a in aggs if a.n == 18]
    assert len(full) >= 8
    for a in full:
        ys = by_t[a.t]
        assert a.estimates["se"].value == pytest.approx(np.mean(ys))          # computed on exactly those reports
        assert a.estimates["mle"].value == pytest.approx(np.median(ys))       # equal lambdas: plain median
        # 18 reports: no bootstrap (published from 100 reports of a level, fusion_center.ldp.merge.BS_MIN_REPORTS);
        # the mean's interval is the clamped BR score interval, within the range.
        assert "bs" not in a.estimates
        lo, hi = a.estimates["mean"].ci
        assert 0.0 <= lo <= hi <= 3000.0 and a.estimates["mean"].method == "score-variance-bound"
        assert a.clamped and a.complete and a.regions == ["r1"]
        assert a.windowed["4"]["se"].present >= 1
    latest = [Aggregate.model_validate_json(m.payload) for m in rec.on("rase/v1/aggregates/latest") if m.payload]
    assert latest and latest[-1].t == max(a.t for a in aggs)
    assert fusion_svc.metrics.closed._value.get() == len(aggs)
