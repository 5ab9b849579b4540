"""The fog's attacker detection, wired to its journal and windows: which
reports are screened out (quarantined devices), which are scored, and what
each ingest batch writes with its reports (fog_shuffler.detection holds the
statistics; this module only keeps them in step with the fog's commits).

Scoring is staged per ingest batch: `write()` gives the rows the journal
commits together with the batch's reports, then `commit()` (or `rollback()`
when the commit failed) makes the staged state the detector's own, so a
crash or a storage error never leaves the statistics ahead of the journal."""

from __future__ import annotations

import logging

from fog_shuffler.detection import SECONDS_PER_DAY, Alarm, Detector, DeviceState
from fog_shuffler.ingest import Accepted, Rejected
from fog_shuffler.journal import DetectionWrite, Journal
from fog_shuffler.protocol import Protocol, ProtocolFollower
from rase_common.mechanisms.base import Setting

log = logging.getLogger("fog_shuffler.service")


class DeviceScreen:
    def __init__(self, own: Protocol, false_alarm: float, quarantined_gauge) -> None:  # noqa: ANN001
        self.detector = Detector(period_s=own.period_s, setting=Setting.of(own), false_alarm=false_alarm)
        self.gauge = quarantined_gauge
        self._alarms: list[Alarm] = []
        self._schedule = None           # (protocol, its schedule): the UTC day of a t

    def restore(self, journal: Journal) -> None:
        """The statistics and quarantine as last committed, then pending releases."""
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
            raise Rejected("quarantined_device", "the device failed the plausibility test")

    def observe(self, rep: Accepted, protocol: ProtocolFollower) -> None:
        """Score an accepted report (staged until commit)."""
        if protocol.changed_at_t is not None and rep.t <= protocol.changed_at_t + protocol.grace:
            # Around a control change a report may be made under the previous parameters
            # (another range or mechanism): it is not scored against the new ones.
            return
        alarm = self.detector.observe(rep.device, rep.y, rep.eps, rep.mechanism, rep.t,
                                      self._day_of(rep.t, protocol.current))
        if alarm is not None:
            self._alarms.append(alarm)

    def _day_of(self, t: int, current: Protocol) -> int:
        """The UTC day period t starts in, on the schedule the fog follows."""
        if self._schedule is None or self._schedule[0] is not current:
            self._schedule = (current, current.schedule)
        return int(self._schedule[1].start_of(t) // SECONDS_PER_DAY)

    def write(self, now: float) -> DetectionWrite:
        """What the batch's journal commit writes for detection."""
        return DetectionWrite(self.detector.staged_rows(), [(a.device, a.t, now, a.test) for a in self._alarms])

    def rollback(self) -> None:
        self.detector.rollback()
        self._alarms = []

    def commit(self, drop_device) -> None:  # noqa: ANN001
        """The batch is on disk: quarantine its alarms' devices (drop_device
        takes their reports out of the open windows; the journal dropped them
        in the same commit)."""
        self.detector.commit()
        for alarm in self._alarms:
            drop_device(alarm.device)
            log.warning(alarm.line())                  # the one log line that names the device
        if self._alarms:
            self.gauge.set(len(self.detector.quarantined))
        self._alarms = []

    def apply_releases(self, journal: Journal) -> None:
        """Releases an operator asked for (`rase fog release` writes them to the journal)."""
        for device in journal.release_requests():
            journal.release(device)
            if self.detector.release(device):
                log.warning("fog released device %s from quarantine (operator request): its reports enter "
                            "windows again, with fresh statistics", device)
        self.gauge.set(len(self.detector.quarantined))
