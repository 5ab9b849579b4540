"""The reporting schedule: t of a moment, start of t, and a change of period
or epoch0 announced at a stated t, after which t runs on without a gap."""

import json

import pytest

from rase_device.core import AgentCore
from rase_device.ledger import BudgetLedger
from rase_device.randomizer import Calibration
from rase_device.schedule import Schedule
from rase_device.wire import parse_control
from rase_common.protocol.control import ControlMessage


@pytest.mark.parametrize("unix,t", [(0.0, 0), (7.999, 0), (8.0, 1), (-0.1, -1), (80.0, 10)])
def test_t_of_a_plain_schedule(unix, t):
    assert Schedule(8.0, 0.0).t_of(unix) == t


def test_a_change_takes_over_at_its_first_t_and_t_runs_on():
    # previous: 8 s from 0; new: 16 s, taking over at unix 100 as t = 13
    s = Schedule(16.0, 100.0 - 13 * 16.0, 13, Schedule(8.0, 0.0))
    assert [s.t_of(u) for u in (95.9, 96.0, 99.99, 100.0, 115.9, 116.0)] == [11, 12, 12, 13, 13, 14]
    assert (s.start_of(12), s.end_of(12), s.start_of(13), s.end_of(13)) == (96.0, 100.0, 100.0, 116.0)
    assert s.period_at(12) == 4.0                     # the last previous period is cut short


def test_a_change_that_would_not_continue_t_is_refused():
    with pytest.raises(ValueError, match="does not continue"):
        Schedule(16.0, 0.0, 13, Schedule(8.0, 0.0))   # t=13 of the new one starts at 208: previous t there is 25


@pytest.mark.parametrize("old,new_period,new_epoch0", [((8.0, 0.0), 16.0, 0.0), ((8.0, 0.0), 4.0, 1.0),
                                                       ((1.0, 0.5), 0.25, 0.0), ((16.0, 3.0), 8.0, 3.0)])
def test_rescheduling_continues_t_and_keeps_the_new_grid(old, new_period, new_epoch0):
    now = 1_700_000_003.7
    cur = ControlMessage(period_s=old[0], epoch0=old[1])
    new = cur.rescheduled(new_period, new_epoch0, now, lead_s=3 * max(old[0], new_period))
    s = new.schedule()
    switch = s.switch_unix()
    assert switch >= now + 3 * max(old[0], new_period)
    assert ((switch - new_epoch0) / new_period) % 1 == pytest.approx(0.0, abs=1e-9)   # on the config's grid
    assert s.t_of(switch) == s.t_before(switch) + 1 == new.since_t
    assert s.t_of(now) == cur.schedule().t_of(now)    # nothing changes before the switch
    assert new.same_schedule_as(new_period, new_epoch0)
    again = new.rescheduled(old[0], old[1], switch + 1.0, lead_s=10.0)    # and back, later
    assert again.schedule().t_before(again.schedule().switch_unix()) + 1 == again.since_t


def test_a_device_never_skips_a_t_across_a_slower_period(tmp_path):
    """The bug this fixes: a slower period made t jump backwards and the
    device, which never reports a t it has passed, fell silent."""
    core = AgentCore(device="d1", region="r1", eps=1.0, calibration=Calibration(), period_s=8.0,
                     ledger=BudgetLedger(str(tmp_path / "l.json"), 1e6, 86400))
    now = 1_700_000_000.0
    ts = []
    for k in range(3):
        core.step(10.0, now + 8 * k)
        ts.append(core.last_t)
    msg = ControlMessage(period_s=8.0).rescheduled(16.0, 0.0, now + 20, lead_s=32.0)
    core.apply_control(msg.model_dump_json(exclude_none=True))
    for k in range(3, 20):
        if core.step(10.0, now + 8 * k) is not None:
            ts.append(core.last_t)
    assert ts == sorted(set(ts)) and ts[-1] - ts[0] == len(ts) - 1     # every t once, none skipped
    assert core.schedule.period_s == 16.0


def test_the_device_parser_reads_a_schedule_change_and_refuses_half_of_one():
    msg = ControlMessage(period_s=8.0).rescheduled(16.0, 0.0, 1000.0, lead_s=32.0)
    parsed = parse_control(msg.model_dump_json(exclude_none=True))
    assert (parsed["since_t"], parsed["previous_period_s"]) == (msg.since_t, 8.0)
    half = json.loads(msg.model_dump_json())
    del half["previous_epoch0"]
    with pytest.raises(ValueError, match="come together"):
        parse_control(json.dumps(half))


@pytest.mark.parametrize("change", [{"period_s": 16.0}, {"epoch0": 4.0}, {"epoch0": 80.0}, {"period_s": 12.0}])
def test_a_device_refuses_a_schedule_change_without_since_t_and_keeps_reporting(tmp_path, change):
    """Issue 29, item 4: a slower period or a moved epoch0 without since_t
    silenced every agent; it is refused whole (status control_rejected)."""
    core = AgentCore(device="d1", region="r1", eps=1.0, calibration=Calibration(), period_s=8.0,
                     ledger=BudgetLedger(str(tmp_path / "l.json"), 1e6, 86400))
    now = 1_700_000_000.0
    core.step(10.0, now)
    t0 = core.last_t
    with pytest.raises(ValueError, match="without since_t"):
        core.apply_control(ControlMessage(**({"period_s": 8.0} | change)).model_dump_json(exclude_none=True))
    assert core.status == "control_rejected" and core.control_rejected == 1
    assert (core.schedule.period_s, core.schedule.epoch0) == (8.0, 0.0)
    assert core.step(10.0, now + 8) is not None and core.last_t == t0 + 1     # it goes on reporting
    # The same parameters without since_t, and a change that states it, are applied.
    core.apply_control(ControlMessage(period_s=8.0, eps_levels=[0.5]).model_dump_json(exclude_none=True))
    assert core.eps_levels == [0.5] and core.status == "online"
    core.apply_control(ControlMessage(period_s=8.0).rescheduled(16.0, 0.0, now + 20, lead_s=32.0)
                       .model_dump_json(exclude_none=True))
    assert core.schedule.period_s == 16.0
