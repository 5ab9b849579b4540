"""The fog service with attacker detection on (in-memory source and sink, a
manual clock): a Duchi device that sends +C every period is quarantined
after the number of reports the detector's table says; from then on its
reports are rejected with a reason and leave no trace in windows; nothing
that leaves the fog names a device or carries a per-device statistic; a
restart keeps the quarantine and the statistics; `rase fog release`
(through the journal) lets the device in again while the fog runs."""

import asyncio
import json
import logging

import numpy as np
from prometheus_client import generate_latest

from fog_shuffler.config import FogConfig
from fog_shuffler.journal import quarantined_in, request_release
from fog_shuffler.metrics import FogMetrics
from fog_shuffler.service import FogService
from rase_common.channels import MemorySink, MemorySource
from rase_common.clock import ManualClock
from rase_common.mechanisms import Setting, mechanism
from rase_common.protocol.window import WindowMessage
from tests.unit.fog_shuffler.screen.test_detection import DETECTION_REPORTS

ATTACKER = "zq7attacker"
HONEST = [f"hon{i:02d}" for i in range(10)]
PERIOD = 8.0


def config(tmp_path) -> FogConfig:
    return FogConfig.load(None, name="det", regions={"r1": {"devices": HONEST + [ATTACKER]}}, period_s=PERIOD,
                          k_min=10, lateness_periods=1, device_mechanism="duchi", eps_levels=[1.0],
                          journal_path=tmp_path / "fog.sqlite", tick_s=0.01)


class Driver:
    """Runs a FogService on the test's loop and feeds it one timestamp at a time."""

    def __init__(self, cfg, clock):
        self.source, self.sink = MemorySource(), MemorySink()
        self.service = FogService(cfg, clock=clock, source=self.source, sink=self.sink, metrics=FogMetrics())
        self.clock = clock
        self.stop = asyncio.Event()
        self.task = None
        self.rng = np.random.default_rng(4)
        self.low, self.top = (float(v) for v in mechanism("duchi").device_values(Setting().calibration, 1.0))

    async def __aenter__(self):
        self.task = asyncio.create_task(self.service.run(self.stop))
        await until(lambda: self.service.forwarder is not None)
        return self

    async def __aexit__(self, *exc):
        self.stop.set()
        await self.task

    async def period(self, t: int, attacker_y: float | None) -> None:
        ys = mechanism("duchi").sample(Setting(), 1.0, np.full(len(HONEST), 50.0), self.rng)
        for d, y in zip(HONEST, ys):
            self.source.put(f"rase/v1/reports/r1/{d}", json.dumps({"v": 1, "t": t, "y": float(y), "eps": 1.0,
                                                                   "seq": t}))
        if attacker_y is not None:
            self.source.put(f"rase/v1/reports/r1/{ATTACKER}", json.dumps({"v": 1, "t": t, "y": attacker_y,
                                                                          "eps": 1.0, "seq": t}))
        self.clock.set((t + 1) * PERIOD - 0.01)
        self.service.wakeup.set()
        await until(lambda: not self.source.pending and not self.source.unacked)

    def metric(self, name: str, **labels) -> float:
        return self.service.metrics.registry.get_sample_value(name, labels or None) or 0.0


async def until(pred, timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not pred():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.002)


def windows(sink: MemorySink) -> list[WindowMessage]:
    return [WindowMessage.model_validate_json(p) for _, p in sink.sent]


