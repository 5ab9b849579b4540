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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_agent.entropy import RandomBits
from edge_agent.report_kind import DEFAULT_BANDS, DEFAULT_ON_ABOVE
from edge_agent.randomizer import BudgetRandomizer, Calibration
from fusion_center.estimators import bootstrap, bootstrap_counts, br_corrected, mle, sample_mean, unbiased_mean
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
                       seed: int | None = None, level: float = 0.95) -> dict[str, np.ndarray]:
    """Per-timestamp estimates (and their interval bounds, key + "_lo"/"_hi")
    from BR reports of readings x (devices x t, NaN = no report)."""
    rng = np.random.default_rng(seed)
    br = BudgetRandomizer(cal, RandomBits(read=seeded_bytes(rng) if seed is not None else None))
    lam = br.lambda_(eps)
    n_t = x.shape[1]
    out = {k + sfx: np.full(n_t, np.nan) for k in ESTIMATORS for sfx in ("", "_lo", "_hi")}
    out["n"] = np.zeros(n_t, dtype=int)
    out["clip_truth"] = np.full(n_t, np.nan)
    for j in range(n_t):
        col = x[:, j]
        col = col[~np.isnan(col)]
        if col.size < k_min:
            continue   # the fog suppresses windows under k_min
        z = np.array([br.randomize(float(v), eps)[0] for v in col])
        e_per = np.full(z.size, eps)
        est = {"mean": unbiased_mean(z, e_per, cal, level),
               "bs": bootstrap_counts(br_corrected(z, e_per, cal), bootstrap_b, level, rng=rng),
               "se": sample_mean(z, level), "mle": mle(z, lam, level)}
        for k, e in est.items():
            out[k][j], out[k + "_lo"][j], out[k + "_hi"][j] = e.value, e.lo, e.hi
        out["n"][j] = z.size
        out["clip_truth"][j] = float(np.clip(col, cal.x_min, cal.x_max).mean())
    return out


def laplace_floor_mae(n: np.ndarray, eps: float, cal: Calibration) -> float:
    """MAE of the mean of n unclamped Laplace reports, sqrt(2/pi) sqrt(2) lambda / sqrt(n),
    averaged over timestamps: what BR's noise alone costs."""
    lam = (cal.x_max - cal.x_min) / eps
    n = n[n > 0]
    return float(np.mean(math.sqrt(2 / math.pi) * math.sqrt(2) * lam / np.sqrt(n)))


def mechanism_floor_mae(x: np.ndarray, eps: float, mechanism: str, x_min: float, x_max: float,
                        gamma: float) -> float:
    """MAE of the mean of the actual readings' reports under `mechanism`, from
    its exact per-report variance (fusion_center.mechanism_variance)."""
    from fusion_center.mechanism_variance import report_variance

    out = []
    for j in range(x.shape[1]):
        col = np.clip(x[:, j][~np.isnan(x[:, j])], x_min, x_max)
        if col.size:
            var = sum(report_variance(mechanism, eps, x_min, x_max, gamma, float(v)) for v in col)
            out.append(math.sqrt(2 / math.pi) * math.sqrt(var) / col.size)
    return float(np.mean(out))


def duchi_floor_mae(x: np.ndarray, eps: float, cal: Calibration) -> float:
    """MAE of the mean under Duchi et al.'s one-bit mechanism for the actual
    readings: per report Var = (C Delta/2)^2 - (x - mid)^2, C = (e^eps+1)/(e^eps-1)
    (the best-known floor for bounded means at small eps)."""
    c = (math.exp(eps) + 1) / (math.exp(eps) - 1)
    half, mid = (cal.x_max - cal.x_min) / 2, (cal.x_max + cal.x_min) / 2
    out = []
    for j in range(x.shape[1]):
        col = np.clip(x[:, j][~np.isnan(x[:, j])], cal.x_min, cal.x_max)
        if col.size:
            out.append(math.sqrt(2 / math.pi) * math.sqrt(np.sum((c * half) ** 2 - (col - mid) ** 2)) / col.size)
    return float(np.mean(out))


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


