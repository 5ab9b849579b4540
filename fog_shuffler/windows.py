"""Event-time windows at the fog (SPEC 4). Pure: the caller supplies the
logical time and persists what it must.

A window (region, t) closes when the fog's logical clock reaches
t + 1 + lateness_periods, or early once every device registered for the
region has reported. Duplicates of (device, t) are dropped (first wins), late
reports (window already closed) are dropped and counted. At close, eps levels
(per report kind) with fewer than k_min reports are dropped, and a window left
with fewer than k_min reports is suppressed.
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


class WindowManager:
    def __init__(self, *, registered: dict[str, set[str]], k_min: int = 10, lateness_periods: int = 1):
        if k_min < 1:
            raise ValueError(f"k_min must be >= 1, got {k_min}")
        if lateness_periods < 0:
            raise ValueError(f"lateness_periods must be >= 0, got {lateness_periods}")
        self.registered = registered
        self.k_min = k_min
        self.lateness = lateness_periods
        self.open: dict[tuple[str, int], OpenWindow] = {}
        self.closed: set[tuple[str, int]] = set()
        self.late: Counter[str] = Counter()

    def add(self, rep: Accepted) -> Outcome:
        key = (rep.region, rep.t)
        if key in self.closed:
            self.late[rep.region] += 1
            return Outcome.LATE
        w = self.open.get(key)
        if w is None:
            w = self.open[key] = OpenWindow(rep.region, rep.t)
        if rep.device in w.reports:
            w.duplicates += 1
            return Outcome.DUPLICATE
        w.reports[rep.device] = (rep.y, rep.eps, rep.mechanism)
        return Outcome.ACCEPTED

    def complete(self, region: str, t: int) -> bool:
        """Every device registered for the region has reported for t."""
        w = self.open.get((region, t))
        return w is not None and len(w.reports) >= len(self.registered.get(region, ()))

    def restore(self, closed: set[tuple[str, int]], reports, duplicates: dict[tuple[str, int], int]) -> int:
        """Reopen windows as a journal kept them: closed markers, accepted
        reports (region, t, device, y, eps, mechanism) and duplicate counts.
        Returns how many reports were restored."""
        self.closed = set(closed)
        n = 0
        for region, t, device, y, eps, mech in reports:
            self.add(Accepted(region, device, t, y, eps, mech))
            n += 1
        for key, k in duplicates.items():
            if key in self.open:
                self.open[key].duplicates = k
        return n

    def due(self, now_t: int) -> list[tuple[str, int]]:
        """Windows to close now, oldest first."""
        out = []
        for (region, t), w in self.open.items():
            if now_t >= t + 1 + self.lateness or self.complete(region, t):
                out.append((region, t))
        return sorted(out, key=lambda k: (k[1], k[0]))

    def close(self, region: str, t: int) -> ClosedWindow:
        w = self.open.pop((region, t), None) or OpenWindow(region, t)
        self.closed.add((region, t))
        # A batch is one eps level of one report kind (around a control change a window may hold two kinds).
        per_level = Counter((eps, m) for _, eps, m in w.reports.values())
        keep = {k for k, c in per_level.items() if c >= self.k_min}
        kept = [(d, y, e, m) for d, (y, e, m) in w.reports.items() if (e, m) in keep]
        dropped = len(w.reports) - len(kept)
        return ClosedWindow(region, t, [r[0] for r in kept], [r[1] for r in kept], [r[2] for r in kept],
                            w.duplicates, dropped, suppressed=len(kept) < self.k_min,
                            mechanisms=[r[3] for r in kept])

    def drop_device(self, device: str) -> int:
        """Take a device's reports out of every open window (it was just
        quarantined); returns how many were taken out."""
        return sum(w.reports.pop(device, None) is not None for w in self.open.values())

    def forget_before(self, t_min: int) -> None:
        """Drop closed markers older than any t ingest still accepts."""
        self.closed = {k for k in self.closed if k[1] >= t_min}


class RegionCounters:
    """Per region, the public counts a forwarded window carries about what
    happened since that region's previous forwarded window: reports rejected,
    reports late, windows suppressed. Never per device."""

    def __init__(self) -> None:
        self.rejected: Counter[str] = Counter()
        self.late: Counter[str] = Counter()
        self.suppressed: Counter[str] = Counter()

    def window_counts(self, cw: "ClosedWindow") -> WindowCounts:
        r = cw.region
        return WindowCounts(duplicates=cw.duplicates, eps_level_dropped=cw.eps_level_dropped, late=self.late[r],
                            rejected=self.rejected[r], suppressed_windows=self.suppressed[r])

    def forwarded(self, region: str) -> None:
        """The counts went out with a window of this region: start again."""
        self.rejected[region] = self.late[region] = self.suppressed[region] = 0
