"""The fog's attacker detection, wired to its journal and windows: which
reports are screened out (quarantined devices), which are scored, and what
each ingest batch writes with its reports (fog_shuffler.screen.detection holds the
statistics; this module only keeps them in step with the fog's commits).

What is journaled when (docs/reliability.md, "Attacker detection"):
- an alarm (a device quarantined, its open reports dropped) in the same
  transaction as the batch of reports that raised it, before that batch is
  acknowledged: a quarantine is never lost;
- the statistics every `checkpoint_s` seconds: the devices changed since the
  last checkpoint, written with the first batch committed (or by the closer,
  when no batch comes) after the interval has passed, and at a clean stop. A
  crash loses at most the evidence of the reports since the last checkpoint
  (their CUSUM increments); the reports themselves are journaled as always.
  Writing each device's row with every batch cost 3-5 us per report.

A batch's scoring is undone by `rollback()` when its commit failed, so a
batch retried after a storage error is scored once."""

from __future__ import annotations

import logging
import time
from typing import Callable

from fog_shuffler.screen.detection import SECONDS_PER_DAY, Alarm, Detector, DeviceState
from fog_shuffler.ingest import Accepted, Rejected, add_reasons
from fog_shuffler.journal import DetectionWrite, Journal
from fog_shuffler.protocol import Protocol, ProtocolFollower
from rase_common.errors import StorageError
from rase_common.mechanisms.base import Setting

log = logging.getLogger("fog_shuffler.service")
CHECKPOINT_S = 5.0
QUARANTINED = "quarantined_device"     # a valid report from a device detection quarantined
add_reasons((QUARANTINED,))


class DeviceScreen:
    def __init__(self, own: Protocol, false_alarm: float, quarantined_gauge, *,  # noqa: ANN001
                 checkpoint_s: float = CHECKPOINT_S, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.detector = Detector(period_s=own.period_s, setting=Setting.of(own), false_alarm=false_alarm)
        self.gauge = quarantined_gauge
        self.checkpoint_s = checkpoint_s
        self.monotonic = monotonic
        self._next_checkpoint = monotonic() + checkpoint_s
        self._checkpointing = False     # the staged write carries a checkpoint
        self._alarms: list[Alarm] = []
        self._days: dict[int, int] = {}  # t -> the UTC day it starts in, on the schedule of _days_of
        self._days_of: Protocol | None = None

    def restore(self, journal: Journal) -> None:
        """The statistics as last checkpointed, the quarantine as last committed, then pending releases."""
        d = self.detector
        self.detector = Detector(period_s=d.period_s, setting=d.setting, false_alarm=d.false_alarm,
                                 states=dict(DeviceState.from_row(r) for r in journal.detector_states()),
                                 quarantined=journal.quarantined_devices())
        self.apply_releases(journal)
        if self.detector.quarantined:
            log.info("fog: %d device(s) stay quarantined (`rase fog release` lets one in again)",
                     len(self.detector.quarantined))

    def follow(self, protocol: Protocol) -> None:
        """New protocol parameters (a control change): the plausibility laws follow them."""
        self.detector.configure(period_s=protocol.period_s, setting=Setting.of(protocol))

    def screen(self, rep: Accepted) -> None:
        if self.detector.is_quarantined(rep.device):
            raise Rejected(QUARANTINED, "the device failed the plausibility test")

    def observe(self, rep: Accepted, protocol: ProtocolFollower) -> None:
        """Score an accepted report (undone by rollback())."""
        if protocol.changed_at_t is not None and rep.t <= protocol.changed_at_t + protocol.grace:
            # Around a control change a report may be made under the previous parameters
            # (another range or mechanism): it is not scored against the new ones.
            return
        day = self._days.get(rep.t) if self._days_of is protocol.current else None
        if day is None:
            day = self._day_of(rep.t, protocol.current)
        alarm = self.detector.observe(rep.device, rep.y, rep.eps, rep.mechanism, rep.t, day)
        if alarm is not None:
            self._alarms.append(alarm)

    def _day_of(self, t: int, current: Protocol) -> int:
        """The UTC day period t starts in, on the schedule the fog follows."""
        if self._days_of is not current or len(self._days) > 4096:
            self._days, self._days_of = {}, current
        day = self._days[t] = int(current.schedule.start_of(t) // SECONDS_PER_DAY)
        return day

    def write(self, now: float) -> DetectionWrite:
        """What the batch's journal commit writes for detection: its alarms,
        and a checkpoint of the statistics when one is due."""
        self._checkpointing = self.monotonic() >= self._next_checkpoint
        states = self.detector.checkpoint_rows() if self._checkpointing else []
        return DetectionWrite(states, [(a.device, a.t, now, a.test) for a in self._alarms])

    def rollback(self) -> None:
        self.detector.rollback()
        self._alarms = []
        self._checkpointing = False

    def commit(self, drop_device) -> None:  # noqa: ANN001
        """The batch is on disk: quarantine its alarms' devices (drop_device
        takes their reports out of the open windows; the journal dropped them
        in the same commit)."""
        self.detector.commit()
        if self._checkpointing:
            self._checkpointed()
        for alarm in self._alarms:
            drop_device(alarm.device)
            log.warning(alarm.line())                  # the one log line that names the device
        if self._alarms:
            self.gauge.set(len(self.detector.quarantined))
        self._alarms = []

    def checkpoint(self, journal: Journal, *, due_only: bool = False) -> None:
        """Between batches: journal the statistics changed since the last
        checkpoint (due_only: only when the interval has passed)."""
        if due_only and self.monotonic() < self._next_checkpoint:
            return
        rows = self.detector.checkpoint_rows()
        if rows:
            journal.save_detector_states(rows)
        self._checkpointed()

    def checkpoint_at_stop(self, journal: Journal) -> None:
        """A clean stop loses no evidence; a journal that cannot be written loses what a crash would."""
        try:
            self.checkpoint(journal)
        except StorageError as err:
            log.warning("fog: the detection statistics of the last %.3g s could not be saved at stop: %s",
                        self.checkpoint_s, err)

    def _checkpointed(self) -> None:
        self.detector.checkpointed()
        self._checkpointing = False
        self._next_checkpoint = self.monotonic() + self.checkpoint_s

    def between_batches(self, journal: Journal) -> None:
        """The closer's turn: releases an operator asked for, and a checkpoint when due."""
        self.apply_releases(journal)
        self.checkpoint(journal, due_only=True)

    def apply_releases(self, journal: Journal) -> None:
        """Releases an operator asked for (`rase fog release` writes them to the journal)."""
        for device in journal.release_requests():
            journal.release(device)
            if self.detector.release(device):
                log.warning("fog released device %s from quarantine (operator request): its reports enter "
                            "windows again, with fresh statistics", device)
        self.gauge.set(len(self.detector.quarantined))
