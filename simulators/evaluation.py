"""The paper's evaluation (RASE section V): utility of the estimators and a
re-identification attack, on REFIT traces. `rase eval utility|attack`.

Utility runs the mechanisms themselves (BR with the exact discrete Laplace,
then the estimators) without brokers, or reads `rase replay` outputs; errors
are always against the truth recomputed from the CSVs by the documented
mapping. The estimators are symmetric functions of the reports, so the
shuffle cannot change utility and is not run here.

Reproducible with --seed: the noise then comes from a seeded generator. That
is for evaluation only; agents always draw from os.urandom.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rase_device.entropy import RandomBits
from rase_device.report_kind import DEFAULT_BANDS, DEFAULT_ON_ABOVE
from rase_device.randomizer import Calibration
from fusion_center.ldp.merge import estimate_reports
from rase_common.mechanisms import Setting, mechanism
from simulators.pipeline import Device, fleet, truth
from simulators.refit import epoch0_of, grid_readings, load_house

ESTIMATORS = ("mean", "bs", "se", "mle")
DEFAULT_EPS = (0.1, 0.5, 1.0, 2.0, 5.0, 9.0)


def seeded_bytes(rng: np.random.Generator):
    return lambda n: rng.bytes(n)


def readings_matrix(devices: list[Device], epoch0: float, period_s: float, t0: int, n_t: int) -> np.ndarray:
    return np.vstack([grid_readings(d.house, d.column, epoch0, period_s, t0 + n_t, shift_s=d.shift_s)[t0:]
                      for d in devices])


def simulate_estimates(x: np.ndarray, eps: float, cal: Calibration, *, k_min: int = 10, bootstrap_b: int = 1000,
                       seed: int | None = None, level: float = 0.95, mechanism_name: str = "br"
                       ) -> dict[str, np.ndarray]:
    """Per-timestamp estimates (and their interval bounds, key + "_lo"/"_hi")
    from the reports of readings x (devices x t, NaN = no report), drawn by the
    mechanism's device randomizer and estimated as the fusion center does."""
    if mechanism_name == "prio3":
        return simulate_secure(x, eps, cal, k_min=k_min, seed=seed, level=level)
    rng = np.random.default_rng(seed)
    setting = Setting.of(cal)
    r = mechanism(mechanism_name).randomizer(setting, RandomBits(read=seeded_bytes(rng) if seed is not None else None))
    n_t = x.shape[1]
    out = {k + sfx: np.full(n_t, np.nan) for k in ESTIMATORS for sfx in ("", "_lo", "_hi")}
    out["n"] = np.zeros(n_t, dtype=int)
    out["clip_truth"] = np.full(n_t, np.nan)
    for j in range(n_t):
        col = x[:, j]
        col = col[~np.isnan(col)]
        if col.size < k_min:
            continue   # the fog suppresses windows under k_min
        z = np.array([r.randomize(float(v), eps)[0] for v in col])
        _, est, _ = estimate_reports(mechanism_name, {eps: z}, setting, level=level, bootstrap_b=bootstrap_b, rng=rng)
        for k, e in est.items():
            out[k][j], out[k + "_lo"][j], out[k + "_hi"][j] = e.value, e.lo, e.hi
        out["n"][j] = z.size
        out["clip_truth"][j] = float(np.clip(col, cal.x_min, cal.x_max).mean())
    return out


def simulate_secure(x: np.ndarray, eps: float, cal: Calibration, *, k_min: int = 10, seed: int | None = None,
                    level: float = 0.95) -> dict[str, np.ndarray]:
    """simulate_estimates for secure aggregation (Prio3 Sum): each timestamp's
    exact sum of quantized readings plus the two aggregators' discrete Laplace
    draws (scale Delta / eps each), estimated as the fusion center does
    (rase_common.mechanisms.prio3). Sharding and verification change nothing
    in the published value and are not run here; `rase replay --mechanism
    prio3` runs them."""
    from rase_common.mechanisms.prio3 import estimate_total, noise_law, simulate_total

    rng = np.random.default_rng(seed)
    setting = Setting.of(cal)
    law = noise_law(cal.grid_max, eps, 2)
    n_t = x.shape[1]
    out = {k + sfx: np.full(n_t, np.nan) for k in ESTIMATORS for sfx in ("", "_lo", "_hi")}
    out["n"] = np.zeros(n_t, dtype=int)
    out["clip_truth"] = np.full(n_t, np.nan)
    for j in range(n_t):
        col = x[:, j][~np.isnan(x[:, j])]
        if col.size < k_min:
            continue
        e = estimate_total("sum", simulate_total("sum", col, setting, law, rng), col.size, law, setting,
                           level).named["mean"]
        out["mean"][j], out["mean_lo"][j], out["mean_hi"][j] = e.value, e.lo, e.hi
        out["n"][j] = col.size
        out["clip_truth"][j] = float(np.clip(col, cal.x_min, cal.x_max).mean())
    return out


