"""One source of truth: the fusion center's [precision] changes mid-run (range
4000 -> 3000 W, eps menu [1] -> [0.5]) while the fog's own config still says
the old values. The agents recalibrate, the fog follows the control message
(and says its config drifted), and no good report is dropped: every report
the agents sent is in a window."""

import json
import time
from collections import Counter

import pytest

from edge_agent.config import AgentConfig
from edge_agent.service import AgentService
from fog_shuffler.config import FogConfig
from rase_common.protocol.window import WindowMessage
from fog_shuffler.service import FogService
from fusion_center.config import FusionConfig
from fusion_center.service import FusionService
from rase_common.clock import ScaledClock
from simulators.refit import RefitColumnSource, bundled_dir, epoch0_of, load_house
from tests.mqtt_helpers import Recorder, ServiceThread, publish_retained

pytestmark = pytest.mark.integration


def fusion_toml(path, port, epoch0, x_max, levels, store):
    path.write_text(f'name = "pc"\nregions = ["r1"]\nmerge_deadline_s = 80\nbootstrap_b = 100\n'
                    f'store_path = "{store}"\n[precision]\nx_max = {x_max}\nperiod_s = 8.0\nepoch0 = {epoch0}\n'
                    f"eps_levels = {levels}\n[broker]\nport = {port}\n")


def test_a_precision_change_mid_run_drops_no_good_report(mosquitto, tmp_path):
    house = load_house(bundled_dir(), 1)
    epoch0 = epoch0_of([house], 8.0)
    clock = ScaledClock(epoch0 + 8 * 3600, 40.0)
    broker = {"port": mosquitto.port}
    cfg_path = tmp_path / "fusion.toml"
    fusion_toml(cfg_path, mosquitto.port, epoch0, 4000.0, [1.0], tmp_path / "fusion.sqlite")
    # At 40x a period is 0.2 s: 12 periods of lateness (2.4 s) keep a loaded machine's slow reports in their
    # windows (with 4, 2 of 9 runs beside two other copies lost a report to an under-k_min late batch).
    fog_svc = FogService(FogConfig.load(None, name="pc", regions={"r1": {"refit_houses": [1]}}, period_s=8.0,
                                        epoch0=epoch0, k_min=5, lateness_periods=12, eps_levels=[1.0], x_max=4000.0,
                                        journal_path=tmp_path / "fog.sqlite", broker=broker), clock=clock)
    rec = Recorder(mosquitto.port, ["rase/v1/windows/#", "rase/v1/reports/#"], persistent=False)
    fusion = ServiceThread(FusionService(FusionConfig.load(cfg_path), config_path=cfg_path, clock=clock))
    fog = ServiceThread(fog_svc)
    agents = []
    try:
        # A new session gets only what is published after its SUBACK.
        assert rec.wait_for(lambda: fog_svc.subscribed, timeout_s=20)
        for dev in house.device_ids():
            cfg = AgentConfig.load(None, device=dev, region="r1", eps=1.0, period_s=8.0, epoch0=epoch0,
                                   ledger_path=tmp_path / f"{dev}.json", broker=broker)
            agents.append(ServiceThread(AgentService(cfg, source=RefitColumnSource(house, dev), clock=clock)))
        assert rec.wait_for(lambda: len(rec.on("rase/v1/windows/")) >= 5, timeout_s=60)
        time.sleep(1.1)   # the config watcher compares modification times
        fusion_toml(cfg_path, mosquitto.port, epoch0, 3000.0, [0.5], tmp_path / "fusion.sqlite")
        assert rec.wait_for(lambda: any(json.loads(m.payload)["eps"] == 0.5 for m in rec.on("rase/v1/reports/")),
                            timeout_s=30)
        n = len(rec.on("rase/v1/windows/"))
        assert rec.wait_for(lambda: len(rec.on("rase/v1/windows/")) >= n + 8, timeout_s=60)
    finally:
        for a in agents:
            a.stop()
        time.sleep(0.3)
        fog.stop()
        fusion.stop()
        publish_retained(mosquitto.port, "rase/v1/control/precision", b"")
    rec.close()
    reports = [(m.topic.rsplit("/", 1)[1], json.loads(m.payload)) for m in rec.on("rase/v1/reports/")]
    windows = [WindowMessage.model_validate_json(m.payload) for m in rec.on("rase/v1/windows/")]
    assert {r["eps"] for _, r in reports} == {1.0, 0.5}             # the change happened mid-run
    m = fog_svc.metrics
    assert m.value("reports_rejected", reason="eps_not_on_menu") == 0
    assert m.value("reports_rejected", reason="implausible_y") == 0
    assert m.value("reports_rejected", reason="impossible_y") == 0
    assert m.registry.get_sample_value("rase_fog_config_drift", {"field": "x_max"}) == 1
    # Every report of a forwarded window's t is in that window: none dropped across the change.
    sent = Counter((r["t"], r["y"]) for _, r in reports)
    closed = {w.t for w in windows}
    got = Counter((w.t, v) for w in windows for v in w.values)
    assert +Counter({k: c for k, c in sent.items() if k[0] in closed}) == got
    assert {b.eps for w in windows for b in w.batches} == {1.0, 0.5}


