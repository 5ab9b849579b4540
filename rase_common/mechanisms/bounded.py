"""What Duchi, Piecewise and Hybrid share: a reading clipped to [x_min, x_max]
and randomly rounded to the K + 1 points of edge_agent.ldp_rational.BoundedGrid,
then a report that is unbiased for that grid point.

For each of them the exact per-report variance at grid index k is quadratic,
Var[y | k] = A + B (k - K/2)^2 (`quadratic`), and the random rounding of a
reading between k0 and k0 + 1 (up with probability u) adds u (1 - u) step^2.
Reports are in reading units; exact values are Fractions.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from edge_agent.ldp_rational import BoundedGrid
from edge_agent.randomizer import Calibration
import math

from rase_common.mechanisms.base import Estimate, Estimates, Mechanism, Setting, z_quantile
from rase_common.mechanisms.intervals import reports_of
from rase_common.mechanisms.base import FLOAT_TOLERANCE
from rase_common.mechanisms.plausibility import PlausibilityTest, mean_tests


def center_half(cal: Calibration) -> tuple[Fraction, Fraction]:
    return (Fraction(cal.x_min) + Fraction(cal.x_max)) / 2, (Fraction(cal.x_max) - Fraction(cal.x_min)) / 2


def grid_value(cal: Calibration, k: int) -> Fraction:
    """The exact reading grid index k stands for: x_min + k * Delta / K."""
    center, half = center_half(cal)
    return center + half * Fraction(2 * k - cal.grid_max, cal.grid_max)


def grid_step(cal: Calibration) -> Fraction:
    return (Fraction(cal.x_max) - Fraction(cal.x_min)) / cal.grid_max


def reading_position(cal: Calibration, x: float) -> Fraction:
    """The exact expected report for reading x: x_min + (k0 + frac) Delta / K,
    the clipped reading up to the float rounding of the device's position."""
    k0, frac = BoundedGrid(cal).position(x)
    return grid_value(cal, k0) + Fraction(frac) * grid_step(cal)


def grid_positions(cal: Calibration, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k0, frac) of BoundedGrid.position for an array of readings."""
    xc = np.clip(np.asarray(x, dtype=np.float64), cal.x_min, cal.x_max)
    f = (xc - cal.x_min) * cal.grid_max / cal.delta
    k0 = np.minimum(np.floor(f), cal.grid_max).astype(np.int64)
    frac = np.where(k0 >= cal.grid_max, 0.0, f - k0)
    return k0, frac


def random_indices(cal: Calibration, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The device's random rounding of readings x to grid indices (vectorised)."""
    k0, frac = grid_positions(cal, x)
    return k0 + (rng.random(k0.shape) < frac)


def mixed_variance(a: Fraction, b: Fraction, cal: Calibration, k0: int, u: Fraction) -> Fraction:
    """Var[y] when the grid index is k0 + 1 with probability u, else k0:
    (1-u) V(k0) + u V(k0+1) + u (1-u) step^2."""
    half_k = Fraction(cal.grid_max, 2)
    v0 = a + b * (k0 - half_k) ** 2
    if u == 0:
        return v0
    v1 = a + b * (k0 + 1 - half_k) ** 2
    step = grid_step(cal)
    return (1 - u) * v0 + u * v1 + u * (1 - u) * step * step


