"""Goodness-of-fit helpers with stated tolerances."""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable

import numpy as np
from scipy import stats

# A seeded test is deterministic, but the seed is arbitrary: this is the
# false-failure rate we accept when choosing it (and when a seed changes).
P_MIN = 1e-3


def chisquare_integers(samples: Iterable[int], pmf: Callable[[int], float], lo: int, hi: int,
                       min_expected: float = 5.0) -> tuple[float, int]:
    """Chi-square of integer samples against pmf; values outside [lo, hi] and
    sparse bins are pooled into two tail bins. Returns (p-value, bins)."""
    counts = Counter(samples)
    n = sum(counts.values())
    obs, exp = [], []
    lo_tail_o = sum(c for v, c in counts.items() if v < lo)
    hi_tail_o = sum(c for v, c in counts.items() if v > hi)
    p_in = 0.0
    for v in range(lo, hi + 1):
        p = pmf(v)
        p_in += p
        obs.append(counts.get(v, 0))
        exp.append(n * p)
    # Tail probabilities by symmetry-free complement split in proportion.
    p_lo = sum(pmf(v) for v in range(lo - 2000, lo))
    p_hi = max(0.0, 1.0 - p_in - p_lo)
    obs = [lo_tail_o] + obs + [hi_tail_o]
    exp = [n * p_lo] + exp + [n * p_hi]
    # Merge bins with small expectation into their neighbour.
    o2, e2, acc_o, acc_e = [], [], 0, 0.0
    for o, e in zip(obs, exp):
        acc_o += o
        acc_e += e
        if acc_e >= min_expected:
            o2.append(acc_o)
            e2.append(acc_e)
            acc_o, acc_e = 0, 0.0
    if acc_e > 0 or acc_o > 0:
        o2[-1] += acc_o
        e2[-1] += acc_e
    o_arr, e_arr = np.array(o2, float), np.array(e2, float)
    e_arr *= o_arr.sum() / e_arr.sum()
    return float(stats.chisquare(o_arr, e_arr).pvalue), len(o2)


def dlaplace_pmf(scale: float) -> Callable[[int], float]:
    """Exact pmf of the discrete Laplace with P(z) proportional to exp(-|z|/scale)."""
    q = np.exp(-1.0 / scale)
    c = (1 - q) / (1 + q)
    return lambda z: float(c * q ** abs(z))
