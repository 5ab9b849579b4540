"""Estimator benchmark: SE, MLE (weighted median), BS (B = 1000) and a
windowed average for n = 1e3 .. 1e6, against numpy's mean of the same array
measured in the same run.

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
from fusion_center.estimators import bootstrap, mle, sample_mean, windowed  # noqa: E402




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
        rep = 5 if n <= 100_000 else 2
        t_np = best_of(lambda: np.mean(z), max(rep, 20))
        t_se = best_of(lambda: sample_mean(z), rep)
        t_mle = best_of(lambda: mle(z, lam), rep)
        t_bs = best_of(lambda: bootstrap(z, args.b, rng=rng), 1 if n >= 1_000_000 else 3)
        per_t = {t: sample_mean(z[:1000]) for t in range(64)}
        t_win = best_of(lambda: windowed(per_t, 63, 64), rep)
        total = t_se + t_mle + t_bs + t_win
        rows.append({"n": n, "numpy_mean_s": t_np, "se_s": t_se, "mle_s": t_mle, "bs_s": t_bs,
                     "windowed_s": t_win, "all_s": total, "se_over_numpy": t_se / t_np,
                     "mle_over_numpy": t_mle / t_np, "bs_over_numpy": t_bs / t_np})
    print(f"{'n':>9} {'numpy mean':>11} {'SE':>10} {'MLE':>10} {'BS B=' + str(args.b):>12} {'windowed':>10} "
          f"{'all':>10} {'MLE/np':>8} {'BS/np':>9}")
    for r in rows:
        print(f"{r['n']:>9,} {r['numpy_mean_s']*1e3:>9.3f}ms {r['se_s']*1e3:>8.2f}ms {r['mle_s']*1e3:>8.2f}ms "
              f"{r['bs_s']*1e3:>10.1f}ms {r['windowed_s']*1e3:>8.3f}ms {r['all_s']*1e3:>8.1f}ms "
              f"{r['mle_over_numpy']:>8.0f} {r['bs_over_numpy']:>9.0f}")
    at_1e5 = [r for r in rows if r["n"] == 100_000]
    if at_1e5:
        print(f"\ntarget: all estimators for one timestamp of 1e5 reports < 0.5 s: {at_1e5[0]['all_s']:.3f} s")
    if args.json:
        print(json.dumps({"benchmark": "estimators", "b": args.b, "rows": rows}))


if __name__ == "__main__":
    main()
