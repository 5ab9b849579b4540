"""Counts of on/off devices from shuffled randomized-response reports
(shuffle-DP lecture notes, seed 002; device side edge_agent.binary_rr).

Each report is, with probability p, a uniform bit and otherwise the true bit,
so E[report] = (1 - p) x + p/2 and, for S the sum of n reports,
    X_hat = (S - n p / 2) / (1 - p)
is unbiased for the true count X. Var(report) = (p/2)(1 - p/2) whatever x is,
so Var(X_hat) = n (p/2)(1 - p/2) / (1 - p)^2 exactly (no plug-in), and the
interval is the normal one, clipped to [0, n] (the count lies there). The point
estimate is NOT clipped: clipping would bias it.

`rr_flip_for_central` picks p for a central (eps, delta) after a uniform
shuffle of n reports, by the numerical FMT bound (rase_common.amplification).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edge_agent.binary_rr import DEFAULT_DEN, flip_fraction, local_eps
from fusion_center.estimators import Estimate, _z
from rase_common.amplification import local_eps_for_central, numerical_eps


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


def count_variance(n: int, p: float) -> float:
    return n * (p / 2) * (1 - p / 2) / (1 - p) ** 2


def count_estimate(ones: int, n: int, p: float, level: float = 0.95) -> Estimate:
    """Unbiased count of devices that are on, from `ones` of n reports, with
    its level interval clipped to [0, n]."""
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not 0 <= ones <= n:
        raise ValueError(f"ones must be in [0, n], got {ones!r} of {n}")
    if not 0 <= p < 1:
        raise ValueError(f"flip probability p must be in [0, 1), got {p!r}")
    value = (ones - n * p / 2) / (1 - p)
    half = _z(level) * math.sqrt(count_variance(n, p))
    return Estimate(value, max(0.0, value - half), min(float(n), value + half), n)


def on_count(bits_by_level: dict[float, np.ndarray], level: float = 0.95) -> Estimate:
    """Unbiased count of devices that are on, from the reports of each eps
    level (the `binary` mechanism: p = flip_fraction(eps) / DEFAULT_DEN, as
    the device draws it). Levels are independent: values and variances add;
    the interval is clipped to [0, n]."""
    value, var, n = 0.0, 0.0, 0
    for eps, bits in bits_by_level.items():
        b = np.asarray(bits, dtype=np.float64)
        if b.size == 0:
            continue
        if not np.all((b == 0) | (b == 1)):
            raise ValueError("binary reports must be 0 or 1")
        p = flip_fraction(eps) / DEFAULT_DEN
        value += (float(b.sum()) - b.size * p / 2) / (1 - p)
        var += count_variance(b.size, p)
        n += b.size
    if n == 0:
        raise ValueError("no reports")
    half = _z(level) * math.sqrt(var)
    return Estimate(value, max(0.0, value - half), min(float(n), value + half), n)
