"""The privacy unit's daily budget on the device (issue 28): interval products
(rase_device.interval) and the ledger refusing the report that would
overspend a device's or a household device's share of the day, in every
mode, saying when it renews; the budget renews at midnight UTC and survives
a reboot, on CPython and under the real MicroPython (unix port)."""

from __future__ import annotations

import json
import math

import pytest

from rase_device import prio3_binary
from rase_device.core import AgentCore
from rase_device.interval import IntervalMean, check_interval, eps_per_release, releases_per_day
from rase_device.ledger import BudgetLedger, utc_text
from rase_device.mechanisms import ALL_MECHANISMS, MEAN_MECHANISMS
from rase_device.policy import LocalPolicy
from rase_device.randomizer import EPS_UNITS, Calibration, eps_units_ceil, eps_units_floor
from rase_common.protocol.control import ControlMessage
from rase_common.protocol.prio3 import Prio3Params
from rase_common.protocol.report import Status
from rase_common.vdaf import generate_keypair

DAY0 = 1420675200            # 2015-01-08 00:00:00 UTC, the bundled REFIT day
SK, PK = generate_keypair()
CAL = Calibration(x_min=0.0, x_max=8000.0)


def test_interval_mean_reports_each_intervals_clipped_mean_once_the_next_interval_starts():
    acc = IntervalMean(60.0, DAY0, 0.0, 100.0)
    assert [acc.add(x, DAY0 + s) for x, s in ((10.0, 0), (20.0, 20), (30.0, 40))] == [None] * 3
    assert acc.add(500.0, DAY0 + 60) == (acc.t_of(DAY0), 20.0)       # 10, 20, 30 -> 20
    assert acc.add(700.0, DAY0 + 70) is None
    assert acc.add(0.0, DAY0 + 130) == (acc.t_of(DAY0) + 1, 100.0)   # mean 600 clipped to x_max
    assert acc.add(5.0, DAY0 + 10) is None                            # the clock went back: ignored
    # An interval with no samples (the device was off) reports nothing; the next one its own mean.
    assert acc.add(-50.0, DAY0 + 600) == (acc.t_of(DAY0) + 2, 0.0)   # mean 0 (of 0.0), nothing for 3..9
    assert acc.add(1.0, DAY0 + 660) == (acc.t_of(DAY0) + 10, 0.0)    # -50 clipped to x_min


@pytest.mark.parametrize("interval_s,ok", [(900, True), (1800, True), (3600, True), (86400, True), (8, True),
                                           (7, False), (1700, False), (0, False), (172800, False)])
def test_an_interval_divides_the_day_and_is_at_least_a_period(interval_s, ok):
    if ok:
        assert check_interval(interval_s, 8) == interval_s and releases_per_day(interval_s) * interval_s == 86400
    else:
        with pytest.raises(ValueError):
            check_interval(interval_s, 8)


@pytest.mark.parametrize("eps_day,releases,devices", [(4.0, 48, 1), (8.0, 48, 9), (8.0, 96, 9), (1.0, 24, 1),
                                                      (0.3, 48, 3), (10.0, 1, 1), (4.0, 10800, 1)])
def test_the_eps_per_release_fits_the_days_releases_into_each_ledger_and_the_units_budget(eps_day, releases,
                                                                                           devices, tmp_path):
    """Rounded down to the ledger's unit, so the ledger's charges (rounded up) fit: every release of the day is
    made, by every device of the unit, and together they stay within the unit's eps_day."""
    eps = eps_per_release(eps_day, releases, devices)
    assert eps * EPS_UNITS == int(eps * EPS_UNITS) and eps_units_ceil(eps) == eps * EPS_UNITS
    assert releases * devices * eps_units_ceil(eps) <= eps_units_floor(eps_day)
    assert eps >= eps_day / (releases * devices) - 1 / EPS_UNITS
    led = BudgetLedger(str(tmp_path / "l.json"), eps_day / devices, 86400, reserve_reports=16)
    assert sum(led.try_spend(eps, DAY0 + 1.0 * i, i + 1) for i in range(releases)) == releases


def test_an_eps_per_release_below_the_ledgers_unit_is_refused():
    with pytest.raises(ValueError, match="below"):
        eps_per_release(1.0, 10800, 9)


def test_utc_text_is_the_calendar_date():
    assert utc_text(DAY0) == "2015-01-08T00:00:00Z" and utc_text(DAY0 + 86399) == "2015-01-08T23:59:59Z"
    assert utc_text(951782400) == "2000-02-29T00:00:00Z" and utc_text(0) == "1970-01-01T00:00:00Z"


# -- every mode refuses the report that would overspend ---------------------------------------------