class BoundedMechanism(Mechanism):
    """A mean mechanism over the bounded grid. A subclass gives `quadratic`,
    `report_values`, `report_pmf`, `device_values`, `support` and `sample_indices`."""
    output = "mean"
    extras = ("bs", "se", "mle")

    # -- what a subclass provides --------------------------------------------
    def quadratic(self, eps: float, cal: Calibration) -> tuple[Fraction, Fraction]:
        """(A, B) with Var[y | grid index k] = A + B (k - K/2)^2 exactly, in W^2."""
        raise NotImplementedError

    def report_values(self, cal: Calibration, eps: float) -> dict[int, Fraction]:
        """Output index -> the exact report in reading units."""
        raise NotImplementedError

    def report_pmf(self, cal: Calibration, eps: float, k: int) -> dict[int, Fraction]:
        """Output index -> exact probability for grid index k (indices as the
        device randomizer's draw_index returns them; zero-probability outputs omitted)."""
        raise NotImplementedError

    def device_values(self, cal: Calibration, eps: float) -> np.ndarray:
        """Output index -> the report as the device's float arithmetic computes it."""
        raise NotImplementedError

    def sample_indices(self, cal: Calibration, eps: float, k: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Output indices for grid indices k, drawn from the exact pmf (vectorised)."""
        raise NotImplementedError

    # -- derived ---------------------------------------------------------------
    def sample(self, setting: Setting, eps: float, readings, rng: np.random.Generator) -> np.ndarray:
        cal = setting.calibration
        k = random_indices(cal, readings, rng)
        return self.device_values(cal, eps)[self.sample_indices(cal, eps, k, rng)]

    def report_variance_exact(self, cal: Calibration, eps: float, k: int) -> Fraction:
        """Var[y | grid index k] as an exact Fraction."""
        if not 0 <= k <= cal.grid_max:
            raise ValueError(f"grid index must be in [0, {cal.grid_max}], got {k}")
        a, b = self.quadratic(eps, cal)
        return a + b * (k - Fraction(cal.grid_max, 2)) ** 2

    def report_variance_at(self, cal: Calibration, eps: float, x: float) -> Fraction:
        """Var[y | x] exactly for a reading x, including the device's random
        rounding of x to a neighbouring grid point."""
        k0, frac = BoundedGrid(cal).position(x)
        a, b = self.quadratic(eps, cal)
        return mixed_variance(a, b, cal, k0, Fraction(frac))

    def report_variance(self, setting: Setting, eps: float, x: float) -> float:
        return float(self.report_variance_at(setting.calibration, eps, x))

    def report_variances(self, setting: Setting, eps: float, x) -> np.ndarray:
        """Var[y | x] for an array of readings (floats; the exact Fractions rounded once)."""
        cal = setting.calibration
        a, b = (float(v) for v in self.quadratic(eps, cal))
        k0, u = grid_positions(cal, x)
        half_k = cal.grid_max / 2
        step = cal.delta / cal.grid_max
        v0 = a + b * (k0 - half_k) ** 2
        v1 = a + b * (k0 + 1 - half_k) ** 2
        return (1 - u) * v0 + u * v1 + u * (1 - u) * step * step

    def worst_case_variance_exact(self, cal: Calibration, eps: float) -> Fraction:
        """max over every reading x (on or between grid points) of Var[y | x].

        Between k0 and k0 + 1 (up with probability u) the variance is
        V(k0) + u (V(k0+1) - V(k0) + s^2) - u^2 s^2, s the grid step: concave in
        u, maximal at u* = (V(k0+1) - V(k0) + s^2) / (2 s^2) clipped to [0, 1].
        V is quadratic in k with coefficient B; for B >= 0 the maximum over k0 is
        at an end of the grid, for B < 0 next to its middle, so only those
        intervals are searched.
        """
        K = cal.grid_max
        a, b = self.quadratic(eps, cal)
        s2 = grid_step(cal) ** 2
        half_k = Fraction(K, 2)
        best = max(a + b * (k - half_k) ** 2 for k in (0, K // 2, (K + 1) // 2, K))
        for k0 in {0, K - 1, K // 2 - 1, K // 2, (K + 1) // 2 - 1, (K + 1) // 2}:
            if not 0 <= k0 < K:
                continue
            v0, v1 = a + b * (k0 - half_k) ** 2, a + b * (k0 + 1 - half_k) ** 2
            u = min(Fraction(1), max(Fraction(0), (v1 - v0 + s2) / (2 * s2)))
            best = max(best, mixed_variance(a, b, cal, k0, u))
        return best

    def worst_case_variance(self, setting: Setting, eps: float) -> float:
        return float(self.worst_case_variance_exact(setting.calibration, eps))

    def plausibility(self, setting: Setting, eps: float) -> tuple[PlausibilityTest, ...]:
        """The fog's detection tests (rase_common.mechanisms.plausibility): the
        report's exact law at grid index K ("above") and 0 ("below"). Duchi,
        PM and HM are stochastically increasing in the grid index (Duchi: P(+C)
        grows with k; PM: k's high-probability window of outputs slides up
        with k; HM: a fixed mixture of the two), and a reading between two grid
        points is a mixture of their laws, so no reading scores higher."""
        cal = setting.calibration
        values = {o: float(v) for o, v in self.report_values(cal, eps).items()}

        def law(k: int) -> tuple[list[float], list[float]]:
            pmf = self.report_pmf(cal, eps, k)
            return [values[o] for o in pmf], [float(p) for p in pmf.values()]

        slack = 2 * FLOAT_TOLERANCE * (abs(cal.x_min) + abs(cal.x_max) + max(abs(v) for v in values.values()))
        return mean_tests(law(cal.grid_max), law(0), cal.x_min, cal.x_max, slack, float)

    def reading_pmf(self, cal: Calibration, eps: float, x: float) -> dict[int, Fraction]:
        """Output index -> exact probability for a reading x, including the
        device's random rounding (grid index k0 + 1 with probability frac)."""
        k0, frac = BoundedGrid(cal).position(x)
        u = Fraction(frac)
        out = {o: (1 - u) * p for o, p in self.report_pmf(cal, eps, k0).items()}
        if u:
            for o, p in self.report_pmf(cal, eps, k0 + 1).items():
                out[o] = out.get(o, 0) + u * p
        return out

    def worst_case_likelihood_ratio(self, cal: Calibration, eps: float) -> Fraction:
        """max over outputs o and inputs k, k' of P(o | k) / P(o | k'), exactly,
        by enumerating every grid input (cost (K+1) * outputs: use a small K)."""
        hi: dict[int, Fraction] = {}
        lo: dict[int, Fraction] = {}
        for k in range(cal.grid_max + 1):
            for o, p in self.report_pmf(cal, eps, k).items():
                if p > hi.get(o, -1):
                    hi[o] = p
                if o not in lo or p < lo[o]:
                    lo[o] = p
        worst = Fraction(1)
        for o in hi:
            if hi[o] == 0:
                continue
            if lo[o] == 0:
                raise ValueError(f"output {o} has probability 0 for some input: not LDP")
            worst = max(worst, hi[o] / lo[o])
        return worst

    def estimate(self, by_level: dict, setting: Setting, level: float = 0.95) -> Estimates:
        return Estimates({"mean": sample_mean(by_level, level)},
                         {"mean": MEAN_MEANING})


def sample_mean(by_level: dict, level: float = 0.95) -> Estimate:
    """Mean of reports that are each unbiased; normal interval from their sample variance."""
    z, _ = reports_of(by_level)
    m = float(z.mean())
    var = float(z.var(ddof=1)) / z.size if z.size > 1 else math.inf
    half = z_quantile(level) * math.sqrt(var)
    return Estimate(m, m - half, m + half, int(z.size), "normal-sample-variance", var)


MEAN_MEANING = ("unbiased for the mean reading (clipped to [x_min, x_max]); each report is unbiased, "
                "so this is their mean. Use this one.")
