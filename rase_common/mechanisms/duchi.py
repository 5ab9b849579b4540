"""Duchi, Jordan and Wainwright's one-bit mechanism (device: rase_device.duchi).

Report center +- half * C, C = (a + b) / (a - b) with a/b <= e^eps the
device's rational bound; P(+C | k) = (k/K) a/(a+b) + (1 - k/K) b/(a+b), so
E[y | k] = grid_value(k) and Var[y | k] = half^2 (C^2 - t^2), t = (2k - K)/K:
concave in the reading. The number S of +C reports among n is a sum of
independent Bernoullis (Poisson binomial) with mean n p_bar, and p_bar is a
linear function of the mean reading: the interval is an exact binomial one
for p_bar (Sterne's acceptance sets, coverage >= level for every p_bar, and
for a Poisson binomial too: its tails are lighter, Hoeffding 1956, Theorem 4),
mapped through that line (rase_common.mechanisms.intervals)."""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from rase_device.duchi import DuchiParams
from rase_device.randomizer import Calibration
from rase_common.mechanisms.base import Estimate, Estimates
from rase_common.mechanisms.bounded import BoundedMechanism, center_half, interval_variance
from rase_common.mechanisms.intervals import STERNE_MAX_N, binomial_sterne
from rase_common.mechanisms.support import PointsSupport


@functools.lru_cache(maxsize=256)
def params(eps: float) -> DuchiParams:
    return DuchiParams(eps)


def magnitude(eps: float) -> Fraction:
    """C = (a + b) / (a - b): the report is center +- half * C."""
    p = params(eps)
    return Fraction(p.a + p.b, p.a - p.b)


def up_probability(cal: Calibration, eps: float, position) -> float:
    """P(+C) for a reading at (fractional) grid position `position` in [0, K]."""
    p = params(eps)
    return (p.b + (p.a - p.b) * np.asarray(position, dtype=np.float64) / cal.grid_max) / (p.a + p.b)


class Duchi(BoundedMechanism):
    name = "duchi"
    # Always exact: the score (Wilson) interval of a binomial covers far less
    # than its level where n p is about 0.1 to 1, i.e. readings near an end of
    # the range at high eps (e.g. 0.84 for 45 readings at 16 W, eps 9).
    exact_max_n = 10 ** 9

    def quadratic(self, eps: float, cal: Calibration) -> tuple[Fraction, Fraction]:
        K = cal.grid_max
        _, half = center_half(cal)
        return half * half * magnitude(eps) ** 2, half * half * Fraction(-4, K * K)

    def report_values(self, cal: Calibration, eps: float) -> dict[int, Fraction]:
        center, half = center_half(cal)
        c = magnitude(eps)
        return {0: center - half * c, 1: center + half * c}

    def report_pmf(self, cal: Calibration, eps: float, k: int) -> dict[int, Fraction]:
        K = cal.grid_max
        if not 0 <= k <= K:
            raise ValueError(f"grid index must be in [0, {K}], got {k}")
        p = params(eps)
        up = Fraction(k, K) * Fraction(p.a, p.a + p.b) + Fraction(K - k, K) * Fraction(p.b, p.a + p.b)
        return {0: 1 - up, 1: up}

    def device_values(self, cal: Calibration, eps: float) -> np.ndarray:
        # As rase_device.duchi.DuchiRandomizer.params computes them.
        p = params(eps)
        center, half = (cal.x_min + cal.x_max) / 2.0, (cal.x_max - cal.x_min) / 2.0
        mag = half * p.ab / (p.a - p.b)
        return np.array([center - mag, center + mag])

    def sample_indices(self, cal: Calibration, eps: float, k: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return (rng.random(np.shape(k)) < up_probability(cal, eps, k)).astype(np.int64)

    def pmf_array(self, cal: Calibration, eps: float, k: int) -> np.ndarray:
        up = float(up_probability(cal, eps, k))
        return np.array([1.0 - up, up])

    def exact_interval(self, y: np.ndarray, eps: float, setting, level: float) -> Estimate:
        """Sterne's exact interval for the mean probability of +C (the number
        of +C reports is a sum of independent Bernoullis), mapped through the
        line from that probability to the mean reading."""
        cal = setting.calibration
        p = params(eps)
        ups = int(np.sum(y > (cal.x_min + cal.x_max) / 2))
        lo, hi = binomial_sterne(ups, y.size, level, p.b / (p.a + p.b), p.a / (p.a + p.b))

        def reading(prob: float) -> float:
            return min(max(cal.x_min + cal.delta * (prob * (p.a + p.b) - p.b) / (p.a - p.b), cal.x_min), cal.x_max)
        bound = functools.partial(self.variance_bound, setting, eps)
        lo, hi = reading(lo), reading(hi)
        method = "exact-binomial-sterne" if y.size <= STERNE_MAX_N else "exact-binomial-clopper-pearson"
        return Estimate(float(y.mean()), lo, hi, y.size, method, interval_variance(bound, lo, hi, y.size))

    def estimate(self, by_level: dict, setting, level: float = 0.95) -> Estimates:
        """The bounded mechanisms' mean, and in its meaning what a first run
        wonders about: a mean of n two-valued reports takes one of n + 1
        values, so with few devices it repeats exactly from one t to the next."""
        out = super().estimate(by_level, setting, level)
        levels = {eps: y for eps, y in by_level.items() if np.size(y)}
        if len(levels) != 1:
            return out
        (eps, y), = levels.items()
        low, high = self.device_values(setting.calibration, eps)
        n = int(np.size(y))
        out.meaning["mean"] = (f"{out.meaning['mean']} Each Duchi report is one of two values ({low:.6g} or "
                               f"{high:.6g} at eps {eps:g}), so the mean of these {n} reports is one of {n + 1} "
                               f"values {(high - low) / n:.6g} apart: with few reports it repeats exactly while the "
                               "readings change little; the windowed means move in smaller steps.")
        return out

    def support(self, setting, eps: float) -> PointsSupport:
        cal = setting.calibration
        return PointsSupport(self.device_values(cal, eps), abs(cal.x_min) + abs(cal.x_max))

    def effective_eps(self, setting, eps: float) -> float:
        p = params(eps)
        return math.log(p.a) - math.log(p.b)


DUCHI = Duchi()
