"""On/off reports by randomized response (shuffle-DP lecture notes, seed 002;
device: rase_device.binary_rr.OnOffRandomizer).

A device is on when its reading is above on_above. With probability p (the
device's rational flip_fraction(eps) / 2^20) the report is a uniform bit,
otherwise the true bit: P(1 | on) = 1 - p/2, P(1 | off) = p/2. For S the sum
of n reports, X_hat = (S - n p/2) / (1 - p) is unbiased for the number X of
devices on, with Var(X_hat) = n (p/2)(1 - p/2) / (1 - p)^2 whatever X is.
"""

from __future__ import annotations

import math

import numpy as np

from dataclasses import dataclass

from rase_device.binary_rr import DEFAULT_DEN, flip_fraction, local_eps
from rase_common.amplification import local_eps_for_central, numerical_eps
from rase_common.mechanisms.base import Estimate, Estimates, Mechanism, Setting, z_quantile
from rase_common.mechanisms.intervals import bonferroni, per_level, two_binomial_sterne
from rase_common.mechanisms.support import ExactSupport
from rase_common.mechanisms.plausibility import bernoulli_test

COUNT_MEANING = {
    "count": "unbiased count of devices that are on (reading > on_above), (S - n p/2) / (1 - p) summed over eps "
             "levels; its interval says how it was made (`method`)",
    "mean": "share of devices that are on: count / n, with the count's interval / n",
}


def flip_probability(eps: float) -> float:
    """p at eps, as the device draws it."""
    return flip_fraction(eps) / DEFAULT_DEN


def count_variance(n: int, p: float) -> float:
    return n * (p / 2) * (1 - p / 2) / (1 - p) ** 2


def _check(ones, n, p) -> None:
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not 0 <= ones <= n:
        raise ValueError(f"ones must be in [0, n], got {ones!r} of {n}")
    if not 0 <= p < 1:
        raise ValueError(f"flip probability p must be in [0, 1), got {p!r}")


def count_estimate(ones: int, n: int, p: float, level: float = 0.95) -> Estimate:
    """Unbiased count of devices that are on, from `ones` of n reports with flip probability p."""
    _check(ones, n, p)
    return on_count_from({p: (int(ones), int(n))}, level)


def on_count_from(tallies: dict[float, tuple[int, int]], level: float = 0.95) -> Estimate:
    """The count from (ones, reports) per flip probability p."""
    return count_interval(tallies, level)


# Several eps levels: a normal interval from the exact variance when at least this
# many reports are expected to be uniform bits (their sum is then near normal), else
# Bonferroni over the levels' exact intervals.
NORMAL_MIN_NOISY = 20


def count_interval(tallies: dict[float, tuple[int, int]], level: float = 0.95) -> Estimate:
    """The count from (ones, reports) per flip probability p. One level's
    ones are exactly Bin(X, 1 - p/2) + Bin(n - X, p/2) for its X devices on,
    so its interval for X is exact (Sterne's acceptance sets: coverage >=
    level for every X). The variance, n (p/2)(1 - p/2) / (1 - p)^2 per level,
    is exact and the same for every X: several levels take the normal
    interval from it when enough reports are noise (NORMAL_MIN_NOISY),
    Bonferroni over their exact intervals otherwise."""
    value = sum((ones - n * p / 2) / (1 - p) for p, (ones, n) in tallies.items())
    var = sum(count_variance(n, p) for p, (_, n) in tallies.items())
    total = sum(n for _, n in tallies.values())
    if len(tallies) > 1 and sum(n * p for p, (_, n) in tallies.items()) >= NORMAL_MIN_NOISY:
        half = z_quantile(level) * math.sqrt(var)
        return Estimate(value, max(0.0, value - half), min(float(total), value + half), total,
                        "normal-exact-variance", var)
    parts = []
    each = per_level(level, len(tallies))
    for p, (ones, n) in tallies.items():
        lo, hi = two_binomial_sterne(int(ones), int(n), 1 - p / 2, p / 2, each)
        parts.append((1.0, Estimate((ones - n * p / 2) / (1 - p), float(lo), float(hi), int(n), "exact-sterne",
                                    count_variance(n, p))))
    if len(parts) == 1:
        return parts[0][1]
    return bonferroni(parts, level, "bonferroni(exact-sterne)")


