"""Choosing the data range [x_min, x_max] from a private histogram.

The range is the largest lever on the error of the mean: the noise of every
LDP mechanism scales with the range, while a range that is too small clips
readings and biases the mean down. Given a debiased histogram of the readings
(frequencies over buckets, from an eps-LDP frequency oracle) this computes,
for each candidate upper bound c, the clipping bias of the mean and the
spread of the mean estimate with n reports. Pure; numpy only.

The choice must be reproducible and its bias honest, so it is made on a
bound, not on the point estimate: for each c, an upper confidence bound B(c)
on how far clipping at c lowers the mean, from the frequency estimates
(negative ones as 0), each bucket's readings counted at its upper edge (the
most a reading there can lose), plus z standard errors (z = 2.33: one-sided
99%). The chosen c minimises sqrt(B(c)^2 + noise_sd(c)^2), and B(c) is what
the fusion center adds to mean's interval ([clipping] bias_bound_w) so the
interval covers the true mean, not only the clipped one. With too few
reports B is large for every small c and the full range wins: a noisy
histogram never talks the choice into heavy clipping.
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


BOUND_Z = 2.326             # one-sided 99% for the clipping-bias bound


@dataclass(frozen=True)
class RangeCandidate:
    x_max: float
    clip_bias: float        # E[min(x, x_max)] - E[x], from the histogram (<= 0)
    noise_sd: float         # sd of the mean of n reports at this range
    rmse: float             # sqrt(clip_bias^2 + noise_sd^2)
    bias_bound: float = 0.0     # B: upper confidence bound on -clip_bias (>= 0)
    rmse_bound: float = 0.0     # sqrt(B^2 + noise_sd^2): what the choice minimises

    def as_dict(self) -> dict:
        return {"x_max": self.x_max, "clip_bias": self.clip_bias, "noise_sd": self.noise_sd, "rmse": self.rmse,
                "bias_bound": self.bias_bound, "rmse_bound": self.rmse_bound}


def clip_bias_bound(edges: Sequence[float], freqs: Sequence[float] | np.ndarray, freq_variances: Sequence[float] | None,
                    x_max: float, z: float = BOUND_Z) -> float:
    """B(x_max) = sum_b max(0, f_b) (hi_b - x_max)^+ + z se: each bucket at its
    upper edge; negative debiased shares count as 0 (that only raises the
    bound: a histogram's noise can never argue the clipping away), se from
    the shares' variances (covariances left out: for kRR they are negative,
    so this overstates se)."""
    e = np.asarray(edges, dtype=float)
    excess = np.maximum(0.0, e[1:] - x_max)
    est = float(np.dot(np.maximum(np.asarray(freqs, dtype=float), 0.0), excess))
    se = 0.0 if freq_variances is None else float(np.sqrt(np.dot(excess ** 2, np.asarray(freq_variances, float))))
    return max(0.0, est + z * se)


def bucket_midpoints(edges: Sequence[float]) -> np.ndarray:
    """Midpoints of the buckets [e_0, e_1), ..., [e_K-1, e_K]; readings outside
    [e_0, e_K] are clipped into the end buckets (e_K is the largest reading the
    devices' own range allows)."""
    e = np.asarray(edges, dtype=float)
    if e.ndim != 1 or e.size < 2 or np.any(np.diff(e) <= 0):
        raise ValueError(f"bucket edges must be increasing, got {list(edges)!r}")
    return (e[:-1] + e[1:]) / 2


def range_tradeoff(edges: Sequence[float], freqs: Sequence[float], n: int, x_min: float,
                   candidates: Sequence[float], variance_per_report: Callable[[float, float], float],
                   freq_variances: Sequence[float] | None = None) -> list[RangeCandidate]:
    """freqs: estimated share of readings per bucket (len(edges) - 1 buckets);
    for the point estimate negative debiased shares are set to 0 and the rest
    renormalised. variance_per_report(x_min, x_max) is the mechanism's
    worst-case per-report variance at that range; freq_variances, the
    frequency estimates' variances (None: exact shares)."""
    mids = bucket_midpoints(edges)
    raw = np.asarray(freqs, dtype=float)
    f = np.clip(raw, 0.0, None)
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
        bound = clip_bias_bound(edges, raw, freq_variances, c)
        out.append(RangeCandidate(float(c), bias, sd, math.hypot(bias, sd), bound, math.hypot(bound, sd)))
    return out


# Candidates whose error bound is within this share of the smallest are ties,
# resolved towards the wider range: near the optimum the bound is flat, and a
# histogram's noise would otherwise flip the choice between far-apart ranges.
CHOICE_TOLERANCE = 0.1


def best_range(table: Sequence[RangeCandidate], tolerance: float = CHOICE_TOLERANCE) -> RangeCandidate:
    """The widest candidate whose error bound sqrt(B^2 + noise_sd^2) is within
    `tolerance` of the smallest."""
    least = min(r.rmse_bound for r in table)
    return max((r for r in table if r.rmse_bound <= least * (1 + tolerance)), key=lambda r: r.x_max)
