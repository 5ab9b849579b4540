"""ET: estimators from shuffled randomized reports (SPEC 2.3). Pure and
vectorised (numpy/scipy).

The primary estimate of every mechanism (`mean`, `count`, band shares) and its
interval live with the mechanism (rase_common.mechanisms): unbiased, from the
mechanism's public parameters, with an interval that holds for any readings.
Here are the paper's estimators and the generic tools, each with n, an
interval at `level` and the interval's method:
- bs: the bootstrap of the unbiased mean (percentile interval), resampling
  counts over the distinct values (multinomial) instead of indices; the
  rarest values' sum by its exact conditional moments when they are drawn
  >= 1,000 times per resample (see bootstrap_from_counts).
- SE, sample mean: normal interval mean +- z s / sqrt(n), or Student's t.
- MLE, weighted median with weights 1/lambda_i (argmin sum |z_i - mu| / lambda_i;
  the plain median when all lambda_i are equal, paper eq. 14): a
  distribution-free order-statistic interval, the weighted quantiles at
  1/2 -+ z sqrt(sum w^2) / (2 sum w) (the binomial interval for equal weights).
- BS, bootstrap: B resamples of the mean (default 1000), estimate = mean of the
  resample means, percentile interval. Resamples are drawn in blocks of rows
  (no Python loop over single resamples) and split over the CPU cores when large.
- Windowed: Win(t_q, w) = mean of the per-timestamp estimates over
  t_q-w+1..t_q, with how many of the w timestamps were present; interval from
  the per-timestamp estimates' own (unclipped) variances, independent normals.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy import stats

from rase_common.mechanisms.base import Estimate, Setting, z_quantile
from rase_common.mechanisms.br import corrected as br_corrected, noise_q as br_noise_q
from rase_common.mechanisms.br import mean_variance as br_mean_variance

__all__ = ["Estimate", "br_corrected", "br_noise_q", "br_mean_variance", "unbiased_mean", "sample_mean", "mle",
           "weighted_median", "weighted_quantile", "bootstrap", "bootstrap_counts", "bootstrap_from_counts",
           "count_resample_means", "grid_value_counts", "br_bootstrap", "br_value_counts", "bootstrap_unbiased",
           "unbiased_value_counts", "windowed"]


def _z(level: float) -> float:
    return z_quantile(level)


def _as_array(z) -> np.ndarray:
    a = np.asarray(z, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError("estimators need a non-empty 1-D array of reports")
    if not np.all(np.isfinite(a)):
        raise ValueError("reports must be finite")
    return a


def sample_mean(z, level: float = 0.95, student: bool = False) -> Estimate:
    """The mean of z with a normal interval from the sample variance, or
    (student) Student's t interval, which allows for that variance's own error."""
    a = _as_array(z)
    m = float(a.mean())
    var = float(a.var(ddof=1)) / a.size if a.size > 1 else math.inf
    if student and a.size > 1:
        half = float(stats.t.ppf(0.5 + level / 2, a.size - 1)) * math.sqrt(var)
        return Estimate(m, m - half, m + half, a.size, "student-t", var)
    half = _z(level) * math.sqrt(var)
    return Estimate(m, m - half, m + half, a.size, "normal-sample-variance", var)


def unbiased_mean(z, eps_per_value, cal, level: float = 0.95) -> Estimate:
    """`mean` of BR reports (rase_common.mechanisms.br): unbiased for the mean
    of the clipped (quantized) readings whatever eps, clamped or not."""
    from rase_common.mechanisms.br import BR_MECHANISM

    a = _as_array(z)
    e = np.asarray(eps_per_value, dtype=np.float64)
    if e.shape != a.shape:
        raise ValueError("one eps per report is needed")
    return BR_MECHANISM.estimate({float(v): a[e == v] for v in np.unique(e)}, Setting.of(cal), level).named["mean"]


def weighted_quantile(z: np.ndarray, w: np.ndarray, q: float) -> float:
    """Smallest z_(k) whose cumulative weight reaches q of the total."""
    order = np.argsort(z, kind="stable")
    cw = np.cumsum(w[order])
    k = int(np.searchsorted(cw, q * cw[-1], side="left"))
    return float(z[order][min(k, len(z) - 1)])


def weighted_median(z, w) -> float:
    """argmin over mu of sum w_i |z_i - mu|. When the minimisers form an
    interval (cumulative weight exactly half at a point), its midpoint."""
    a = _as_array(z)
    wt = np.asarray(w, dtype=np.float64)
    if wt.shape != a.shape or np.any(wt <= 0) or not np.all(np.isfinite(wt)):
        raise ValueError("weights must be positive, finite and one per report")
    order = np.argsort(a, kind="stable")
    zs, cw = a[order], np.cumsum(wt[order])
    half = cw[-1] / 2
    k = int(np.searchsorted(cw, half, side="left"))
    if math.isclose(cw[k], half, rel_tol=1e-12) and k + 1 < len(zs):
        return float((zs[k] + zs[k + 1]) / 2)
    return float(zs[k])


def mle(z, lam, level: float = 0.95) -> Estimate:
    """Weighted median with weights 1/lambda_i (SPEC 2.3 MLE)."""
    a = _as_array(z)
    lam_a = np.broadcast_to(np.asarray(lam, dtype=np.float64), a.shape)
    w = 1.0 / lam_a
    m = weighted_median(a, w)
    spread = _z(level) * math.sqrt(float(np.sum(w * w))) / (2 * float(np.sum(w)))
    lo = weighted_quantile(a, w, max(0.0, 0.5 - spread))
    hi = weighted_quantile(a, w, min(1.0, 0.5 + spread))
    return Estimate(m, min(lo, m), max(hi, m), a.size, "order-statistic")


BLOCK_ELEMENTS = 262_144     # indices drawn per block: 1 MB of int32 and 2 MB of gathered values stay in cache,
                             # and the same few MB are reused instead of faulting in fresh pages per call
PARALLEL_ABOVE = 10_000_000  # resample elements above which the cores share the work


def _resample_means(a: np.ndarray, b: int, rng: np.random.Generator) -> np.ndarray:
    n = a.size
    rows = max(1, BLOCK_ELEMENTS // n)
    out = np.empty(b)
    # 32-bit indices: the same uniform draws (numpy's bounded integers are
    # exact at any width), at a third of the cost of 64-bit ones plus take().
    dtype = np.int32 if n < 2**31 else np.int64
    for s in range(0, b, rows):
        e = min(b, s + rows)
        out[s:e] = a[rng.integers(0, n, size=(e - s, n), dtype=dtype)].mean(axis=1)
    return out


def bootstrap(z, b: int = 1000, level: float = 0.95, rng: np.random.Generator | None = None,
              workers: int | None = None) -> Estimate:
    a = _as_array(z)
    if b < 2:
        raise ValueError(f"bootstrap needs B >= 2 resamples, got {b}")
    rng = rng if rng is not None else np.random.default_rng()
    workers = workers or min(4, os.cpu_count() or 1)
    if workers > 1 and a.size * b > PARALLEL_ABOVE:
        children = rng.spawn(workers)
        sizes = [b // workers + (1 if i < b % workers else 0) for i in range(workers)]
        with ThreadPoolExecutor(workers) as ex:
            means = np.concatenate(list(ex.map(lambda args: _resample_means(a, *args), zip(sizes, children))))
    else:
        means = _resample_means(a, b, rng)
    lo, hi = np.quantile(means, [0.5 - level / 2, 0.5 + level / 2])
    return Estimate(float(means.mean()), float(lo), float(hi), a.size, "bootstrap-percentile", float(means.var()))


EXACT_DISTINCT = 64           # values drawn by an exact multinomial in every resample
NORMAL_TAIL_MIN_DRAWS = 1_000  # expected draws among the rarer values before their sum may be drawn as a normal


def grid_value_counts(a: np.ndarray, step: float, origin: float = 0.0) -> tuple[np.ndarray, np.ndarray] | None:
    """Distinct values and their counts for values on (or mostly on) the grid
    origin + k step, by integer bincount instead of a sort. Values within
    1e-9 (relative) of a grid point count as that point. None when two
    different values share a grid cell (then np.unique must do)."""
    if not (step > 0 and math.isfinite(step)) or a.size == 0:
        return None
    inv = 1.0 / step
    buf = np.multiply(a, inv)          # one scratch buffer, reused in place: passes over memory dominate here
    if origin:
        buf -= origin * inv
    np.rint(buf, out=buf)
    lo, hi = float(buf.min()), float(buf.max())
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi - lo > 4 * a.size + 1024:
        return None
    k = np.empty(a.size, dtype=np.int64)
    np.subtract(buf, lo, out=k, casting="unsafe")   # exact: buf holds integers
    counts = np.bincount(k)
    present = counts > 0
    grid = origin + step * (lo + np.flatnonzero(present))
    # A value counts as its grid point within a millionth of a step (or a few ulps of the largest value).
    tol = max(1e-6 * step, 8 * float(np.spacing(max(abs(float(grid[0])), abs(float(grid[-1]))))))
    # Every value on its grid point (BR reports are): the values are the grid points.
    buf *= step
    buf += origin
    buf -= a
    if max(float(buf.max()), -float(buf.min())) <= tol:
        return grid, counts[present]
    # Off-grid values (corrected clamps): each cell's value is its mean, if all its values agree.
    sums = np.bincount(k, weights=a)
    means = np.zeros_like(sums)
    means[present] = sums[present] / counts[present]
    np.take(means, k, out=buf)
    buf -= a
    if max(float(buf.max()), -float(buf.min())) > tol:
        return None
    return means[present], counts[present]


def bootstrap_from_counts(values: np.ndarray, counts: np.ndarray, b: int = 1000, level: float = 0.95,
                          rng: np.random.Generator | None = None, split=None) -> Estimate:
    """Bootstrap of the mean of n = sum(counts) reports taking `values` with
    multiplicities `counts`: each resample's counts are multinomial(n, counts / n),
    the distribution of resampling indices.

    The h most frequent values (h = 2, 4, ... 64, the smallest that works) and
    the combined count m of all others are drawn exactly in every resample.
    The others' sum given m is drawn as a normal with its exact conditional
    mean m mu and variance m sigma^2 only where the Berry-Esseen bound puts
    that normal's CDF error at or below 0.005 (so m is large and the rarer values
    are not dominated by a few outliers): a worst-case bound no larger than
    the Monte Carlo error of a 2.5% point from B = 1000 resamples (sd 0.0049).
    Otherwise every value is drawn exactly.
    Cost O(B x (h + 1)) instead of O(B x n)."""
    means = count_resample_means(values, counts, b, rng, split)
    lo, hi = np.quantile(means, [0.5 - level / 2, 0.5 + level / 2])
    return Estimate(float(means.mean()), float(lo), float(hi), int(np.sum(counts)), "bootstrap-percentile",
                    float(means.var()))


BERRY_ESSEEN_C = 0.4748          # Shevtsova (2011), i.i.d. summands
# CDF error allowed for a normal tail sum: the Monte Carlo sd of a 2.5% point at B = 1000 is 0.0049.
NORMAL_TAIL_MAX_ERROR = 0.005


def normal_tail_split(values: np.ndarray, counts: np.ndarray) -> tuple[int, float, float] | None:
    """(h, mu, sigma): how many of the most frequent values to draw exactly,
    and the moments of the rest, when the rest's sum may be drawn as a normal;
    None when every value must be drawn exactly."""
    order = np.argsort(counts)[::-1]
    for h in (2, 4, 8, 16, 32, EXACT_DISTINCT):
        if values.size <= h + 1:
            return None
        tail = order[h:]
        m_expected = float(counts[tail].sum())
        if m_expected < NORMAL_TAIL_MIN_DRAWS:
            return None
        w = counts[tail] / m_expected
        mu = float(w @ values[tail])
        dev = np.abs(values[tail] - mu)
        sigma = math.sqrt(float(w @ dev ** 2))
        if sigma == 0.0:
            continue
        # Berry-Esseen: the normal's CDF error for a sum of m draws from the
        # tail is <= C rho / (sigma^3 sqrt(m)); m is within a few % of its
        # expectation at these sizes, so 0.9 of it is a safe stand-in.
        rho = float(w @ dev ** 3)
        if BERRY_ESSEEN_C * rho / (sigma ** 3 * math.sqrt(0.9 * m_expected)) <= NORMAL_TAIL_MAX_ERROR:
            return h, mu, sigma
    return None


def count_resample_means(values, counts, b: int, rng: np.random.Generator | None = None, split=None) -> np.ndarray:
    """The B resample means behind bootstrap_from_counts (`split`: a
    normal_tail_split result already computed for these values, or None)."""
    if b < 2:
        raise ValueError(f"bootstrap needs B >= 2 resamples, got {b}")
    rng = rng if rng is not None else np.random.default_rng()
    values = np.asarray(values, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    if n < 1:
        raise ValueError("no reports to bootstrap")
    p = counts / n
    split = split if split is not None else normal_tail_split(values, counts)
    if split is None:
        # In blocks of rows, so B x distinct counts never sit in memory at once.
        rows = max(1, BLOCK_ELEMENTS // values.size)
        return np.concatenate([rng.multinomial(n, p, size=min(rows, b - s)) @ values / n
                               for s in range(0, b, rows)])
    h, mu, sigma = split
    head = np.argsort(counts)[::-1][:h]
    draws = rng.multinomial(n, np.append(p[head], max(0.0, 1.0 - float(p[head].sum()))), size=b)
    m = draws[:, -1]
    tail_sum = m * mu + np.sqrt(m) * sigma * rng.standard_normal(b)
    return (draws[:, :-1] @ values[head] + tail_sum) / n


def bootstrap_unbiased(reports_by_level: dict[float, np.ndarray], mech, setting, b: int = 1000,
                       level: float = 0.95, rng: np.random.Generator | None = None) -> Estimate:
    """`bs`: the bootstrap of a mechanism's unbiased mean. The distinct reports
    of each eps level are counted on the grid (reports mostly lie on it), each
    distinct report is mapped to its unbiased value by the mechanism
    (`unbiased_values`: BR's clamp correction; the report itself otherwise; an
    elementwise map, so the same as mapping every report), and counts are
    resampled (bootstrap_from_counts), or indices where that is cheaper."""
    u, c = unbiased_value_counts(reports_by_level, mech, setting)
    return _bootstrap_distinct(u, c, b, level, rng, lambda: np.repeat(u, c))


def unbiased_value_counts(reports_by_level: dict[float, np.ndarray], mech, setting) -> tuple[np.ndarray, np.ndarray]:
    """The unbiased values of the reports as distinct values per eps level and
    their counts (a value may repeat across levels)."""
    cal = setting.calibration
    values, counts = [], []
    for eps, z in reports_by_level.items():
        a = _as_array(z)
        u, c = grid_value_counts(a, cal.gamma, cal.x_min) or np.unique(a, return_counts=True)
        values.append(mech.unbiased_values(u, float(eps), setting))
        counts.append(c)
    return np.concatenate(values), np.concatenate(counts)


def br_bootstrap(reports_by_level: dict[float, np.ndarray], cal, b: int = 1000, level: float = 0.95,
                 rng: np.random.Generator | None = None) -> Estimate:
    """`bs` for BR reports (bootstrap_unbiased with BR's clamp correction)."""
    from rase_common.mechanisms.br import BR_MECHANISM

    return bootstrap_unbiased(reports_by_level, BR_MECHANISM, Setting.of(cal), b, level, rng)


def br_value_counts(reports_by_level: dict[float, np.ndarray], cal) -> tuple[np.ndarray, np.ndarray]:
    """The corrected BR reports (br_corrected) as distinct values per eps level and their counts."""
    from rase_common.mechanisms.br import BR_MECHANISM

    return unbiased_value_counts(reports_by_level, BR_MECHANISM, Setting.of(cal))


def _bootstrap_distinct(u: np.ndarray, c: np.ndarray, b: int, level: float, rng, reports) -> Estimate:
    """Resample counts over the distinct values u (counts c), or the reports
    themselves (`reports()`) when that is cheaper: a binomial draw costs about
    ten index draws, so indices win below ten reports per value drawn exactly."""
    if b < 2:
        raise ValueError(f"bootstrap needs B >= 2 resamples, got {b}")
    split = normal_tail_split(u, c)
    drawn_exactly = u.size if split is None else split[0] + 1
    if int(c.sum()) < 10 * drawn_exactly:
        return bootstrap(reports(), b, level, rng=rng)
    return bootstrap_from_counts(u, c, b, level, rng, split)


def bootstrap_counts(z, b: int = 1000, level: float = 0.95, rng: np.random.Generator | None = None,
                     step: float | None = None, origin: float = 0.0) -> Estimate:
    """Bootstrap of the mean over the distinct values of z (see
    bootstrap_from_counts). With `step`, values on the grid origin + k step
    are counted by bincount instead of a sort. Resamples indices instead
    (the same distribution) when that is cheaper: fewer than ten reports per
    value drawn exactly."""
    a = _as_array(z)
    if b < 2:
        raise ValueError(f"bootstrap needs B >= 2 resamples, got {b}")
    found = grid_value_counts(a, step, origin) if step is not None else None
    u, c = found or np.unique(a, return_counts=True)
    return _bootstrap_distinct(u, c, b, level, rng, lambda: a)


def windowed(per_t: dict[int, Estimate], t_q: int, w: int, level: float = 0.95) -> dict:
    """Win(t_q, w) from the per-timestamp estimates that exist in t_q-w+1..t_q.

    The per-timestamp estimates are independent, so the variance of their
    average is the sum of their variances over m^2: each estimate's own
    (unclipped) `var`, or, for one restored without it, its interval's
    half-width over z (its interval may be clipped, so this is a fallback)."""
    if w < 1:
        raise ValueError(f"window length w must be >= 1, got {w}")
    present = [per_t[t] for t in range(t_q - w + 1, t_q + 1) if t in per_t]
    if not present:
        return {"value": None, "ci": None, "present": 0, "w": w}
    m = len(present)
    value = sum(e.value for e in present) / m
    z = _z(level)
    var = sum(e.var if e.var is not None else ((e.hi - e.lo) / (2 * z)) ** 2 for e in present) / m ** 2
    half = z * math.sqrt(var)
    return {"value": value, "ci": [value - half, value + half], "present": m, "w": w}
