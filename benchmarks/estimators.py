"""Estimator benchmark: the unbiased mean, its bootstrap (B = 1000, multinomial
counts over the distinct reports counted on the BR grid, as the fusion center runs it), the index bootstrap it
replaced, SE, MLE
(weighted median) and a windowed average for n = 1e3 .. 1e6, against numpy's
mean of the same array measured in the same run. Then every mechanism's own
estimate with its interval (rase_common.mechanisms, as the fusion center runs
it per timestamp) for one eps level of n reports: the first call (which may
build a cached table: PM/HM's exact distributions up to 200 reports) and
later calls, against numpy's mean.

    python benchmarks/estimators.py [--sizes 1000,10000,100000,1000000] [--mechanism-sizes 10,45,1000,100000] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.timing import best_of  # noqa: E402
from rase_device.randomizer import Calibration  # noqa: E402
from fusion_center.estimators import (bootstrap, br_bootstrap, br_corrected, mle, sample_mean,  # noqa: E402
                                      unbiased_mean, windowed)
from rase_common.mechanisms import MECHANISMS, Setting, mechanism  # noqa: E402




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--b", type=int, default=1000)
    ap.add_argument("--mechanism-sizes", default="10,45,1000,100000")
    ap.add_argument("--eps", type=float, default=9.0, help="eps of the mechanisms' reports")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        # Clamped BR reports of REFIT-like readings at eps 1: range 0..4000 W, lambda 4000.
        z = np.clip(rng.uniform(0, 500, n) + rng.laplace(0, 4000, n), 0, 4000).round()
        lam = np.full(n, 4000.0)
        eps = np.full(n, 1.0)
        cal = Calibration()
        rep = 5 if n <= 100_000 else 2
        t_np = best_of(lambda: np.mean(z), max(rep, 20))
        t_mean = best_of(lambda: unbiased_mean(z, eps, cal), rep)
        c = br_corrected(z, eps, cal)
        # As the fusion center calls it: the reports of one eps level, counted on the BR grid.
        t_bs = best_of(lambda: br_bootstrap({1.0: z}, cal, args.b, rng=rng), 3)
        t_bs_idx = best_of(lambda: bootstrap(c, args.b, rng=rng), 1 if n >= 1_000_000 else 3)
        t_se = best_of(lambda: sample_mean(z), rep)
        t_mle = best_of(lambda: mle(z, lam), rep)
        per_t = {t: sample_mean(z[:1000]) for t in range(64)}
        t_win = best_of(lambda: windowed(per_t, 63, 64), rep)
        total = t_mean + t_bs + t_se + t_mle + t_win
        rows.append({"n": n, "numpy_mean_s": t_np, "mean_s": t_mean, "bs_s": t_bs, "bs_index_s": t_bs_idx,
                     "se_s": t_se, "mle_s": t_mle, "windowed_s": t_win, "all_s": total,
                     "mean_over_numpy": t_mean / t_np, "bs_over_numpy": t_bs / t_np,
                     "bs_index_over_numpy": t_bs_idx / t_np, "mle_over_numpy": t_mle / t_np})
    print(f"{'n':>9} {'numpy mean':>11} {'mean':>9} {'BS counts':>11} {'BS index':>10} {'SE':>9} {'MLE':>9} "
          f"{'all':>9} {'BS/np':>7} {'BSidx/np':>9}")
    for r in rows:
        print(f"{r['n']:>9,} {r['numpy_mean_s']*1e3:>9.3f}ms {r['mean_s']*1e3:>7.2f}ms {r['bs_s']*1e3:>9.1f}ms "
              f"{r['bs_index_s']*1e3:>8.1f}ms {r['se_s']*1e3:>7.2f}ms {r['mle_s']*1e3:>7.2f}ms "
              f"{r['all_s']*1e3:>7.1f}ms {r['bs_over_numpy']:>7.0f} {r['bs_index_over_numpy']:>9.0f}")
    at_1e5 = [r for r in rows if r["n"] == 100_000]
    if at_1e5:
        print(f"\ntarget: all estimators for one timestamp of 1e5 reports < 0.5 s: {at_1e5[0]['all_s']:.3f} s")
    at_1e6 = [r for r in rows if r["n"] == 1_000_000]
    if at_1e6:
        print(f"target: bootstrap B={args.b} at n = 1e6 within 50x of one numpy mean: "
              f"{at_1e6[0]['bs_over_numpy']:.0f}x (index bootstrap {at_1e6[0]['bs_index_over_numpy']:.0f}x)")
    mech_rows = mechanism_timings([int(v) for v in args.mechanism_sizes.split(",")], args.eps, rng)
    print(f"\nevery mechanism's estimate with its interval, one eps level ({args.eps:g}) of n reports")
    print(f"{'mechanism':<12}{'n':>8} {'first':>10} {'later':>10} {'later/np':>9}  method")
    for r in mech_rows:
        print(f"{r['mechanism']:<12}{r['n']:>8,} {r['first_s']*1e3:>8.1f}ms {r['later_s']*1e3:>8.2f}ms "
              f"{r['later_over_numpy']:>9.0f}  {r['method']}")
    if args.json:
        print(json.dumps({"benchmark": "estimators", "b": args.b, "rows": rows, "mechanisms": mech_rows}))


def mechanism_timings(sizes: list[int], eps: float, rng: np.random.Generator) -> list[dict]:
    """First and later call of each mechanism's estimate on REFIT-like readings."""
    import time

    from simulators.coverage import refit_like

    setting = Setting()
    out = []
    for name in MECHANISMS:
        m = mechanism(name)
        for n in sizes:
            y = {eps: m.sample(setting, eps, refit_like(n, rng), rng)}
            t0 = time.perf_counter()
            est = m.estimate(y, setting)
            first = time.perf_counter() - t0
            later = best_of(lambda: m.estimate(y, setting), 3)
            t_np = best_of(lambda: np.mean(y[eps]), 20)
            e = next(iter(est.named.values()), None) or est.frequencies[0]
            out.append({"mechanism": name, "n": n, "first_s": first, "later_s": later, "numpy_mean_s": t_np,
                        "later_over_numpy": later / t_np, "method": e.method})
    return out


if __name__ == "__main__":
    main()