def central_floor_mae(n: np.ndarray, eps: float, cal: Calibration) -> float:
    """Delta / (n eps) averaged over timestamps: the MAE of the mean with one
    full discrete Laplace draw (the central floor; two draws cost 1.5x it)."""
    n = n[n > 0]
    return float(np.mean((cal.x_max - cal.x_min) / (n * eps)))


def laplace_floor_mae(n: np.ndarray, eps: float, cal: Calibration) -> float:
    """MAE of the mean of n unclamped Laplace reports, sqrt(2/pi) sqrt(2) lambda / sqrt(n),
    averaged over timestamps: what BR's noise alone costs."""
    lam = (cal.x_max - cal.x_min) / eps
    n = n[n > 0]
    return float(np.mean(math.sqrt(2 / math.pi) * math.sqrt(2) * lam / np.sqrt(n)))


def mechanism_floor_mae(x: np.ndarray, eps: float, mechanism_name: str, x_min: float, x_max: float,
                        gamma: float) -> float:
    """MAE of the mean of the actual readings' reports under a mechanism, from
    its exact per-report variance (the registry's report_variances), averaged
    over timestamps: what no estimator of that mechanism's reports can beat
    (for BR below eps_star, the variance of the clamp-corrected reports)."""
    mech = mechanism(mechanism_name)
    setting = Setting(x_min=x_min, x_max=x_max, gamma=gamma)
    if mechanism_name == "prio3":     # the two noise draws' exact E|Z| over n
        return _secure_floor((~np.isnan(x)).sum(axis=0), eps, setting.calibration)
    out = []
    for j in range(x.shape[1]):
        col = x[:, j][~np.isnan(x[:, j])]
        if col.size:
            var = float(np.sum(mech.report_variances(setting, eps, col)))
            out.append(math.sqrt(2 / math.pi) * math.sqrt(var) / col.size)
    return float(np.mean(out))


def duchi_floor_mae(x: np.ndarray, eps: float, cal: Calibration) -> float:
    """MAE of the mean under Duchi et al.'s one-bit mechanism for the actual
    readings (the best-known floor for bounded means at small eps)."""
    return mechanism_floor_mae(x, eps, "duchi", cal.x_min, cal.x_max, cal.gamma)


def windowed_series(values: np.ndarray, w: int) -> np.ndarray:
    """Win(t, w): mean of the present (non-NaN) values over the last w timestamps."""
    v = np.nan_to_num(values)
    present = (~np.isnan(values)).astype(float)
    k = np.ones(w)
    s = np.convolve(v, k)[:len(v)]
    c = np.convolve(present, k)[:len(v)]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(c > 0, s / c, np.nan)


def errors(est: dict[str, np.ndarray], true_mean: np.ndarray, windows_w: tuple[int, ...]) -> dict:
    """MAE and maximum squared error per timestamp and for windowed averages.
    Windowed truth averages the true means over the same present timestamps."""
    out = {}
    for k in ESTIMATORS:
        e = est[k]
        ok = ~np.isnan(e) & ~np.isnan(true_mean)
        if not ok.any():
            continue                      # not published for this mechanism
        d = e[ok] - true_mean[ok]
        row = {"mae": float(np.mean(np.abs(d))), "max_sq": float(np.max(d * d)), "timestamps": int(ok.sum()),
               "bias": float(np.mean(d))}
        if k + "_lo" in est:
            lo, hi = est[k + "_lo"][ok], est[k + "_hi"][ok]
            row["coverage"] = float(np.mean((lo <= true_mean[ok]) & (true_mean[ok] <= hi)))
        for w in windows_w:
            masked_truth = np.where(np.isnan(e), np.nan, true_mean)
            we, wt = windowed_series(e, w), windowed_series(masked_truth, w)
            okw = ~np.isnan(we) & ~np.isnan(wt)
            okw[:w - 1] = False   # only full-length windows
            dw = we[okw] - wt[okw]
            row[f"win{w}_mae"] = float(np.mean(np.abs(dw))) if dw.size else math.nan
            row[f"win{w}_max_sq"] = float(np.max(dw * dw)) if dw.size else math.nan
        out[k] = row
    return out


