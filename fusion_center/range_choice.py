"""Choosing the data range [x_min, x_max] from a private histogram.

The range is the largest lever on the error of the mean: the noise of every
LDP mechanism scales with the range, while a range that is too small clips
readings and biases the mean down. Given a debiased histogram of the readings
(frequencies over buckets, from an eps-LDP frequency oracle) this computes,
for each candidate upper bound c, the clipping bias of the mean and the
spread of the mean estimate with n reports, and picks the c with the smallest
root-mean-square error. Pure; numpy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np


def clip_bias_sd(edges: Sequence[float], freq_variances: Sequence[float], x_max: float) -> float:
    """Standard error of the histogram's clipping-bias estimate at x_max from the
    frequency estimates' variances (their covariances ignored: small and negative
    for kRR, zero for OUE)."""
    d = np.minimum(bucket_midpoints(edges), x_max) - bucket_midpoints(edges)
    return float(np.sqrt(np.sum(d ** 2 * np.asarray(freq_variances, dtype=float))))


@dataclass(frozen=True)
class RangeCandidate:
    x_max: float
    clip_bias: float        # E[min(x, x_max)] - E[x], from the histogram (<= 0)
    noise_sd: float         # sd of the mean of n reports at this range
    rmse: float             # sqrt(clip_bias^2 + noise_sd^2)

    def as_dict(self) -> dict:
        return {"x_max": self.x_max, "clip_bias": self.clip_bias, "noise_sd": self.noise_sd, "rmse": self.rmse}


def bucket_midpoints(edges: Sequence[float]) -> np.ndarray:
    """Midpoints of the buckets [e_0, e_1), ..., [e_K-1, e_K]; readings outside
    [e_0, e_K] are clipped into the end buckets (e_K is the largest reading the
    devices' own range allows)."""
    e = np.asarray(edges, dtype=float)
    if e.ndim != 1 or e.size < 2 or np.any(np.diff(e) <= 0):
        raise ValueError(f"bucket edges must be increasing, got {list(edges)!r}")
    return (e[:-1] + e[1:]) / 2


def range_tradeoff(edges: Sequence[float], freqs: Sequence[float], n: int, x_min: float,
                   candidates: Sequence[float], variance_per_report: Callable[[float, float], float]
                   ) -> list[RangeCandidate]:
    """freqs: estimated share of readings per bucket (len(edges) - 1 buckets);
    negative debiased shares are set to 0 and the rest renormalised. variance_per_report(x_min, x_max) is the
    mechanism's worst-case per-report variance at that range."""
    mids = bucket_midpoints(edges)
    f = np.clip(np.asarray(freqs, dtype=float), 0.0, None)
    if f.size != mids.size:
        raise ValueError(f"{mids.size} buckets need {mids.size} frequencies, got {f.size}")
    if f.sum() <= 0:
        raise ValueError("the histogram has no mass")
    f = f / f.sum()
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    out = []
    for c in candidates:
        if not c > x_min:
            raise ValueError(f"candidate x_max {c} must be > x_min {x_min}")
        bias = float(np.sum(f * (np.minimum(mids, c) - mids)))
        sd = math.sqrt(variance_per_report(x_min, c) / n)
        out.append(RangeCandidate(float(c), bias, sd, math.hypot(bias, sd)))
    return out


def best_range(table: Sequence[RangeCandidate]) -> RangeCandidate:
    return min(table, key=lambda r: r.rmse)
