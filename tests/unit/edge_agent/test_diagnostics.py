"""What an agent says when it cannot report: one line per change, devices in
the same state together, and the fog's feedback once per reason."""

import json
import logging

from rase_device.core import AgentCore
from edge_agent.diagnostics import FeedbackWatch, StatusWatch, problem_line
from rase_device.ledger import BudgetLedger
from rase_device.randomizer import Calibration
from rase_common.protocol.control import ControlMessage


def core(tmp_path, device, eps=1.0, budget=100.0):
    return AgentCore(device=device, region="r1", eps=eps, calibration=Calibration(),
                     ledger=BudgetLedger(str(tmp_path / f"{device}.json"), budget, 86400.0))


def test_no_eps_level_is_one_line_for_every_device_in_it(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    cores = [core(tmp_path, f"d{i}", eps=0.5) for i in range(8)]
    control = ControlMessage(eps_levels=[1.0, 2.0]).model_dump_json()
    for c in cores:
        c.apply_control(control)
    watch = StatusWatch(logging.getLogger("t"))
    watch.check(cores)
    watch.check(cores)                                 # no change: nothing more
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs == ["agents d0, d1, d2, d3, d4, d5 and 2 more send nothing: their eps 0.5 is below every level "
                    "of the menu [1.0, 2.0] (the fusion center's [precision] eps_levels); set eps >= 1 in the "
                    "agent's config, or add a level <= 0.5 to the menu"]
    for c in cores:
        c.apply_control(ControlMessage(eps_levels=[0.5]).model_dump_json())
    watch.check(cores)
    assert caplog.records[-1].getMessage().startswith("agents d0, d1") and "reporting again" in \
        caplog.records[-1].getMessage()


def test_a_spent_budget_says_how_much_and_until_when(tmp_path):
    c = core(tmp_path, "b1", budget=2.0)
    for k in range(4):
        c.step(100.0, 1_700_000_000.0 + 8 * k)
    assert c.status == "budget_exhausted"
    line = problem_line("budget_exhausted", [c])
    assert line.startswith("agent=b1 sends nothing until the next budget period: its budget of 2 eps per 86400 s")


def test_feedback_is_counted_every_time_and_said_once_per_reason(caplog):
    caplog.set_level(logging.INFO)
    fw = FeedbackWatch(logging.getLogger("t"), repeat_s=600)
    msg = json.dumps({"v": 1, "reason": "unknown_device", "detail": "r1/x", "rejected": 7}).encode()
    fw.on_feedback("x", msg)
    fw.on_feedback("x", msg)
    fw.on_feedback("x", b"not json")
    assert fw.count("x") == 14
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "unknown_device (r1/x)" in said[0] and "malformed" in said[1]
