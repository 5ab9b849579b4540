"""AgentCore: reports on the wire, one per timestamp, recalibration, outbox."""

import json
import random

import pytest

from rase_device import wire
from rase_device.core import AgentCore
from rase_device.entropy import RandomBits
from rase_device.ledger import BudgetLedger
from rase_device.outbox import Outbox
from rase_device.randomizer import Calibration
from rase_common.protocol.report import Report, Status


def make_core(tmp_path, budget=100.0, eps=1.0, **kw):
    return AgentCore(device="h1a1", region="r1", eps=eps,
                     ledger=BudgetLedger(str(tmp_path / "l.json"), budget, 86400),
                     calibration=Calibration(), period_s=8, epoch0=0,
                     bits=RandomBits(read=random.Random(1).randbytes), **kw)


def test_report_is_valid_and_compact(tmp_path):
    core = make_core(tmp_path)
    payload = core.step(100.0, 80.5)
    rep = Report.model_validate_json(payload)
    assert (rep.t, rep.eps, rep.seq) == (10, 1.0, 1)
    assert " " not in payload
    assert core.outbox.peek() == ("rase/v1/reports/r1/h1a1", payload)


def test_one_report_per_timestamp(tmp_path):
    core = make_core(tmp_path)
    assert core.step(1.0, 8.0) is not None
    assert core.step(1.0, 15.9) is None      # same t = 1
    assert core.step(1.0, 16.0) is not None  # t = 2
    assert core.seq == 2


def test_budget_exhausted_sets_status(tmp_path):
    core = make_core(tmp_path, budget=2.0)
    assert core.step(1.0, 0.0) and core.step(1.0, 8.0)
    assert core.step(1.0, 16.0) is None
    assert core.status == "budget_exhausted" and core.skipped_budget == 1
    Status.model_validate_json(wire.encode_status(core.status))


def test_bad_reading_costs_no_budget(tmp_path):
    core = make_core(tmp_path, budget=1.0)
    with pytest.raises(ValueError):
        core.step(float("nan"), 0.0)
    assert core.step(5.0, 8.0) is not None


def control(**kw):
    msg = {"v": 1, "beta": 0.5, "rho": 0.9, "x_min": 0, "x_max": 2000, "gamma": 2,
           "period_s": 8, "eps_levels": [0.5, 2.0]} | kw
    return json.dumps(msg).encode()


def test_control_recalibrates(tmp_path):
    core = make_core(tmp_path, eps=1.0)
    core.apply_control(control(mechanism="br"))
    assert core.eps() == 0.5            # largest menu level <= the device's eps
    rep = Report.model_validate_json(core.step(3000.0, 0.0))
    assert rep.eps == 0.5 and 0 <= rep.y <= 2000 and rep.y % 2 == 0


@pytest.mark.parametrize("payload,match", [
    (b"not json", "not JSON"),
    (control(v=2), "version"),
    (control(beta=2.0), "beta"),
    (control(gamma="x"), "gamma"),
    (control(eps_levels=[]), "eps_levels"),
    (control(eps_levels=[-1]), "eps level"),
    (control(period_s=0), "period_s"),
])
def test_bad_control_is_refused_and_calibration_kept(tmp_path, payload, match):
    core = make_core(tmp_path)
    before = core.randomizer
    with pytest.raises(ValueError, match=match):
        core.apply_control(payload)
    assert core.randomizer is before


def test_no_menu_level_for_device(tmp_path):
    core = make_core(tmp_path, eps=0.1)
    core.apply_control(control(eps_levels=[0.5]))
    assert core.step(1.0, 0.0) is None and core.status == "no_eps_level"


def test_outbox_drops_oldest_when_full():
    box = Outbox(3)
    for i in range(5):
        box.put(i)
    assert [box.pop() for _ in range(3)] == [2, 3, 4] and box.dropped == 2


@pytest.mark.parametrize("name", ["", "a/b", "a+", "#", "a b", "x" * 65])
def test_topic_unsafe_names_refused(tmp_path, name):
    with pytest.raises(ValueError, match="device"):
        AgentCore(device=name, region="r1", eps=1.0, ledger=None, calibration=Calibration())
