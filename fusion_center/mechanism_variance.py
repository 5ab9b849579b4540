"""Exact per-report variance and output pmf of each device mechanism.

The formulas follow the device core's discretized implementation exactly
(edge_agent.duchi, edge_agent.piecewise, edge_agent.randomizer): they read
the same rational parameters (a/b <= exp(eps), PM window L, HM alpha) from
the device classes, so a change there is a change here.

Reports are in reading units. For duchi/piecewise/hybrid the report is an
unbiased estimate of the clipped reading (the device rounds it to a
neighbouring grid point at random, without bias), so the plain
sample mean of n reports has variance sum(Var[y | x_i]) / n**2. For "br" the
variance is that of the unclamped discrete Laplace noise (the clamped branch
is biased; its variance is not a floor).

Public names (see docs/api.md):
  report_variance(mechanism, eps, x_min, x_max, gamma, x) -> float
  worst_case_variance(mechanism, eps, x_min, x_max, gamma) -> float
  report_variance_exact / report_variance_at / worst_case_variance_exact: Fractions
  report_pmf(mechanism, calibration, eps, k) -> {output index: Fraction}
  reading_pmf(mechanism, calibration, eps, x) -> {output index: Fraction}
  reading_position(calibration, x) -> Fraction (E[y | x])
  report_values(mechanism, calibration, eps) -> {output index: Fraction}
  grid_value(calibration, k) -> Fraction
  worst_case_likelihood_ratio(mechanism, calibration, eps) -> Fraction
"""

from __future__ import annotations

import math
from fractions import Fraction

from edge_agent.duchi import DuchiParams
from edge_agent.ldp_rational import BoundedGrid
from edge_agent.mechanisms import check_mechanism
from edge_agent.piecewise import HybridParams, PiecewiseParams
from edge_agent.randomizer import BudgetRandomizer, Calibration

BOUNDED_MECHANISMS = ("duchi", "piecewise", "hybrid")


def _calibration(x_min: float, x_max: float, gamma: float) -> Calibration:
    return Calibration(x_min=x_min, x_max=x_max, gamma=gamma)


def _bounded(mechanism: str) -> str:
    check_mechanism(mechanism)
    if mechanism not in BOUNDED_MECHANISMS:
        raise ValueError(f"pmf and likelihood ratio are defined here for {BOUNDED_MECHANISMS}, got {mechanism!r}")
    return mechanism


def _center_half(cal: Calibration) -> tuple[Fraction, Fraction]:
    return (Fraction(cal.x_min) + Fraction(cal.x_max)) / 2, (Fraction(cal.x_max) - Fraction(cal.x_min)) / 2


def grid_value(cal: Calibration, k: int) -> Fraction:
    """The exact reading grid index k stands for: x_min + k * Delta / K."""
    center, half = _center_half(cal)
    return center + half * Fraction(2 * k - cal.grid_max, cal.grid_max)


# --- second moments in normalized units (reading = center + half * T) -------

def _duchi_t2(p: DuchiParams) -> Fraction:
    """E[T^2] of Duchi's report: C^2 for every input."""
    return Fraction(p.a + p.b, p.a - p.b) ** 2


def _pm_w(p: PiecewiseParams) -> Fraction:
    return Fraction(2 * p.den, (p.a - p.b) * p.window * p.k_max)


def _pm_t2(p: PiecewiseParams, k: int) -> Fraction:
    """E[T^2] of discrete PM at grid index k (T_j = (2j - N + 1) w / 2)."""
    n, L, d = p.n_out, p.window, 2 * k - p.k_max
    all_sq = Fraction(n * (n * n - 1), 3)           # sum over j of (2j - N + 1)^2
    win_sq = L * d * d + Fraction(L * (L * L - 1), 3)  # the same over k's window
    w = _pm_w(p)
    return w * w / 4 * (Fraction(p.b, p.den) * all_sq + Fraction(p.a - p.b, p.den) * win_sq)


def _quadratic(mechanism: str, eps: float, cal: Calibration) -> tuple[Fraction, Fraction]:
    """(A, B) with Var[y | grid index k] = A + B (k - K/2)^2 exactly, in W^2."""
    K = cal.grid_max
    _, half = _center_half(cal)
    minus_t2 = Fraction(-4, K * K)           # -t^2 = -4 (k - K/2)^2 / K^2
    if mechanism == "duchi":
        return half * half * _duchi_t2(DuchiParams(eps)), half * half * minus_t2
    pm = PiecewiseParams(eps, K)
    a_pm = _pm_t2(pm, 0) - _pm_t2_slope(pm) * Fraction(K * K, 4)
    if mechanism == "piecewise":
        return half * half * a_pm, half * half * (_pm_t2_slope(pm) + minus_t2)
    duchi = DuchiParams(eps)
    hm = HybridParams(eps, K, duchi, pm)
    alpha = Fraction(hm.alpha_num, hm.alpha_den)
    return (half * half * (alpha * a_pm + (1 - alpha) * _duchi_t2(duchi)),
            half * half * (alpha * _pm_t2_slope(pm) + minus_t2))


