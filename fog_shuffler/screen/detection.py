"""Attacker detection at the fog (SPEC 4): the fog sees device ids, so it
tests each device's long-run reports against what an honest device could
send, and quarantines one whose reports are implausible for every reading in
the range. Pure: no I/O, no clock; the service journals its state.

The test. For the deployment's mechanism and a report's eps, the registry
gives tests (rase_common.mechanisms.plausibility): a score s(y) of one
report (the debiased report above x_max or below x_min, in units of the
range; a band named too often) and log_mgf(lam), a bound on log E[exp(lam s)]
for an honest report whatever the reading. Per device and per test, two
one-sided CUSUMs run on the increments lam * s(y) - log_mgf(lam):
    W_n = max(0, W_{n-1} + lam s(y_n) - log_mgf(lam)),
one with lam tuned to the mechanism's largest output (an attacker that sends
it every period), one to a device whose scores average half-way between an
honest device's largest mean and that output. The device is quarantined
when any W_n reaches h.

The false-positive rate, derived. W_n >= h means some run of the device's
reports k..n has sum(lam s - log_mgf) >= h. For a fixed start k, exp of that
running sum is a nonnegative supermartingale with mean <= 1 under honest
reports (fresh noise per report; log_mgf bounds the conditional moment
generating function for any reading, even one chosen adaptively), so by
Ville's inequality it ever reaches e^h with probability <= e^-h. The
statistics restart at 0 each day (the day of the report's t), so within one
day there are at most N = ceil(86400 / period_s) + 1 start points per
CUSUM, and S = 2 x (tests) CUSUMs per device: a union bound gives
    P(an honest device is quarantined on a given day) <= S N e^-h = alpha
for h = ln(S N / alpha). alpha = 1e-6 per honest device-day by default.
A restart at 0 only lowers the statistics, so it never adds alarms.

Quarantine is sticky (days do not clear it); an operator releases a device
(`rase fog release`), which also clears its statistics.
"""

from __future__ import annotations

import functools
import math
from array import array
from dataclasses import dataclass, field

from rase_common.mechanisms import Setting, mechanism
from rase_common.mechanisms.plausibility import PlausibilityTest

FALSE_ALARM_PER_DEVICE_DAY = 1e-6
SECONDS_PER_DAY = 86400.0
# lam of the "largest output" CUSUM: the smallest lam whose increment for that
# output reaches this share of its supremum -ln P(largest output | worst reading).
EXTREME_SHARE = 0.95
LAM_CAP = 1e6


@dataclass(frozen=True)
class Cusum:
    """One CUSUM of one test: its lam and log_mgf(lam)."""
    test: int
    lam: float
    log_mgf: float
    target: str            # "largest output" or "half-way"


@dataclass(frozen=True)
class Plan:
    """The CUSUMs for one (mechanism, eps, setting)."""
    tests: tuple[PlausibilityTest, ...]
    cusums: tuple[Cusum, ...]

    def value(self, y: float) -> float:
        """A report's debiased value (reading units) for mean mechanisms, else 0."""
        debiased = self.tests[0].debiased
        return 0.0 if debiased is None else debiased(y)

    def increments(self, y: float) -> list[float]:
        scores = [t.score(y) for t in self.tests]
        return [c.lam * scores[c.test] - c.log_mgf for c in self.cusums]


def extreme_lam(test: PlausibilityTest) -> float:
    """The smallest lam (within 1%) whose increment for the largest output,
    lam * largest - log_mgf(lam), reaches EXTREME_SHARE of -ln P(largest)."""
    goal = -EXTREME_SHARE * math.log(test.largest_prob)
    if goal <= 0:
        return 0.0

    def gain(lam: float) -> float:
        return lam * test.largest - test.log_mgf(lam)

    lo, hi = 0.0, 1.0
    while gain(hi) < goal and hi < LAM_CAP:
        lo, hi = hi, hi * 2
    while hi - lo > 0.01 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gain(mid) < goal else (lo, mid)
    return hi


def halfway_lam(test: PlausibilityTest) -> float:
    """The lam that is best against scores averaging m = (honest mean +
    largest) / 2: the root of tilted_mean(lam) = m (the tilted mean rises from
    the honest mean to the largest score)."""
    m = (test.mean + test.largest) / 2
    if test.largest <= test.mean:
        return 0.0
    lo, hi = 0.0, 1.0
    while test.tilted_mean(hi) < m and hi < LAM_CAP:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if test.tilted_mean(mid) < m else (lo, mid)
    return hi


@functools.lru_cache(maxsize=256)
def plan_for(kind: str, eps: float, setting: Setting) -> Plan:
    tests = tuple(mechanism(kind).plausibility(setting, eps))
    cusums = []
    for i, test in enumerate(tests):
        for target, lam in (("largest output", extreme_lam(test)), ("half-way", halfway_lam(test))):
            cusums.append(Cusum(i, lam, test.log_mgf(lam), target))
    return Plan(tests, tuple(cusums))


