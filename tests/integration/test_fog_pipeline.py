"""Real agents -> real Mosquitto -> fog -> windows topic."""

import json
import urllib.request
from collections import Counter, defaultdict

import pytest

from edge_agent.config import AgentConfig
from edge_agent.service import AgentService
from fog_shuffler.config import FogConfig
from rase_common.protocol.window import LevelBatch, WindowMessage
from fog_shuffler.service import FogService
from rase_common.clock import ScaledClock
from simulators.refit import RefitColumnSource, bundled_dir, epoch0_of, load_house
from simulators.brokers import free_port
from tests.mqtt_helpers import Recorder, ServiceThread

pytestmark = pytest.mark.integration
HOUSES = (1, 2, 3)


def test_agents_fog_windows_with_correct_metadata(mosquitto, tmp_path):
    houses = [load_house(bundled_dir(), h) for h in HOUSES]
    epoch0 = epoch0_of(houses, 8.0)
    clock = ScaledClock(epoch0 + 6 * 3600, 80.0)  # 06:00, one 8 s period per 100 ms
    broker = {"port": mosquitto.port}
    metrics_port = free_port()
    fog_cfg = FogConfig.load(None, name="itest", regions={"r1": {"refit_houses": list(HOUSES)}},
                             period_s=8.0, epoch0=epoch0, k_min=10, lateness_periods=2,
                             journal_path=tmp_path / "fog.sqlite", broker=broker, metrics_port=metrics_port)
    rec = Recorder(mosquitto.port, ["rase/v1/windows/#", "rase/v1/reports/#"], persistent=False)
    fog = ServiceThread(FogService(fog_cfg, clock=clock))
    agents = []
    for h in houses:
        for dev in h.device_ids():
            cfg = AgentConfig.load(None, device=dev, region="r1", eps=1.0, period_s=8.0, epoch0=epoch0,
                                   ledger_path=tmp_path / f"{dev}.json", broker=broker)
            agents.append(ServiceThread(AgentService(cfg, source=RefitColumnSource(h, dev), clock=clock)))
    try:
        assert rec.wait_for(lambda: len(rec.on("rase/v1/windows/")) >= 15, timeout_s=60)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    finally:
        for a in agents:
            a.stop()
        fog.stop()
    rec.close()
    reports = defaultdict(list)
    for m in rec.on("rase/v1/reports/"):
        p = json.loads(m.payload)
        reports[p["t"]].append(p["y"])
    windows = [WindowMessage.model_validate_json(m.payload) for m in rec.on("rase/v1/windows/")]
    assert len({w.t for w in windows}) == len(windows)        # each window once
    full = [w for w in windows if w.n == 27]
    assert len(full) >= 10
    for w in windows:
        raw = json.loads(rec.on("rase/v1/windows/")[windows.index(w)].payload)
        assert set(raw) == set(WindowMessage.model_fields)     # nothing beyond the schema on the wire
        # The multiset of what the agents sent for t (all of it when the window is
        # full; a report that arrives after its window closed is counted late).
        assert not Counter(w.values) - Counter(reports[w.t])
        if w.n == 27:
            assert sorted(w.values) == sorted(reports[w.t])
        # One eps level on the menu: one batch, and no per-position eps anywhere.
        assert w.region == "r1" and [b.eps for b in w.batches] == [1.0]
        assert set(raw["batches"][0]) == set(LevelBatch.model_fields)
    for w in full:
        # Three houses of nine appliances: components of width 8, k = ceil(27/9) = 3,
        # Delta_K = 36 in [2, 40] (the fog's default alpha 2) so Mallows with theta = 2/36.
        b = w.batches[0]
        assert (b.mechanism, b.omega, b.delta_k, b.k) == ("mallows", 8, 36, 3)
        assert b.theta == pytest.approx(2 / 36)
        assert b.groups == [(0, 8), (9, 17), (18, 26)]
        # A Mallows order promises d_sigma privacy, and the window says so instead of an eps.
        assert b.guarantee["kind"] == "d_sigma" and b.guarantee["eps"] is None
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in metrics.splitlines()
              if line and not line.startswith("#")}
    assert values["rase_fog_reports_accepted_total"] >= 27 * 10
    assert values['rase_fog_windows_forwarded_total{mechanism="mallows"}'] >= 10
    assert values["rase_fog_window_size_count"] >= 10 and values["rase_fog_shuffle_seconds_count"] >= 10
    body = b"".join(m.payload for m in rec.on("rase/v1/windows/"))
    assert b"h1a" not in body and b"seq" not in body and b"device" not in body
