"""No silent failure modes, on a real Mosquitto with the real fog and agent:
a device the fog does not know hears so on its own feedback topic (and only
it), logs one clear line and counts the rejections in its retained status;
an agent whose eps is not on the menu says so in its log and its status;
the status carries made and delivered reports."""

from __future__ import annotations

import json
import logging
import time

import pytest

from edge_agent import service as agent_service
from edge_agent.config import AgentConfig
from edge_agent.service import AgentService
from fog_shuffler.config import FogConfig
from fog_shuffler.service import FogService
from rase_common.clock import ScaledClock
from rase_common.protocol.control import ControlMessage
from rase_common.protocol.report import Feedback, Receipt, Status
from tests.mqtt_helpers import Recorder, ServiceThread, publish_retained

pytestmark = pytest.mark.integration
REGISTERED = [f"g{i:02d}" for i in range(12)]


class ConstSource:
    def read(self, now):
        return 250.0


def agent(tmp_path, port, device, eps=1.0):
    cfg = AgentConfig.load(None, device=device, region="r1", eps=eps, period_s=8.0,
                           ledger_path=tmp_path / f"{device}.json", broker={"port": port})
    return AgentService(cfg, source=ConstSource(), clock=ScaledClock(time.time(), 40.0))


def statuses(rec, device):
    return [Status.model_validate_json(m.payload) for m in rec.on(f"rase/v1/status/{device}") if m.payload]


def test_an_unregistered_device_hears_why_its_reports_are_rejected(mosquitto, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    fog_cfg = FogConfig.load(None, name="diag", regions={"r1": {"devices": REGISTERED}}, period_s=8.0,
                             journal_path=tmp_path / "fog.sqlite", broker={"port": mosquitto.port})
    fog = FogService(fog_cfg, clock=ScaledClock(time.time(), 40.0))
    rec = Recorder(mosquitto.port, ["rase/v1/feedback/#", "rase/v1/status/#"], persistent=False)
    fog_run = ServiceThread(fog)
    svc = agent(tmp_path, mosquitto.port, "stranger")
    known = agent(tmp_path, mosquitto.port, REGISTERED[0])
    try:
        deadline = time.monotonic() + 10
        while not fog.subscribed and time.monotonic() < deadline:
            time.sleep(0.02)
        runs = [ServiceThread(svc), ServiceThread(known)]
        try:
            assert rec.wait_for(lambda: getattr(svc, "transport", None) is not None and svc.transport.feedback.count("stranger") >= 1, 20)
            assert rec.wait_for(lambda: any(s.counts and s.counts.rejected_by_fog >= 1
                                            for s in statuses(rec, "stranger")), 10)
            time.sleep(1.0)                              # more rejected reports: no more feedback within a minute
        finally:
            for run in runs:
                run.stop()
    finally:
        fog_run.stop()
        rec.close()
    # Only the stranger was told, once, on its own topic, with the reason and nothing about anyone else;
    # the registered device had receipts for its reports (fog_shuffler.receipts) on its own topic only.
    feedback = rec.on("rase/v1/feedback/")
    receipts = [m for m in feedback if b'"kept"' in m.payload]
    told = [m for m in feedback if m not in receipts]
    assert [m.topic for m in told] == ["rase/v1/feedback/r1/stranger"]
    assert receipts and {m.topic for m in receipts} == {f"rase/v1/feedback/r1/{REGISTERED[0]}"}
    assert all(Receipt.model_validate_json(m.payload).late == 0 for m in receipts)
    fb = Feedback.model_validate_json(told[0].payload)
    assert fb.reason == "unknown_device" and fb.detail == "r1/stranger"
    assert fog.metrics.value("reports_rejected", reason="unknown_device") > 1
    lines = [r.getMessage() for r in caplog.records if "rejects this device's reports" in r.getMessage()]
    assert len(lines) == 1 and "agent=stranger" in lines[0] and "unknown_device" in lines[0]
    assert "register it in the fog's config" in lines[0]
    # The registered device was never told anything, and its stop line counts what it made and delivered.
    stop = [r.getMessage() for r in caplog.records if f"agent={REGISTERED[0]} stopped" in r.getMessage()][-1]
    made = int(stop.split("made=")[1].split()[0])
    assert made > 0 and f"delivered={made}" in stop and "rejected_by_fog=0" in stop


def test_an_agent_whose_eps_is_not_on_the_menu_says_so(mosquitto, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    publish_retained(mosquitto.port, "rase/v1/control/precision",
                     ControlMessage(eps_levels=[1.0]).model_dump_json(exclude_none=True))
    rec = Recorder(mosquitto.port, ["rase/v1/status/#", "rase/v1/reports/#"], persistent=False)
    svc = agent(tmp_path, mosquitto.port, "lowe", eps=0.5)
    run = ServiceThread(svc)
    try:
        assert rec.wait_for(lambda: any(s.state == "no_eps_level" for s in statuses(rec, "lowe")), 15)
        time.sleep(0.5)                                  # a few periods pass: still nothing sent
    finally:
        run.stop()
        rec.close()
    assert svc.core.sent == 0 and rec.on("rase/v1/reports/") == []
    lines = [r.getMessage() for r in caplog.records if "sends nothing" in r.getMessage()]
    assert lines == ["agent=lowe sends nothing: its eps 0.5 is below every level of the menu [1.0] (the fusion "
                     "center's [precision] eps_levels); set eps >= 1 in the agent's config, or add a level <= 0.5 "
                     "to the menu"]


def test_the_status_carries_made_and_delivered(mosquitto, tmp_path, monkeypatch):
    monkeypatch.setattr(agent_service, "STATUS_EVERY_REPORTS", 5)
    rec = Recorder(mosquitto.port, ["rase/v1/status/#"], persistent=False)
    svc = agent(tmp_path, mosquitto.port, "counted")
    run = ServiceThread(svc)
    try:
        assert rec.wait_for(lambda: sum(1 for s in statuses(rec, "counted") if s.counts and s.counts.made >= 10)
                            >= 1, 20)
    finally:
        run.stop()
        rec.close()
    counted = [s.counts for s in statuses(rec, "counted") if s.counts is not None]
    assert all(c.delivered <= c.made for c in counted)
    assert counted[-1].made >= 10 and counted[-1].delivered >= counted[-1].made - svc.cfg.max_inflight
    assert json.loads(rec.on("rase/v1/status/counted")[-1].payload)["state"] == "offline"
