"""Estimator benchmark: the unbiased mean, its bootstrap (B = 1000, multinomial
counts over the distinct reports counted on the BR grid, as the fusion center runs it), the index bootstrap it replaced, SE, MLE
(weighted median) and a windowed average for n = 1e3 .. 1e6, against numpy's
mean of the same array measured in the same run.

    python benchmarks/estimators.py [--sizes 1000,10000,100000,1000000] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.timing import best_of  # noqa: E402
from edge_agent.randomizer import Calibration  # noqa: E402
from fusion_center.estimators import (bootstrap, br_bootstrap, br_corrected, mle, sample_mean,  # noqa: E402
                                      unbiased_mean, windowed)




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--b", type=int, default=1000)
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
    if args.json:
        print(json.dumps({"benchmark": "estimators", "b": args.b, "rows": rows}))


if __name__ == "__main__":
    main()
