"""Does continual-release noise (the binary tree) beat independent noise for
a running total, energy since midnight, under the household-day guarantee?
(issue 28; docs/privacy.md section 2b gives the numbers.)

A household contributes to every interval of its day (its meter's mean, in
[0, Delta]); the guarantee covers its whole day, so a release strategy pays
for every interval a household can change. With R releases a day and a
daily budget eps, each strategy's noise (Laplace, or the two aggregators'
discrete Laplace: the same factor for all) has the scale of its L1
sensitivity over the day, divided by eps:

- independent: each interval's total noised at eps / R (scale R Delta / eps);
  the running total after k intervals is the sum of k of them: variance
  2 k (R Delta / eps)^2. This is what the interval product publishes, and
  the running total is free post-processing of it.
- binary tree (Chan, Shi, Song; Dwork et al.): a node per dyadic block of
  intervals at each of L = ceil(log2 R) + 1 levels; a household changes
  every node of every level, so the scale is L R Delta / eps; the running
  total after k intervals adds popcount(k) nodes: variance
  2 popcount(k) (L R Delta / eps)^2.
- the running totals themselves, noised: sensitivity R (R + 1) / 2 Delta.

The tree wins where popcount(k) L^2 < k: for a half-hourly product (R 48,
L 7) never (it needs k > 49 popcount(k)); the ratio does not depend on the
unit (a household touching one interval or all of them scales every
strategy alike), so it is the number of releases that decides: at one
release every 8 s (R 10,800, L 15) the tree wins late in the day.
"""

from __future__ import annotations

import math

import numpy as np


def levels(releases: int) -> int:
    return math.ceil(math.log2(releases)) + 1 if releases > 1 else 1


def running_total_variance(releases: int, strategy: str, *, eps: float = 1.0, delta: float = 1.0) -> np.ndarray:
    """Var of the noisy running total after k = 1 .. releases intervals (Laplace noise), a household
    changing every interval of its day by up to delta."""
    k = np.arange(1, releases + 1)
    touched = releases
    if strategy == "independent":
        b = touched * delta / eps
        return 2 * k * b * b
    if strategy == "tree":
        b = levels(releases) * touched * delta / eps
        popcount = np.array([bin(int(i)).count("1") for i in k])
        return 2 * popcount * b * b
    if strategy == "totals":
        # Each running total is a query; a household changes total k by up to k delta: L1 R (R + 1) / 2 delta.
        b = releases * (releases + 1) / 2 * delta / eps
        return np.full(releases, 2 * b * b)
    raise ValueError(f"unknown strategy {strategy!r}")


def simulate_running_total_variance(releases: int, strategy: str, *, trials: int, rng: np.random.Generator,
                                    eps: float = 1.0, delta: float = 1.0) -> np.ndarray:
    """The same by sampling the strategy's noise (Laplace), for checking the formulas."""
    if strategy == "independent":
        z = rng.laplace(0, releases * delta / eps, (trials, releases))
        return np.var(np.cumsum(z, axis=1), axis=0)
    if strategy == "tree":
        n_levels = levels(releases)
        b = n_levels * releases * delta / eps
        out = np.zeros((trials, releases))
        nodes = {lv: rng.laplace(0, b, (trials, releases // (1 << lv) + 1)) for lv in range(n_levels)}
        for k in range(1, releases + 1):
            total, start = np.zeros(trials), 0
            for lv in reversed(range(n_levels)):         # the dyadic blocks of [0, k)
                if k - start >= (1 << lv):
                    total += nodes[lv][:, start >> lv]
                    start += 1 << lv
            out[:, k - 1] = total
        return np.var(out, axis=0)
    raise ValueError(f"unknown strategy {strategy!r}")


def comparison(releases: int) -> dict[str, dict[str, float]]:
    """The tree's and the noised totals' error (sd) over independent noise's, for the running total at
    the day's end, averaged over the day (root mean square over k), and at the best k for the tree."""
    ind = running_total_variance(releases, "independent")
    out = {}
    for strategy in ("tree", "totals"):
        v = running_total_variance(releases, strategy)
        out[strategy] = {"end": math.sqrt(v[-1] / ind[-1]), "rms": math.sqrt(v.mean() / ind.mean()),
                         "best": math.sqrt(float(np.min(v / ind)))}
    return out
