"""The fog follows the control message; reports made under the previous
parameters are accepted for a grace period after a change."""

import json

import pytest

from fog_shuffler.ingest import IngestRules, Rejected
from fog_shuffler.protocol import Protocol, ProtocolFollower, ProtocolGate
from rase_common.errors import ProtocolError
from rase_common.protocol.control import ControlMessage, ControlPolicy

OWN = Protocol(period_s=8.0, epoch0=0.0, eps_levels=(1.0,), x_min=0.0, x_max=4000.0)
CONTROL = {"period_s": 8.0, "eps_levels": [0.5, 1.0, 0.5], "x_min": 0.0, "x_max": 3000.0}


def test_from_control_keeps_epoch0_when_absent_and_sorts_the_menu():
    p = Protocol.from_control(CONTROL, OWN)
    assert p == Protocol(8.0, 0.0, (0.5, 1.0), 0.0, 3000.0)
    assert OWN.differences(p) == {"eps_levels": ((1.0,), (0.5, 1.0)), "x_max": (4000.0, 3000.0)}


@pytest.mark.parametrize("t,expected", [
    (99, ["new", "old"]),     # before the change: either
    (100, ["new", "old"]),
    (103, ["new", "old"]),    # within the grace of 3 periods
    (104, ["new"]),           # after it: only the new parameters
])
def test_candidates_around_a_change(t, expected):
    f = ProtocolFollower(OWN, grace_periods=3)
    new = Protocol.from_control(CONTROL, OWN)
    assert f.apply(new, now_t=100)
    names = {id(new): "new", id(OWN): "old"}
    assert [names[id(p)] for p in f.candidates(t)] == expected


def test_same_message_again_changes_nothing_and_drift_is_reported():
    f = ProtocolFollower(OWN, grace_periods=2)
    assert f.drift() == {}
    new = Protocol.from_control(CONTROL, OWN)
    f.apply(new, 10)
    assert f.apply(Protocol.from_control(CONTROL, OWN), 50) == {}
    assert f.changed_at_t == 10 and set(f.drift()) == {"eps_levels", "x_max"}
    assert Protocol(8.0, 0.0, (1.0,), 0.0, 4000.0).t_of(17.0) == 2


# -- ProtocolGate: the control message and report validation in one place ------------

def gate() -> ProtocolGate:
    rules = IngestRules(devices={"d1": "r1"}, eps_levels=(1.0,), x_min=0.0, x_max=4000.0, lateness_periods=None)
    own = Protocol(8.0, 0.0, (1.0,), 0.0, 4000.0, mechanism="br")
    return ProtocolGate(own, rules, grace_periods=2, policy=ControlPolicy().build(8.0))


def control(**kw) -> bytes:
    return ControlMessage(**({"period_s": 8.0, "epoch0": 0.0, "eps_levels": [1.0], "x_min": 0.0, "x_max": 4000.0,
                              "mechanism": "br"} | kw)).model_dump_json(exclude_none=True).encode()


def report(eps: float, y: float = 12.0, t: int = 100) -> bytes:
    return json.dumps({"v": 1, "t": t, "y": y, "eps": eps, "seq": 1}).encode()


@pytest.mark.parametrize("payload,reason", [
    (b"{not json", "control_invalid"),
    (b'{"v": 1}', "control_invalid"),
    (None, "control_refused"),        # a 1 ms period: below the fog's own policy
])
def test_gate_refuses_a_bad_or_too_weak_control_message_and_keeps_its_parameters(payload, reason):
    g = gate()
    before = g.current
    with pytest.raises(ProtocolError) as e:
        g.follow(payload if payload is not None else control(period_s=0.001), now_t=100)
    assert e.value.reason == reason and e.value.detail
    assert g.current is before


def test_gate_follows_a_change_and_accepts_old_parameters_only_within_the_grace():
    g = gate()
    assert g.follow(b"", 100) == {}                                  # a cleared retained topic
    assert g.follow(control(), 100) == {}                            # the same parameters
    assert g.follow(control(eps_levels=[0.5]), 100) == {"eps_levels": ((1.0,), (0.5,))}
    assert g.validate("rase/v1/reports/r1/d1", report(0.5), 100).eps == 0.5
    assert g.validate("rase/v1/reports/r1/d1", report(1.0, t=102), 102).eps == 1.0   # made before the change
    with pytest.raises(Rejected) as e:
        g.validate("rase/v1/reports/r1/d1", report(1.0, t=103), 103)
    assert e.value.reason == "eps_not_on_menu"
    with pytest.raises(Rejected) as e:                               # not retried under the old rules
        g.validate("rase/v1/reports/r1/zz", report(1.0), 100)
    assert e.value.reason == "unknown_device"


@pytest.mark.parametrize("change", [{"period_s": 16.0}, {"epoch0": 8.0}])
def test_gate_refuses_a_schedule_change_without_since_t(change):
    """Issue 29, item 4: the fog refuses (and the service counts, control_refused)
    what devices refuse, and keeps its schedule."""
    g = gate()
    before = g.current
    with pytest.raises(ProtocolError) as e:
        g.follow(control(**change), now_t=100)
    assert e.value.reason == "control_refused" and "since_t" in e.value.detail
    assert g.current is before
    stated = ControlMessage.model_validate_json(control()).rescheduled(16.0, 0.0, 1000.0, lead_s=32.0)
    assert "period_s" in g.follow(stated.model_dump_json(exclude_none=True).encode(), now_t=100)