@dataclass
class UtilityResult:
    eps: list[float]
    table: dict[float, dict]
    devices: int
    timestamps: int
    source: str
    # Per eps, the mean's series for the plot: value, interval bounds, truth, reports per t, the range.
    series: dict[float, dict] = field(default_factory=dict)


def _series(est: dict[str, np.ndarray], true_mean: np.ndarray, n: np.ndarray, x_range: float,
            period_s: float, mechanism_name: str = "br") -> dict:
    return {"mean": est["mean"], "lo": est["mean_lo"], "hi": est["mean_hi"], "truth": true_mean, "n": n,
            "x_range": x_range, "period_s": period_s, "mechanism": mechanism_name}


def utility_from_simulation(data_dir: Path, houses: list[int], eps_list, *, hours: float, start_offset_s: float = 0,
                            period_s: float = 8.0, clone: int = 1, seed: int | None = None,
                            windows_w: tuple[int, ...] = (64,), bootstrap_b: int = 1000,
                            progress=None, mechanism_name: str = "br") -> UtilityResult:
    hs = [load_house(data_dir, h) for h in houses]
    epoch0 = epoch0_of(hs, period_s)
    t0, n_t = int(start_offset_s // period_s), int(hours * 3600 // period_s)
    devices = fleet(hs, clone, 3600.0)
    x = readings_matrix(devices, epoch0, period_s, t0, n_t)
    true_mean, _ = truth(devices, epoch0, period_s, t0, n_t)
    cal = Calibration()
    table, series = {}, {}
    for i, eps in enumerate(eps_list):
        est = simulate_estimates(x, eps, cal, bootstrap_b=bootstrap_b,
                                 seed=None if seed is None else seed * 1000 + i, mechanism_name=mechanism_name)
        table[eps] = errors(est, true_mean, windows_w)
        series[eps] = _series(est, true_mean, est["n"], cal.x_max - cal.x_min, period_s, mechanism_name)
        # Clipping to [x_min, x_max] is a bias no estimator removes: shown beside the errors.
        ok = ~np.isnan(est["clip_truth"]) & ~np.isnan(true_mean)
        table[eps]["floors"] = {"laplace_mae": laplace_floor_mae(est["n"], eps, cal),
                                "central_mae": central_floor_mae(est["n"], eps, cal),
                                "duchi_mae": duchi_floor_mae(x, eps, cal), "mechanism": mechanism_name,
                                "mechanism_mae": mechanism_floor_mae(x, eps, mechanism_name, cal.x_min, cal.x_max,
                                                                     cal.gamma),
                                "clip_bias": float(np.mean(est["clip_truth"][ok] - true_mean[ok]))}
        if progress:
            progress(eps, table[eps])
    return UtilityResult(list(eps_list), table, len(devices), n_t, "simulation", series)


def utility_from_replays(data_dir: Path, paths: list[Path], windows_w: tuple[int, ...] = (64,)) -> UtilityResult:
    """Errors of `rase replay` outputs against the truth from the CSVs (one eps each)."""
    table, eps_list, n_dev, n_ts, series = {}, [], 0, 0, {}
    for p in paths:
        params, row, n_t, one = score_replay(data_dir, Path(p), windows_w)
        table[params["eps"]] = row
        eps_list.append(params["eps"])
        n_dev, n_ts = params["devices"], n_t
        series[params["eps"]] = one
    return UtilityResult(eps_list, table, n_dev, n_ts, "replay", series)


def score_replay(data_dir: Path, path: Path, windows_w: tuple[int, ...] = (64,)) -> tuple[dict, dict, int, dict]:
    """(the replay's parameters, its errors and floors, timestamps scored, the
    mean's series for the plot)."""
    lines = Path(path).read_text().splitlines()
    params = json.loads(lines[0])["params"]
    rows = [json.loads(line) for line in lines[1:]]
    devices = fleet([load_house(data_dir, h) for h in params["houses"]], params["clone"], 3600.0)
    t0, n_t = params["t_start"], params["timestamps"]
    product = params.get("prio3", {}).get("product", "per-t")
    if product != "per-t":            # rows are hours (or days): the truth is the mean of the devices' averages
        true_mean, t0 = product_truth(devices, params, product)
        n_t = len(true_mean)
    else:
        true_mean, _ = truth(devices, params["epoch0"], params["period_s"], t0, n_t)
    est = {k + sfx: np.full(n_t, np.nan) for k in ESTIMATORS for sfx in ("", "_lo", "_hi")}
    for r in rows:
        if not 0 <= r["t"] - t0 < n_t:
            continue
        for k in ESTIMATORS:
            if k in r["estimates"]:
                e = r["estimates"][k]
                est[k][r["t"] - t0] = e["value"]
                est[k + "_lo"][r["t"] - t0], est[k + "_hi"][r["t"] - t0] = e["ci"]
    row = errors(est, true_mean, windows_w)
    mech, eps, cal = params.get("device_mechanism", "br"), params["eps"], _cal(params)
    if product != "per-t":
        n = np.array([r["n"] for r in rows], dtype=float)
        row["floors"] = {"central_mae": central_floor_mae(n, eps, cal), "mechanism": mech, "product": product,
                         "mechanism_mae": _secure_floor(n, eps, cal)}
        per_t = np.zeros(n_t)
        for r in rows:
            if 0 <= r["t"] - t0 < n_t:
                per_t[r["t"] - t0] = r["n"]
        span = {"hourly": 3600.0, "daily": 86400.0}[product]
        return params, row, n_t, _series(est, true_mean, per_t, cal.x_max - cal.x_min, span, mech)
    x = readings_matrix(devices, params["epoch0"], params["period_s"], t0, n_t)
    n = (~np.isnan(x)).sum(axis=0)
    row["floors"] = {"central_mae": central_floor_mae(n, eps, cal), "laplace_mae": laplace_floor_mae(n, eps, cal),
                     "duchi_mae": duchi_floor_mae(x, eps, cal), "mechanism": mech,
                     "mechanism_mae": mechanism_floor_mae(x, eps, mech, cal.x_min, cal.x_max, cal.gamma),
                     "clip_bias": 0.0}
    return params, row, n_t, _series(est, true_mean, n, cal.x_max - cal.x_min, params["period_s"], mech)


def _secure_floor(n: np.ndarray, eps: float, cal: Calibration) -> float:
    from rase_common.mechanisms.prio3 import noise_law

    noise = noise_law(cal.grid_max, eps, 2).mean_abs() * cal.gamma
    return float(np.mean(noise / n[n > 0]))


def _cal(params: dict) -> Calibration:
    return Calibration(x_min=params["x_min"], x_max=params["x_max"], gamma=params["gamma"])


def product_truth(devices: list[Device], params: dict, product: str) -> tuple[np.ndarray, int]:
    """(true value per product t, the first product t) of an hourly or daily
    replay: per product period, the mean over the devices of each one's
    rounded mean of its quantized readings (what its one report holds)."""
    from rase_common.mechanisms.prio3 import measurements

    span = {"hourly": 3600.0, "daily": 86400.0}[product]
    period, t0, n_t = params["period_s"], params["t_start"], params["timestamps"]
    x = readings_matrix(devices, params["epoch0"], period, t0, n_t)
    cal = _cal(params)
    q = np.where(np.isnan(x), np.nan, measurements("sum", np.nan_to_num(x), Setting.of(cal)).astype(float))
    hour = ((np.arange(t0, t0 + n_t) * period) // span).astype(int)
    first = int(hour[0])
    out = []
    for h in range(first, int(hour[-1]) + 1):
        block = q[:, hour == h]
        with np.errstate(invalid="ignore"):
            means = np.floor(np.nanmean(block, axis=1) + 0.5)
        out.append(cal.x_min + cal.gamma * float(np.nanmean(means)) if np.isfinite(means).any() else np.nan)
    return np.array(out), first


def plot_utility(res: UtilityResult, windows_w: tuple[int, ...], path: Path, series_eps: float | None = None) -> None:
    """Errors against eps (top; the mean, the estimate to use, drawn on top),
    and the mean itself at one eps (bottom): per timestamp with its 95%
    interval band and the truth, and windowed beside it, in words."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from simulators.plots import mean_panels

    w = windows_w[0]
    fig, axes = plt.subplots(2, 2, figsize=(15, 10), gridspec_kw={"height_ratios": [1, 1.15]})
    eps = res.eps
    # Drawn in this order, the mean last and boldest; the bootstrap (equal to the mean within a watt
    # or so) as open squares around it, so neither hides the other.
    styles = {"mle": dict(color="tab:orange", ls="-.", marker="v", ms=5, lw=1.2, zorder=3),
              "se": dict(color="tab:blue", ls="--", marker="s", ms=4, lw=1.2, zorder=3),
              "bs": dict(color="tab:purple", ls="none", marker="s", ms=10, mfc="none", mew=1.3, zorder=4),
              "mean": dict(color="tab:red", ls="-", marker="o", ms=5, lw=2.2, zorder=5)}
    labels = {"mean": "mean (unbiased: use this)", "bs": "bs (bootstrap of the mean)",
              "se": "se (paper's mean of clamped reports)", "mle": "mle (paper's weighted median)"}
    for k, st in styles.items():
        if any(k not in res.table[e] for e in eps):
            continue                      # not published for this mechanism
        axes[0, 0].plot(eps, [res.table[e][k]["mae"] for e in eps], label=f"{labels[k]}, per t", **st)
        axes[0, 1].plot(eps, [res.table[e][k]["max_sq"] for e in eps], label=labels[k], **st)
    if all("mean" in res.table[e] for e in eps):
        axes[0, 0].plot(eps, [res.table[e]["mean"][f"win{w}_mae"] for e in eps], color="tab:red", ls=":",
                        marker="o", mfc="white", ms=5, lw=1.8, zorder=5, label=f"mean, windowed w = {w}")
    for ax, title in zip(axes[0], ("mean absolute error (W)", "maximum squared error (W²)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("eps per report")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0, 0].legend(fontsize=7.5)
    axes[0, 1].legend(fontsize=7.5)
    shown = series_eps if series_eps is not None else _series_eps(list(res.series))
    if shown is not None:
        s = res.series[shown]
        x = np.arange(len(s["mean"])) * s["period_s"] / 3600
        n = s["n"][s["n"] > 0]
        mean_panels(axes[1, 0], axes[1, 1], x, mean=s["mean"], lo=s["lo"], hi=s["hi"], truth=s["truth"], w=w,
                    n=float(np.median(n)) if n.size else float("nan"), eps=shown, x_range=s["x_range"],
                    xlabel="hours", mechanism_name=s.get("mechanism", "br"))
        axes[1, 0].set_title(f"The mean at eps = {shown:g}, per timestamp", fontsize=10)
        axes[1, 1].set_title(f"The mean at eps = {shown:g}, averaged over the last {w} timestamps", fontsize=10)
    fig.suptitle(f"RASE utility on REFIT: {res.devices} appliances, {res.timestamps} timestamps ({res.source})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _series_eps(eps: list[float]) -> float | None:
    """The eps whose series the utility plot shows: the largest up to 5 (the
    demo's), else the smallest."""
    if not eps:
        return None
    under = [e for e in eps if e <= 5]
    return max(under) if under else min(eps)


# --- On/off counts and categorical frequencies against eps (issue 12) ---------
# On/off: an appliance is on when its power is above ON_THRESHOLD_W. Category:
# the load class of an appliance's reading (off / low / medium / high, edges in
# LOAD_CLASS_EDGES_W). Each device reports through the real device randomizers
# (rase_device.binary_rr, rase_device.categorical); the fusion center's
# estimators are scored against the truth per timestamp.

ON_THRESHOLD_W = DEFAULT_ON_ABOVE                  # the devices' defaults, so offline and replay agree
LOAD_CLASS_EDGES_W = tuple(DEFAULT_BANDS)


def load_classes(x: np.ndarray, edges=LOAD_CLASS_EDGES_W) -> np.ndarray:
    """Class 0..len(edges) of each reading, upper edges inclusive as on the
    device (rase_device.categorical.band_of; NaN stays NaN)."""
    out = np.digitize(x, edges, right=True).astype(float)   # <= 10 W is off, as for on/off
    out[np.isnan(x)] = np.nan
    return out


def _refit_matrix(data_dir: Path, houses: list[int], hours: float, period_s: float = 8.0) -> np.ndarray:
    hs = [load_house(data_dir, h) for h in houses]
    epoch0 = epoch0_of(hs, period_s)
    return readings_matrix(fleet(hs, 1, 0.0), epoch0, period_s, 0, int(hours * 3600 // period_s))


def _kind_errors(name: str, x: np.ndarray, eps: float, truth_of, *, seed: int | None, level: float,
                 k_min: int) -> tuple[list, list, list]:
    """Errors and interval hits of a report kind's estimates per timestamp
    (reports drawn by the registry's device randomizer, estimated by its
    estimator); truth_of(readings) -> the true value(s)."""
    mech = mechanism(name)
    setting = Setting(on_above=ON_THRESHOLD_W, bands=LOAD_CLASS_EDGES_W)
    rng = np.random.default_rng(seed)
    r = mech.randomizer(setting, RandomBits(read=seeded_bytes(rng) if seed is not None else None))
    err, cover, ns = [], [], []
    for j in range(x.shape[1]):
        col = x[:, j][~np.isnan(x[:, j])]
        if col.size < k_min:
            continue
        out = mech.estimate({eps: np.array([r.randomize(float(v), eps)[0] for v in col])}, setting, level)
        got = out.frequencies or [out.named["count"]]
        for e, tv in zip(got, truth_of(col)):
            err.append(abs(e.value - tv))
            cover.append(e.lo <= tv <= e.hi)
        ns.append(col.size)
    return err, cover, ns


def count_errors(x: np.ndarray, eps_list, *, seed: int | None = None, level: float = 0.95,
                 k_min: int = 10) -> dict[float, dict]:
    """Per local eps: MAE of the on-count estimate, coverage of its interval,
    mean reporters and mean true count, over the timestamps with >= k_min reports."""
    from rase_common.mechanisms.binary import flip_probability

    out = {}
    for i, eps in enumerate(eps_list):
        on = np.where(np.isnan(x), np.nan, x > ON_THRESHOLD_W)
        err, cover, ns = _kind_errors("binary", x, eps, lambda col: [float((col > ON_THRESHOLD_W).sum())],
                                      seed=None if seed is None else seed * 1000 + i, level=level, k_min=k_min)
        counted = (~np.isnan(x)).sum(axis=0) >= k_min
        out[eps] = {"mae": float(np.mean(err)), "coverage": float(np.mean(cover)), "p": flip_probability(eps),
                    "n_mean": float(np.mean(ns)), "true_mean": float(np.nanmean(np.nansum(on, axis=0)[counted])),
                    "timestamps": len(err)}
    return out


def frequency_errors(x: np.ndarray, eps_list, *, seed: int | None = None, level: float = 0.95,
                     k_min: int = 10) -> dict[float, dict]:
    """Per local eps: the oracle chosen for k load classes, mean absolute error
    of the class frequencies and the coverage of their intervals."""
    from rase_common.mechanisms.categorical import oracle

    k = len(LOAD_CLASS_EDGES_W) + 1
    out = {}
    for i, eps in enumerate(eps_list):
        def shares(col):
            return np.bincount(load_classes(col).astype(int), minlength=k) / col.size
        err, cover, _ = _kind_errors("categorical", x, eps, shares,
                                     seed=None if seed is None else seed * 1000 + 500 + i, level=level, k_min=k_min)
        out[eps] = {"oracle": oracle(k, eps)[0], "k": k, "mae": float(np.mean(err)),
                    "coverage": float(np.mean(cover)), "timestamps": len(err) // k}
    return out


def reports_errors_from_simulation(data_dir: Path, houses: list[int], eps_list, *, hours: float,
                                   seed: int | None = None) -> dict:
    """`rase eval counts`: on/off counts and load-class frequencies against eps."""
    x = _refit_matrix(data_dir, houses, hours)
    return {"devices": int(x.shape[0]), "timestamps": int(x.shape[1]),
            "counts": count_errors(x, eps_list, seed=seed), "frequencies": frequency_errors(x, eps_list, seed=seed)}


def kinds_from_replays(data_dir: Path, paths: list[Path]) -> list[dict]:
    """Errors of binary and categorical `rase replay` outputs against the truth
    recomputed from the CSVs: per timestamp, among the devices with a reading,
    how many are on (reading > on_above) and the share in each band."""
    out = []
    for p in paths:
        lines = Path(p).read_text().splitlines()
        params = json.loads(lines[0])["params"]
        mech = params.get("device_mechanism", "br")
        output = mechanism(mech).output
        if output == "mean":
            raise ValueError(f"{p}: a {mech!r} replay; `rase eval utility --replay` scores mean replays")
        rows = [json.loads(line) for line in lines[1:]]
        hs = [load_house(data_dir, h) for h in params["houses"]]
        devices = fleet(hs, params["clone"], 3600.0)
        t0, n_t = params["t_start"], params["timestamps"]
        x = readings_matrix(devices, params["epoch0"], params["period_s"], t0, n_t)
        present = (~np.isnan(x)).sum(axis=0)
        err, bias, cover, n_mismatch = [], [], [], 0
        series: list[tuple[int, list[float], list[dict]]] = []     # (t, truths, estimates) for the plot
        for r in rows:
            j = r["t"] - t0
            col = x[:, j][~np.isnan(x[:, j])]
            if r["n"] != present[j]:
                n_mismatch += 1          # a report lost or late: the truth is over other devices
                continue
            if output == "count":
                true = [float((col > params["on_above"]).sum())]
                got = [r["estimates"]["count"]]
            else:
                classes = load_classes(col, params["bands"]).astype(int)
                true = list(np.bincount(classes, minlength=len(params["bands"]) + 1) / col.size)
                got = r["frequencies"]
            series.append((r["t"], [float(v) for v in true], list(got)))
            for e, tv in zip(got, true):
                err.append(abs(e["value"] - tv))
                bias.append(e["value"] - tv)
                cover.append(e["ci"][0] <= tv <= e["ci"][1])
        out.append({"mechanism": mech, "output": output, "eps": params["eps"], "devices": params["devices"],
                    "timestamps": len(rows) - n_mismatch, "n_mismatch": n_mismatch,
                    "estimates": len(err), "mae": float(np.mean(err)) if err else None,
                    "bias": float(np.mean(bias)) if bias else None,
                    "bias_se": float(np.std(bias) / math.sqrt(len(bias))) if bias else None,
                    "coverage": float(np.mean(cover)) if cover else None,
                    "on_above": params.get("on_above"), "bands": params.get("bands"),
                    "period_s": params["period_s"], "series": series})
    return out


def plot_kinds(rows: list[dict], path: Path) -> None:
    """One panel per replay: the truth from the CSVs against the estimate and
    its 95% interval over time (binary: devices on; categorical: the share in
    each band)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(rows), 1, figsize=(11, 3.6 * len(rows)), squeeze=False)
    colors = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
    for ax, r in zip(axes[:, 0], rows):
        s = r["series"]
        if not s:
            continue
        hours = (np.array([t for t, _, _ in s]) - s[0][0]) * r["period_s"] / 3600.0
        k = len(s[0][1])
        labels = ["devices on"] if r["output"] == "count" else \
            [f"band {j}" + (f" (<= {r['bands'][0]:g} W)" if j == 0 else f" (> {r['bands'][j - 1]:g} W)")
             for j in range(k)]
        for j in range(k):
            c = colors[j % len(colors)]
            est = np.array([e[j]["value"] for _, _, e in s])
            lo = np.array([e[j]["ci"][0] for _, _, e in s])
            hi = np.array([e[j]["ci"][1] for _, _, e in s])
            ax.fill_between(hours, lo, hi, color=c, alpha=0.15, linewidth=0)
            ax.plot(hours, est, color=c, linewidth=0.6, alpha=0.8, label=f"{labels[j]}: estimate, 95% interval")
            ax.plot(hours, [tv[j] for _, tv, _ in s], color=c, linewidth=1.6, label=f"{labels[j]}: truth")
        ax.set_title(f"{r['mechanism']} reports, eps {r['eps']:.3g}, {r['devices']} devices: MAE {r['mae']:.3g}, "
                     f"coverage {r['coverage']:.3f}")
        ax.set_xlabel("hours into the replay")
        ax.set_ylabel("devices" if r["output"] == "count" else "share of devices")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- Local DP against secure aggregation, with the plan's predictions (issue 20) ------------

def compare_simulated(data_dir: Path, houses: list[int], mechanisms: list[str], eps_list, *, hours: float,
                      clone: int = 1, seed: int | None = None, period_s: float = 8.0, progress=None) -> list[dict]:
    """The mean's MAE, bias and coverage per mechanism and eps on the same readings:
    local mechanisms by their registry's exact vectorised sampler and estimator,
    "prio3" by its exact sum plus both aggregators' noise (simulate_secure)."""
    from simulators.plan import plan_prediction

    hs = [load_house(data_dir, h) for h in houses]
    epoch0 = epoch0_of(hs, period_s)
    n_t = int(hours * 3600 // period_s)
    devices = fleet(hs, clone, 3600.0)
    x = readings_matrix(devices, epoch0, period_s, 0, n_t)
    true_mean, _ = truth(devices, epoch0, period_s, 0, n_t)
    cal = Calibration()
    rows = []
    for i, name in enumerate(mechanisms):
        for j, eps in enumerate(eps_list):
            s = None if seed is None else seed * 1000 + 100 * i + j
            est = simulate_secure(x, eps, cal, seed=s) if name == "prio3" else _simulate_mean(x, eps, cal, name, s)
            row = errors(est, true_mean, ())["mean"]
            n = est["n"][est["n"] > 0]
            rows.append({"mechanism": name, "devices": len(devices), "eps": eps, "mae": row["mae"],
                         "bias": row["bias"], "bias_se": float(np.nanstd(est["mean"] - true_mean) / math.sqrt(n.size)),
                         "coverage": row["coverage"], "timestamps": row["timestamps"],
                         "plan_mae": plan_prediction(name, eps, len(devices), data_dir=data_dir, period_s=period_s),
                         "floor_mae": mechanism_floor_mae(x, eps, name, cal.x_min, cal.x_max, cal.gamma),
                         "central_floor": central_floor_mae(n, eps, cal), "source": "simulation"})
            if progress:
                progress(name, eps)
    return rows


def _simulate_mean(x: np.ndarray, eps: float, cal: Calibration, name: str, seed: int | None,
                   k_min: int = 10, level: float = 0.95) -> dict[str, np.ndarray]:
    """simulate_estimates' mean alone, reports drawn by the registry's vectorised sampler
    (tested against the device randomizer: tests/unit/rase_common/test_mechanism_registry.py)."""
    rng = np.random.default_rng(seed)
    mech, setting = mechanism(name), Setting.of(cal)
    n_t = x.shape[1]
    out = {k + sfx: np.full(n_t, np.nan) for k in ESTIMATORS for sfx in ("", "_lo", "_hi")}
    out["n"] = np.zeros(n_t, dtype=int)
    for j in range(n_t):
        col = x[:, j][~np.isnan(x[:, j])]
        if col.size < k_min:
            continue
        e = mech.estimate({eps: mech.sample(setting, eps, col, rng)}, setting, level).named["mean"]
        out["mean"][j], out["mean_lo"][j], out["mean_hi"][j] = e.value, e.lo, e.hi
        out["n"][j] = col.size
    return out


def compare_replays(data_dir: Path, paths: list[Path]) -> list[dict]:
    """compare_simulated's rows for `rase replay` outputs (each replay one mechanism and eps)."""
    from simulators.plan import plan_prediction

    rows = []
    for p in paths:
        params, row, _, _ = score_replay(data_dir, p, ())
        mech, m, fl = params.get("device_mechanism", "br"), row["mean"], row["floors"]
        product = params.get("prio3", {}).get("product", "per-t")
        rows.append({"mechanism": mech + ("" if product == "per-t" else f" {product}"), "devices": params["devices"],
                     "eps": params["eps"], "mae": m["mae"], "bias": m["bias"], "coverage": m["coverage"],
                     "timestamps": m["timestamps"], "floor_mae": fl["mechanism_mae"],
                     "central_floor": fl["central_mae"], "source": str(p),
                     "plan_mae": plan_prediction(mech, params["eps"], params["devices"], data_dir=data_dir,
                                                 period_s=params["period_s"], product=product)})
    return rows
