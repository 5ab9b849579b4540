"""What an honest device's reports can look like, per mechanism: the fog's
attacker detection (fog_shuffler.screen.detection) tests each device against it.

A `PlausibilityTest` is one side of one report statistic (the debiased
report above x_max, below x_min, a band named more often than any reading
explains), as
- `score(y)`: a report's score, never above the exact score of the output it
  stands for (the float slack of base.float_tolerance is taken off), and
- the law of the score at the *worst* reading: the reading whose reports
  score highest. Every mechanism here is stochastically monotone in its
  reading (its module says why), so for every reading in the range and
  every lam >= 0, E[exp(lam * score)] <= sum_o prob_o exp(lam * value_o):
  `log_mgf(lam)` bounds the log moment generating function of an honest
  report's score whatever the device reads.

That bound is all the sequential test needs: for any readings (even chosen
adaptively), exp(sum_i lam * score_i - log_mgf(lam)) is a nonnegative
supermartingale with mean <= 1 under honest reports (fresh noise per report).
Each mechanism module provides `plausibility(setting, eps)`; tests check the
monotonicity claim at every grid reading of a small grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class PlausibilityTest:
    name: str                          # "above", "below", "band 2", ...
    values: np.ndarray                 # the score's possible values at the worst reading
    probs: np.ndarray                  # their probabilities (sum 1)
    score: Callable[[float], float]    # one report -> its score
    debiased: Callable[[float], float] | None = None   # mean mechanisms: a report -> its unbiased value (W)

    def __post_init__(self) -> None:
        v, p = np.asarray(self.values, dtype=np.float64), np.asarray(self.probs, dtype=np.float64)
        if v.shape != p.shape or v.ndim != 1 or v.size == 0:
            raise ValueError("values and probs must be non-empty 1-d arrays of one length")
        if np.any(p < 0) or abs(float(p.sum()) - 1.0) > 1e-9:
            raise ValueError(f"probs must be >= 0 and sum to 1, got sum {float(p.sum())!r}")
        keep = p > 0
        object.__setattr__(self, "values", v[keep])
        object.__setattr__(self, "probs", p[keep] / p[keep].sum())

    @property
    def largest(self) -> float:
        """The largest score an output can have (an attacker's best)."""
        return float(self.values.max())

    @property
    def mean(self) -> float:
        """The largest mean score any honest reading gives (<= 0 for the mean mechanisms)."""
        return float(np.dot(self.probs, self.values))

    @property
    def largest_prob(self) -> float:
        """How likely an honest device at the worst reading sends the largest output."""
        return float(self.probs[self.values == self.values.max()].sum())

    def log_mgf(self, lam: float) -> float:
        """log E[exp(lam * score)] at the worst reading (log-sum-exp)."""
        a = lam * self.values + np.log(self.probs)
        top = float(a.max())
        return top + math.log(float(np.exp(a - top).sum()))

    def tilted_mean(self, lam: float) -> float:
        """d/dlam log_mgf: the mean score under the law tilted by exp(lam * score)."""
        a = lam * self.values + np.log(self.probs)
        w = np.exp(a - a.max())
        return float(np.dot(w, self.values) / w.sum())


def normalized(values, probs, bound: float, sign: float, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Values of a debiased report turned into scores sign * (value - bound) / scale."""
    v = np.asarray(values, dtype=np.float64)
    return sign * (v - bound) / scale, np.asarray(probs, dtype=np.float64)


def mean_tests(top_law, bottom_law, x_min: float, x_max: float, slack: float,
               debias: Callable[[float], float]) -> tuple[PlausibilityTest, PlausibilityTest]:
    """The two tests of a mean mechanism: its debiased reports above x_max on
    average (law at the top reading) and below x_min (law at the bottom one).
    Scores are in units of the range; `slack` (reading units) covers the float
    rounding between a report and the exact output it stands for."""
    scale = x_max - x_min

    def above(y: float) -> float:
        return (debias(y) - slack - x_max) / scale

    def below(y: float) -> float:
        return (x_min - debias(y) - slack) / scale

    (top_v, top_p), (bottom_v, bottom_p) = top_law, bottom_law
    return (PlausibilityTest("above", *normalized(top_v, top_p, x_max, 1.0, scale), above, debias),
            PlausibilityTest("below", *normalized(bottom_v, bottom_p, x_min, -1.0, scale), below, debias))


def bernoulli_test(name: str, p_one: float, score: Callable[[float], float]) -> PlausibilityTest:
    """A 0/1 score that is 1 with probability at most p_one for any reading."""
    return PlausibilityTest(name, np.array([0.0, 1.0]), np.array([1.0 - p_one, p_one]), score)
