"""Shared by the benchmarks: best-of-N wall time."""

from __future__ import annotations

import math
import time


def best_of(fn, repeat: int) -> float:
    """Shortest of `repeat` timings of fn(): the least disturbed by a shared machine."""
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
