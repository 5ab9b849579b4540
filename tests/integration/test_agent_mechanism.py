"""A running CPython agent switches its device mechanism when the retained
control message names one (real Mosquitto)."""

import json

import pytest

from rase_device.randomizer import Calibration
from rase_common.protocol.report import Report
from rase_common.mechanisms import mechanism
from rase_common.protocol.control import ControlMessage
from tests.integration.test_agent_mosquitto import agent
from tests.mqtt_helpers import Recorder, ServiceThread, publish_retained

pytestmark = pytest.mark.integration


def test_control_message_switches_a_running_agent_to_duchi(mosquitto, tmp_path):
    rec = Recorder(mosquitto.port, ["rase/v1/reports/r1/mech1"], persistent=False)
    svc = agent(tmp_path, mosquitto.port, device="mech1")
    run = ServiceThread(svc)
    control = ControlMessage(x_min=0.0, x_max=500.0, gamma=5.0, eps_levels=[0.5], mechanism="duchi")
    try:
        assert rec.wait_for(lambda: len(rec.messages) >= 2)
        publish_retained(mosquitto.port, "rase/v1/control/precision", control.model_dump_json())
        assert rec.wait_for(lambda: any(json.loads(m.payload)["eps"] == 0.5 for m in rec.messages))
        n_before = len(rec.messages)
        assert rec.wait_for(lambda: len(rec.messages) >= n_before + 8)
    finally:
        run.stop()
        publish_retained(mosquitto.port, "rase/v1/control/precision", b"")  # clear the retained message
    assert svc.core.mechanism == "duchi"
    reps = [Report.model_validate_json(m.payload) for m in rec.messages]
    after = [r.y for r in reps if r.eps == 0.5]
    cal = Calibration(x_min=0.0, x_max=500.0, gamma=5.0)
    duchi = sorted(float(v) for v in mechanism("duchi").report_values(cal, 0.5).values())
    # Only Duchi's two reports, center -+ half C (C = 4.08 at eps 0.5): outside [0, 500].
    assert all(min(abs(y - v) for v in duchi) < 1e-6 for y in after), (after, duchi)
    assert duchi[0] < 0 and duchi[1] > 500
