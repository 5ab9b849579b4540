"""What Duchi, Piecewise and Hybrid share: a reading clipped to [x_min, x_max]
and randomly rounded to the K + 1 points of rase_device.ldp_rational.BoundedGrid,
then a report that is unbiased for that grid point.

For each of them the exact per-report variance at grid index k is quadratic,
Var[y | k] = A + B (k - K/2)^2 (`quadratic`), and the random rounding of a
reading between k0 and k0 + 1 (up with probability u) adds u (1 - u) step^2.
Reports are in reading units; exact values are Fractions.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np

from rase_device.ldp_rational import BoundedGrid
from rase_device.randomizer import Calibration
from rase_common.mechanisms.base import FLOAT_TOLERANCE, Estimate, Estimates, Mechanism, Setting, z_quantile
from rase_common.mechanisms.intervals import (accepted_hull, bonferroni, per_level, reports_of, score_interval,
                                               split_variance_bound)
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
    `report_values`, `report_pmf`, `pmf_array`, `device_values`, `support` and `sample_indices`."""
    output = "mean"
    # Up to this many reports in an eps level the interval is exact (the normal
    # approximation fails for few reports of PM/HM at high eps, whose rare
    # outliers dominate); above it the score interval with the variance bound
    # (measured in benchmarks/coverage.py).
    exact_max_n = 200

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

    def variance_bound(self, setting: Setting, eps: float, mu) -> np.ndarray:
        """The largest mean per-report variance of n readings whose mean is mu:
        the least concave majorant of Var[y | x] at mu. V is quadratic in the
        reading with coefficient B: for B <= 0 (concave: Duchi, HM at small
        eps) it is V(mu); for B > 0 (convex: PM) the chord between the ends,
        V(x_min) = V(x_max). The random rounding adds at most step^2 / 4."""
        cal = setting.calibration
        a, b = (float(v) for v in self.quadratic(eps, cal))
        m = np.clip(np.asarray(mu, dtype=np.float64), cal.x_min, cal.x_max)
        d = (m - cal.x_min) * cal.grid_max / cal.delta - cal.grid_max / 2
        core = a + b * d * d if b <= 0 else a + b * (cal.grid_max / 2) ** 2 + 0.0 * d
        return core + (cal.delta / cal.grid_max) ** 2 / 4

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

    def pmf_array(self, cal: Calibration, eps: float, k: int) -> np.ndarray:
        """report_pmf at grid index k as floats over every output index."""
        raise NotImplementedError

    def exact_interval(self, y: np.ndarray, eps: float, setting: Setting, level: float) -> Estimate:
        """The small-sample interval of the mean of one eps level's reports
        (Duchi: exact binomial; PM and HM: exact under the least favourable readings)."""
        return least_favourable_estimate(self, y, eps, setting, level)

    def estimate(self, by_level: dict, setting: Setting, level: float = 0.95) -> Estimates:
        return Estimates({"mean": level_mean(self, by_level, setting, level)}, {"mean": MEAN_MEANING})


LF_BINS = 1024       # bins of the output range for the exact sum distribution
LF_POINTS = 129      # mean readings at which the least favourable quantiles are tabulated


def level_mean(mech, by_level: dict, setting: Setting, level: float) -> Estimate:
    """The mean of reports that are each unbiased for their reading, with an
    interval that holds for every reading configuration: exact per level for
    few reports, the score interval with the variance bound for many; eps
    levels combined by the split variance bound (many reports each) or by
    Bonferroni."""
    levels = [(float(e), np.asarray(v, dtype=np.float64)) for e, v in by_level.items() if len(v)]
    y_all, _ = reports_of(by_level)
    n = y_all.size
    if len(levels) == 1:
        eps, y = levels[0]
        return level_interval(mech, y, eps, setting, level)
    if all(y.size > mech.exact_max_n for _, y in levels):
        bound = split_variance_bound([functools.partial(mech.variance_bound, setting, e) for e, _ in levels],
                                     [y.size / n for _, y in levels], setting.x_min, setting.x_max)
        return score_estimate(float(y_all.mean()), n, bound, setting, level, "score-variance-bound")
    each = per_level(level, len(levels))
    parts = [(y.size / n, level_interval(mech, y, e, setting, each)) for e, y in levels]
    return bonferroni(parts, level, "bonferroni(" + ",".join(sorted({p.method for _, p in parts})) + ")")