def utility_from_simulation(data_dir: Path, houses: list[int], eps_list, *, hours: float, start_offset_s: float = 0,
                            period_s: float = 8.0, clone: int = 1, seed: int | None = None,
                            windows_w: tuple[int, ...] = (64,), bootstrap_b: int = 1000,
                            progress=None) -> UtilityResult:
    hs = [load_house(data_dir, h) for h in houses]
    epoch0 = epoch0_of(hs, period_s)
    t0, n_t = int(start_offset_s // period_s), int(hours * 3600 // period_s)
    devices = fleet(hs, clone, 3600.0)
    x = readings_matrix(devices, epoch0, period_s, t0, n_t)
    true_mean, _ = truth(devices, epoch0, period_s, t0, n_t)
    cal = Calibration()
    table = {}
    for i, eps in enumerate(eps_list):
        est = simulate_estimates(x, eps, cal, bootstrap_b=bootstrap_b,
                                 seed=None if seed is None else seed * 1000 + i)
        table[eps] = errors(est, true_mean, windows_w)
        # Clipping to [x_min, x_max] is a bias no estimator removes: shown beside the errors.
        ok = ~np.isnan(est["clip_truth"]) & ~np.isnan(true_mean)
        table[eps]["floors"] = {"laplace_mae": laplace_floor_mae(est["n"], eps, cal),
                                "duchi_mae": duchi_floor_mae(x, eps, cal),
                                "clip_bias": float(np.mean(est["clip_truth"][ok] - true_mean[ok]))}
        if progress:
            progress(eps, table[eps])
    return UtilityResult(list(eps_list), table, len(devices), n_t, "simulation")


def utility_from_replays(data_dir: Path, paths: list[Path], windows_w: tuple[int, ...] = (64,)) -> UtilityResult:
    """Errors of `rase replay` outputs against the truth from the CSVs."""
    table, eps_list, n_dev, n_ts = {}, [], 0, 0
    for p in paths:
        lines = Path(p).read_text().splitlines()
        params = json.loads(lines[0])["params"]
        rows = [json.loads(line) for line in lines[1:]]
        hs = [load_house(data_dir, h) for h in params["houses"]]
        devices = fleet(hs, params["clone"], 3600.0)
        t0, n_t = params["t_start"], params["timestamps"]
        true_mean, _ = truth(devices, params["epoch0"], params["period_s"], t0, n_t)
        est = {k + sfx: np.full(n_t, np.nan) for k in ESTIMATORS for sfx in ("", "_lo", "_hi")}
        for r in rows:
            for k in ESTIMATORS:
                if k in r["estimates"]:
                    e = r["estimates"][k]
                    est[k][r["t"] - t0] = e["value"]
                    est[k + "_lo"][r["t"] - t0], est[k + "_hi"][r["t"] - t0] = e["ci"]
        table[params["eps"]] = errors(est, true_mean, windows_w)
        mech = params.get("device_mechanism", "br")
        x = readings_matrix(devices, params["epoch0"], params["period_s"], t0, n_t)
        table[params["eps"]]["floors"] = {
            "laplace_mae": laplace_floor_mae((~np.isnan(x)).sum(axis=0), params["eps"], Calibration(
                x_min=params["x_min"], x_max=params["x_max"], gamma=params["gamma"])),
            "duchi_mae": duchi_floor_mae(x, params["eps"], Calibration(x_min=params["x_min"], x_max=params["x_max"],
                                                                      gamma=params["gamma"])),
            "mechanism": mech,
            "mechanism_mae": mechanism_floor_mae(x, params["eps"], mech, params["x_min"], params["x_max"],
                                                 params["gamma"]),
            "clip_bias": 0.0}
        eps_list.append(params["eps"])
        n_dev, n_ts = params["devices"], n_t
    return UtilityResult(eps_list, table, n_dev, n_ts, "replay")


def plot_utility(res: UtilityResult, windows_w: tuple[int, ...], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    eps = res.eps
    for k, c in zip(ESTIMATORS, ("tab:red", "tab:purple", "tab:blue", "tab:orange")):
        axes[0].plot(eps, [res.table[e][k]["mae"] for e in eps], "o-", color=c, label=f"{k.upper()} per t")
        for w in windows_w:
            axes[0].plot(eps, [res.table[e][k][f"win{w}_mae"] for e in eps], "s--", color=c, alpha=0.6,
                         label=f"{k.upper()} windowed w={w}")
        axes[1].plot(eps, [res.table[e][k]["max_sq"] for e in eps], "o-", color=c, label=f"{k.upper()} per t")
    for ax, title in zip(axes, ("mean absolute error (W)", "maximum squared error (W^2)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("eps per report")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"RASE utility on REFIT: {res.devices} appliances, {res.timestamps} timestamps ({res.source})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- On/off counts and categorical frequencies against eps (issue 12) ---------
# On/off: an appliance is on when its power is above ON_THRESHOLD_W. Category:
# the load class of an appliance's reading (off / low / medium / high, edges in
# LOAD_CLASS_EDGES_W). Each device reports through the real device randomizers
# (edge_agent.binary_rr, edge_agent.categorical); the fusion center's
# estimators are scored against the truth per timestamp.

ON_THRESHOLD_W = DEFAULT_ON_ABOVE                  # the devices' defaults, so offline and replay agree
LOAD_CLASS_EDGES_W = tuple(DEFAULT_BANDS)


def load_classes(x: np.ndarray, edges=LOAD_CLASS_EDGES_W) -> np.ndarray:
    """Class 0..len(edges) of each reading, upper edges inclusive as on the
    device (edge_agent.categorical.band_of; NaN stays NaN)."""
    out = np.digitize(x, edges, right=True).astype(float)   # <= 10 W is off, as for on/off
    out[np.isnan(x)] = np.nan
    return out


def _refit_matrix(data_dir: Path, houses: list[int], hours: float, period_s: float = 8.0) -> np.ndarray:
    hs = [load_house(data_dir, h) for h in houses]
    epoch0 = epoch0_of(hs, period_s)
    return readings_matrix(fleet(hs, 1, 0.0), epoch0, period_s, 0, int(hours * 3600 // period_s))


def count_errors(x: np.ndarray, eps_list, *, seed: int | None = None, level: float = 0.95,
                 k_min: int = 10) -> dict[float, dict]:
    """Per local eps: MAE of the on-count estimate, coverage of its interval,
    mean reporters and mean true count, over the timestamps with >= k_min reports."""
    from edge_agent.binary_rr import BinaryRR, flip_fraction
    from fusion_center.counts import count_estimate

    out = {}
    for i, eps in enumerate(eps_list):
        rng = np.random.default_rng(None if seed is None else seed * 1000 + i)
        num = flip_fraction(eps)
        rr = BinaryRR(num, 1 << 20, RandomBits(read=seeded_bytes(rng) if seed is not None else None))
        p = num / (1 << 20)
        err, cover, ns, truths = [], [], [], []
        for j in range(x.shape[1]):
            col = x[:, j][~np.isnan(x[:, j])]
            if col.size < k_min:
                continue
            on = col > ON_THRESHOLD_W
            ones = sum(rr.randomize(bool(b)) for b in on)
            e = count_estimate(int(ones), int(col.size), p, level)
            true = int(on.sum())
            err.append(abs(e.value - true))
            cover.append(e.lo <= true <= e.hi)
            ns.append(col.size)
            truths.append(true)
        out[eps] = {"mae": float(np.mean(err)), "coverage": float(np.mean(cover)), "p": p,
                    "n_mean": float(np.mean(ns)), "true_mean": float(np.mean(truths)), "timestamps": len(err)}
    return out


def frequency_errors(x: np.ndarray, eps_list, *, seed: int | None = None, level: float = 0.95,
                     k_min: int = 10) -> dict[float, dict]:
    """Per local eps: the oracle chosen for k load classes, mean absolute error
    of the class frequencies and the coverage of their intervals."""
    from edge_agent.categorical import (KaryRR, OptimizedUnaryEncoding, choose_oracle, krr_keep_fraction,
                                        oue_flip_fraction)
    from fusion_center.frequencies import krr_counts, krr_frequencies, oue_counts, oue_frequencies

    k = len(LOAD_CLASS_EDGES_W) + 1
    classes = load_classes(x)
    out = {}
    for i, eps in enumerate(eps_list):
        rng = np.random.default_rng(None if seed is None else seed * 1000 + 500 + i)
        bits = RandomBits(read=seeded_bytes(rng) if seed is not None else None)
        oracle = choose_oracle(k, eps)
        if oracle == "krr":
            num = krr_keep_fraction(eps, k)
            mech = KaryRR(k, num, 1 << 20, bits)
        else:
            num = oue_flip_fraction(eps)
            mech = OptimizedUnaryEncoding(k, num, 1 << 20, bits)
        prob = num / (1 << 20)
        err, cover = [], []
        for j in range(classes.shape[1]):
            col = classes[:, j][~np.isnan(classes[:, j])].astype(int)
            if col.size < k_min:
                continue
            reports = [mech.randomize(int(c)) for c in col]
            if oracle == "krr":
                est = krr_frequencies(krr_counts(reports, k), int(col.size), prob, level)
            else:
                est = oue_frequencies(oue_counts(reports, k), int(col.size), prob, level)
            true = np.bincount(col, minlength=k) / col.size
            err += [abs(e.value - t) for e, t in zip(est, true)]
            cover += [e.lo <= t <= e.hi for e, t in zip(est, true)]
        out[eps] = {"oracle": oracle, "k": k, "mae": float(np.mean(err)), "coverage": float(np.mean(cover)),
                    "timestamps": len(err) // k}
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
        if mech not in ("binary", "categorical"):
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
            if mech == "binary":
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
        out.append({"mechanism": mech, "eps": params["eps"], "devices": params["devices"],
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
        labels = ["devices on"] if r["mechanism"] == "binary" else \
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
        ax.set_ylabel("devices" if r["mechanism"] == "binary" else "share of devices")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