def threshold(cusums: int, period_s: float, false_alarm: float = FALSE_ALARM_PER_DEVICE_DAY) -> float:
    """h = ln(S N / alpha): S CUSUMs per device, N = reports a device can send in a day."""
    if not (period_s > 0 and math.isfinite(period_s)):
        raise ValueError(f"period_s must be a finite number > 0, got {period_s!r}")
    if not 0 < false_alarm < 1:
        raise ValueError(f"false_alarm must be in (0, 1), got {false_alarm!r}")
    per_day = math.ceil(SECONDS_PER_DAY / period_s) + 1
    return math.log(cusums * per_day / false_alarm)


@dataclass(slots=True)
class DeviceState:
    """A device's running statistics today: its reports, the sum of their
    debiased values, and one CUSUM per (test, lam) of its mechanism."""
    kind: str
    day: int
    reports: int = 0
    total: float = 0.0
    cusum: list[float] = field(default_factory=list)

    def as_row(self, device: str) -> tuple:
        return (device, self.kind, self.day, self.reports, self.total, array("d", self.cusum).tobytes())

    @classmethod
    def from_row(cls, row: tuple) -> tuple[str, "DeviceState"]:
        device, kind, day, reports, total, cusum = row
        return device, cls(kind, int(day), int(reports), float(total), array("d", bytes(cusum or b"")).tolist())


class Scorer:
    """A plan, its threshold h, and each report value's (debiased value,
    CUSUM increments) remembered: most mechanisms have few outputs, so a
    report's scores are looked up, not computed (the same numbers: the plan's
    own functions made them). Continuous outputs fill the memo, which is
    cleared at MEMO_MAX entries."""
    MEMO_MAX = 1 << 14
    __slots__ = ("plan", "h", "memo")

    def __init__(self, plan: Plan, h: float):
        self.plan, self.h = plan, h
        self.memo: dict[float, tuple[float, tuple[float, ...]]] = {}

    def scores(self, y: float) -> tuple[float, tuple[float, ...]]:
        """Computed, and remembered (callers look in memo first). A zero is
        never remembered: -0.0 and 0.0 are one key."""
        got = (self.plan.value(y), tuple(self.plan.increments(y)))
        if y != 0.0:
            if len(self.memo) >= self.MEMO_MAX:
                self.memo.clear()
            self.memo[y] = got
        return got


@dataclass(frozen=True)
class Alarm:
    """A device just quarantined: what the fog's one log line about it says."""
    device: str
    t: int
    test: str              # e.g. "above (largest output)"
    statistic: float
    threshold: float
    reports_today: int
    mean_today: float | None   # of its debiased reports today (mean mechanisms, reading units)
    false_alarm: float = FALSE_ALARM_PER_DEVICE_DAY

    def line(self) -> str:
        return (f"fog quarantined device {self.device} at t={self.t}: its reports fail the {self.test} test "
                f"(CUSUM {self.statistic:.1f} >= {self.threshold:.1f}; false-positive rate <= "
                f"{self.false_alarm:g} per honest device-day) after {self.reports_today} reports today"
                + ("" if self.mean_today is None else f" averaging {self.mean_today:,.6g} debiased")
                + "; its reports no longer enter windows; "
                f"release with `rase fog release --config ... {self.device}`")