def level_interval(mech, y: np.ndarray, eps: float, setting: Setting, level: float) -> Estimate:
    if y.size <= mech.exact_max_n:
        return mech.exact_interval(y, eps, setting, level)
    return score_estimate(float(y.mean()), y.size, functools.partial(mech.variance_bound, setting, eps), setting,
                          level, "score-variance-bound")


def score_estimate(mu_hat: float, n: int, bound, setting: Setting, level: float, method: str) -> Estimate:
    """The score interval, its variance the bound's largest value over the interval."""
    lo, hi = score_interval(mu_hat, n, bound, setting.x_min, setting.x_max, z_quantile(level))
    return Estimate(mu_hat, lo, hi, n, method, interval_variance(bound, lo, hi, n))


def interval_variance(bound, lo: float, hi: float, n: int) -> float:
    """The largest variance of a mean of n reports over [lo, hi] (for windowed averages)."""
    return float(np.max(bound(np.linspace(lo, hi, 65)))) / n


def least_favourable_estimate(mech, y: np.ndarray, eps: float, setting: Setting, level: float) -> Estimate:
    """Exact interval of the mean of n reports: every mu whose least
    favourable readings (the two ends of the range, in the proportion that
    gives mean mu, when the per-report variance is convex; all readings at mu
    when it is concave) put mu_hat inside the central `level` of the mean's
    exact distribution. That distribution is the n-fold convolution of the
    reports' pmfs, over the output range cut into LF_BINS bins (each bin's
    half-width is added to both ends)."""
    cal = setting.calibration
    grid, d_lo, d_hi = least_favourable_table(mech, eps, y.size, cal.x_min, cal.x_max, cal.gamma, level)
    mu_hat = float(y.mean())

    def ok(m):
        return (m + np.interp(m, grid, d_lo) <= mu_hat) & (mu_hat <= m + np.interp(m, grid, d_hi))
    lo, hi = accepted_hull(ok, lambda m: bool(ok(np.array([m]))[0]), cal.x_min, cal.x_max,
                           min(max(mu_hat, cal.x_min), cal.x_max))
    bound = functools.partial(mech.variance_bound, setting, eps)
    return Estimate(mu_hat, lo, hi, y.size, "exact-least-favourable", interval_variance(bound, lo, hi, y.size))


@functools.lru_cache(maxsize=256)
def least_favourable_table(mech, eps: float, n: int, x_min: float, x_max: float, gamma: float,
                           level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mu grid, lower and upper quantile of mu_hat - mu) under the least
    favourable readings of mean mu, for n reports of one eps level."""
    from scipy import fft

    cal = Calibration(x_min=x_min, x_max=x_max, gamma=gamma)
    K = cal.grid_max
    values = mech.device_values(cal, eps)
    vmin, vmax = float(values.min()), float(values.max())
    h = (vmax - vmin) / (LF_BINS - 1)
    bins = np.rint((values - vmin) / h).astype(np.int64)
    length = n * (LF_BINS - 1) + 1
    size = fft.next_fast_len(length, real=True)

    def spectrum(k: float) -> np.ndarray:
        k0 = min(int(k), K - 1)
        u = k - k0
        pmf = (1 - u) * mech.pmf_array(cal, eps, k0) + u * mech.pmf_array(cal, eps, k0 + 1)
        return fft.rfft(np.bincount(bins, weights=pmf, minlength=LF_BINS), size)

    convex = float(mech.quadratic(eps, cal)[1]) > 0
    bottom, top = spectrum(0), spectrum(K)
    grid = np.linspace(x_min, x_max, LF_POINTS)
    alpha = 1 - level
    d_lo, d_hi = np.empty(LF_POINTS), np.empty(LF_POINTS)
    for i, mu in enumerate(grid):
        share = (mu - x_min) / cal.delta
        if convex:
            m = min(int(share * n), n - 1)
            f = top ** m * spectrum((share * n - m) * K) * bottom ** (n - m - 1)
        else:
            f = spectrum(share * K) ** n
        dist = np.clip(fft.irfft(f, size)[:length], 0.0, None)
        cdf = np.cumsum(dist) / dist.sum()
        i_lo = int(np.searchsorted(cdf, alpha / 2, side="right"))
        i_hi = min(int(np.searchsorted(cdf, 1 - alpha / 2, side="left")), length - 1)
        d_lo[i] = vmin + h * i_lo / n - mu - h / 2
        d_hi[i] = vmin + h * i_hi / n - mu + h / 2
    return grid, d_lo, d_hi


MEAN_MEANING = ("unbiased for the mean reading (clipped to [x_min, x_max]); each report is unbiased, "
                "so this is their mean; its interval holds for any readings (`method`). Use this one.")
