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
from rase_common.protocol.report import Receipt, Report, Status


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
    assert core.outbox.peek() == ("rase/v1/reports/r1/h1a1", payload, 10)


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


def _report(t):
    return ("rase/v1/reports/r1/d1", json.dumps({"t": t}), t)


def test_outbox_keeps_acknowledged_reports_until_the_fogs_receipt():
    """Issue 29, item 3: a PUBACK is not the end of a report; the receipt is."""
    box = Outbox(10, confirm_s=5, confirm_max_s=20)
    for t in (1, 2, 3):
        box.put(_report(t))
    for _ in range(3):
        box.handed(box.pop(), now=100.0)
    assert len(box) == 0 and box.awaiting == 3
    assert box.confirm([2]) == 1 and box.awaiting == 2 and box.kept == 1
    assert box.resend_due(104.9) == 0 and box.next_resend_s(104.0) == pytest.approx(1.0)
    # No receipt within 5 s: the same bytes go out again, oldest first, and wait twice as long.
    assert box.resend_due(105.0) == 2 and [box.peek()] == [_report(1)]
    again = [box.pop(), box.pop()]
    assert again == [_report(1), _report(3)]
    for item in again:
        box.handed(item, now=105.0)
    assert box.resend_due(114.9) == 0 and box.resend_due(115.0) == 2 and box.resent == 4
    # A receipt for a report queued again takes it off the queue too; a reconnect resends all at once.
    assert box.confirm([1]) == 0 and [box.pop()] == [_report(3)]
    box.handed(_report(3), now=116.0)
    assert box.resend_due(116.0, all_of_them=True) == 1
    assert box.confirm([3, 99]) == 0 and len(box) == 0 and box.awaiting == 0


def test_outbox_bounds_queued_and_awaiting_together_and_forgets_at_the_puback_without_receipts():
    box = Outbox(3, confirm_s=5)
    for t in range(3):
        box.put(_report(t))
        box.handed(box.pop(), now=0.0)
    box.put(_report(3))                   # full: the oldest awaiting report is dropped, and counted
    assert box.awaiting == 2 and len(box) == 1 and box.dropped == 1
    plain = Outbox(3)                     # confirm_s = 0: the broker's PUBACK is the end of it
    plain.put(_report(0))
    plain.handed(plain.pop(), now=0.0)
    assert plain.awaiting == 0 and plain.resend_due(1e9, all_of_them=True) == 0


def test_a_receipt_on_the_feedback_topic_confirms_reports_and_counts_late_ones(tmp_path):
    core = AgentCore(device="h1a1", region="r1", eps=1.0, calibration=Calibration(), period_s=8.0,
                     ledger=BudgetLedger(str(tmp_path / "l.json"), 1e6, 86400), confirm_s=30)
    for k in range(3):
        core.step(10.0, 8.0 * k)
        core.outbox.handed(core.outbox.pop(), now=0.0)
    assert core.on_feedback(Receipt(kept=[0, 1], late=1).model_dump_json().encode())
    assert core.outbox.awaiting == 1 and core.late_by_fog == 1 and core.status_changed
    assert not core.on_feedback(b'{"v":1,"reason":"unknown_device","rejected":2}')   # for the diagnostics
    assert not core.on_feedback(b'{"v":1,"kept":"all"}') and core.outbox.awaiting == 1


@pytest.mark.parametrize("name", ["", "a/b", "a+", "#", "a b", "x" * 65])
def test_topic_unsafe_names_refused(tmp_path, name):
    with pytest.raises(ValueError, match="device"):
        AgentCore(device=name, region="r1", eps=1.0, ledger=None, calibration=Calibration())


def test_a_receipt_that_overtakes_the_brokers_puback_still_counts():
    box = Outbox(10, confirm_s=5)
    box.put(_report(7))
    item = box.pop()
    assert box.confirm([7]) == 0          # the fog's receipt came first
    box.handed(item, now=0.0)             # then the transport saw the PUBACK
    assert box.awaiting == 0 and box.kept == 1 and box.resend_due(1e9) == 0
