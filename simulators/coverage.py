"""Coverage of the published intervals: how often each estimate's interval
holds the TRUE value, per mechanism, number of reports n and eps, on
REFIT-like readings and on the bundled houses (issue 16). Used by the seeded
test (tests/unit/rase_common/test_mechanism_coverage.py, a small grid) and by
benchmarks/coverage.py (the full grid; results in docs/evaluation.md).

Reports are drawn by each mechanism's vectorised exact sampler
(`Mechanism.sample`, tested against the device randomizer) and estimated by
its registry entry exactly as the fusion center does. Beside every interval
the one published before issue 16 is scored too ("normal": a normal interval
from the reports' sample variance for Duchi/PM/HM and clamped BR, from the
exact variance for unclamped BR and counts, clipped for counts and shares).
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import numpy as np

from fusion_center.ldp.merge import estimate_reports
from rase_common.mechanisms import Setting, binary, categorical, mechanism
from rase_common.mechanisms.base import z_quantile
from rase_common.mechanisms.br import is_clamped, laplace_variance

DATA = ("refit-like", "houses")


def refit_like(shape, rng: np.random.Generator) -> np.ndarray:
    """Appliance loads: 80% standby (0-10 W), 15% 50-300 W, 5% 1-3.5 kW, whole watts."""
    u = rng.random(shape)
    x = np.where(u < 0.8, rng.integers(0, 11, shape),
                 np.where(u < 0.95, rng.integers(50, 301, shape), rng.integers(1000, 3501, shape)))
    return x.astype(float)


@functools.lru_cache(maxsize=1)
def house_readings() -> np.ndarray:
    """The bundled houses' 45 appliances over their day (devices x timestamps of 8 s; NaN: no reading)."""
    from simulators.evaluation import _refit_matrix
    from simulators.refit import bundled_dir

    return _refit_matrix(bundled_dir(), [1, 2, 3, 5, 12], 24.0)


def house_sample(n: int, reps: int, rng: np.random.Generator) -> np.ndarray:
    """reps x n readings of the bundled houses: for n up to the devices with a
    reading at one timestamp, n of them at a random timestamp; for more, n
    readings drawn from the whole day (any device, any timestamp)."""
    x = house_readings()
    present = ~np.isnan(x)
    counts = present.sum(axis=0)
    out = np.empty((reps, n))
    usable = np.flatnonzero(counts >= n)
    if usable.size:
        for r, t in enumerate(rng.choice(usable, size=reps)):
            col = x[present[:, t], t]
            out[r] = rng.choice(col, size=n, replace=False)
        return out
    pool = x[present]
    return pool[rng.integers(0, pool.size, size=(reps, n))]


def readings(data: str, n: int, reps: int, rng: np.random.Generator) -> np.ndarray:
    if data == "refit-like":
        return refit_like((reps, n), rng)
    if data == "houses":
        return house_sample(n, reps, rng)
    raise ValueError(f"data must be one of {DATA}, got {data!r}")


@dataclass
class Cell:
    mechanism: str
    estimate: str            # "mean", "count", "share", "band 0".. (categorical)
    data: str
    n: int
    eps: float
    reps: int
    coverage: float          # of the true value by the published interval
    method: str              # the interval's method (the most frequent, when several)
    width: float             # mean width of the published interval
    normal_coverage: float   # the interval published before issue 16 ("normal")
    normal_width: float
    # The least coverage here of ANY interval whose coverage is >= level for every
    # reading configuration (validity_floor); `level` where nothing forces more.
    floor: float = 0.95

    @property
    def width_ratio(self) -> float:
        return self.width / self.normal_width if self.normal_width > 0 else math.inf

    def mc_sd(self, p: float = 0.95) -> float:
        """Monte Carlo standard deviation of a coverage p measured over `reps`."""
        return math.sqrt(p * (1 - p) / self.reps)

    def as_dict(self) -> dict:
        return asdict(self) | {"width_ratio": self.width_ratio}


def normal_interval(kind: str, values: np.ndarray, eps: float, setting: Setting, level: float) -> tuple:
    """The interval published before issue 16, for one rep's unbiased values."""
    z = z_quantile(level)
    m = float(values.mean())
    cal = setting.calibration
    if kind == "br" and not is_clamped(cal, eps):
        half = z * math.sqrt(laplace_variance(cal, eps) / values.size)
    else:
        half = z * float(values.std(ddof=1)) / math.sqrt(values.size)
    return m - half, m + half


