"""`rase demo`: the whole pipeline with nothing to install or configure.

Embedded MQTT broker (amqtt), the bundled REFIT excerpt (5 houses, 45
appliances), a few simulated hours replayed at full speed through real edge
agents, the fog shuffler and the fusion center; then a summary and a plot of
the true against the estimated mean (the RASE paper's Fig. 9).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simulators.pipeline import PipelineSpec, run_pipeline, truth, write_jsonl
from simulators.refit import bundled_dir

DEMO_HOUSES = [1, 2, 3, 5, 12]


def plot_true_vs_estimated(ts: np.ndarray, true_mean: np.ndarray, aggs: dict[int, dict], w: int, period_s: float,
                           eps: float, x_range: float, path: Path, title: str, mechanism_name: str = "br") -> None:
    """The mean (the estimate to use) with its 95% interval band and the truth,
    per timestamp and, beside it, windowed over w, each panel saying in words
    why it is as wide as it is (simulators.plots)."""
    import logging

    import matplotlib
    matplotlib.use("Agg")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)   # no font-cache line in the demo's output
    import matplotlib.pyplot as plt

    from simulators.plots import mean_panels

    hours = (ts - ts[0]) * period_s / 3600
    est = [aggs[t]["estimates"]["mean"] for t in ts]
    win = [aggs[t]["windowed"][str(w)]["mean"] for t in ts]
    nan = float("nan")
    fig, (ax_t, ax_w) = plt.subplots(1, 2, figsize=(15, 5.8))
    mean_panels(ax_t, ax_w, hours, mean=np.array([e["value"] for e in est]),
                lo=np.array([e["ci"][0] for e in est]), hi=np.array([e["ci"][1] for e in est]), truth=true_mean,
                w=w, n=float(np.median([e["n"] for e in est])), eps=eps, x_range=x_range, xlabel="hours replayed",
                win=(np.array([nan if e["value"] is None else e["value"] for e in win]),
                     np.array([nan if e["ci"] is None else e["ci"][0] for e in win]),
                     np.array([nan if e["ci"] is None else e["ci"][1] for e in win])), mechanism_name=mechanism_name)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


async def run_demo(out_dir: Path, periods: int | None = None, hours: float = 3.0) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    if periods is not None:
        hours = periods * 8.0 / 3600
    spec = PipelineSpec(data_dir=bundled_dir(), houses=DEMO_HOUSES, hours=hours, start_offset_s=6 * 3600,
                        eps=5.0, work_dir=out_dir / "state",
                        # At eps >= 2 Hybrid's mean is the tightest (docs/evaluation.md, "The default
                        # mechanism"); the deployment default, Duchi, is chosen for eps 1.
                        device_mechanism="hybrid")
    print(f"RASE demo: {len(DEMO_HOUSES) * 9} REFIT appliances of houses {DEMO_HOUSES}, {hours:g} h from 06:00 "
          f"(2015-01-08) replayed at full speed, eps = {spec.eps}, embedded MQTT broker")
    res = await run_pipeline(spec)
    write_jsonl(res, out_dir / "aggregates.jsonl")
    p = res.params
    true_mean, present = truth(res.devices, p["epoch0"], p["period_s"], p["t_start"], p["timestamps"])
    aggs = {a["t"]: a for a in res.aggregates}
    ts = np.array(sorted(aggs))
    idx = ts - p["t_start"]
    # The deployment mechanism's estimates (Duchi, the default, publishes only mean; BR also bs, se, mle).
    names = [k for k in ("mean", "bs", "se", "mle") if all(k in aggs[t]["estimates"] for t in ts)]
    est = {k: np.array([aggs[t]["estimates"][k]["value"] for t in ts]) for k in names}
    w = max(p["windows_w"])
    win = {k: np.array([aggs[t]["windowed"][str(w)][k]["value"] for t in ts]) for k in names}
    tm = true_mean[idx]
    print(f"\ndevices {p['devices']}   reports {res.reports}   timestamps {p['timestamps']}   "
          f"wall time {res.elapsed_s:.1f} s")
    f = res.fog
    print(f"fog: windows forwarded {f['windows_forwarded']} (mallows {f['mallows']}, uniform {f['uniform']}), "
          f"suppressed {f['windows_suppressed']}, rejected reports {f['rejected']}, late {f['late']}")
    print(f"fusion: aggregates stored {len(ts)}, clamped estimates {sum(a['clamped'] for a in res.aggregates)}")
    print(f"true mean over the run: {np.nanmean(tm):.1f} W per appliance\n")
    print(f"device mechanism: {p.get('device_mechanism', 'br')} (the tightest mean at this eps; the default, duchi, "
          "is for eps 1)")
    print(f"{'estimator':<10}{'MAE per t (W)':>15}{'MAE windowed w=' + str(w):>22}")
    true_win = np.convolve(np.nan_to_num(true_mean), np.ones(w) / w, mode="full")[:len(true_mean)][idx]
    ok = idx >= w - 1
    what = {"mean": "unbiased mean (use this)", "bs": "its bootstrap", "se": "paper's mean of reports",
            "mle": "paper's weighted median"}
    for k in names:
        mae = float(np.nanmean(np.abs(est[k] - tm)))
        mae_w = float(np.nanmean(np.abs(win[k][ok] - true_win[ok])))
        print(f"{k:<10}{mae:>15.1f}{mae_w:>22.1f}   {what[k]}")
    png = out_dir / "true_vs_estimated.png"
    plot_true_vs_estimated(ts, tm, aggs, w, p["period_s"], p["eps"], p["x_max"] - p["x_min"], png,
                           f"RASE on REFIT: {p['devices']} appliances, eps = {p['eps']} per report, "
                           f"RS shuffle ({f['mallows']} Mallows / {f['uniform']} uniform windows): the unbiased mean "
                           "with its 95% interval and the truth", mechanism_name=p.get("device_mechanism", "br"))
    print(f"\nplot: {png}\nper-timestamp estimates: {out_dir / 'aggregates.jsonl'}")
    per_day = p["eps"] * 9 * 86400 / p["period_s"]
    print(f"\nwhat this demo promises per household per day: event-level (the per-report stream: each report "
          f"eps {p['eps']:g}-DP on its own); a house's 9 appliances report every {p['period_s']:g} s, so a household "
          f"spends eps {p['eps'] * 9 * p['timestamps']:,.0f} over these {hours:g} h and would spend "
          f"eps {per_day:,.0f} a day: no daily guarantee. The shipped configs run the half-hourly product at eps 8 "
          "per household per UTC day instead; `rase replay --unit household --households 10000 --product interval "
          "--eps-day 4 --mechanism prio3 --hours 24 --out X.jsonl` shows what that buys (docs/evaluation.md).")
    return 0 if len(ts) else 1
