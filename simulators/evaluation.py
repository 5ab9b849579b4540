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
from edge_agent.randomizer import BudgetRandomizer, Calibration
from fusion_center.estimators import bootstrap, mle, sample_mean
from simulators.pipeline import Device, fleet, truth
from simulators.refit import epoch0_of, grid_readings, load_house

ESTIMATORS = ("se", "mle", "bs")
DEFAULT_EPS = (0.1, 0.5, 1.0, 2.0, 5.0, 9.0)


def seeded_bytes(rng: np.random.Generator):
    return lambda n: rng.bytes(n)


def readings_matrix(devices: list[Device], epoch0: float, period_s: float, t0: int, n_t: int) -> np.ndarray:
    return np.vstack([grid_readings(d.house, d.column, epoch0, period_s, t0 + n_t, shift_s=d.shift_s)[t0:]
                      for d in devices])


def simulate_estimates(x: np.ndarray, eps: float, cal: Calibration, *, k_min: int = 10, bootstrap_b: int = 1000,
                       seed: int | None = None, level: float = 0.95) -> dict[str, np.ndarray]:
    """Per-timestamp SE/MLE/BS from BR reports of readings x (devices x t, NaN = no report)."""
    rng = np.random.default_rng(seed)
    br = BudgetRandomizer(cal, RandomBits(read=seeded_bytes(rng) if seed is not None else None))
    lam = br.lambda_(eps)
    n_t = x.shape[1]
    out = {k: np.full(n_t, np.nan) for k in ESTIMATORS}
    out["n"] = np.zeros(n_t, dtype=int)
    for j in range(n_t):
        col = x[:, j]
        col = col[~np.isnan(col)]
        if col.size < k_min:
            continue   # the fog suppresses windows under k_min
        z = np.array([br.randomize(float(v), eps)[0] for v in col])
        out["se"][j] = sample_mean(z, level).value
        out["mle"][j] = mle(z, lam, level).value
        out["bs"][j] = bootstrap(z, bootstrap_b, level, rng=rng).value
        out["n"][j] = z.size
    return out


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
        row = {"mae": float(np.mean(np.abs(d))), "max_sq": float(np.max(d * d)), "timestamps": int(ok.sum())}
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
        est = {k: np.full(n_t, np.nan) for k in ESTIMATORS}
        for r in rows:
            for k in ESTIMATORS:
                est[k][r["t"] - t0] = r["estimates"][k]["value"]
        table[params["eps"]] = errors(est, true_mean, windows_w)
        eps_list.append(params["eps"])
        n_dev, n_ts = params["devices"], n_t
    return UtilityResult(eps_list, table, n_dev, n_ts, "replay")


def plot_utility(res: UtilityResult, windows_w: tuple[int, ...], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    eps = res.eps
    for k, c in zip(ESTIMATORS, ("tab:blue", "tab:orange", "tab:green")):
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