def _pm_t2_slope(p: PiecewiseParams) -> Fraction:
    """d E[T^2] / d (k - K/2)^2 for discrete PM: (w^2/4) ((a-b)/D) L * 4."""
    w = _pm_w(p)
    return w * w * Fraction((p.a - p.b) * p.window, p.den)


def br_laplace_variance(eps: float, x_min: float, x_max: float, gamma: float) -> float:
    """Variance of BR's unclamped discrete Laplace report: gamma^2 2q/(1-q)^2,
    q = exp(-s/t) for the noise scale t/s BR actually uses at eps."""
    noise = BudgetRandomizer(_calibration(x_min, x_max, gamma)).noise(eps)
    q = math.exp(-noise.s / noise.t)
    return gamma * gamma * 2.0 * q / (1.0 - q) ** 2


def report_variance_exact(mechanism: str, eps: float, cal: Calibration, k: int) -> Fraction:
    """Var[y | grid index k] as an exact Fraction (duchi, piecewise, hybrid)."""
    _bounded(mechanism)
    if not 0 <= k <= cal.grid_max:
        raise ValueError(f"grid index must be in [0, {cal.grid_max}], got {k}")
    a, b = _quadratic(mechanism, eps, cal)
    return a + b * (k - Fraction(cal.grid_max, 2)) ** 2


def _mixed_variance(a: Fraction, b: Fraction, cal: Calibration, k0: int, u: Fraction) -> Fraction:
    """Var[y] when the grid index is k0 + 1 with probability u, else k0:
    (1-u) V(k0) + u V(k0+1) + u (1-u) step^2."""
    half_k = Fraction(cal.grid_max, 2)
    v0 = a + b * (k0 - half_k) ** 2
    if u == 0:
        return v0
    v1 = a + b * (k0 + 1 - half_k) ** 2
    step = _grid_step(cal)
    return (1 - u) * v0 + u * v1 + u * (1 - u) * step * step


def _grid_step(cal: Calibration) -> Fraction:
    return (Fraction(cal.x_max) - Fraction(cal.x_min)) / cal.grid_max


def report_variance_at(mechanism: str, eps: float, cal: Calibration, x: float) -> Fraction:
    """Var[y | x] exactly for a reading x, including the device's random
    rounding of x to a neighbouring grid point."""
    _bounded(mechanism)
    k0, frac = BoundedGrid(cal).position(x)
    a, b = _quadratic(mechanism, eps, cal)
    return _mixed_variance(a, b, cal, k0, Fraction(frac))


def report_variance(mechanism: str, eps: float, x_min: float, x_max: float, gamma: float, x: float) -> float:
    """Var[y | x] of one report of `mechanism` at eps for reading x (W^2).
    "br": the unclamped Laplace variance (the same for every x)."""
    check_mechanism(mechanism)
    if mechanism == "br":
        return br_laplace_variance(eps, x_min, x_max, gamma)
    return float(report_variance_at(mechanism, eps, _calibration(x_min, x_max, gamma), x))


