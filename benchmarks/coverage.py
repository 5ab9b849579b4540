"""Coverage benchmark (issue 16): how often each published interval holds the
TRUE value, for every mechanism and report kind, n reports of one eps level
(n in 10, 20, 45, 1000 by default: the fog forwards k_min = 10 and up), eps
0.5 .. 9, on REFIT-like readings and on the bundled houses. Beside each, the
interval published before issue 16 ("normal") and the width ratio of the two.
Reports come from each mechanism's exact vectorised sampler (tested against
the device randomizers), estimated by its registry entry as the fusion
center does (simulators.coverage).

    python benchmarks/coverage.py [--mechanisms br,duchi,...] [--n 10,20,45,1000] [--eps 0.5,1,2,4,9]
                                  [--data refit-like,houses] [--reps 2000] [--reps-large 500] [--seed 1] [--json]

Coverage is measured over `reps` draws (Monte Carlo sd 0.0049 at 2,000 reps,
0.0097 at 500). Results in docs/evaluation.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rase_common.mechanisms import MECHANISMS  # noqa: E402
from simulators.coverage import DATA, run_cell  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mechanisms", default=",".join(MECHANISMS))
    ap.add_argument("--n", default="10,20,45,1000")
    ap.add_argument("--eps", default="0.5,1,2,4,9")
    ap.add_argument("--data", default=",".join(DATA))
    ap.add_argument("--reps", type=int, default=2000, help="draws per cell for n <= 200")
    ap.add_argument("--reps-large", type=int, default=500, help="draws per cell for n > 200")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    cells = []
    print(f"{'mechanism':<12}{'estimate':<9}{'data':<11}{'n':>5}{'eps':>5}  {'coverage':>8}  {'method':<28}"
          f"{'floor':>6}{'normal cov.':>12}{'width/normal':>13}", flush=True)
    t0 = time.perf_counter()
    for name in args.mechanisms.split(","):
        for data in args.data.split(","):
            for n in (int(v) for v in args.n.split(",")):
                for eps in (float(v) for v in args.eps.split(",")):
                    reps = args.reps if n <= 200 else args.reps_large
                    for c in run_cell(name, eps, n, data, reps, rng):
                        cells.append(c)
                        print(f"{c.mechanism:<12}{c.estimate:<9}{c.data:<11}{c.n:>5}{c.eps:>5g}  {c.coverage:>8.3f}  "
                              f"{c.method:<28}{c.floor:>6.3f}{c.normal_coverage:>12.3f}{c.width_ratio:>13.2f}",
                              flush=True)
    bad = [c for c in cells if not 0.93 <= c.coverage <= 0.975]
    print(f"\n{len(cells)} cells in {time.perf_counter() - t0:.0f} s; outside [0.93, 0.975]: {len(bad)} "
          f"(floor: the least coverage any interval valid at every configuration has there)")
    for c in bad:
        print(f"  {c.mechanism} {c.estimate} {c.data} n={c.n} eps={c.eps:g}: {c.coverage:.3f} ({c.method}), "
              f"floor {c.floor:.3f}")
    if args.json:
        print(json.dumps({"benchmark": "coverage", "seed": args.seed, "cells": [c.as_dict() for c in cells]}))


if __name__ == "__main__":
    main()