def run_cell(name: str, eps: float, n: int, data: str, reps: int, rng: np.random.Generator,
             setting: Setting = Setting(), level: float = 0.95, bootstrap_b: int = 500, bits=None) -> list[Cell]:
    """Coverage of every published estimate of `name` that has a true value
    (mean, bs, count, band shares), over `reps` draws, estimated as the
    fusion center does (fusion_center.ldp.merge.estimate_reports). Reports come
    from the mechanism's vectorised sampler, or with `bits` (a RandomBits)
    from its real device randomizer."""
    mech = mechanism(name)
    x = readings(data, n, reps, rng)
    if bits is None:
        y = mech.sample(setting, eps, x, rng)
    else:
        device = mech.randomizer(setting, bits)
        y = np.array([[device.randomize(float(v), eps)[0] for v in row] for row in x], dtype=np.float64)
    rows: dict[str, dict[str, list]] = {}

    def score(label: str, est, truth: float, normal: tuple[float, float], floor: float = level) -> None:
        r = rows.setdefault(label, {"hit": [], "method": [], "width": [], "nhit": [], "nwidth": [], "floor": []})
        r["floor"].append(floor)
        r["hit"].append(est.lo <= truth <= est.hi)
        r["method"].append(est.method)
        r["width"].append(est.hi - est.lo)
        r["nhit"].append(normal[0] <= truth <= normal[1])
        r["nwidth"].append(normal[1] - normal[0])

    for i in range(reps):
        out, est, _ = estimate_reports(name, {eps: y[i]}, setting, level=level, bootstrap_b=bootstrap_b, rng=rng)
        if mech.output == "mean":
            truth = float(np.clip(x[i], setting.x_min, setting.x_max).mean())
            u = mech.unbiased_values(y[i], eps, setting)
            lo, hi = normal_interval(name, u, eps, setting, level)
            score("mean", est["mean"], truth, (max(lo, setting.x_min), min(hi, setting.x_max)),
                  validity_floor(name, eps, x[i], setting, level))
            if "bs" in est:   # the paper's bootstrap of the same mean, where published; neither is clipped
                score("bs", est["bs"], truth, (lo, hi))
        elif mech.output == "count":
            on = float(np.sum(x[i] > setting.on_above))
            c = out.named["count"]
            half = z_quantile(level) * math.sqrt(c.var)
            score("count", c, on, (max(0.0, c.value - half), min(float(n), c.value + half)),
                  count_floor(binary.flip_probability(eps), int(on), n, level))
        else:
            true = np.bincount(np.searchsorted(np.asarray(setting.bands), x[i], side="left"),
                               minlength=setting.categories) / n
            _, hit, q = categorical.oracle(setting.categories, eps)
            for j, (f, t) in enumerate(zip(out.frequencies, true)):
                half = z_quantile(level) * math.sqrt(_share_variance_at_estimate(f, name, eps, setting))
                score(f"band {j}", f, float(t), (max(0.0, f.value - half), min(1.0, f.value + half)),
                      two_binomial_floor(int(round(t * n)), n, hit, q, level))
    cells = []
    for label, r in rows.items():
        methods = r["method"]
        cells.append(Cell(name, label, data, n, eps, reps, float(np.mean(r["hit"])),
                          max(set(methods), key=methods.count), float(np.mean(r["width"])),
                          float(np.mean(r["nhit"])), float(np.mean(r["nwidth"])), float(np.mean(r["floor"]))))
    return cells


def validity_floor(name: str, eps: float, x: np.ndarray, setting: Setting, level: float) -> float:
    """The least coverage, at readings x, of any confidence interval whose
    coverage is >= level at every reading configuration and whose acceptance
    regions are intervals of outcomes (every monotone procedure); `level`
    where that forces no more.

    Duchi: the number of +C reports is Poisson-binomial with the readings'
    probabilities p_i; with all readings at their mean it is Binomial(n,
    p_bar). A valid procedure covers that mean on an interval [b, c] of
    outcomes with Binomial mass >= level, and the readings x give that
    interval their own Poisson-binomial mass, which is larger (Hoeffding
    1956): the least such mass is the floor. It is high when the readings are
    unlike each other, a spread the reports cannot reveal."""
    if name != "duchi":
        return level
    from scipy import stats

    from rase_common.mechanisms.duchi import up_probability

    cal = setting.calibration
    ps = np.atleast_1d(up_probability(cal, eps, (np.clip(x, cal.x_min, cal.x_max) - cal.x_min) / cal.delta
                                      * cal.grid_max))
    pb = np.ones(1)
    for p in ps:
        pb = np.convolve(pb, [1 - p, p])
    return interval_floor(stats.binom.pmf(np.arange(ps.size + 1), ps.size, float(ps.mean())), pb, level)


def interval_floor(valid: np.ndarray, actual: np.ndarray, level: float) -> float:
    """min over intervals [b, c] of outcomes with valid-mass >= level of their actual mass."""
    cv, ca = np.concatenate([[0.0], np.cumsum(valid)]), np.concatenate([[0.0], np.cumsum(actual)])
    best = 1.0
    for b in range(valid.size):
        c = int(np.searchsorted(cv, cv[b] + level - 1e-12))   # the shortest [b, c) holding >= level
        if c > valid.size:
            break
        best = min(best, float(ca[c] - ca[b]))
    return max(level, best) if actual is valid else best


def two_binomial_floor(x: int, n: int, hit: float, q: float, level: float) -> float:
    """The least coverage at count x of any interval procedure with coverage
    >= level at every count: the least mass >= level of an interval of
    outcomes of S = Bin(x, hit) + Bin(n - x, q) (discreteness alone)."""
    from rase_common.mechanisms.intervals import two_binomial_pmf

    _, pm = two_binomial_pmf(x, n, hit, q)
    return interval_floor(pm, pm, level)


def count_floor(p: float, on: int, n: int, level: float) -> float:
    return two_binomial_floor(on, n, 1 - p / 2, p / 2, level)


def _share_variance_at_estimate(f, name: str, eps: float, setting: Setting) -> float:
    """The pre-issue-16 share variance: at the estimate clipped to [0, 1]."""
    from rase_common.mechanisms.categorical import oracle, share_variance

    _, hit, q = oracle(setting.categories, eps)
    return share_variance(min(max(f.value, 0.0), 1.0), f.n, hit, q)