def on_count(bits_by_level: dict[float, np.ndarray], level: float = 0.95) -> Estimate:
    """Unbiased count of devices that are on, from the reports of each eps level."""
    tallies: dict[float, tuple[int, int]] = {}
    for eps, bits in bits_by_level.items():
        b = np.asarray(bits, dtype=np.float64)
        if b.size == 0:
            continue
        if not np.all((b == 0) | (b == 1)):
            raise ValueError("binary reports must be 0 or 1")
        p = flip_probability(eps)
        ones, n = tallies.get(p, (0, 0))
        tallies[p] = (ones + int(b.sum()), n + int(b.size))
    if not tallies:
        raise ValueError("no reports")
    return on_count_from(tallies, level)


@dataclass(frozen=True)
class FlipChoice:
    flip_num: int
    flip_den: int
    eps0: float            # local eps of each report, ln((2 - p) / p)
    central_eps: float     # after a uniform shuffle of n reports (numerical FMT bound)
    delta: float
    n: int

    @property
    def p(self) -> float:
        return self.flip_num / self.flip_den


def rr_flip_for_central(eps: float, delta: float, n: int, den: int = DEFAULT_DEN) -> FlipChoice:
    """The smallest flip probability p = num/den whose n shuffled reports are
    (eps, delta)-DP: eps0 from the numerical bound, p rounded up."""
    eps0 = local_eps_for_central(eps, delta, n)
    num = flip_fraction(eps0, den)
    e0 = local_eps(num, den)
    return FlipChoice(num, den, e0, numerical_eps(e0, n, delta), delta, n)


class Binary(Mechanism):
    name = "binary"
    output = "count"

    def support(self, setting: Setting, eps: float) -> ExactSupport:
        return ExactSupport(2)

    def sample(self, setting: Setting, eps: float, readings, rng: np.random.Generator) -> np.ndarray:
        on = (np.asarray(readings, dtype=np.float64) > setting.on_above).astype(np.int64)
        flipped = rng.integers(0, DEFAULT_DEN, size=on.shape) < flip_fraction(eps)
        return np.where(flipped, rng.integers(0, 2, size=on.shape), on)

    def plausibility(self, setting: Setting, eps: float):
        return plausibility(setting, eps)

    def report_variances(self, setting: Setting, eps: float, x) -> np.ndarray:
        """Variance of one report's debiased count (the same whatever the reading)."""
        p = flip_probability(eps)
        return np.full(np.shape(x), count_variance(1, p))

    def central_eps0(self, eps: float, delta: float, devices: int) -> float:
        return rr_flip_for_central(eps, delta, devices).eps0

    def estimate(self, by_level: dict, setting: Setting, level: float = 0.95) -> Estimates:
        count = on_count(by_level, level)
        n = count.n
        share = Estimate(count.value / n, count.lo / n, count.hi / n, n, count.method,
                         None if count.var is None else count.var / n ** 2)
        return Estimates({"count": count, "mean": share}, COUNT_MEANING)


BINARY = Binary()


def plausibility(setting: Setting, eps: float):
    """The fog's detection tests (rase_common.mechanisms.plausibility): a
    report is 1 with probability at most 1 - p/2 (a device that is on) and 0
    with probability at most 1 - p/2 (one that is off)."""
    keep = 1 - flip_probability(eps) / 2
    return (bernoulli_test("above", keep, lambda y: float(y)), bernoulli_test("below", keep, lambda y: 1.0 - float(y)))
