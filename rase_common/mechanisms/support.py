"""Exact output sets, for the fog's ingest check (SPEC 4: a report the
deployment's mechanism cannot output at its eps is rejected with a reason).

Reports arrive as floats the device computed from exact rationals; a report
counts as an output when it is within `base.float_tolerance` of one (the
tolerance is derived there from how the device computes them)."""

from __future__ import annotations

import bisect
import math

import numpy as np

from rase_common.mechanisms.base import IMPLAUSIBLE, IMPOSSIBLE, Support, float_tolerance


class PointsSupport(Support):
    """A finite set of outputs (Duchi's two values, an off-grid clamp point)."""

    def __init__(self, values, scale: float = 0.0):
        self.values = np.unique(np.asarray(values, dtype=np.float64))
        spacing = float(np.min(np.diff(self.values))) if self.values.size > 1 else math.inf
        self.tol = float_tolerance(scale + float(np.max(np.abs(self.values))), spacing) if scale >= 0 else 0.0
        self._points = [float(v) for v in self.values]

    def reason(self, y: float) -> str | None:
        # Python floats and bisect: a numpy call per report cost the fog's ingest 3 us (Duchi).
        points = self._points
        i = bisect.bisect_left(points, y)
        if i < len(points) and abs(y - points[i]) <= self.tol or i > 0 and abs(y - points[i - 1]) <= self.tol:
            return None
        return IMPOSSIBLE


class ExactSupport(Support):
    """Outputs compared exactly: integers in [0, top) (a bit, a category, a mask)."""

    def __init__(self, top: int):
        self.top = top

    def reason(self, y: float) -> str | None:
        return None if y == int(y) and 0 <= y < self.top else IMPOSSIBLE


class GridSupport(Support):
    """Outputs base + unit * (a m + b) for integers m in [lo, hi], computed by
    the device in that order. Integers m outside [lo, hi] are `beyond`:
    impossible, or (BR without clamping, whose noise is unbounded) implausible
    beyond a stated tail."""

    def __init__(self, base: float, unit: float, a: int, b: int, lo: int, hi: int, beyond: str = IMPOSSIBLE,
                 scale: float = 0.0):
        if not (unit > 0 and a > 0 and lo <= hi):
            raise ValueError("a grid support needs unit > 0, a > 0 and lo <= hi")
        self.base, self.unit, self.a, self.b, self.lo, self.hi = base, unit, a, b, lo, hi
        self.beyond = beyond
        self.scale = scale + abs(base)
        self.spacing = unit * a

    def value(self, m: int) -> float:
        return self.base + self.unit * (self.a * m + self.b)

    def reason(self, y: float) -> str | None:
        m = round(((y - self.base) / self.unit - self.b) / self.a)
        tol = float_tolerance(self.scale + abs(y), self.spacing)
        if abs(y - self.value(m)) > tol:
            return IMPOSSIBLE
        return None if self.lo <= m <= self.hi else self.beyond


class UnionSupport(Support):
    def __init__(self, *parts: Support):
        self.parts = parts

    def reason(self, y: float) -> str | None:
        reasons = [p.reason(y) for p in self.parts]
        if None in reasons:
            return None
        return IMPLAUSIBLE if IMPLAUSIBLE in reasons else IMPOSSIBLE
