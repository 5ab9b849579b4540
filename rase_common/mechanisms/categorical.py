"""Load bands by kRR or OUE (device: rase_device.categorical.BandRandomizer).

The reading's band j (how many of the `bands` edges it is above; k = edges + 1
bands) is reported by k-ary randomized response or optimized unary encoding,
whichever choose_oracle picks for k and eps, at the device's rational
probabilities. Per band j, the count c_j of reports naming j (kRR) or with bit
j set (OUE) is Bin(n_j, hit) + Bin(n - n_j, q) for the n_j devices in band j:
    kRR: hit = p, q = (1 - p) / (k - 1);   OUE: hit = 1/2, q = the 0-bit flip;
and f_j = (c_j / n - q) / (hit - q) is unbiased for the share n_j / n.
Variance of a rare band's frequency per report:
    kRR: (e^eps + k - 2) / (e^eps - 1)^2,  OUE: 4 e^eps / (e^eps - 1)^2.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from rase_device.categorical import DEFAULT_DEN, choose_oracle, krr_keep_fraction, oue_flip_fraction
from rase_common.mechanisms.base import Estimate, Estimates, Mechanism, Setting, z_quantile
from rase_common.mechanisms.intervals import (bonferroni, per_level, score_interval, split_variance_bound,
                                               two_binomial_sterne)
from rase_common.mechanisms.support import ExactSupport
from rase_common.mechanisms.plausibility import bernoulli_test

FREQUENCIES_MEANING = {
    "frequencies": "per band (category j: bands[j-1] < reading <= bands[j]): unbiased share of devices in it, "
                   "kRR or OUE debiased; each interval says how it was made (`method`)",
}


def oracle(k: int, eps: float) -> tuple[str, float, float]:
    """(oracle, hit, q) as the device draws at eps for k categories."""
    if choose_oracle(k, eps) == "krr":
        hit = krr_keep_fraction(eps, k) / DEFAULT_DEN
        return "krr", hit, (1 - hit) / (k - 1)
    return "oue", 0.5, oue_flip_fraction(eps) / DEFAULT_DEN


def krr_counts(reports, k: int) -> np.ndarray:
    r = np.asarray(reports, dtype=np.int64)
    if r.ndim != 1 or r.size == 0 or r.min() < 0 or r.max() >= k:
        raise ValueError(f"kRR reports must be a non-empty list of categories in [0, {k})")
    return np.bincount(r, minlength=k)


def oue_counts(masks, k: int) -> np.ndarray:
    """Per category, how many reports have its bit set."""
    m = np.asarray(masks, dtype=np.int64)
    if m.ndim != 1 or m.size == 0 or m.min() < 0 or (m >> k).any():
        raise ValueError(f"OUE reports must be a non-empty list of {k}-bit masks")
    return np.array([int(((m >> j) & 1).sum()) for j in range(k)], dtype=np.int64)


def tallies(reports_by_level: dict[float, np.ndarray], k: int) -> list[tuple[float, float, np.ndarray, int]]:
    """Per eps level: (hit, q, counts per category, reports)."""
    out = []
    for eps, reports in reports_by_level.items():
        r = np.asarray(reports, dtype=np.float64)
        if r.size == 0:
            continue
        if not np.all(r == np.floor(r)):
            raise ValueError("categorical reports must be whole numbers (a category or a bit mask)")
        kind, hit, q = oracle(k, eps)
        counts = krr_counts(r.astype(np.int64), k) if kind == "krr" else oue_counts(r.astype(np.int64), k)
        out.append((hit, q, counts, int(r.size)))
    if not out:
        raise ValueError("no reports")
    return out


def _frequencies(levels: list[tuple[float, float, np.ndarray, int]], k: int, level: float) -> list[Estimate]:
    return [share_interval([(hit, q, int(c[j]), m) for hit, q, c, m in levels], level) for j in range(k)]


# Several eps levels: the score interval with the split variance bound when at least
# this many reports are expected to name a category falsely, else Bonferroni.
NORMAL_MIN_FALSE = 20


def share_interval(levels: list[tuple[float, float, int, int]], level: float = 0.95) -> Estimate:
    """Share of devices in one category from (hit, q, count, reports) per eps
    level. One level's count is exactly Bin(n_j, hit) + Bin(n - n_j, q), so
    its interval for n_j is exact (Sterne's acceptance sets: coverage >=
    level for every n_j). Several levels: the score interval with the largest
    variance over the split of the share between levels (linear in each
    level's share) when enough false reports make the sum near normal
    (NORMAL_MIN_FALSE), Bonferroni over the levels' exact intervals otherwise.
    The variance is the largest over the interval (for windowed averages)."""
    n_all = sum(m for _, _, _, m in levels)
    value = sum(m / n_all * (c / m - q) / (hit - q) for hit, q, c, m in levels)
    if len(levels) > 1 and sum(m * q for _, q, _, m in levels) >= NORMAL_MIN_FALSE:
        bound = split_variance_bound([functools.partial(_unit_variance, hit, q) for hit, q, _, _ in levels],
                                     [m / n_all for *_, m in levels], 0.0, 1.0)
        lo, hi = score_interval(value, n_all, bound, 0.0, 1.0, z_quantile(level))
        var = float(np.max(bound(np.linspace(lo, hi, 65)))) / n_all
        return Estimate(value, lo, hi, n_all, "score-variance-bound", var)
    each = per_level(level, len(levels))
    parts = []
    for hit, q, c, m in levels:
        lo, hi = two_binomial_sterne(int(c), int(m), hit, q, each)
        var = max(share_variance(v / m, m, hit, q) for v in (lo, hi))
        parts.append((m / n_all, Estimate((c / m - q) / (hit - q), lo / m, hi / m, int(m), "exact-sterne", var)))
    if len(parts) == 1:
        return parts[0][1]
    return bonferroni(parts, level, "bonferroni(exact-sterne)")


def _unit_variance(hit: float, q: float, f):
    """n x the variance of one level's share estimate at share f (linear in f)."""
    return (np.asarray(f) * hit * (1 - hit) + (1 - np.asarray(f)) * q * (1 - q)) / (hit - q) ** 2


def share_variance(f: float, m: int, hit: float, q: float) -> float:
    return (f * hit * (1 - hit) + (1 - f) * q * (1 - q)) / (m * (hit - q) ** 2)


def krr_frequencies(counts, n: int, keep_p: float, level: float = 0.95) -> list[Estimate]:
    k = len(counts)
    q = (1 - keep_p) / (k - 1)
    if not (k >= 2 and keep_p > q):
        raise ValueError(f"need k >= 2 and keep probability > 1/k, got k={k}, p={keep_p!r}")
    return _frequencies([(keep_p, q, _checked(counts, n), int(n))], k, level)


def oue_frequencies(counts, n: int, flip_q: float, level: float = 0.95) -> list[Estimate]:
    if not 0 < flip_q < 0.5:
        raise ValueError(f"OUE 0-bit flip probability must be in (0, 1/2), got {flip_q!r}")
    return _frequencies([(0.5, flip_q, _checked(counts, n), int(n))], len(counts), level)


def _checked(counts, n) -> np.ndarray:
    c = np.asarray(counts, dtype=np.int64)
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if np.any(c < 0) or np.any(c > n):
        raise ValueError("counts must lie in [0, n]")
    return c


def band_frequencies(reports_by_level: dict[float, np.ndarray], k: int, level: float = 0.95) -> list[Estimate]:
    """Debiased share of devices in each of k categories from the reports of each eps level."""
    return _frequencies(tallies(reports_by_level, k), k, level)


def frequency_variance(oracle_name: str, k: int, eps: float, n: int = 1) -> float:
    """Variance of a rare category's debiased frequency (f -> 0)."""
    e = math.exp(eps)
    if oracle_name == "krr":
        return (e + k - 2) / ((e - 1) ** 2 * n)
    if oracle_name == "oue":
        return 4 * e / ((e - 1) ** 2 * n)
    raise ValueError(f"oracle must be 'krr' or 'oue', got {oracle_name!r}")


def band_of(x, bands) -> np.ndarray:
    """rase_device.categorical.band_of, vectorised: how many edges x is above."""
    return np.searchsorted(np.asarray(bands, dtype=np.float64), np.asarray(x, dtype=np.float64), side="left")


class Categorical(Mechanism):
    name = "categorical"
    output = "frequencies"

    def support(self, setting: Setting, eps: float) -> ExactSupport:
        k = setting.categories
        return ExactSupport(k if choose_oracle(k, eps) == "krr" else 1 << k)

    def sample(self, setting: Setting, eps: float, readings, rng: np.random.Generator) -> np.ndarray:
        k = setting.categories
        x = band_of(readings, setting.bands)
        if choose_oracle(k, eps) == "krr":
            keep = rng.integers(0, DEFAULT_DEN, size=x.shape) < krr_keep_fraction(eps, k)
            r = rng.integers(0, k - 1, size=x.shape)
            return np.where(keep, x, np.where(r < x, r, r + 1))
        flip = oue_flip_fraction(eps)
        bits = rng.integers(0, DEFAULT_DEN, size=x.shape + (k,)) < flip
        own = np.arange(k) == x[..., None]
        bits = np.where(own, rng.integers(0, 2, size=x.shape + (k,)) == 1, bits)
        return (bits * (1 << np.arange(k))).sum(axis=-1)

    def plausibility(self, setting: Setting, eps: float):
        return plausibility(setting, eps)

    def report_variances(self, setting: Setting, eps: float, x) -> np.ndarray:
        """Variance of one report's debiased indicator of the reading's own band."""
        _, hit, q = oracle(setting.categories, eps)
        return np.full(np.shape(x), hit * (1 - hit) / (hit - q) ** 2)

    def estimate(self, by_level: dict, setting: Setting, level: float = 0.95) -> Estimates:
        return Estimates({}, FREQUENCIES_MEANING, frequencies=band_frequencies(by_level, setting.categories, level))


CATEGORICAL = Categorical()


def plausibility(setting: Setting, eps: float):
    """The fog's detection tests (rase_common.mechanisms.plausibility), one
    per band j: a report names j (kRR) or sets bit j (OUE) with probability
    `hit` when the reading is in band j and q < hit otherwise."""
    k = setting.categories
    kind, hit, _ = oracle(k, eps)

    def scorer(j: int):
        if kind == "krr":
            return lambda y: 1.0 if int(y) == j else 0.0
        return lambda y: float((int(y) >> j) & 1)

    return tuple(bernoulli_test(f"band {j}", hit, scorer(j)) for j in range(k))
