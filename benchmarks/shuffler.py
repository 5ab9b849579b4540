"""Fog shuffler benchmark: Mallows sampling, group refinement and the whole RS
for n = 1e3 .. 1e6, against numpy's uniform permutation of the same n
measured in the same run, plus the paper's O(n^3)-style refinement for small n.

    python benchmarks/shuffler.py [--sizes 1000,10000,100000,1000000] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.timing import best_of  # noqa: E402
from fog_shuffler.shuffle.group_refinement import agglomerative, paper_agglomerative, refine  # noqa: E402
from fog_shuffler.shuffle.mallows import mallows_order  # noqa: E402
from fog_shuffler.shuffle.randomness import window_rng  # noqa: E402
from fog_shuffler.shuffle.relationship import RelationshipGraph  # noqa: E402
from fog_shuffler.shuffle.robust_shuffler import ShuffleParams, robust_shuffle  # noqa: E402

THETA = 30 / 36  # REFIT houses of 9 appliances: omega 8, Delta_K 36




def fleet(n: int) -> tuple[list[str], RelationshipGraph]:
    houses = [[f"h{h}a{a}" for a in range(1, 10)] for h in range(math.ceil(n / 9))]
    devs = [d for hs in houses for d in hs][:n]
    return devs, RelationshipGraph(groups=houses)


def singleton_spans(n: int) -> list[tuple[int, int]]:
    return [(i, i) for i in range(n)]


def run(sizes: list[int]) -> list[dict]:
    rows = []
    for n in sizes:
        rep = 5 if n <= 100_000 else 2
        rng = window_rng()
        t_np = best_of(lambda: rng.permutation(n), rep)
        t_mallows = best_of(lambda: mallows_order(n, THETA, rng), rep)
        # Refinement from singletons to groups of 9 (the heaviest case: n groups to merge).
        spans = singleton_spans(n)
        t_refine = best_of(lambda: refine(spans, math.ceil(n / 9)), 1 if n >= 1_000_000 else 2)
        t_agglo = best_of(lambda: agglomerative(spans, math.ceil(n / 9)), 1 if n >= 1_000_000 else 2)
        devs, graph = fleet(n)
        params = ShuffleParams()
        t_rs = best_of(lambda: robust_shuffle(devs, graph, params, rng), rep)
        row = {"n": n, "numpy_permutation_s": t_np, "mallows_s": t_mallows, "refine_s": t_refine,
               "agglomerative_s": t_agglo,
               "rs_s": t_rs, "mallows_over_numpy": t_mallows / t_np, "rs_over_numpy": t_rs / t_np,
               "refine_ns_per_item": t_refine / n * 1e9, "mallows_ns_per_item": t_mallows / n * 1e9}
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--paper-sizes", default="250,500,1000,2000", help="extra small n for the O(n^3) baseline")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = run([int(s) for s in args.sizes.split(",")])
    print(f"{'n':>9} {'numpy perm':>11} {'Mallows':>10} {'x numpy':>8} {'refine':>10} {'agglom.':>10} "
          f"{'whole RS':>10} {'x numpy':>8}")
    for r in rows:
        print(f"{r['n']:>9,} {r['numpy_permutation_s']*1e3:>9.2f}ms {r['mallows_s']*1e3:>8.2f}ms "
              f"{r['mallows_over_numpy']:>8.1f} {r['refine_s']*1e3:>8.1f}ms {r['agglomerative_s']*1e3:>8.1f}ms "
              f"{r['rs_s']*1e3:>8.1f}ms {r['rs_over_numpy']:>8.1f}")
    print("refine: exact optimum used by RS (contiguous groups); agglom.: the SPEC's heap agglomeration; "
          "both from n singletons to ceil(n/9) groups")
    paper = []
    for n in [int(s) for s in args.paper_sizes.split(",") if s]:
        singles = [[i] for i in range(n)]
        t_paper = best_of(lambda: paper_agglomerative(singles, math.ceil(n / 9)), 1)
        spans = singleton_spans(n)
        t_ours = best_of(lambda: refine(spans, math.ceil(n / 9)), 3)
        paper.append({"n": n, "paper_refine_s": t_paper, "refine_s": t_ours, "speedup": t_paper / t_ours})
    print("\nrefinement vs the paper's all-pairs agglomeration (singletons -> groups of 9):")
    print(f"{'n':>9} {'paper O(n^3)':>14} {'ours':>10} {'speedup':>10}")
    for p in paper:
        print(f"{p['n']:>9,} {p['paper_refine_s']:>12.3f} s {p['refine_s']*1e3:>8.2f}ms {p['speedup']:>10,.0f}")
    if len(rows) >= 2:
        a, b = rows[-2], rows[-1]
        nlogn = (b["n"] * math.log(b["n"])) / (a["n"] * math.log(a["n"]))
        for key in ("refine_s", "agglomerative_s"):
            growth = (b[key] / a[key]) / nlogn
            print(f"\n{key[:-2]} growth {a['n']:,} -> {b['n']:,} relative to n log n: {growth:.2f} (1.0 = n log n)",
                  end="")
        print()
    if args.json:
        print(json.dumps({"benchmark": "shuffler", "rows": rows, "paper_baseline": paper}))


if __name__ == "__main__":
    main()
