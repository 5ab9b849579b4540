"""Privacy amplification by shuffling: the central (eps, delta) of a window of
n reports, each eps0-LDP, after a UNIFORM shuffle.

Feldman, McMillan and Talwar, "Hiding among the clones" (FOCS 2021).

Closed form (as specified in issue 12, SPEC 2.4):
    a = 8 sqrt(e^eps0 ln(4/delta) / n),  c = 8 e^eps0 / n,
    eps = ln(1 + (1 - e^-eps0) / (1 + e^(-eps0 - ln(1 + a + c))) (a + c)),
valid when eps0 <= ln(n / (16 ln(4/delta))). Checked from memory of the paper
(it could not be consulted here): the commonly quoted statement of its Theorem
3.1 has (e^eps0 - 1)/(e^eps0 + 1) = (1 - e^-eps0)/(1 + e^-eps0) in front of
(a + c) and ln(2/delta) in the validity condition. The form used here has a
smaller denominator (e^(-eps0 - ln(1+a+c)) <= e^-eps0) and the stricter
condition, so it is never smaller and is valid on a subset: conservative if
the quoted statement is the right one. The numerical bound below is derived
independently and is the one `shuffle_amplification` reports when smaller.

Numerical bound (the paper's Section 4, computed by search): every eps0-LDP
report of another user is, with probability e^-eps0, a "clone" of the target's
output on x or on x' (half each). With C ~ Bin(n - 1, e^-eps0) clones and
A ~ Bin(C, 1/2) of them on x, the shuffled output is post-processing of the
pair (number of x-type outputs, C + 1) under P, whose target is x-type with
probability q = e^eps0 / (e^eps0 + 1), against Q, where it is with probability
1 - q. The window is (eps, delta)-DP for every eps with hockey-stick divergence
D_{e^eps}(P || Q) <= delta (the pair is symmetric, so one direction suffices).
We compute the divergence from the binomial pmfs (log-gamma, double
precision), truncating negligible tails and adding the truncated mass and a
rounding slack to delta (so truncation and rounding only ever make the answer
larger), and bisect on eps.

A shuffle never hurts: the result is capped at eps0. Where no bound gives less
than eps0 (by a relative 1e-4) (small n, large eps0) the result is eps0 with `amplified` False.

The Mallows (d_sigma) branch gives (alpha, theta) d_sigma privacy, not this
amplification: `mallows_guarantee` says so instead of a number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats
from scipy.special import gammaln

# Standard deviations kept either side of a binomial's mean before the
# remaining tail mass is dropped (and added to delta, computed exactly): at
# least 6, and enough that a Hoeffding tail 2 exp(-z^2 / 2) is 1e-3 delta.
MIN_TAIL_SD = 6.0


# Relative error allowed for the log-gamma binomial pmfs (they reach ~1e-12 at
# c ~ 1e4), added to delta: deltas under ~1e-9 then get little or no amplification.
PMF_REL_ERROR = 1e-11


def _tail_sd(delta: float) -> float:
    return max(MIN_TAIL_SD, math.sqrt(2.0 * math.log(2.0 / (1e-3 * delta))))
EPS_TOL = 1e-6
# A bound within this relative distance of eps0 is reported as no amplification.
MIN_GAIN = 1e-4


def _check(eps0: float, n: int, delta: float) -> None:
    if not (eps0 > 0 and math.isfinite(eps0)):
        raise ValueError(f"eps0 must be a finite number > 0, got {eps0!r}")
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")


def closed_form_valid(eps0: float, n: int, delta: float) -> bool:
    """eps0 <= ln(n / (16 ln(4/delta)))."""
    _check(eps0, n, delta)
    return eps0 <= math.log(n / (16.0 * math.log(4.0 / delta)))


def closed_form_eps(eps0: float, n: int, delta: float) -> float | None:
    """FMT closed form, or None outside its validity condition."""
    if not closed_form_valid(eps0, n, delta):
        return None
    a = 8.0 * math.sqrt(math.exp(eps0) * math.log(4.0 / delta) / n)
    c = 8.0 * math.exp(eps0) / n
    x = a + c
    return math.log1p(-math.expm1(-eps0) / (1.0 + math.exp(-eps0 - math.log1p(x))) * x)


class _CloneMixture:
    """P(a | c) and Q(a | c) for the clone reduction, over the c and a that
    carry non-negligible mass, one row per c; `dropped` bounds the mass left
    out plus the rounding of the row sums.

    Built in one vectorised pass (log-binomials by gammaln). Within one c the
    ratio P/Q = (q a + (1-q)(c+1-a)) / ((1-q) a + q (c+1-a)) increases with a,
    so the pairs above a threshold t = e^eps are a suffix of the row,
    a > (c+1)(t q - 1 + q) / ((2q - 1)(1 + t)): a hockey-stick evaluation is
    one suffix sum per row. Row-wise cumulative sums keep the rounding error
    of each suffix under (row length) u times the row's mass (u = 2^-53)."""

    def __init__(self, eps0: float, n: int, delta: float):
        tail_sd = _tail_sd(delta)
        p_clone = math.exp(-eps0)
        self.q = q = math.exp(eps0) / (math.exp(eps0) + 1.0)
        m = n - 1
        mean, sd = m * p_clone, math.sqrt(m * p_clone * (1 - p_clone))
        c_lo = max(0, int(math.floor(mean - tail_sd * sd)) - 1)
        c_hi = min(m, int(math.ceil(mean + tail_sd * sd)) + 1)
        cs = np.arange(c_lo, c_hi + 1)
        w = stats.binom.pmf(cs, m, p_clone)
        cs, w = cs[w > 0], w[w > 0]
        half = tail_sd * 0.5 * np.sqrt(cs) + 2
        lo = np.maximum(0, np.trunc(cs / 2 - half).astype(np.int64))       # a' ranges over lo..hi of 0..c+1
        hi = np.minimum(cs + 1, np.trunc(cs / 2 + half).astype(np.int64))
        self.sizes = hi - lo + 1
        width = int(self.sizes.max())
        c = cs[:, None].astype(np.float64)
        a = (lo[:, None] + np.arange(width)[None, :]).astype(np.float64)
        valid = np.arange(width)[None, :] < self.sizes[:, None]
        b_here = np.where(valid, _binom_half_pmf(c, a), 0.0)            # b_c(a')
        b_prev = np.where(valid, _binom_half_pmf(c, a - 1), 0.0)        # b_c(a' - 1)
        p_ac = w[:, None] * (q * b_prev + (1 - q) * b_here)
        q_ac = w[:, None] * ((1 - q) * b_prev + q * b_here)
        zeros = np.zeros((cs.size, 1))
        self.cum_p = np.concatenate([zeros, np.cumsum(p_ac, axis=1)], axis=1)
        self.cum_q = np.concatenate([zeros, np.cumsum(q_ac, axis=1)], axis=1)
        self.tot_p, self.tot_q = self.cum_p[:, -1], self.cum_q[:, -1]
        self.cs, self.lo = cs.astype(np.float64), lo
        # Slack: the summation rounding, and PMF_REL_ERROR for the gammaln pmfs.
        self.dropped = max(0.0, 1.0 - math.fsum(self.tot_p.tolist())) + (width + 2) * 2.0 ** -53 + PMF_REL_ERROR

    def hockey_stick(self, eps: float) -> float:
        """Upper bound on D_{e^eps}(P || Q): the sum of P - e^eps Q over the
        pairs with P/Q > e^eps, plus the dropped mass."""
        t, q = math.exp(eps), self.q
        threshold = (self.cs + 1) * (t * q - 1 + q) / ((2 * q - 1) * (1 + t))
        first = np.floor(threshold).astype(np.int64) + 1                  # smallest a' with ratio > t
        j = np.clip(first - self.lo, 0, self.sizes)[:, None]
        above_p = self.tot_p - np.take_along_axis(self.cum_p, j, axis=1)[:, 0]
        above_q = self.tot_q - np.take_along_axis(self.cum_q, j, axis=1)[:, 0]
        return float(np.maximum(above_p - t * above_q, 0.0).sum()) + self.dropped


