"""Secure aggregation end to end (issue 20): real device cores (pure-Python
Prio3 and HPKE) -> real Mosquitto -> the fog as Prio3's leader -> the fusion
center as helper and collector, for Sum, Count and Histogram; the fog ->
fusion path through Tansu (Kafka) too.

- With the test-only setting that switches noise off, the published total is
  exactly the sum of the accepted measurements, and a registered device's
  out-of-range report with a forged proof is rejected and counted.
- What the fusion center receives (on the wire) carries no device id and no
  report topic; the fog's journal keeps no device with a closed window's shares.
"""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from fog_shuffler.config import FogConfig
from fog_shuffler.service import FogService
from fusion_center.config import FusionConfig
from fusion_center.service import FusionService
from rase_common.protocol.aggregate import Aggregate
from rase_common.protocol.prio3 import Prio3Statement
from tests.integration.secagg_support import AckedPublisher, Deployment, forged_report, wait, window_reports
from tests.mqtt_helpers import Recorder, ServiceThread

pytestmark = pytest.mark.integration
READINGS = [0.0, 3.0, 9.6, 10.4, 55.0, 99.5, 100.0, 250.0, 999.0, 1000.2, 2500.0, 4200.0]   # 4200: clipped


def run_window(dep: Deployment, port: int, *, forged: bool, fog_extra=None, fusion_extra=None,
               recorder_topics=("rase/v1/windows/#", "rase/v1/prio3/statements/#")
               ) -> tuple[Aggregate, Recorder, FogService]:
    fog = ServiceThread(FogService(FogConfig.load(None, **dep.fog_settings(port, **(fog_extra or {})))))
    fusion = ServiceThread(FusionService(FusionConfig.load(None, **dep.fusion_settings(port, **(fusion_extra or {})))))
    rec = Recorder(port, list(recorder_topics))
    pub = AckedPublisher(port, f"sa-pub-{dep.kind}")
    try:
        assert wait(lambda: fog.service.subscribed and fusion.service.connected, 20)
        cores = dep.cores()
        now = time.time()
        t = int(now // dep.period_s)
        reports = window_reports(dep, cores[:-1] if forged else cores, READINGS[:len(cores) - forged], now)
        if forged:   # the last device lies: its report is well formed, its proof false
            reports.append((cores[-1].topic, forged_report(dep, t)))
        for topic, payload in reports:
            pub.send(topic, payload)
        assert wait(lambda: fusion.service.store.count() >= 1, 60), "no aggregate published"
        row = fusion.service.store.recent("all", t, t)
        assert row, fusion.service.store.recent("all", 0, 1 << 40)
        # The fog states its own account on its topic, and compares the published aggregate with it.
        leader = fog.service.roles.get("prio3").leader
        assert wait(lambda: rec.on("rase/v1/prio3/statements/") and leader.checked >= 1, 30)
        return Aggregate.model_validate(row[0]), rec, fog.service
    finally:
        pub.close()
        fog.stop()
        fusion.stop()


@pytest.mark.parametrize("kind", ["sum", "count", "histogram"])
def test_the_published_total_is_the_exact_sum_of_the_accepted_reports_and_a_forged_one_is_counted(
        kind, mosquitto, tmp_path):
    dep = Deployment(tmp_path, kind=kind)
    agg, rec, fog = run_window(dep, mosquitto.port, forged=True)
    honest = READINGS[:len(dep.devices) - 1]
    truth = [dep.measurement(x) for x in honest]
    s = agg.prio3
    assert (agg.n, s.received, s.accepted) == (len(honest), len(honest) + 1, len(honest))
    assert s.rejected == {"proof_invalid": 1}
    assert s.noise["draws"] == 0 and s.noise["off_for_tests"] == "yes"
    if kind == "sum":
        assert s.total == sum(truth)
        assert agg.estimates["mean"].value == pytest.approx(sum(truth) / len(truth))
        assert agg.estimates["mean"].ci == (agg.estimates["mean"].value, agg.estimates["mean"].value)
    elif kind == "count":
        assert s.total == sum(truth) == agg.estimates["count"].value
    else:
        assert s.counts == [float(truth.count(b)) for b in range(len(s.counts))]
        assert [f.value for f in agg.frequencies] == pytest.approx([truth.count(b) / len(truth) for b in range(4)])
    assert s.wall_clock.t_end - s.wall_clock.t_start == dep.period_s and s.privacy["eps_per_release"] == 1.0
    # Every wall-clock field and the privacy unit (issue 26), and each party's view of the window.
    assert (agg.t_start, agg.t_end, agg.period_s) == (s.wall_clock.t_start, s.wall_clock.t_end, dep.period_s)
    assert agg.t_start_iso.endswith("Z") and agg.t_end_iso.endswith("Z")
    assert agg.privacy_unit.eps_per_report == 1.0 and agg.privacy_unit.central_eps == 1.0
    assert (agg.clipping is not None) == (kind == "sum")
    views = s.regions[dep.region]
    assert views.leader.received == views.helper.received == len(honest) + 1
    assert views.leader.accepted == views.helper.accepted == len(honest) and s.discrepancies == {}
    (statement,) = [Prio3Statement.model_validate_json(m.payload) for m in rec.on("rase/v1/prio3/statements/")]
    assert (statement.t, statement.received, statement.accepted) == (agg.t, len(honest) + 1, agg.n)
    assert statement.leader_rejected == {"proof_invalid": 1} and statement.discrepancies == {}
    assert not any(s.value for m in fog.metrics.registry.collect() if m.name == "rase_fog_prio3_helper_discrepancies"
                   for s in m.samples)
    # What the fusion center was sent: batches and shares without a device id or a report's topic.
    sent = [m.payload for m in rec.on("rase/v1/windows/")]
    assert sent and all(json.loads(p)["type"] in ("prio3_batch", "prio3_share") for p in sent)
    for payload in sent:
        text = payload.decode()
        assert not any(d in text for d in dep.devices) and "rase/v1/reports" not in text
        assert set(json.loads(payload)) <= {"type", "v", "region", "part", "t", "total", "first", "count", "params",
                                            "nonces", "public_shares", "sealed", "leader_verifier_shares", "leader_live",
                                            "ingest_rejected", "leader_accepted", "accepted", "accepted_digest",
                                            "agg_share", "dropped", "leader_rejected", "noise_draws", "statement"}
        statement = json.loads(payload).get("statement") or {}      # the leader's account: counts only
        assert set(statement) <= set(Prio3Statement.model_fields)
    # The fog keeps no device beside a closed window's shares.
    db = sqlite3.connect(tmp_path / "fog.sqlite")
    assert db.execute("SELECT COUNT(*) FROM prio3_open").fetchone()[0] == 0
    assert "device" not in [c[1] for c in db.execute("PRAGMA table_info(prio3_batch_blob)")]


def test_with_noise_the_total_is_near_the_truth_and_its_interval_is_the_exact_one(mosquitto, tmp_path):
    """Noise on (the fog's and the fusion center's, from os.urandom): two draws
    of scale 4000 grid steps; the statistics are in the seeded unit tests
    (tests/unit/fusion_center/prio3/test_helper.py), here the published interval is
    the exact one for two draws and the error is within 40 scales (a bound
    that fails with probability below 1e-15)."""
    from rase_common.mechanisms.prio3 import noise_law

    dep = Deployment(tmp_path, noise=True)
    agg, _, _ = run_window(dep, mosquitto.port, forged=False)
    truth = sum(dep.measurement(x) for x in READINGS)
    law = noise_law(4000, 1.0, 2)
    assert agg.prio3.noise["draws"] == 2 and agg.prio3.noise["scale_per_draw"] == law.scale
    assert abs(agg.prio3.total - truth) < 40 * law.scale
    lo, hi = agg.estimates["mean"].ci
    assert (hi - lo) / 2 == pytest.approx(law.half_width(0.95) / agg.n)


def test_fog_to_fusion_through_tansu(mosquitto, tansu, tmp_path):
    """The batch, the helper's answer and the leader's share all travel through
    Kafka (rase.windows and rase.prio3.verify); devices still use MQTT."""
    dep = Deployment(tmp_path, kind="count")
    kafka = {"bootstrap_servers": tansu.bootstrap, "idempotent": False}
    agg, _, _ = run_window(dep, mosquitto.port, forged=True, fog_extra={"sink": "kafka", "kafka": kafka},
                        fusion_extra={"source": "kafka", "kafka": kafka})
    truth = [dep.measurement(x) for x in READINGS[:len(dep.devices) - 1]]
    assert agg.prio3.total == sum(truth) and agg.n == len(truth) and agg.prio3.rejected == {"proof_invalid": 1}


class ConstantSensor:
    def read(self, now: float) -> float:
        return 1234.0


def test_a_real_agent_ignores_a_forged_control_message_with_another_key_id(mosquitto, tmp_path):
    """A CPython agent (paho) flashed with the helper's key: a retained control
    message naming another key id is refused whole (status control_rejected,
    no report: the device has no kind to report), the genuine one is applied,
    and its reports open under the pinned key only."""
    import asyncio
    import threading

    from edge_agent.config import AgentConfig
    from edge_agent.service import AgentService
    from rase_common.protocol.prio3 import Prio3BinaryReport
    from rase_common.secagg import read_key
    from rase_common.vdaf import open_helper_shares
    from tests.mqtt_helpers import publish_retained

    dep = Deployment(tmp_path, period_s=1.0)
    forged = json.loads(dep.control.model_dump_json())
    forged["prio3"]["key_id"] = "attacker-key"
    publish_retained(mosquitto.port, "rase/v1/control/precision", json.dumps(forged))
    rec = Recorder(mosquitto.port, ["rase/v1/reports/#", "rase/v1/status/#"])
    cfg = AgentConfig.load(None, device="sa-dev-00", region="r1", mechanism="prio3", period_s=1.0,
                           ledger_path=str(tmp_path / "ledger.json"), broker={"port": mosquitto.port},
                           policy={"prio3_key_id": dep.keys["key_id"], "prio3_public_key": dep.keys["public_key"]})
    agent = AgentService(cfg, source=ConstantSensor(), control_grace_s=0.2, give_up_s=2.0)
    stop = asyncio.Event()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=lambda: loop.run_until_complete(agent.run(stop)), daemon=True)
    thread.start()
    try:
        assert rec.wait_for(lambda: any(b"control_rejected" in m.payload for m in rec.on("rase/v1/status/")), 20)
        time.sleep(2.5)                                     # periods pass: the refused message changed nothing
        assert rec.on("rase/v1/reports/") == [] and agent.core.randomizer is None
        publish_retained(mosquitto.port, "rase/v1/control/precision", dep.control.model_dump_json())
        assert rec.wait_for(lambda: len(rec.on("rase/v1/reports/")) >= 2, 20)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(20)
        rec.close()
    sk = read_key(dep.keys["private_key_file"], "helper key")
    for m in rec.on("rase/v1/reports/"):
        rep = Prio3BinaryReport.from_bytes(m.payload, dep.params.report_sizes())    # what the agent sends (issue 30)
        assert open_helper_shares(sk, dep.params.ctx("r1", rep.t), [rep.nonce], [rep.pub], [rep.sealed])[0] is not None