def worst_case_variance_exact(mechanism: str, eps: float, cal: Calibration) -> Fraction:
    """max over every reading x (on or between grid points) of Var[y | x].

    Between k0 and k0 + 1 (up with probability u) the variance is
    V(k0) + u (V(k0+1) - V(k0) + s^2) - u^2 s^2, s the grid step: concave in
    u, maximal at u* = (V(k0+1) - V(k0) + s^2) / (2 s^2) clipped to [0, 1].
    V is quadratic in k with coefficient B; for B >= 0 the maximum over k0 is
    at an end of the grid, for B < 0 next to its middle, so only those
    intervals are searched.
    """
    _bounded(mechanism)
    K = cal.grid_max
    a, b = _quadratic(mechanism, eps, cal)
    s2 = _grid_step(cal) ** 2
    half_k = Fraction(K, 2)
    best = max(a + b * (k - half_k) ** 2 for k in (0, K // 2, (K + 1) // 2, K))
    for k0 in {0, K - 1, K // 2 - 1, K // 2, (K + 1) // 2 - 1, (K + 1) // 2}:
        if not 0 <= k0 < K:
            continue
        v0, v1 = a + b * (k0 - half_k) ** 2, a + b * (k0 + 1 - half_k) ** 2
        u = min(Fraction(1), max(Fraction(0), (v1 - v0 + s2) / (2 * s2)))
        best = max(best, _mixed_variance(a, b, cal, k0, u))
    return best


def worst_case_variance(mechanism: str, eps: float, x_min: float, x_max: float, gamma: float) -> float:
    """max over readings x of Var[y | x] (W^2); "br": the Laplace variance."""
    check_mechanism(mechanism)
    if mechanism == "br":
        return br_laplace_variance(eps, x_min, x_max, gamma)
    return float(worst_case_variance_exact(mechanism, eps, _calibration(x_min, x_max, gamma)))


# --- exact output distributions, for tests and audits ------------------------

def report_values(mechanism: str, cal: Calibration, eps: float) -> dict[int, Fraction]:
    """Output index -> the exact report in reading units (the device's float
    report is this value rounded once or twice to double)."""
    _bounded(mechanism)
    center, half = _center_half(cal)
    K = cal.grid_max
    out: dict[int, Fraction] = {}
    if mechanism in ("piecewise", "hybrid"):
        pm = PiecewiseParams(eps, K)
        w = _pm_w(pm)
        # HM at eps <= 0.61 never runs PM: its outputs are not possible reports.
        if mechanism == "piecewise" or HybridParams(eps, K, None, pm).alpha_num:
            for j in range(pm.n_out):
                out[j] = center + half * w * (2 * j - pm.n_out + 1) / 2
        base = pm.n_out
    else:
        base = 0
    if mechanism in ("duchi", "hybrid"):
        p = DuchiParams(eps)
        c = Fraction(p.a + p.b, p.a - p.b)
        out[base] = center - half * c
        out[base + 1] = center + half * c
    return out


def report_pmf(mechanism: str, cal: Calibration, eps: float, k: int) -> dict[int, Fraction]:
    """Output index -> exact probability, for grid index k (indices as the
    randomizers' draw_index returns them; outputs of probability 0 omitted)."""
    _bounded(mechanism)
    K = cal.grid_max
    if not 0 <= k <= K:
        raise ValueError(f"grid index must be in [0, {K}], got {k}")
    out: dict[int, Fraction] = {}
    weight_pm = Fraction(0)
    if mechanism in ("piecewise", "hybrid"):
        pm = PiecewiseParams(eps, K)
        if mechanism == "piecewise":
            weight_pm = Fraction(1)
        else:
            hm = HybridParams(eps, K, DuchiParams(eps), pm)
            weight_pm = Fraction(hm.alpha_num, hm.alpha_den)
        hi, lo = Fraction(pm.a, pm.den) * weight_pm, Fraction(pm.b, pm.den) * weight_pm
        if weight_pm:
            for j in range(pm.n_out):
                out[j] = hi if k <= j < k + pm.window else lo
        base = pm.n_out
    else:
        base = 0
    if mechanism in ("duchi", "hybrid"):
        p = DuchiParams(eps)
        up = Fraction(k, K) * Fraction(p.a, p.a + p.b) + Fraction(K - k, K) * Fraction(p.b, p.a + p.b)
        out[base] = (1 - weight_pm) * (1 - up)
        out[base + 1] = (1 - weight_pm) * up
    return out


def reading_pmf(mechanism: str, cal: Calibration, eps: float, x: float) -> dict[int, Fraction]:
    """Output index -> exact probability for a reading x, including the
    device's random rounding (grid index k0 + 1 with probability frac)."""
    k0, frac = BoundedGrid(cal).position(x)
    u = Fraction(frac)
    out = {o: (1 - u) * p for o, p in report_pmf(mechanism, cal, eps, k0).items()}
    if u:
        for o, p in report_pmf(mechanism, cal, eps, k0 + 1).items():
            out[o] = out.get(o, 0) + u * p
    return out


def reading_position(cal: Calibration, x: float) -> Fraction:
    """The exact expected report for reading x: x_min + (k0 + frac) Delta / K,
    the clipped reading up to the float rounding of the device's position."""
    k0, frac = BoundedGrid(cal).position(x)
    return grid_value(cal, k0) + Fraction(frac) * _grid_step(cal)


def worst_case_likelihood_ratio(mechanism: str, cal: Calibration, eps: float) -> Fraction:
    """max over outputs o and inputs k, k' of P(o | k) / P(o | k'), exactly,
    by enumerating every grid input (cost (K+1) * outputs: use a small K)."""
    _bounded(mechanism)
    hi: dict[int, Fraction] = {}
    lo: dict[int, Fraction] = {}
    for k in range(cal.grid_max + 1):
        for o, p in report_pmf(mechanism, cal, eps, k).items():
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


def effective_eps(mechanism: str, eps: float, x_min: float = 0.0, x_max: float = 4000.0, gamma: float = 1.0) -> float:
    """ln of the rational likelihood-ratio bound the device uses (<= eps)."""
    check_mechanism(mechanism)
    cal = _calibration(x_min, x_max, gamma)
    if mechanism == "br":
        return BudgetRandomizer(cal).effective_eps(eps)
    if mechanism == "duchi":
        p = DuchiParams(eps)
        return math.log(p.a) - math.log(p.b)
    pm = PiecewiseParams(eps, cal.grid_max)
    ratio = math.log(pm.a) - math.log(pm.b)
    if mechanism == "hybrid":
        d = DuchiParams(eps)
        ratio = max(ratio, math.log(d.a) - math.log(d.b))
    return ratio
