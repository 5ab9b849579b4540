"""Event-time windows at the fog (SPEC 4). Pure: the service supplies the
logical time and persists what it must.

A window (region, t) closes when the fog's logical clock reaches
t + 1 + lateness_periods (counted from when its first report came, if that
was later: after an outage the backlog arrives together), or early once
every device registered for the region has reported. Duplicates of (device, t) are dropped (first wins). At
close, eps levels (per report kind) with fewer than k_min reports are dropped,
and a window left with fewer than k_min reports is suppressed.

Late data is data: a report whose window has closed, but whose t is within
`late_periods` periods of that close (the allowed lateness, minutes rather
than one period: a device's outbox delivers what it queued through an
outage), opens a late batch for that t, revision 1, 2, ... A late batch is a
window like any other: it closes once it has k_min reports and has been
open as long as a window is (1 + lateness_periods periods), or, short of
k_min, is suppressed when the allowed lateness ends; it is shuffled on its own, and only its reports go out; the fusion
center publishes a revised aggregate. Reports past the allowed lateness are
counted as late, never as hostile input. A device counts once per t across
the window and its late batches (`seen`).
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

from fog_shuffler.ingest import Accepted
from rase_common.protocol.window import WindowCounts


class Outcome(enum.Enum):
    """What became of a report the ingest rules accepted."""
    ACCEPTED = "accepted"       # into its open window
    DUPLICATE = "duplicate"     # (device, t) seen before: QoS 1 redelivery
    LATE = "late"               # its window already closed


@dataclass
class OpenWindow:
    region: str
    t: int
    reports: dict[str, tuple[float, float, str]] = field(default_factory=dict)  # device -> (y, eps, mechanism)
    duplicates: int = 0
    revision: int = 0               # 0: the window; 1, 2, ...: late batches of the same t
    opened_at_t: int | None = None  # the fog's t when its first report came


@dataclass(frozen=True)
class ClosedWindow:
    region: str
    t: int
    devices: list[str]
    values: list[float]
    eps: list[float]
    duplicates: int
    eps_level_dropped: int
    suppressed: bool
    mechanisms: list[str] = field(default_factory=list)   # per report: the device mechanism it was checked against
    revision: int = 0


class WindowManager:
    def __init__(self, *, registered: dict[str, set[str]], k_min: int = 10, lateness_periods: int = 1,
                 late_periods: int = 0):
        if k_min < 1:
            raise ValueError(f"k_min must be >= 1, got {k_min}")
        if lateness_periods < 0:
            raise ValueError(f"lateness_periods must be >= 0, got {lateness_periods}")
        if late_periods < 0:
            raise ValueError(f"late_periods must be >= 0, got {late_periods}")
        self.registered = registered
        self.k_min = k_min
        self.lateness = lateness_periods
        self.late_periods = late_periods
        self.open: dict[tuple[str, int], OpenWindow] = {}
        self.closed: dict[tuple[str, int], int] = {}      # (region, t) -> revisions closed so far
        self.seen: dict[tuple[str, int], set[str]] = {}   # devices already in a closed window of (region, t)
        self.late: Counter[str] = Counter()                # reports past the allowed lateness, per region

    def horizon_t(self, now_t: int) -> int:
        """The oldest t a report may still have (its window, or a late batch)."""
        return now_t - 1 - self.lateness - self.late_periods

    def add(self, rep: Accepted, now_t: int) -> Outcome:
        key = (rep.region, rep.t)
        if rep.t < self.horizon_t(now_t) or (key in self.closed and not self.late_periods):
            self.late[rep.region] += 1
            return Outcome.LATE
        w = self.open.get(key)
        if rep.device in self.seen.get(key, ()) or (w is not None and rep.device in w.reports):
            # A repeat (a device sends again what no receipt confirmed): counted, and it opens nothing. Before,
            # a repeat of a closed window's report opened an empty late batch, closed at once as suppressed,
            # one journal commit per repeat.
            if w is not None:
                w.duplicates += 1
            return Outcome.DUPLICATE
        if w is None:
            revision = self.closed.get(key, -1) + 1
            w = self.open[key] = OpenWindow(rep.region, rep.t, revision=revision, opened_at_t=now_t)
        w.reports[rep.device] = (rep.y, rep.eps, rep.mechanism)
        return Outcome.ACCEPTED

    def complete(self, region: str, t: int) -> bool:
        """Every device registered for the region has reported for t."""
        w = self.open.get((region, t))
        seen = len(self.seen.get((region, t), ()))
        return w is not None and len(w.reports) + seen >= len(self.registered.get(region, ()))

    def restore(self, closed: dict[tuple[str, int], int], reports, duplicates: dict[tuple[str, int], int],
                seen: dict[tuple[str, int], set[str]], now_t: int) -> int:
        """Reopen windows as a journal kept them: closed markers (revisions),
        open reports (region, t, device, y, eps, mechanism), duplicate counts,
        and the devices of closed windows. Returns how many reports were restored."""
        self.closed = dict(closed)
        self.seen = {k: set(v) for k, v in seen.items()}
        n = 0
        for region, t, device, y, eps, mech in reports:
            key = (region, t)
            if key not in self.open:        # reopened as it was, even if now past its lateness
                revision = self.closed.get(key, -1) + 1
                self.open[key] = OpenWindow(region, t, revision=revision, opened_at_t=now_t)
            self.open[key].reports[device] = (y, eps, mech)
            n += 1
        for key, k in duplicates.items():
            if key in self.open:
                self.open[key].duplicates = k
        return n

    def due(self, now_t: int) -> list[tuple[str, int]]:
        """Windows and late batches to close now, oldest first."""
        out = []
        for (region, t), w in self.open.items():
            if w.revision == 0:
                # A window that opens behind time (its reports come from outboxes after an outage) stays
                # open as long as one that opened on time, so the rest of the backlog reaches it.
                start = t if w.opened_at_t is None else max(t, w.opened_at_t)
                if now_t >= start + 1 + self.lateness or self.complete(region, t):
                    out.append((region, t))
            # A late batch stays open as long as a window does (issue 29): reports that devices send again
            # together, spread over a second or two, go out in one batch, not in one and a straggler short
            # of k_min that is suppressed when the allowed lateness ends.
            elif (len(w.reports) >= self.k_min and now_t >= (w.opened_at_t or 0) + 1 + self.lateness) \
                    or t < self.horizon_t(now_t) + 1 or self.complete(region, t):
                out.append((region, t))
        return sorted(out, key=lambda k: (k[1], k[0]))

    def close(self, region: str, t: int) -> ClosedWindow:
        key = (region, t)
        w = self.open.pop(key, None) or OpenWindow(region, t, revision=self.closed.get(key, -1) + 1)
        self.closed[key] = w.revision
        self.seen.setdefault(key, set()).update(w.reports)
        # A batch is one eps level of one report kind (around a control change a window may hold two kinds).
        per_level = Counter((eps, m) for _, eps, m in w.reports.values())
        keep = {k for k, c in per_level.items() if c >= self.k_min}
        kept = [(d, y, e, m) for d, (y, e, m) in w.reports.items() if (e, m) in keep]
        dropped = len(w.reports) - len(kept)
        return ClosedWindow(region, t, [r[0] for r in kept], [r[1] for r in kept], [r[2] for r in kept],
                            w.duplicates, dropped, suppressed=len(kept) < self.k_min,
                            mechanisms=[r[3] for r in kept], revision=w.revision)

    def drop_device(self, device: str) -> int:
        """Take a device's reports out of every open window (it was just
        quarantined); returns how many were taken out."""
        return sum(w.reports.pop(device, None) is not None for w in self.open.values())

    def forget_before(self, t_min: int) -> None:
        """Drop closed markers and seen devices older than any t ingest still takes."""
        self.closed = {k: v for k, v in self.closed.items() if k[1] >= t_min}
        self.seen = {k: v for k, v in self.seen.items() if k[1] >= t_min}


class RegionCounters:
    """Per region, the public counts a forwarded window carries about what
    happened since that region's previous forwarded window: reports rejected,
    reports late, windows suppressed. Never per device."""

    def __init__(self) -> None:
        self.rejected: Counter[str] = Counter()
        self.late: Counter[str] = Counter()
        self.suppressed: Counter[str] = Counter()
        self.rejected_by: dict[str, Counter[str]] = {}     # region -> reason -> count (a Prio3 statement's)

    def reject(self, region: str, reason: str) -> None:
        self.rejected[region] += 1
        self.rejected_by.setdefault(region, Counter())[reason] += 1

    def window_counts(self, cw: "ClosedWindow") -> WindowCounts:
        r = cw.region
        return WindowCounts(duplicates=cw.duplicates, eps_level_dropped=cw.eps_level_dropped, late=self.late[r],
                            rejected=self.rejected[r], suppressed_windows=self.suppressed[r])

    def forwarded(self, region: str) -> None:
        """The counts went out with a window of this region: start again."""
        self.rejected[region] = self.late[region] = self.suppressed[region] = 0
        self.rejected_by.pop(region, None)