def test_quarantine_release_and_nothing_per_device_leaves(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    cfg = config(tmp_path)
    clock = ManualClock(0.0)
    n_attack = DETECTION_REPORTS["duchi"]

    async def first_run():
        async with Driver(cfg, clock) as drv:
            for t in range(n_attack + 5):
                await drv.period(t, drv.top)
                if t == n_attack - 2:
                    assert drv.metric("rase_fog_devices_quarantined") == 0
            clock.set((n_attack + 7) * PERIOD)
            drv.service.wakeup.set()
            await until(lambda: len(drv.sink.sent) >= n_attack + 5)
            return drv

    drv = asyncio.run(first_run())
    assert drv.metric("rase_fog_devices_quarantined") == 1
    # Its reports after the one that tipped the test are rejected with a reason ...
    assert drv.metric("rase_fog_reports_rejected_total", reason="quarantined_device") == 5
    ws = windows(drv.sink)
    # ... and its reports left the windows still open when it was quarantined (the one
    # that tipped the test; the previous period's too when that window had not closed yet):
    # earlier windows closed early with all 11, later ones hold the 10 honest reports.
    ns = [w.n for w in ws]
    assert ns[:n_attack - 2] == [11] * (n_attack - 2) and ns[n_attack - 2] in (10, 11)
    assert ns[n_attack - 1:] == [10] * 6
    # Nothing that leaves the fog names a device or carries its statistics.
    exposition = generate_latest(drv.service.metrics.registry).decode()
    for d in HONEST + [ATTACKER]:
        assert all(d not in p for _, p in drv.sink.sent)
        assert d not in exposition
    assert all(w.counts.rejected >= 0 for w in ws) and sum(w.counts.rejected for w in ws) == 5
    naming = [r for r in caplog.records if ATTACKER in r.getMessage()]
    assert naming and all(r.name.startswith("fog_shuffler") for r in naming)
    lines = [r.getMessage() for r in naming if "quarantined device" in r.getMessage()]
    assert len(lines) == 1 and f"after {n_attack} reports today" in lines[0]
    # Per-device statistics appear only in that line.
    assert all("CUSUM" not in r.getMessage() for r in caplog.records if r.getMessage() != lines[0])
    assert [row[0] for row in quarantined_in(cfg.journal_path)] == [ATTACKER]

    async def second_run():
        async with Driver(cfg, clock) as drv2:      # a restart keeps the quarantine and the statistics
            assert drv2.service.roles.get("screen").device_screen.detector.is_quarantined(ATTACKER)
            assert drv2.metric("rase_fog_devices_quarantined") == 1
            assert {d: drv2.service.roles.get("screen").device_screen.detector.states[d].reports for d in HONEST} == {d: n_attack + 5 for d in HONEST}
            t = n_attack + 8
            await drv2.period(t, drv2.top)
            assert drv2.metric("rase_fog_reports_rejected_total", reason="quarantined_device") == 1
            assert request_release(cfg.journal_path, ATTACKER, clock.now())      # the operator's command
            assert not request_release(cfg.journal_path, "hon00", clock.now())   # not quarantined
            await until(lambda: drv2.metric("rase_fog_devices_quarantined") == 0)
            await drv2.period(t + 1, drv2.low)         # Duchi's -C: the device's report is accepted again
            assert drv2.metric("rase_fog_reports_rejected_total", reason="quarantined_device") == 1
            assert drv2.metric("rase_fog_reports_accepted_total") == 10 + 11
            return drv2

    drv2 = asyncio.run(second_run())
    assert quarantined_in(cfg.journal_path) == []
    assert not drv2.service.roles.get("screen").device_screen.detector.is_quarantined(ATTACKER)
    assert any("released device" in r.getMessage() for r in caplog.records)


def test_detection_off(tmp_path):
    cfg = FogConfig.load(None, **{**config(tmp_path).model_dump(), "detection": {"enabled": False}})

    async def run():
        async with Driver(cfg, ManualClock(0.0)) as drv:
            for t in range(120):
                await drv.period(t, drv.top)
            return drv

    drv = asyncio.run(run())
    assert drv.service.roles.get("screen") is None
    assert drv.metric("rase_fog_devices_quarantined") == 0
    assert drv.metric("rase_fog_reports_rejected_total", reason="quarantined_device") == 0


def test_a_range_change_never_quarantines_reports_made_under_the_old_range(tmp_path):
    """The control message shrinks the range from 4,000 to 300 W. Reports
    made under the old range arrive for a few periods (the fog accepts them
    by the previous parameters); scored against the new range, Duchi's old
    +C would be 20 ranges above x_max. They are not scored, and nobody is
    quarantined."""
    from rase_common.protocol.control import ControlMessage

    cfg = config(tmp_path)

    async def run():
        clock = ManualClock(0.0)
        async with Driver(cfg, clock) as drv:
            for t in range(3):
                await drv.period(t, drv.low)
            new = ControlMessage(mechanism="duchi", eps_levels=[1.0], x_max=300.0, period_s=PERIOD)
            drv.source.put("rase/v1/control/precision", new.model_dump_json())
            await drv.period(3, drv.top)            # the old range's +C, from every device
            for d in HONEST:
                drv.source.put(f"rase/v1/reports/r1/{d}", json.dumps({"v": 1, "t": 3, "y": drv.top, "eps": 1.0,
                                                                       "seq": 3}))
            await drv.period(4, drv.top)
            return drv

    drv = asyncio.run(run())
    assert drv.metric("rase_fog_reports_rejected_total", reason="impossible_y") == 0
    assert drv.metric("rase_fog_devices_quarantined") == 0
    assert drv.service.ctx.gate.current.x_max == 300.0


def test_a_crash_keeps_the_last_checkpoint_and_every_alarm(tmp_path):
    """The statistics are journaled by checkpoint, alarms with their batch.
    The journal's files are copied mid-run, between batches (what a SIGKILL
    leaves on disk): a fog started on the copy has each device's statistics
    as of the last checkpoint (the evidence after it is lost, and gathered
    again from the next reports), and the quarantine raised after that
    checkpoint (it was committed with its batch)."""
    import shutil

    cfg = FogConfig.load(None, **{**config(tmp_path).model_dump(), "detection": {"checkpoint_s": 3600}})
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    n_attack, at_checkpoint = DETECTION_REPORTS["duchi"], 10

    async def run():
        clock = ManualClock(0.0)
        async with Driver(cfg, clock) as drv:
            for t in range(n_attack + 2):
                await drv.period(t, drv.top)
                if t == at_checkpoint - 1:
                    drv.service.roles.get("screen").device_screen.checkpoint(drv.service.ctx.journal, due_only=True)   # not due: nothing
                    assert drv.service.ctx.journal.detector_states() == []
                    drv.service.roles.get("screen").device_screen.checkpoint(drv.service.ctx.journal)                  # as when due
            assert drv.service.roles.get("screen").device_screen.detector.is_quarantined(ATTACKER)
            for suffix in ("", "-wal"):
                shutil.copy(f"{cfg.journal_path}{suffix}", crashed / f"fog.sqlite{suffix}")
        after_crash = FogConfig.load(None, **{**cfg.model_dump(), "journal_path": crashed / "fog.sqlite"})
        async with Driver(after_crash, clock) as drv2:
            det = drv2.service.roles.get("screen").device_screen.detector
            assert det.quarantined.keys() == {ATTACKER}
            assert {d: det.states[d].reports for d in HONEST} == {d: at_checkpoint for d in HONEST}
        async with Driver(cfg, clock) as drv3:          # a clean stop checkpoints: nothing lost
            det = drv3.service.roles.get("screen").device_screen.detector
            assert det.quarantined.keys() == {ATTACKER}
            assert {d: det.states[d].reports for d in HONEST} == {d: n_attack + 2 for d in HONEST}

    asyncio.run(run())
