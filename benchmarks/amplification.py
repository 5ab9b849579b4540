"""Amplification-by-shuffling cost per window: the FMT numerical bound
(uncached) and the closed form for n = 45 .. 1e5 reports at eps0 = 1,
delta = 1e-6, against a uniform shuffle of the same n (numpy Fisher-Yates)
measured in the same run. The fog would compute one bound per (eps0, n):
numerical_eps is lru-cached, so a steady fleet pays it once per window size.

    python benchmarks/amplification.py [--sizes 45,1000,10000,100000] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.timing import best_of  # noqa: E402
from rase_common.amplification import closed_form_eps, numerical_eps  # noqa: E402
from fog_shuffler.shuffle.mallows import uniform_order  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="45,1000,10000,100000")
    ap.add_argument("--eps0", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng()
    uncached = numerical_eps.__wrapped__
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        t_shuffle = best_of(lambda: uniform_order(n, rng), 20)
        t_num = best_of(lambda: uncached(args.eps0, n, 1e-6), 3 if n <= 10_000 else 1)
        t_cf = best_of(lambda: closed_form_eps(args.eps0, n, 1e-6), 20)
        rows.append({"n": n, "shuffle_s": t_shuffle, "numerical_s": t_num, "closed_form_s": t_cf,
                     "numerical_over_shuffle": t_num / t_shuffle, "eps": uncached(args.eps0, n, 1e-6)})
    print(f"{'n':>8} {'uniform shuffle':>16} {'numerical bound':>16} {'closed form':>12} {'num/shuffle':>12} "
          f"{'eps (eps0 ' + format(args.eps0, 'g') + ')':>14}")
    for r in rows:
        print(f"{r['n']:>8,} {r['shuffle_s']*1e3:>14.3f}ms {r['numerical_s']*1e3:>14.1f}ms "
              f"{r['closed_form_s']*1e6:>10.1f}us {r['numerical_over_shuffle']:>12.0f} {r['eps']:>14.4f}")
    if args.json:
        print(json.dumps({"benchmark": "amplification", "eps0": args.eps0, "rows": rows}))


if __name__ == "__main__":
    main()
