"""BR, the paper's budget-aware clamped Laplace randomizer (RASE Alg. 1;
device: rase_device.randomizer.BudgetRandomizer).

The reading is clipped and rounded to the nearest grid point k (x_min + k
gamma, k in [0, K]); the report is k + Z grid steps, Z discrete Laplace with
P(Z = z) ~ q^|z|, q = exp(-s/t) for the device's scale t/s >= K / eps. Below
eps_star the report is clamped into [0, K] (a top report off the range is
sent as x_max).

Unbiased mean: the discrete Laplace tail is memoryless, so a report clamped
at the bottom stands for x_min - gamma tau and one at the top for
x_min + gamma (K + tau) in expectation, tau = q / (1 - q) (`corrected`).
Per-report variance of the report the mean averages (`grid_variance`):
gamma^2 q/(1-q)^2 [2 - (q^k + q^(K-k)) / (1+q)] when clamped and corrected
(concave in k), gamma^2 2q/(1-q)^2 otherwise (the same for every reading).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from rase_device.randomizer import Calibration, laplace_noise
from rase_common.mechanisms.base import IMPLAUSIBLE, Estimate, Estimates, Mechanism, Setting, z_quantile
from rase_common.mechanisms.intervals import reports_of, score_interval, split_variance_bound
from rase_common.mechanisms.support import GridSupport, PointsSupport, UnionSupport
from rase_common.mechanisms.base import FLOAT_TOLERANCE
from rase_common.mechanisms.plausibility import mean_tests

# Without clamping BR's noise is unbounded: ingest accepts reports on the grid
# within the noise's two-sided tail of this probability per report (about one
# honest report in 10^9 is refused).
REPORT_TAIL = 1e-9


@functools.lru_cache(maxsize=256)
def noise_q(cal: Calibration, eps: float) -> float:
    """q = exp(-s/t) of the discrete Laplace the device uses at eps under `cal`
    (its rounding of eps and of the scale included): P(Z = z) ~ q^|z| in grid steps."""
    d = laplace_noise(cal, eps)
    return math.exp(-d.s / d.t)


def is_clamped(cal: Calibration, eps: float) -> bool:
    """The device clamps below eps_star (rase_device.randomizer.BudgetRandomizer.randomize)."""
    return eps < cal.eps_star


def tail(cal: Calibration, eps: float) -> float:
    """tau = q / (1 - q): the mean overshoot, in grid steps, of a clamped report."""
    q = noise_q(cal, eps)
    return q / (1.0 - q)


def laplace_variance(cal: Calibration, eps: float) -> float:
    """Variance of an unclamped report, gamma^2 2q/(1-q)^2 (any reading)."""
    q = noise_q(cal, eps)
    return cal.gamma ** 2 * 2.0 * q / (1.0 - q) ** 2


def grid_variance(cal: Calibration, eps: float, k) -> np.ndarray | float:
    """Variance of the report `mean` averages for grid index k (array or
    scalar, fractional k allowed): the corrected report when clamped."""
    q = noise_q(cal, eps)
    if not is_clamped(cal, eps):
        return laplace_variance(cal, eps) + 0.0 * np.asarray(k, dtype=np.float64)
    kk = np.asarray(k, dtype=np.float64)
    lost = (q ** kk + q ** (cal.grid_max - kk)) / (1.0 + q)
    return cal.gamma ** 2 * q / (1.0 - q) ** 2 * (2.0 - lost)


def grid_index(cal: Calibration, x) -> np.ndarray:
    """The device's nearest-point quantization (BudgetRandomizer.quantize), vectorised."""
    xc = np.clip(np.asarray(x, dtype=np.float64), cal.x_min, cal.x_max)
    return np.minimum((xc - cal.x_min) / cal.gamma + 0.5, cal.grid_max).astype(np.int64)


def corrected(z, eps_per_value, cal: Calibration) -> np.ndarray:
    """Each BR report replaced by its conditional expectation where it was
    clamped (levels with eps < eps_star); unbiased for the quantized reading."""
    a = np.array(z, dtype=np.float64)
    e = np.asarray(eps_per_value, dtype=np.float64)
    if e.shape != a.shape:
        raise ValueError("one eps per report is needed")
    m = np.rint((a - cal.x_min) / cal.gamma)       # grid index of each report
    # A clamped top report is sent as min(x_min + K gamma, x_max), which is off
    # the grid when gamma does not divide the range.
    top = (m >= cal.grid_max) | (a >= cal.x_max - 1e-9 * max(1.0, abs(cal.x_max)))
    bottom = m <= 0
    for level in np.unique(e):
        if not is_clamped(cal, float(level)):
            continue                               # this level was not clamped: its reports are unbiased
        t = tail(cal, float(level))
        sel = e == level
        a[sel & top] = cal.x_min + cal.gamma * (cal.grid_max + t)
        a[sel & bottom] = cal.x_min - cal.gamma * t
    return a


