"""The fog follows the control message; reports made under the previous
parameters are accepted for a grace period after a change."""

import pytest

from fog_shuffler.protocol import Protocol, ProtocolFollower

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