class Detector:
    """Per-device CUSUMs and the quarantine list.

    A batch's changes are applied in place and undone by rollback() (the
    batch was not journaled and will be retried); commit() keeps them (the
    service commits the batch's alarms with its reports, in one journal
    transaction). The statistics are journaled by checkpoint:
    checkpoint_rows() are the devices changed since the last one,
    checkpointed() says they are on disk."""

    def __init__(self, *, period_s: float, setting: Setting, false_alarm: float = FALSE_ALARM_PER_DEVICE_DAY,
                 states: dict[str, DeviceState] | None = None, quarantined: dict[str, int] | None = None):
        threshold(1, period_s, false_alarm)
        self.period_s = period_s
        self.setting = setting
        self.false_alarm = false_alarm
        self.states: dict[str, DeviceState] = dict(states or {})
        self.quarantined: dict[str, int] = dict(quarantined or {})    # device -> t it was quarantined at
        self._undo: dict[str, tuple | None] = {}   # this batch: each device's state before it (None: had none)
        self._newly: dict[str, int] = {}
        self._dirty: set[str] = set()              # changed by committed batches since the last checkpoint
        self._scorers: dict[tuple[str, float], Scorer] = {}

    # -- configuration -------------------------------------------------------------
    def configure(self, *, period_s: float, setting: Setting) -> None:
        """The protocol changed (period, range, grid): new laws and threshold from now on."""
        threshold(1, period_s, self.false_alarm)
        self.period_s, self.setting = period_s, setting
        self._scorers = {}

    def scorer(self, kind: str, eps: float) -> Scorer:
        key = (kind, eps)
        got = self._scorers.get(key)
        if got is None:
            plan = plan_for(kind, float(eps), self.setting)
            got = self._scorers[key] = Scorer(plan, threshold(len(plan.cusums), self.period_s, self.false_alarm))
        return got

    def plan(self, kind: str, eps: float) -> tuple[Plan, float]:
        """The CUSUMs for this kind and eps, and their threshold h."""
        s = self.scorer(kind, eps)
        return s.plan, s.h

    def threshold_for(self, kind: str, eps: float) -> float:
        return self.scorer(kind, eps).h

    # -- the test ---------------------------------------------------------------------
    def is_quarantined(self, device: str) -> bool:
        return device in self.quarantined or device in self._newly

    def observe(self, device: str, y: float, eps: float, kind: str, t: int, day: int) -> Alarm | None:
        """Fold one accepted report in; an Alarm when it quarantines the device.
        (The fog's per-report path: written for speed, checked against the
        plain definition by tests/unit/fog_shuffler/screen/test_detection.py.)"""
        if device in self.quarantined or device in self._newly:
            return None
        scorer = self._scorers.get((kind, eps)) or self.scorer(kind, eps)
        value, increments = scorer.memo.get(y) or scorer.scores(y)
        state = self.states.get(device)
        if state is None or state.kind != kind or state.day != day or len(state.cusum) != len(increments):
            state = self._fresh(device, state, kind, day, len(increments))
        elif device not in self._undo:
            # Its state before this batch, for rollback() (the CUSUMs are updated in place: a copy).
            self._undo[device] = (state.kind, state.day, state.reports, state.total, state.cusum[:])
        state.reports += 1
        state.total += value
        w, h, tipped = state.cusum, scorer.h, False
        for i, inc in enumerate(increments):
            v = w[i] + inc
            if v > 0.0:                      # max(0, v), and v reaching h tips the test
                w[i] = v
                tipped = tipped or v >= h
            else:
                w[i] = 0.0
        if not tipped:
            return None
        return self._alarm(device, t, state, scorer)

    def _fresh(self, device: str, old: DeviceState | None, kind: str, day: int, slots: int) -> DeviceState:
        """A device's first report today (or of another kind): its statistics
        start at 0 (a restart never adds alarms). The old state object is
        replaced, not changed, so rollback() can keep it as it is."""
        if device not in self._undo:
            self._undo[device] = None if old is None else (old.kind, old.day, old.reports, old.total, old.cusum)
        state = self.states[device] = DeviceState(kind, day, 0, 0.0, [0.0] * slots)
        return state

    def _alarm(self, device: str, t: int, state: DeviceState, scorer: Scorer) -> Alarm:
        plan, w = scorer.plan, state.cusum
        worst = max(range(len(w)), key=w.__getitem__)
        self._newly[device] = t
        c = plan.cusums[worst]
        mean = state.total / state.reports if plan.tests[0].debiased is not None else None
        return Alarm(device, t, f"{plan.tests[c.test].name} ({c.target})", w[worst], scorer.h, state.reports, mean,
                     self.false_alarm)

    # -- the batch -----------------------------------------------------------------------
    def staged_rows(self) -> list[tuple]:
        """The rows of the devices this batch changed."""
        return [self.states[d].as_row(d) for d in self._undo if d in self.states]

    def newly_quarantined(self) -> dict[str, int]:
        return dict(self._newly)

    def commit(self) -> None:
        self._dirty.update(self._undo)
        self.quarantined.update(self._newly)
        self._undo, self._newly = {}, {}

    def rollback(self) -> None:
        for device, old in self._undo.items():
            if old is None:
                self.states.pop(device, None)
            else:
                self.states[device] = DeviceState(*old)
        self._undo, self._newly = {}, {}

    # -- checkpoints ---------------------------------------------------------------------
    def checkpoint_rows(self) -> list[tuple]:
        """The rows of every device changed since the last checkpoint (this batch's too)."""
        return [self.states[d].as_row(d) for d in self._dirty.union(self._undo) if d in self.states]

    def checkpointed(self) -> None:
        """The rows checkpoint_rows() gave are on disk (call after commit())."""
        self._dirty = set()

    # -- the operator --------------------------------------------------------------------
    def release(self, device: str) -> bool:
        """Let a quarantined device's reports in again, with fresh statistics.
        False when it was not quarantined."""
        self.states.pop(device, None)
        self._dirty.discard(device)
        return self.quarantined.pop(device, None) is not None