def mean_variance(corrected: np.ndarray, eps_per_value, cal: Calibration) -> float:
    """Variance of the mean of the corrected reports, from the reports: exact
    for levels that were not clamped, the corrected reports' sample variance
    for clamped ones (a plug-in; `mean`'s interval uses the exact bound instead)."""
    e = np.asarray(eps_per_value, dtype=np.float64)
    n = corrected.size
    total = 0.0
    for level in np.unique(e):
        sel = corrected[e == level]
        if not is_clamped(cal, float(level)):
            total += sel.size * laplace_variance(cal, float(level))
        elif sel.size > 1:
            total += sel.size * float(sel.var(ddof=1))
        else:
            return math.inf
    return total / n ** 2


def unbiased_mean(by_level: dict, setting: Setting, level: float = 0.95) -> Estimate:
    """`mean`: the mean of the corrected reports. Its interval uses no
    variance estimated from the reports: without clamping the noise variance
    is exact and the same for every reading (a normal interval; the mean of
    n >= 10 discrete Laplace noises is close enough to normal that it covers
    >= 0.947); with clamping it is the score interval with the corrected
    report's exact variance at the candidate mean (concave in the reading, so
    no readings with that mean have more); several levels by the split bound."""
    cal = setting.calibration
    z, e = reports_of(by_level)
    c = corrected(z, e, cal)
    n, mu_hat = c.size, float(c.mean())
    levels = sorted(by_level)
    if len(levels) == 1 and not is_clamped(cal, float(levels[0])):
        var = laplace_variance(cal, float(levels[0])) / n
        half = z_quantile(level) * math.sqrt(var)
        lo, hi = max(mu_hat - half, cal.x_min), min(mu_hat + half, cal.x_max)   # the mean reading lies in the range
        if lo > hi:
            lo = hi = cal.x_min if mu_hat < cal.x_min else cal.x_max
        return Estimate(mu_hat, lo, hi, n, "normal-exact-variance", var)
    if len(levels) == 1:
        bound = functools.partial(BR_MECHANISM.variance_bound, setting, float(levels[0]))
    else:
        bound = split_variance_bound([functools.partial(BR_MECHANISM.variance_bound, setting, float(v))
                                      for v in levels], [float(np.mean(e == v)) for v in levels],
                                     setting.x_min, setting.x_max)
    # A mean outside [x_min, x_max] is possible (noise); the bound is flat beyond the ends.
    lo, hi = score_interval(mu_hat, n, bound, cal.x_min, cal.x_max, z_quantile(level))
    return Estimate(mu_hat, lo, hi, n, "score-variance-bound", float(np.max(bound(np.linspace(lo, hi, 65)))) / n)


