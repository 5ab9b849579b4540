"""Debiased category frequencies from shuffled kRR or OUE reports
(device side: edge_agent.categorical). Pure numpy.

kRR: a report equals the true category with probability p and each other one
with q = (1 - p) / (k - 1). With c_j reports of category j among n,
    f_j = (c_j / n - q) / (p - q)
is unbiased, Var = (f_j p (1 - p) + (1 - f_j) q (1 - q)) / (n (p - q)^2).
OUE: bit j is 1 with probability 1/2 if x = j, else q. With c_j reports having
bit j set,  f_j = (c_j / n - q) / (1/2 - q),
Var = (f_j / 4 + (1 - f_j) q (1 - q)) / (n (1/2 - q)^2).
The intervals are normal with the variance at the estimate clipped to [0, 1],
themselves clipped to [0, 1]; the point estimates are not clipped (unbiased,
so they may fall slightly outside [0, 1] and need not sum exactly to 1 for OUE).
"""

from __future__ import annotations

import math

import numpy as np

from fusion_center.estimators import Estimate, _z


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


def _debias(counts, n: int, hit: float, q: float, level: float) -> list[Estimate]:
    c = np.asarray(counts, dtype=np.float64)
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if np.any(c < 0) or np.any(c > n):
        raise ValueError("counts must lie in [0, n]")
    f = (c / n - q) / (hit - q)
    fc = np.clip(f, 0.0, 1.0)
    var = (fc * hit * (1 - hit) + (1 - fc) * q * (1 - q)) / (n * (hit - q) ** 2)
    half = _z(level) * np.sqrt(var)
    return [Estimate(float(v), max(0.0, float(v - h)), min(1.0, float(v + h)), int(n)) for v, h in zip(f, half)]


def krr_frequencies(counts, n: int, keep_p: float, level: float = 0.95) -> list[Estimate]:
    k = len(counts)
    q = (1 - keep_p) / (k - 1)
    if not (k >= 2 and keep_p > q):
        raise ValueError(f"need k >= 2 and keep probability > 1/k, got k={k}, p={keep_p!r}")
    return _debias(counts, n, keep_p, q, level)


def oue_frequencies(counts, n: int, flip_q: float, level: float = 0.95) -> list[Estimate]:
    if not 0 < flip_q < 0.5:
        raise ValueError(f"OUE 0-bit flip probability must be in (0, 1/2), got {flip_q!r}")
    return _debias(counts, n, 0.5, flip_q, level)


def frequency_variance(oracle: str, k: int, eps: float, n: int = 1) -> float:
    """Variance of a rare category's debiased frequency (f -> 0)."""
    e = math.exp(eps)
    if oracle == "krr":
        return (e + k - 2) / ((e - 1) ** 2 * n)
    if oracle == "oue":
        return 4 * e / ((e - 1) ** 2 * n)
    raise ValueError(f"oracle must be 'krr' or 'oue', got {oracle!r}")


def band_frequencies(reports_by_level: dict[float, np.ndarray], k: int, level: float = 0.95) -> list[Estimate]:
    """Debiased frequency of each of k categories from the reports of each eps
    level (the `categorical` mechanism: kRR or OUE as choose_oracle picks, at
    the probabilities the device draws). Per-level estimates are combined
    weighted by their report counts, which keeps them unbiased; variances
    combine with the squared weights."""
    from edge_agent.categorical import DEFAULT_DEN, choose_oracle, krr_keep_fraction, oue_flip_fraction

    n = sum(int(np.asarray(r).size) for r in reports_by_level.values())
    if n == 0:
        raise ValueError("no reports")
    value = np.zeros(k)
    var = np.zeros(k)
    for eps, reports in reports_by_level.items():
        r = np.asarray(reports, dtype=np.float64)
        m = r.size
        if m == 0:
            continue
        if not np.all(r == np.floor(r)):
            raise ValueError("categorical reports must be whole numbers (a category or a bit mask)")
        if choose_oracle(k, eps) == "krr":
            hit = krr_keep_fraction(eps, k) / DEFAULT_DEN
            q = (1 - hit) / (k - 1)
            counts = krr_counts(r.astype(np.int64), k)
        else:
            hit, q = 0.5, oue_flip_fraction(eps) / DEFAULT_DEN
            counts = oue_counts(r.astype(np.int64), k)
        f = (counts / m - q) / (hit - q)
        fc = np.clip(f, 0.0, 1.0)
        value += m / n * f
        var += (m / n) ** 2 * (fc * hit * (1 - hit) + (1 - fc) * q * (1 - q)) / (m * (hit - q) ** 2)
    half = _z(level) * np.sqrt(var)
    return [Estimate(float(v), max(0.0, float(v - h)), min(1.0, float(v + h)), n) for v, h in zip(value, half)]