def _binom_half_pmf(c: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Bin(c, 1/2) pmf at a, 0 outside 0..c."""
    inside = (a >= 0) & (a <= c)
    aa = np.where(inside, a, 0.0)
    log_pmf = gammaln(c + 1) - gammaln(aa + 1) - gammaln(c - aa + 1) - c * math.log(2.0)
    return np.where(inside, np.exp(log_pmf), 0.0)


@lru_cache(maxsize=1024)
def numerical_eps(eps0: float, n: int, delta: float, tol: float = EPS_TOL) -> float:
    """The smallest eps (to within tol, rounded up) with D_{e^eps}(P || Q) <= delta;
    eps0 when the search finds nothing below it."""
    _check(eps0, n, delta)
    if n < 2:
        return eps0
    mix = _CloneMixture(eps0, n, delta)
    if mix.hockey_stick(eps0) > delta:
        return eps0
    lo, hi = 0.0, eps0
    if mix.hockey_stick(lo) <= delta:
        return 0.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if mix.hockey_stick(mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class Amplification:
    """Central guarantee of a uniformly shuffled window of n eps0-LDP reports."""
    eps0: float
    n: int
    delta: float
    eps: float          # central eps after shuffling; eps0 when not amplified
    method: str         # "numerical", "closed_form" or "none"
    amplified: bool     # False: no bound gave less than eps0

    def as_dict(self) -> dict:
        return {"kind": "shuffle_dp", "eps0": self.eps0, "n": self.n, "delta": self.delta, "eps": self.eps,
                "method": self.method, "amplified": self.amplified}


def shuffle_amplification(eps0: float, n: int, delta: float, method: str = "best") -> Amplification:
    """The central (eps, delta) after a uniform shuffle of n eps0-LDP reports.

    method: "closed_form", "numerical" or "best" (the smaller of the two
    where valid). Returns eps0 with amplified=False where no bound applies."""
    _check(eps0, n, delta)
    if method not in ("best", "closed_form", "numerical"):
        raise ValueError(f"method must be 'best', 'closed_form' or 'numerical', got {method!r}")
    candidates = []
    if method in ("best", "closed_form"):
        cf = closed_form_eps(eps0, n, delta)
        if cf is not None:
            candidates.append((cf, "closed_form"))
    if method in ("best", "numerical"):
        candidates.append((numerical_eps(eps0, n, delta), "numerical"))
    best = min(candidates, default=(math.inf, "none"))
    if best[0] < eps0 * (1 - MIN_GAIN):
        return Amplification(eps0, int(n), delta, best[0], best[1], True)
    return Amplification(eps0, int(n), delta, eps0, "none", False)


def local_eps_for_central(eps: float, delta: float, n: int, *, eps0_max: float = 20.0,
                          tol: float = 1e-4) -> float:
    """The largest eps0 (to within tol, rounded down) whose uniformly shuffled
    window of n reports is (eps, delta)-DP by the numerical bound. At least eps
    (no amplification needed to meet eps)."""
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
    _check(eps, n, delta)
    if numerical_eps(eps0_max, n, delta) <= eps:
        return eps0_max
    lo, hi = eps, eps0_max
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if numerical_eps(mid, n, delta) <= eps:
            lo = mid
        else:
            hi = mid
    return lo


def mallows_guarantee(alpha: float, theta: float | None) -> dict:
    """What a Mallows-shuffled window promises: (alpha, xi) d_sigma privacy with
    dispersion theta, on top of each report's LDP. No amplification number:
    a Mallows order stays near the public sigma_0, so the clone argument (which
    needs a uniform permutation) does not apply."""
    if not (alpha > 0 and math.isfinite(alpha)):
        raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")
    return {"kind": "d_sigma", "alpha": alpha, "theta": theta, "eps": None,
            "note": "d_sigma privacy of the order; no amplification by shuffling is claimed"}


def window_guarantee(mechanism: str, *, eps0: float, n: int, delta: float, alpha: float | None = None,
                     theta: float | None = None) -> dict:
    """The payload the fog/fusion center should publish beside an aggregate
    for a window shuffled by `mechanism` ("uniform", "buds" with n the smallest
    batch, or "mallows")."""
    if mechanism == "mallows":
        if alpha is None:
            raise ValueError("a Mallows window needs its alpha")
        return mallows_guarantee(alpha, theta)
    if mechanism in ("uniform", "buds"):
        return shuffle_amplification(eps0, n, delta).as_dict()
    raise ValueError(f"unknown shuffle mechanism {mechanism!r}")


def levels_amplification(counts_by_eps: dict[float, int], delta: float) -> dict[float, Amplification]:
    """A uniformly shuffled window whose reports use several eps levels (the
    published menu): for a report at level e, two bounds hold and the smaller
    is kept. (1) Every report is e_max-LDP: shuffle_amplification(e_max,
    n_total). (2) Reports at levels above e may be handed to the adversary
    (a stronger adversary), leaving the n_{<= e} reports that are all e-LDP:
    shuffle_amplification(e, n_{<= e})."""
    if not counts_by_eps or any(n < 0 for n in counts_by_eps.values()):
        raise ValueError("counts_by_eps must map each eps level to a count >= 0")
    levels = sorted(e for e, n in counts_by_eps.items() if n > 0)
    if not levels:
        raise ValueError("counts_by_eps has no reports")
    total = sum(counts_by_eps[e] for e in levels)
    e_max = levels[-1]
    whole = shuffle_amplification(e_max, total, delta)
    out = {}
    below = 0
    for e in levels:
        below += counts_by_eps[e]
        own = shuffle_amplification(e, below, delta)
        out[e] = own if own.eps <= whole.eps else whole
    return out


def conservative_n(n: int, digits: int = 2) -> int:
    """n rounded DOWN to `digits` significant digits (12,345 -> 12,000; n <= 100
    unchanged). Fewer reports never give a smaller bound, so the amplification
    of conservative_n(n) holds for n; a fog whose window sizes vary can then
    reuse the cached numerical bound (benchmarks/amplification.py: ~0.5 s at 1e5)."""
    if not (isinstance(n, (int, np.integer)) and n >= 0):
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    if n <= 10 ** digits:
        return int(n)
    scale = 10 ** (len(str(int(n))) - digits)
    return int(n) // scale * scale