class BR(Mechanism):
    name = "br"
    output = "mean"
    extras = ("bs", "se", "mle")

    def unbiased_values(self, reports, eps: float, setting: Setting) -> np.ndarray:
        a = np.asarray(reports, dtype=np.float64)
        return corrected(a, np.full(a.shape, float(eps)), setting.calibration)

    def support(self, setting: Setting, eps: float):
        cal = setting.calibration
        scale = abs(cal.x_min) + abs(cal.x_max)
        if not is_clamped(cal, eps):
            q = noise_q(cal, eps)
            # P(|Z| > m) = 2 q^(m+1) / (1 + q): the smallest m with that under REPORT_TAIL.
            reach = math.ceil(math.log(REPORT_TAIL / 2 * (1 + q)) / math.log(q)) - 1
            return GridSupport(cal.x_min, cal.gamma, 1, 0, -reach, cal.grid_max + reach, IMPLAUSIBLE, scale)
        top = cal.grid_max if cal.x_min + cal.grid_max * cal.gamma <= cal.x_max else cal.grid_max - 1
        grid = GridSupport(cal.x_min, cal.gamma, 1, 0, 0, top, scale=scale)
        return grid if top == cal.grid_max else UnionSupport(grid, PointsSupport([cal.x_max], scale))

    def sample(self, setting: Setting, eps: float, readings, rng: np.random.Generator) -> np.ndarray:
        """What the device sends for readings (any shape): discrete Laplace as
        the difference of two geometrics with the device's q, then its clamp rule."""
        cal = setting.calibration
        k = grid_index(cal, readings)
        q = noise_q(cal, eps)
        m = k + (rng.geometric(1 - q, size=k.shape) - 1) - (rng.geometric(1 - q, size=k.shape) - 1)
        if is_clamped(cal, eps):
            m = np.clip(m, 0, cal.grid_max)
        y = cal.x_min + m * cal.gamma
        return np.minimum(y, cal.x_max) if is_clamped(cal, eps) else y

    def report_variances(self, setting: Setting, eps: float, x) -> np.ndarray:
        cal = setting.calibration
        return np.asarray(grid_variance(cal, eps, grid_index(cal, x)), dtype=np.float64)

    def variance_bound(self, setting: Setting, eps: float, mu) -> np.ndarray:
        """The largest mean per-report variance of readings whose mean is mu:
        grid_variance at mu's (fractional) grid position, since it is concave
        in k (constant when not clamped)."""
        cal = setting.calibration
        k = np.clip((np.asarray(mu, dtype=np.float64) - cal.x_min) / cal.gamma, 0, cal.grid_max)
        return np.asarray(grid_variance(cal, eps, k), dtype=np.float64)

    def worst_case_variance(self, setting: Setting, eps: float) -> float:
        cal = setting.calibration
        return float(grid_variance(cal, eps, cal.grid_max // 2))   # concave, symmetric about K/2

    def effective_eps(self, setting: Setting, eps: float) -> float:
        d = laplace_noise(setting.calibration, eps)
        return setting.calibration.grid_max * d.s / d.t

    def plausibility(self, setting: Setting, eps: float):
        return plausibility(setting, eps)

    def estimate(self, by_level: dict, setting: Setting, level: float = 0.95) -> Estimates:
        cal = setting.calibration
        z = np.concatenate([np.asarray(v, dtype=np.float64) for v in by_level.values()])
        return Estimates({"mean": unbiased_mean(by_level, setting, level)}, {"mean": MEAN_MEANING},
                         clamped=any(is_clamped(cal, float(e)) for e in by_level),
                         share_at_bound=float(np.mean((z == cal.x_min) | (z == cal.x_max))))


MEAN_MEANING = ("unbiased for the mean reading (clipped to [x_min, x_max]) whatever eps, clamped or not: "
                "clamped reports replaced by their exact conditional expectations; its interval holds for any "
                "readings (`method`). Use this one.")

BR_MECHANISM = BR()


def report_law(cal: Calibration, eps: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact law of the report `mean` averages for grid index k (values,
    probabilities): when clamped, m = clamp(k + Z) with the clamped ends
    replaced by their conditional expectations (`corrected`); unclamped, k + Z
    on the grid the fog's ingest accepts (within the support's tail), renormalised."""
    q, K = noise_q(cal, eps), cal.grid_max
    if is_clamped(cal, eps):
        m = np.arange(K + 1)
        p = (1 - q) / (1 + q) * q ** np.abs(m - k).astype(np.float64)
        p[K], p[0] = q ** (K - k) / (1 + q), q ** k / (1 + q)
        if K == k == 0:
            p[0] = 1.0
        v = cal.x_min + m * cal.gamma
        t = tail(cal, eps)
        v[K], v[0] = cal.x_min + cal.gamma * (K + t), cal.x_min - cal.gamma * t
        return v, p
    sup = BR_MECHANISM.support(Setting.of(cal), eps)
    m = np.arange(sup.lo, sup.hi + 1)
    p = q ** np.abs(m - k).astype(np.float64)
    return cal.x_min + m * cal.gamma, p / p.sum()


def plausibility(setting: Setting, eps: float):
    """The fog's detection tests (rase_common.mechanisms.plausibility) on the
    corrected reports: their law at grid index K ("above") and 0 ("below").
    BR is stochastically increasing in k: clamp(k + Z) is nondecreasing in k
    for every Z and the correction is increasing in the report; unclamped,
    the shifts of a log-concave law keep a monotone likelihood ratio, which
    conditioning on the accepted range preserves."""
    cal = setting.calibration
    clamped = is_clamped(cal, eps)
    t = tail(cal, eps)
    top_y = cal.x_max - 1e-9 * max(1.0, abs(cal.x_max))

    def debias(y: float) -> float:
        if not clamped:
            return y
        m = round((y - cal.x_min) / cal.gamma)
        if m >= cal.grid_max or y >= top_y:
            return cal.x_min + cal.gamma * (cal.grid_max + t)
        return cal.x_min - cal.gamma * t if m <= 0 else y

    top, bottom = report_law(cal, eps, cal.grid_max), report_law(cal, eps, 0)
    slack = 2 * FLOAT_TOLERANCE * (abs(cal.x_min) + abs(cal.x_max) + float(np.abs(top[0]).max()))
    return mean_tests(top, bottom, cal.x_min, cal.x_max, slack, debias)
