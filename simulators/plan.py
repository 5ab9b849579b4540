"""`rase plan`: error against guarantee for each deployment mode, before deploying.

Given N devices reporting every S seconds, a product (per-t: one release per
period; hourly or daily: each device's average over the hour or day) and a
budget E per device per day, every mode spends E over the day's R releases
(basic composition, what the devices' ledgers count) and predicts the mean
absolute error of the published mean on REFIT-like readings (the bundled
REFIT day, resampled at S and averaged per product period):

- local DP (each mean mechanism of the registry): eps e = E / R per report.
  Its unbiased mean has variance V(e) / n, V the mechanism's exact
  per-report variance (rase_common.mechanisms report_variances) averaged
  over the readings; MAE = sqrt(2 / pi) sqrt(V(e) / n) (the mean of n
  reports is near normal). Population division: k groups take turns, each
  device reporting every k-th release at eps k e; a release then averages
  n = N / k devices, whose mean differs from all N's by sampling error
  (between-device variance s^2 (1/n - 1/N)). It helps local DP, whose
  variance falls like 1/eps^2; the plan shows the best k;
- secure aggregation (Prio3 + central discrete Laplace from both aggregators):
  eps e per release, (e, 0)-DP if either aggregator is honest; the mean's
  error is the noise's alone, exactly E|Z| gamma / N for Z the sum of two
  discrete Laplace draws of scale Delta / e (1.5 Delta / (N e) for large
  scales): division never helps (noise scale and n shrink alike).

Households (issue 28, `--households N`): the privacy unit is a household,
one whole-house meter each (REFIT's Aggregate, clipped to 0..x_max), and the
product an interval (half-hourly by default): each meter reports its
interval's clipped mean (simulators.households), a release spends
eps_day / releases a day (rounded down to the ledger's unit, as every party
computes it), and the readings are the bundled houses' time-shifted copies'
interval means. `recommend` names the mode and interval with the most
releases a day whose predicted MAE meets a target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rase_common.mechanisms import MEAN_MECHANISMS, Setting, mechanism
from rase_common.mechanisms.prio3 import measurements, noise_law

PRODUCT_SECONDS = {"hourly": 3600.0, "daily": 86400.0}
K_MIN = 10


@dataclass(frozen=True)
class PlanRow:
    mode: str                 # "local" or "secure"
    mechanism: str
    groups: int               # population division: devices report every k-th release
    eps_per_release: float    # per report (local) or per release (secure)
    mae_w: float              # predicted MAE of the published mean
    guarantee: str
    eps_per_day: float


def product_readings(data_dir: Path, period_s: float, product: str, setting: Setting) -> np.ndarray:
    """REFIT-like readings at the product's granularity: devices x releases
    (NaN: no report). per-t: the bundled day at period_s; hourly / daily: each
    device's rounded mean of its quantized readings over the hour / day."""
    from simulators.pipeline import fleet
    from simulators.refit import epoch0_of, grid_readings, load_house

    houses = [load_house(data_dir, h) for h in (1, 2, 3, 5, 12)]
    epoch0 = epoch0_of(houses, period_s)
    x = np.vstack([grid_readings(d.house, d.column, epoch0, period_s, int(86400 // period_s))
                   for d in fleet(houses, 1, 0.0)])
    if product == "per-t":
        return x
    per = int(PRODUCT_SECONDS[product] // period_s)
    q = np.where(np.isnan(x), np.nan, measurements("sum", np.nan_to_num(x), setting) * setting.gamma + setting.x_min)
    blocks = q[:, :x.shape[1] // per * per].reshape(x.shape[0], -1, per)
    with np.errstate(invalid="ignore"):
        return np.floor(np.nanmean(blocks, axis=2) + 0.5)


def releases_per_day(period_s: float, product: str) -> float:
    return 86400.0 / PRODUCT_SECONDS.get(product, period_s)


def local_mae(name: str, readings: np.ndarray, eps: float, n: float, total: int, setting: Setting) -> float:
    """Predicted MAE of a local mechanism's mean over n of `total` devices at eps per report."""
    x = readings[~np.isnan(readings)]
    var = float(np.mean(mechanism(name).report_variances(setting, eps, x)))
    spread = float(np.nanmean(np.nanvar(readings, axis=0))) * max(0.0, 1 / n - 1 / total)
    return math.sqrt(2 / math.pi) * math.sqrt(var / n + spread)


def secure_mae(eps: float, n: int, setting: Setting) -> float:
    """The published mean's error under secure aggregation: the two noise draws over n."""
    return noise_law(setting.calibration.grid_max, eps, 2).mean_abs() * setting.gamma / n


def plan(devices: int, period_s: float, product: str, eps_day: float, *, data_dir: Path,
         setting: Setting = Setting(), mechanisms: tuple[str, ...] = MEAN_MECHANISMS) -> list[PlanRow]:
    if devices < 1 or period_s <= 0 or eps_day <= 0:
        raise ValueError("devices, period and eps per day must be positive")
    r = releases_per_day(period_s, product)
    readings = product_readings(data_dir, period_s, product, setting)
    e = eps_day / r
    rows = [PlanRow("secure", "prio3", 1, e, secure_mae(e, devices, setting),
                    f"({e:.3g}, 0)-DP per release if the fog or the fusion center is honest", eps_day)]
    for name in mechanisms:
        rows += local_rows(name, readings, e, r, devices, setting, eps_day, "")
    return rows


def local_rows(name: str, readings: np.ndarray, e: float, r: float, units: int, setting: Setting, eps_day: float,
               note: str) -> list[PlanRow]:
    """A local mechanism's rows: each unit reporting in every release at eps e
    (k = 1), and the best of the rotating groups that report in one release of
    k at eps e * k (k = 2, 4, ... while k <= r and a group keeps K_MIN units),
    shown only when it beats k = 1."""
    rows: list[PlanRow] = []
    best = None
    k = 1
    while k <= r and units / k >= min(K_MIN, units):
        mae = local_mae(name, readings, e * k, units / k, units, setting)
        row = PlanRow("local", name, k, e * k, mae, f"{e * k:.3g}-LDP per report, against anyone{note}", eps_day)
        if k == 1:
            rows.append(row)
        elif best is None or mae < best.mae_w:
            best = row
        k *= 2
    if best is not None and best.mae_w < rows[-1].mae_w:
        rows.append(best)
    return rows


def format_plan(rows: list[PlanRow], devices: int, period_s: float, product: str, eps_day: float) -> str:
    r = releases_per_day(period_s, product)
    lines = [f"{devices} devices, a report every {period_s:g} s, product {product}: {r:,.0f} releases a day; "
             f"budget eps {eps_day:g} per device per day (basic composition)",
             f"{'mode':<7}{'mechanism':<11}{'groups':>7}{'eps/release':>13}{'MAE of mean (W)':>17}   guarantee"]
    for row in rows:
        groups = f"1/{row.groups}" if row.groups > 1 else "all"
        lines.append(f"{row.mode:<7}{row.mechanism:<11}{groups:>7}{row.eps_per_release:>13.4g}{row.mae_w:>17.4g}   "
                     f"{row.guarantee}; eps {row.eps_per_day:g} per day")
    lines.append("groups 1/k: population division, each device reports every k-th release at k times the eps "
                 "(shown where it lowers a local mechanism's error).")
    lines.append("MAE on REFIT-like readings (the bundled day), range and grid of the control message; "
                 "check it with `rase replay` and `rase eval utility --replay`.")
    return "\n".join(lines)


# Intervals `rase plan --households` compares: 15 min, half-hourly, hourly, 2 h, 6 h, daily.
INTERVALS_S = (900.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)
METER_X_MAX = 8000.0


def household_readings(data_dir: Path, interval_s: float, period_s: float = 8.0, x_max: float = METER_X_MAX,
                       copies: int = 20) -> np.ndarray:
    """households x intervals of a day: the bundled houses' meters, `copies` time-shifted copies each
    (simulators.households), each the clipped mean of its interval's samples."""
    from simulators.households import day_start_of, interval_means, make_households
    from simulators.refit import load_house

    houses = {h: load_house(data_dir, h) for h in (1, 2, 3, 5, 12)}
    day = day_start_of(min(int(h.unix[0]) for h in houses.values()))
    fleet = make_households(sorted(houses), copies * len(houses))
    n = int(86400 // interval_s)
    return interval_means(houses, fleet, day_start=day, epoch0=day, t0=0, intervals=n, interval_s=interval_s,
                          period_s=period_s, x_min=0.0, x_max=x_max)


def plan_households(households: int, eps_day: float, interval_s: float, *, data_dir: Path,
                    x_max: float = METER_X_MAX, mechanisms: tuple[str, ...] = MEAN_MECHANISMS,
                    readings: np.ndarray | None = None) -> list[PlanRow]:
    """Every mode's predicted MAE of the interval mean of `households` meters at eps_day per household-day."""
    from rase_device.interval import eps_per_release, releases_per_day

    if households < 1 or eps_day <= 0:
        raise ValueError("households and eps per day must be positive")
    setting = Setting(x_min=0.0, x_max=x_max)
    r = releases_per_day(interval_s)
    e = eps_per_release(eps_day, r)
    x = household_readings(data_dir, interval_s, x_max=x_max) if readings is None else readings
    day = f"eps {e * r:.4g} per household per UTC day"
    rows = [PlanRow("secure", "prio3", 1, e, secure_mae(e, households, setting),
                    f"({e:.3g}, 0)-DP per release if the fog or the fusion center is honest; {day}", eps_day)]
    for name in mechanisms:
        rows += local_rows(name, x, e, r, households, setting, eps_day, f"; {day}")
    return rows


@dataclass(frozen=True)
class Recommendation:
    interval_s: float
    row: PlanRow
    met: bool                 # its MAE is within the target


def recommend(households: int, eps_day: float, target_mae_w: float, *, data_dir: Path,
              x_max: float = METER_X_MAX, intervals: tuple[float, ...] = INTERVALS_S
              ) -> tuple[Recommendation, dict[float, list[PlanRow]]]:
    """The mode, product and interval to deploy: among the intervals, the one with the most releases a
    day whose best mode's predicted MAE meets target_mae_w (the secure mode where it ties); if none does,
    the daily product's best (met False). Also every interval's rows."""
    table = {i: plan_households(households, eps_day, i, data_dir=data_dir, x_max=x_max) for i in intervals}
    best_of = {i: min(rows, key=lambda r: (r.mae_w, r.mode != "secure")) for i, rows in table.items()}
    for i in sorted(intervals):
        if best_of[i].mae_w <= target_mae_w:
            return Recommendation(i, best_of[i], True), table
    i = max(intervals)
    return Recommendation(i, best_of[i], False), table


def format_households(rec: Recommendation, table: dict[float, list[PlanRow]], households: int, eps_day: float,
                      target_mae_w: float | None) -> str:
    lines = [f"{households} households (one whole-house meter each), budget eps {eps_day:g} per household per UTC "
             "day (basic composition over the day's releases)",
             f"{'interval':>9}{'releases':>9} {'mode':<7}{'mechanism':<11}{'groups':>7}{'eps/release':>13}"
             f"{'MAE of mean (W)':>17}   guarantee"]
    for i, rows in sorted(table.items()):
        for row in rows:
            groups = f"1/{row.groups}" if row.groups > 1 else "all"
            lines.append(f"{_interval(i):>9}{86400 / i:>9,.0f} {row.mode:<7}{row.mechanism:<11}{groups:>7}"
                         f"{row.eps_per_release:>13.4g}{row.mae_w:>17.4g}   {row.guarantee}")
    r = rec.row
    how = (f"{r.mode} ({r.mechanism}" + (f", groups 1/{r.groups}" if r.groups > 1 else "") + ")")
    if target_mae_w is not None:
        verdict = "meets" if rec.met else "misses (no interval meets it; the coarsest shown)"
        lines.append(f"recommended: {how}, interval product of {rec.interval_s:g} s ({_interval(rec.interval_s)}, "
                     f"{86400 / rec.interval_s:,.0f} releases a day), predicted MAE {r.mae_w:.4g} W: {verdict} the "
                     f"target {target_mae_w:g} W")
    lines.append("MAE on the bundled houses' meters (time-shifted copies, clipped to 0..x_max), interval means; "
                 "check it with `rase replay --unit household` and `rase eval utility --replay`.")
    return "\n".join(lines)


def _interval(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:g} min"


def plan_prediction(name: str, eps: float, devices: int, *, data_dir: Path, period_s: float = 8.0,
                    product: str = "per-t", setting: Setting = Setting()) -> float:
    """The plan's predicted MAE for one mechanism at eps per release and all devices reporting."""
    if name == "prio3":
        return secure_mae(eps, devices, setting)
    return local_mae(name, product_readings(data_dir, period_s, product, setting), eps, devices, devices, setting)