def control(mechanism: str, eps: float, interval_s: float | None) -> ControlMessage:
    if mechanism == "prio3":
        params = Prio3Params.for_deployment("sum", key_id="fc-1", dp_eps=eps, grid_steps=CAL.grid_max, bands=[10.0],
                                            product="interval" if interval_s else "per-t", interval_s=interval_s)
        return ControlMessage(x_max=CAL.x_max, mechanism="prio3", eps_levels=[eps], prio3=params,
                              interval_s=interval_s)
    return ControlMessage(x_max=CAL.x_max, mechanism=mechanism, eps_levels=[eps], interval_s=interval_s)


def device(tmp_path, mechanism: str, budget: float, privacy: dict, name: str = "d1") -> AgentCore:
    policy = LocalPolicy.from_dict({"prio3_key_id": "fc-1", "prio3_public_key": PK.hex()}, 8.0)
    core = AgentCore(device=name, region="r1", eps=1.0, ledger=BudgetLedger(str(tmp_path / f"{name}.json"), budget,
                                                                            86400), calibration=CAL, period_s=8,
                     policy=policy, mechanism=mechanism, privacy=privacy)
    return core


def run_day(core: AgentCore, start: float, seconds: float) -> list[dict]:
    made = []
    for k in range(int(seconds // 8)):
        p = core.step(300.0 + (k % 50), start + 8 * k + 1)
        if p is not None:
            made.append(as_dict(p))
    return made


def as_dict(payload: bytes | str) -> dict:
    """A report as a dict: JSON, or a binary Prio3 report's header (t, seq, p: no eps, its params id commits
    to dp_eps)."""
    if isinstance(payload, bytes) and prio3_binary.is_binary(payload):
        _version, t, seq, pid, *_shares = prio3_binary.decode(payload)
        return {"t": t, "seq": seq, "p": pid}
    return json.loads(payload)


# (mechanism, interval): the mean mechanisms and prio3 half-hourly, the count and band kinds per period.
MODES = [(m, 1800.0) for m in MEAN_MECHANISMS] + [("prio3", 1800.0), ("binary", None), ("categorical", None)]
assert {m for m, _ in MODES} == set(ALL_MECHANISMS)


@pytest.mark.parametrize("mechanism,interval_s", MODES)
def test_a_device_refuses_the_report_that_would_overspend_its_day_in_every_mode(tmp_path, mechanism, interval_s):
    """Budget eps 1 a day; the control message asks eps 0.125 per release (more than 1/48): the device makes 8
    reports, refuses the 9th (budget_exhausted, renewing at midnight UTC, said in its status) and every later
    one that day, and reports again the next day."""
    core = device(tmp_path, mechanism, 1.0, {"unit": "device", "household": "d1", "eps_day": 1.0, "share": 1.0})
    core.apply_control(control(mechanism, 0.125, interval_s).model_dump_json())
    made = run_day(core, DAY0, 86400 if interval_s else 200 * 8)
    assert len(made) == 8
    if mechanism == "prio3":        # binary reports: the params id, which commits to dp_eps 0.125
        assert all(r["p"] == control(mechanism, 0.125, interval_s).prio3.params_id for r in made)
    else:
        assert all(r["eps"] == 0.125 for r in made)
    assert core.status == "budget_exhausted" and core.skipped_budget >= 1
    status = Status.model_validate_json(core.status_payload())
    assert status.privacy is not None and status.privacy.renews_at == DAY0 + 86400
    assert status.privacy.renews_at_utc == "2015-01-09T00:00:00Z"
    assert status.privacy.guarantee == "per unit per day" and status.privacy.eps_day == 1.0
    assert core.ledger.remaining(DAY0 + 3600) == 0.0
    again = run_day(core, DAY0 + 86400, 3 * 3600 if interval_s else 5 * 8)
    assert again and core.status == "online"                    # a new UTC day: a new budget


@pytest.mark.parametrize("mechanism,interval_s", MODES)
def test_a_households_devices_each_refuse_past_their_share(tmp_path, mechanism, interval_s):
    """A household of 4 devices with eps 2 a day, each with a share of 1/4: each device stops after
    0.5 / 0.125 = 4 reports, so the household's devices together spend at most 2.0."""
    cores = [device(tmp_path, mechanism, 2.0 * 0.25, {"unit": "household", "household": "hh1", "eps_day": 2.0,
                                                      "share": 0.25}, name=f"hh1d{i}") for i in range(4)]
    total = 0.0
    for core in cores:
        core.apply_control(control(mechanism, 0.125, interval_s).model_dump_json())
        made = run_day(core, DAY0, 86400 if interval_s else 100 * 8)
        assert len(made) == 4 and core.status == "budget_exhausted"
        stated = control(mechanism, 0.125, interval_s)
        # A binary Prio3 report states no eps: its params id names the dp_eps it spends.
        total += sum(r["eps"] if "eps" in r else {stated.prio3.params_id: stated.prio3.dp_eps}[r["p"]]
                     for r in made)
        p = Status.model_validate_json(core.status_payload()).privacy
        assert p is not None and (p.unit, p.household, p.share, p.eps_day) == ("household", "hh1", 0.25, 2.0)
    assert total <= 2.0 + 1e-9


def test_an_interval_report_is_charged_to_the_day_its_readings_belong_to(tmp_path):
    """The report of 23:30-24:00 is made after midnight and charged to its own day: the next day still has
    all of its 48 releases."""
    eps = eps_per_release(4.0, 48)
    core = device(tmp_path, "duchi", 4.0, {"unit": "device", "household": "d1", "eps_day": 4.0, "share": 1.0})
    core.apply_control(control("duchi", eps, 1800.0).model_dump_json())
    made = run_day(core, DAY0, 2 * 86400 + 1800)
    assert len(made) == 96 and core.status == "online" and core.skipped_budget == 0
    assert [r["t"] for r in made] == list(range(int(DAY0 // 1800), int(DAY0 // 1800) + 96))


def test_without_eps_day_the_device_is_event_level_and_says_so(tmp_path):
    core = device(tmp_path, "duchi", 20000.0, None)
    core.apply_control(control("duchi", 1.0, None).model_dump_json())
    assert len(run_day(core, DAY0, 80)) == 10
    p = Status.model_validate_json(core.status_payload()).privacy
    assert p is not None and p.guarantee == "event-level" and p.eps_day is None and p.eps_per_hour == 450.0


def test_the_budget_survives_a_reboot_and_renews_at_the_stated_time(tmp_path):
    def boot() -> AgentCore:
        core = device(tmp_path, "hybrid", 1.0, {"unit": "device", "household": "d1", "eps_day": 1.0, "share": 1.0})
        core.apply_control(control("hybrid", 0.25, 1800.0).model_dump_json())
        return core

    first = boot()
    assert len(run_day(first, DAY0, 6 * 3600)) == 4 and first.status == "budget_exhausted"
    renews = first.renews_at
    second = boot()                                              # a reboot, later the same day
    assert run_day(second, DAY0 + 8 * 3600, 4 * 3600) == [] and second.renews_at == renews == DAY0 + 86400
    # Its last interval of the day (23:00-23:30) is still refused; the first one after the stated time is made.
    assert run_day(second, renews - 3600, 1800 + 16) == [] and second.status == "budget_exhausted"
    made = run_day(second, renews, 1800 + 16)
    assert [r["t"] for r in made] == [int(renews // 1800)] and second.status == "online"


UNIX_PORT_BOOT = """
import json
from rase_device.core import AgentCore
from rase_device.ledger import BudgetLedger
from rase_device.randomizer import Calibration
from rase_device.entropy import RandomBits

START, SECONDS = %(start)r, %(seconds)r
CONTROL = %(control)r
core = AgentCore(device="b1", region="r1", eps=1.0, ledger=BudgetLedger("ledger.json", 1.0, 86400, 4),
                 calibration=Calibration(0.5, 0.9, 0.0, 8000.0, 1.0), period_s=8, mechanism="duchi",
                 privacy={"unit": "household", "household": "hh1", "eps_day": 2.0, "share": 0.5})
core.apply_control(CONTROL)
made = []
k = 0
while k * 8 < SECONDS:
    p = core.step(250.0, START + 8 * k + 1)
    if p is not None:
        made.append(json.loads(p)["t"])
    k += 1
print(json.dumps({"made": made, "status": core.status, "privacy": core.privacy_spent()}))
"""


@pytest.mark.micropython
def test_under_micropython_a_household_device_refuses_past_its_share_across_a_reboot_until_midnight(
        micropython_unix, tmp_path):
    """The device core on the MicroPython unix port, its ledger in a real file: share 0.5 of a household's
    eps 2 a day at eps 0.25 per half-hour is 4 reports; a second process (a reboot) the same day makes none and
    says when the budget renews; one started after midnight UTC reports again."""
    msg = control("duchi", 0.25, 1800.0).model_dump_json()

    def boot(start: float, seconds: float) -> dict:
        out = micropython_unix(UNIX_PORT_BOOT % {"start": start, "seconds": seconds, "control": msg}, cwd=tmp_path)
        return json.loads(out.strip().splitlines()[-1])

    first = boot(DAY0, 4 * 3600)
    assert len(first["made"]) == 4 and first["status"] == "budget_exhausted"
    assert first["privacy"]["renews_at_utc"] == "2015-01-09T00:00:00Z"
    second = boot(DAY0 + 10 * 3600, 2 * 3600)
    assert second["made"] == [] and second["status"] == "budget_exhausted"
    assert math.isclose(second["privacy"]["spent_this_period"], 1.0) and second["privacy"]["renews_at"] == DAY0 + 86400
    third = boot(DAY0 + 86400, 1800 + 16)
    assert third["made"] == [int((DAY0 + 86400) // 1800)] and third["status"] == "online"
