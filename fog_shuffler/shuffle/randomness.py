"""Per-window random generators.

Each window's shuffle gets a fresh numpy Generator (Philox, a counter-based
generator built on a block cipher round function) keyed with 256 bits from
the OS CSPRNG. Tests pass an explicit seed; nothing else may.
"""

from __future__ import annotations

import os

import numpy as np


def window_rng(seed: int | None = None) -> np.random.Generator:
    """A generator for one window: OS CSPRNG key unless a test passes `seed`."""
    key = int.from_bytes(os.urandom(32), "big") if seed is None else seed
    return np.random.Generator(np.random.Philox(key))