def fusion_toml_period(path, port, epoch0, period_s, store):
    path.write_text(f'name = "sc"\nregions = ["r1"]\nmerge_deadline_s = 80\nbootstrap_b = 100\n'
                    f'schedule_lead_periods = 2\nstore_path = "{store}"\n[precision]\nperiod_s = {period_s}\n'
                    f"epoch0 = {epoch0}\neps_levels = [1.0]\n[broker]\nport = {port}\n")


def test_an_operators_period_change_mid_run_silences_no_device(mosquitto, tmp_path):
    """[precision] period_s 8 -> 16 s edited mid-run (a slower period used to
    make t jump backwards and silence every device): the change is announced
    at a stated t, t runs on, every device goes on reporting every t, and every
    good report reaches its window."""
    house = load_house(bundled_dir(), 1)
    epoch0 = epoch0_of([house], 8.0)
    clock = ScaledClock(epoch0 + 8 * 3600, 40.0)
    broker = {"port": mosquitto.port}
    cfg_path = tmp_path / "fusion.toml"
    fusion_toml_period(cfg_path, mosquitto.port, epoch0, 8.0, tmp_path / "fusion.sqlite")
    fog_svc = FogService(FogConfig.load(None, name="sc", regions={"r1": {"refit_houses": [1]}}, period_s=8.0,
                                        epoch0=epoch0, k_min=5, lateness_periods=4, journal_path=tmp_path / "fog.sqlite",
                                        broker=broker, control_policy={"period_max_s": 60.0}), clock=clock)
    rec = Recorder(mosquitto.port, ["rase/v1/windows/#", "rase/v1/reports/#", "rase/v1/control/#"], persistent=False)
    fusion = ServiceThread(FusionService(FusionConfig.load(cfg_path), config_path=cfg_path, clock=clock))
    fog = ServiceThread(fog_svc)
    agents = []
    try:
        assert rec.wait_for(lambda: fog_svc.subscribed, timeout_s=20)
        for dev in house.device_ids():
            cfg = AgentConfig.load(None, device=dev, region="r1", eps=1.0, period_s=8.0, epoch0=epoch0,
                                   ledger_path=tmp_path / f"{dev}.json", broker=broker)
            agents.append(ServiceThread(AgentService(cfg, source=RefitColumnSource(house, dev), clock=clock)))
        assert rec.wait_for(lambda: len(rec.on("rase/v1/windows/")) >= 4, timeout_s=60)
        time.sleep(1.1)   # the config watcher compares modification times
        fusion_toml_period(cfg_path, mosquitto.port, epoch0, 16.0, tmp_path / "fusion.sqlite")
        assert rec.wait_for(lambda: any(json.loads(m.payload).get("since_t") for m in rec.on("rase/v1/control/")
                                        if m.payload), timeout_s=30)
        since = [json.loads(m.payload) for m in rec.on("rase/v1/control/") if m.payload][-1]["since_t"]
        assert rec.wait_for(lambda: max((WindowMessage.model_validate_json(m.payload).t
                                         for m in rec.on("rase/v1/windows/")), default=0) >= since + 6, timeout_s=60)
    finally:
        for a in agents:
            a.stop()
        time.sleep(0.3)
        fog.stop()
        fusion.stop()
        publish_retained(mosquitto.port, "rase/v1/control/precision", b"")
    rec.close()
    reports = [(m.topic.rsplit("/", 1)[1], json.loads(m.payload)) for m in rec.on("rase/v1/reports/")]
    windows = [WindowMessage.model_validate_json(m.payload) for m in rec.on("rase/v1/windows/")]
    by_device: dict = {}
    for dev, r in reports:
        by_device.setdefault(dev, []).append(r["t"])
    for dev, ts in by_device.items():
        after = sorted(t for t in ts if since - 1 <= t <= since + 5)
        # every t across the switch (a REFIT gap elsewhere may leave a t without a reading)
        assert after == list(range(since - 1, since + 6)), f"{dev} skipped a t across the change: {after}"
        assert len(ts) == len(set(ts)), f"{dev} reported a t twice"
    assert fog_svc.metrics.value("reports_rejected", reason="t_out_of_range") == 0
    sent = Counter((r["t"], r["y"]) for _, r in reports)
    got = Counter((w.t, v) for w in windows for v in w.values)
    closed = {w.t for w in windows}
    assert +Counter({k: c for k, c in sent.items() if k[0] in closed}) == got
