"""The CPython agent against a real Mosquitto: reports, broker restart, control."""

import json
import time

import pytest

from edge_agent.config import AgentConfig
from rase_common.protocol.report import Report, Status
from edge_agent.service import AgentService
from rase_common.clock import ScaledClock
from tests.mqtt_helpers import Recorder, ServiceThread, publish_retained

pytestmark = pytest.mark.integration


class ConstSource:
    def __init__(self, value):
        self.value = value

    def read(self, now):
        return self.value


def agent(tmp_path, port, device="dev1", speedup=80.0, **kw):
    kw.setdefault("mechanism", "br")      # the checks below are BR's grid and clamp range
    cfg = AgentConfig.load(None, device=device, region="r1", eps=1.0, period_s=8.0,
                           ledger_path=tmp_path / f"{device}.json", broker={"port": port}, **kw)
    return AgentService(cfg, source=ConstSource(1000.0), clock=ScaledClock(1_700_000_000.0, speedup))


def test_agent_publishes_well_formed_reports(mosquitto, tmp_path):
    rec = Recorder(mosquitto.port, ["rase/v1/reports/#", "rase/v1/status/#"], persistent=False)
    run = ServiceThread(agent(tmp_path, mosquitto.port, device="wf1"))
    try:
        assert rec.wait_for(lambda: len(rec.on("rase/v1/reports/r1/wf1")) >= 15)
    finally:
        run.stop()
    reports = [Report.model_validate_json(m.payload) for m in rec.on("rase/v1/reports/r1/wf1")]
    assert [r.seq for r in reports] == list(range(1, len(reports) + 1))
    ts = [r.t for r in reports]
    assert ts == sorted(set(ts))                     # one report per timestamp
    assert all(r.eps == 1.0 and 0 <= r.y <= 4000 and float(r.y).is_integer() for r in reports)
    def states() -> list[str]:
        return [Status.model_validate_json(m.payload).state for m in rec.on("rase/v1/status/wf1")]
    # The "offline" status is published as the agent stops: it may reach the recorder after stop() returns.
    rec.wait_for(lambda: states()[-1:] == ["offline"])
    assert states()[0] == "online" and states()[-1] == "offline"
    rec.close()


def test_reports_made_while_the_broker_is_down_arrive_after_restart(own_mosquitto, tmp_path):
    broker = own_mosquitto
    rec = Recorder(broker.port, ["rase/v1/reports/#"], client_id="restart-recorder", persistent=True)
    svc = agent(tmp_path, broker.port, device="rs1")
    run = ServiceThread(svc)
    try:
        assert rec.wait_for(lambda: len(rec.on("rase/v1/reports/")) >= 10)
        broker.stop()
        seq_at_stop = svc.core.seq
        time.sleep(2.5)                                 # ~25 periods produced offline
        seq_at_restart = svc.core.seq
        assert seq_at_restart - seq_at_stop >= 10, "agent did not keep producing while the broker was down"
        assert len(svc.core.outbox) > 0
        broker.start()
        assert rec.wait_for(lambda: svc.transport.connects >= 2 and len(svc.core.outbox) == 0
                            and svc.transport.inflight == 0, timeout_s=30)
    finally:
        run.stop()
    produced = svc.core.seq
    assert rec.wait_for(lambda: {json.loads(m.payload)["seq"] for m in rec.on("rase/v1/reports/")}
                        >= set(range(1, produced + 1)), timeout_s=20)
    seqs = {json.loads(m.payload)["seq"] for m in rec.on("rase/v1/reports/")}
    missing = set(range(1, produced + 1)) - seqs
    assert not missing, f"{len(missing)} of {produced} reports lost: {sorted(missing)[:10]}"
    assert svc.core.outbox.dropped == 0
    rec.close()


def test_control_message_recalibrates_a_running_agent(mosquitto, tmp_path):
    rec = Recorder(mosquitto.port, ["rase/v1/reports/r1/ctl1"], persistent=False)
    svc = agent(tmp_path, mosquitto.port, device="ctl1")
    run = ServiceThread(svc)
    try:
        assert rec.wait_for(lambda: len(rec.messages) >= 3)
        control = {"v": 1, "beta": 0.5, "rho": 0.9, "x_min": 0, "x_max": 500, "gamma": 5,
                   "period_s": 8, "eps_levels": [0.25, 0.5], "mechanism": "br"}
        publish_retained(mosquitto.port, "rase/v1/control/precision", json.dumps(control))
        assert rec.wait_for(lambda: any(json.loads(m.payload)["eps"] == 0.5 for m in rec.messages))
        n_before = len(rec.messages)
        assert rec.wait_for(lambda: len(rec.messages) >= n_before + 5)
    finally:
        run.stop()
        publish_retained(mosquitto.port, "rase/v1/control/precision", b"")  # clear the retained message
    reps = [Report.model_validate_json(m.payload) for m in rec.messages]
    first_new = next(i for i, r in enumerate(reps) if r.eps == 0.5)
    assert all(r.eps == 1.0 for r in reps[:first_new])
    after = reps[first_new:]
    assert all(r.eps == 0.5 and 0 <= r.y <= 500 and r.y % 5 == 0 for r in after)
