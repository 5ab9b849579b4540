"""The privacy unit's daily budget at the fog (fog_shuffler.budget, issue 28):
the rule from a table, and the fog service (in-memory source and sink, a
manual clock) refusing and counting the reports of a household's devices that
together would overspend its day, in the local-DP and the secure mode, across
a restart, renewed the next UTC day."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time

import pytest

from fog_shuffler.budget import REASON, UnitBudget
from fog_shuffler.config import FogConfig
from fog_shuffler.ingest import Rejected
from fog_shuffler.service import FogService
from rase_common.channels import MemorySink, MemorySource
from rase_common.clock import ManualClock
from rase_common.protocol import topics
from rase_device.randomizer import EPS_UNITS

DAY = 86400
DAY0 = 1420675200 // DAY          # 2015-01-08


def test_the_rule_charges_a_units_devices_together_per_day_and_refuses_past_the_budget():
    units = {"a1": "hh1", "a2": "hh1", "b1": "hh2"}
    rule = UnitBudget(1.0, lambda d: units.get(d, d))
    for device in ("a1", "a2", "a1"):
        rule.check(device, DAY0, 0.25)
        rule.charge(device, DAY0, 0.25)
    rule.check("a2", DAY0, 0.25)                     # 0.75 staged: a fourth quarter fits
    rule.charge("a2", DAY0, 0.25)
    with pytest.raises(Rejected) as err:
        rule.check("a1", DAY0, 0.25)                  # the fifth, by either device, does not
    assert err.value.reason == REASON and "hh1" in err.value.detail and "2015-01-09T00:00:00Z" in err.value.detail
    rule.check("b1", DAY0, 1.0)                       # another household, its own budget
    rule.check("a1", DAY0 + 1, 0.25)                  # the next day, a new one
    assert sorted(rule.rows()) == [("hh1", DAY0, EPS_UNITS)]
    rule.rollback()                                   # the batch did not commit: nothing was spent
    rule.check("a1", DAY0, 1.0)
    rule.charge("a1", DAY0, 0.5)
    rule.commit()
    assert rule.rows() == [] and rule.left_units("hh1", DAY0) == EPS_UNITS // 2
    rule.charge("a2", DAY0, 0.25)
    assert rule.rows() == [("hh1", DAY0, 3 * EPS_UNITS // 4)]        # what is written: committed + staged
    rule.forget_before(DAY0 + 1)
    assert rule.left_units("hh1", DAY0) == EPS_UNITS * 3 // 4 and not rule.spent


def test_charges_are_the_ledgers_rounded_up():
    rule = UnitBudget(1.0, lambda d: d)
    n = 0
    try:
        while True:
            rule.check("d", DAY0, 0.1)
            rule.charge("d", DAY0, 0.1)
            n += 1
    except Rejected:
        pass
    assert n == 9                                      # as the device's ledger: ten charges of 0.1 exceed 1.0


class Harness:
    """A fog with a daily product (one window a day), households of three devices whose budget was configured
    for two (devices_per_unit 2: each report eps 0.5 of the household's 1.0 a day)."""

    def __init__(self, tmp_path, **cfg):
        self.cfg = FogConfig.load(None, name="mem", device_mechanism="br", period_s=8.0, interval_s=DAY, k_min=2,
                                  regions={"r1": {"households": {"hh1": ["a1", "a2", "a3"], "hh2": ["b1", "b2"]}}},
                                  privacy={"unit": "household", "eps_day": 1.0, "devices_per_unit": 2},
                                  lateness_periods=1, journal_path=tmp_path / "fog.sqlite", **cfg)
        self.clock = ManualClock(DAY0 * DAY + 3600.0)
        self.source = MemorySource()
        self.sink = MemorySink()
        self.fog = FogService(self.cfg, clock=self.clock, source=self.source, sink=self.sink)
        self.source.wakeup = self.fog.arrived.set

    async def put(self, device: str, t: int, eps: float = 0.5) -> None:
        before = len(self.source.acked)
        self.source.put(topics.report_topic("r1", device), json.dumps({"v": 1, "t": t, "y": 100.0, "eps": eps,
                                                                       "seq": t}))
        deadline = time.monotonic() + 5
        while len(self.source.acked) == before and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(self.source.acked) > before, "not acknowledged"

    def run(self, scenario) -> None:
        async def main() -> None:
            stop = asyncio.Event()
            task = asyncio.create_task(self.fog.run(stop))
            try:
                await scenario(self)
            finally:
                stop.set()
                await task
        asyncio.run(main())


def test_the_fog_computes_its_own_eps_per_release_from_its_days_budget(tmp_path):
    h = Harness(tmp_path)
    assert h.cfg.eps_levels == [0.5]                   # 1.0 a day / 1 release / 2 devices per household


def test_the_fog_refuses_and_counts_a_households_devices_that_together_overspend(tmp_path):
    h = Harness(tmp_path)

    async def scenario(h: Harness) -> None:
        for device in ("a1", "a2", "a3", "b1"):
            await h.put(device, DAY0)

    h.run(scenario)
    m = h.fog.metrics
    assert m.value("reports_accepted") == 3 and m.value("reports_rejected", reason=REASON) == 1
    assert h.fog.ctx.windows.open[("r1", DAY0)].reports.keys() == {"a1", "a2", "b1"}   # a3's is in no window

    # After a restart (the journal's unit_budget table) the household is still spent today ...
    h2 = Harness(tmp_path)

    async def later(h: Harness) -> None:
        await h.put("a3", DAY0)
        await h.put("b2", DAY0)
        h.clock.set((DAY0 + 1) * DAY + 60.0)          # ... and renews at midnight UTC
        h.fog.wakeup.set()
        await h.put("a3", DAY0 + 1)

    h2.run(later)
    m2 = h2.fog.metrics
    assert m2.value("reports_rejected", reason=REASON) == 1 and m2.value("reports_accepted") == 2
    db = sqlite3.connect(tmp_path / "fog.sqlite")
    spent = {(u, d): n for u, d, n in db.execute("SELECT unit, day, spent_units FROM unit_budget")}
    db.close()
    assert spent == {("hh1", DAY0): EPS_UNITS, ("hh2", DAY0): EPS_UNITS, ("hh1", DAY0 + 1): EPS_UNITS // 2}


def test_a_device_unit_is_held_to_its_day_whatever_eps_the_control_message_offers(tmp_path):
    """A device unit with eps 1 a day and two releases a day (its own eps 0.5 per report); the control
    message (which a local-DP fog follows) offers eps 1 per report: each device's first report of the day
    is taken, its second (the next release) refused; yesterday's window is charged to yesterday."""
    from rase_common.protocol.control import ControlMessage

    h = Harness(tmp_path, **{})
    h.cfg = FogConfig.load(None, **{**h.cfg.model_dump(exclude={"eps_levels"}), "interval_s": DAY / 2,
                                    "privacy": {"unit": "device", "eps_day": 1.0}})
    assert h.cfg.eps_levels == [0.5]
    h.fog = FogService(h.cfg, clock=h.clock, source=h.source, sink=h.sink)
    h.source.wakeup = h.fog.arrived.set
    t0 = 2 * DAY0

    async def scenario(h: Harness) -> None:
        h.source.put(topics.CONTROL_TOPIC, ControlMessage(mechanism="br", eps_levels=[1.0],
                                                          interval_s=DAY / 2).model_dump_json())
        for device in ("a1", "a2"):
            await h.put(device, t0, eps=1.0)
        h.clock.set(DAY0 * DAY + DAY / 2 + 60)
        h.fog.wakeup.set()
        for device in ("a1", "a2"):
            await h.put(device, t0 + 1, eps=1.0)
        await h.put("a3", t0 - 1, eps=1.0)

    h.run(scenario)
    m = h.fog.metrics
    assert m.value("reports_accepted") == 3 and m.value("reports_rejected", reason=REASON) == 2


def test_the_secure_modes_leader_refuses_a_households_devices_that_together_overspend(tmp_path):
    """The same rule hosted beside the Prio3 leader: real device cores' Prio3 reports of one half-hour, a
    household of three meters configured as two (each eps 4/48/2), 48 releases a day."""
    from rase_device.interval import eps_per_release
    from tests.integration.secagg_support import Deployment

    devices = ["m1", "m2", "m3", "n1", "n2"]
    eps = eps_per_release(4.0, 48, 2)
    dep = Deployment(tmp_path, devices=devices, k_min=2, period_s=8.0, dp_eps=eps)
    params = dep.params.model_copy(update={"product": "interval", "interval_s": 1800.0})
    settings = dep.fog_settings(1)
    settings["prio3"]["params"] = {k: v for k, v in params.model_dump().items() if k != "dp_eps"}
    settings.pop("eps_levels")
    settings["regions"] = {"r1": {"households": {"hh1": ["m1", "m2", "m3"], "hh2": ["n1", "n2"]}}}
    cfg = FogConfig.load(None, **{**settings, "lateness_periods": 1,
                                  "privacy": {"unit": "household", "eps_day": 4.0, "devices_per_unit": 2}})
    assert cfg.eps_levels == [eps] and cfg.prio3.params.dp_eps == eps       # its own, from its own budget
    # hh1's day almost spent: 94 of the 96 reports (48 releases x 2 devices) its budget holds ...
    now = DAY0 * DAY + 12 * 3600 + 60.0
    clock = ManualClock(now)
    source, sink = MemorySource(), MemorySink()
    fog = FogService(cfg, clock=clock, source=source, sink=sink)
    source.wakeup = fog.arrived.set
    control = dep.control.model_copy(update={"prio3": params.model_copy(update={"dp_eps": eps}),
                                             "eps_levels": [eps], "interval_s": 1800.0})
    cores = dep.cores()
    for core in cores:
        core.apply_control(control.model_dump_json())
    t = int(now // 1800) - 1

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(fog.run(stop))
        await asyncio.sleep(0.3)
        rule = fog.ctx.budget.rule
        rule.spent[("hh1", DAY0)] = 94 * int(eps * EPS_UNITS)
        for core in cores:
            assert core.report_mean(t, 500.0, t * 1800.0) is not None, core.status
            source.put(*core.outbox.pop()[:2])
        deadline = time.monotonic() + 10
        while len(source.acked) < len(cores) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        stop.set()
        await task

    asyncio.run(run())
    m = fog.metrics
    # hh1: two more reports fit (m1, m2), the third device's (m3) does not; hh2's both do.
    assert m.value("reports_rejected", reason=REASON) == 1 and m.value("reports_accepted") == 4
    assert len(source.acked) == 5
