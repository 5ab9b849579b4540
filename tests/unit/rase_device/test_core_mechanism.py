"""The deployment's mechanism: chosen in the fusion center's [precision],
broadcast in the control message, used by AgentCore (BR when absent)."""

import json

import pytest

from rase_device import wire
from rase_device.board import build_core
from edge_agent.config import AgentConfig
from rase_device.core import AgentCore
from rase_device.duchi import DuchiRandomizer
from rase_device.entropy import RandomBits
from rase_device.ledger import BudgetLedger
from rase_device.mechanisms import DEFAULT_MECHANISM
from rase_device.piecewise import HybridRandomizer, PiecewiseRandomizer
from rase_device.randomizer import BudgetRandomizer, Calibration
from rase_common.protocol.report import Report
from rase_common.mechanisms import mechanism
from rase_common.protocol.control import ControlMessage
from tests.seeded_bytes import XorShiftBytes


def make_core(tmp_path, **kw):
    return AgentCore(device="h1a1", region="r1", eps=1.0,
                     ledger=BudgetLedger(str(tmp_path / "l.json"), 100.0, 86400),
                     calibration=Calibration(), period_s=8, epoch0=0,
                     bits=RandomBits(read=XorShiftBytes(3)), **kw)


def control(**kw):
    msg = {"v": 1, "beta": 0.5, "rho": 0.9, "x_min": 0, "x_max": 2000, "gamma": 2,
           "period_s": 8, "eps_levels": [0.5, 2.0]} | kw
    return json.dumps(msg).encode()


def test_default_is_the_default_mechanism_and_absent_field_means_it(tmp_path):
    core = make_core(tmp_path)
    assert core.mechanism == DEFAULT_MECHANISM == "duchi" and isinstance(core.randomizer, DuchiRandomizer)
    assert wire.parse_control(control())["mechanism"] == DEFAULT_MECHANISM
    core.apply_control(control(mechanism="br"))
    core.apply_control(control())
    assert isinstance(core.randomizer, DuchiRandomizer)


@pytest.mark.parametrize("name,cls", [("duchi", DuchiRandomizer), ("piecewise", PiecewiseRandomizer),
                                      ("hybrid", HybridRandomizer), ("br", BudgetRandomizer)])
def test_control_switches_the_mechanism_and_reports_come_from_it(tmp_path, name, cls):
    core = make_core(tmp_path)
    bits = core.randomizer.bits
    cal = core.apply_control(control(mechanism=name))
    assert type(core.randomizer) is cls and core.mechanism == name
    assert core.randomizer.bits is bits, "the same entropy source is kept"
    rep = Report.model_validate_json(core.step(3000.0, 0.0))
    assert rep.eps == 0.5
    if name != "br":
        allowed = {float(v) for v in mechanism(name).report_values(cal, 0.5).values()}
        assert min(abs(rep.y - v) for v in allowed) <= 1e-9 * max(1.0, abs(rep.y))


@pytest.mark.parametrize("bad", ["laplace", "", 3, None])
def test_unknown_mechanism_is_refused_and_randomizer_kept(tmp_path, bad):
    core = make_core(tmp_path, mechanism="duchi")
    before = core.randomizer
    with pytest.raises(ValueError, match="mechanism"):
        core.apply_control(control(mechanism=bad))
    assert core.randomizer is before and core.mechanism == "duchi"


def test_unknown_mechanism_in_the_constructor_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="mechanism"):
        make_core(tmp_path, mechanism="staircase")


def test_fusion_control_round_trips_to_the_device():
    pc = ControlMessage(mechanism="hybrid", x_max=500.0)
    assert wire.parse_control(pc.model_dump_json())["mechanism"] == "hybrid"
    assert ControlMessage().mechanism == DEFAULT_MECHANISM
    with pytest.raises(ValueError, match="mechanism"):
        ControlMessage(mechanism="pm")


def test_agent_config_sets_the_board_mechanism(tmp_path):
    cfg = AgentConfig(device="d1", mechanism="piecewise", ledger_path=tmp_path / "l.json")
    d = cfg.device_dict()
    assert d["mechanism"] == "piecewise"
    d["ledger_path"] = str(tmp_path / "board.json")
    assert isinstance(build_core(d).randomizer, PiecewiseRandomizer)
    assert AgentConfig(device="d1").mechanism == DEFAULT_MECHANISM
    with pytest.raises(ValueError, match="mechanism"):
        AgentConfig(device="d1", mechanism="nope")
