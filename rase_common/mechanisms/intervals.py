"""Interval tools the mechanisms share (pure numpy/scipy)."""

from __future__ import annotations

import numpy as np


def reports_of(by_level: dict) -> tuple[np.ndarray, np.ndarray]:
    z = [np.asarray(v, dtype=np.float64) for v in by_level.values()]
    e = [np.full(len(v), float(eps)) for eps, v in zip(by_level, z)]
    a = np.concatenate(z)
    if a.size == 0:
        raise ValueError("no reports")
    if not np.all(np.isfinite(a)):
        raise ValueError("reports must be finite")
    return a, np.concatenate(e)
