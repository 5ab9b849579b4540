"""Exact Mallows permutations under Kendall tau, and a uniform Fisher-Yates.

Repeated insertion model (SPEC 2.2): for item k = 0..n-1 draw V_k in {0..k}
with P(V_k = j) proportional to exp(-theta j) and insert item k at index
k - V_k of the list built so far. sum(V) is the Kendall distance to the
identity, and the result has P(pi) = exp(-theta d_K(pi, id)) / Z exactly.

V_k is drawn as a geometric variable truncated by rejection (exact). The
insertions are done by list.insert driven from C (map), so the whole sampler
runs at a few tens of nanoseconds per item.
"""

from __future__ import annotations

from collections import deque

import numpy as np


def insertion_vector(n: int, theta: float, rng: np.random.Generator) -> np.ndarray:
    """V_0..V_{n-1}: V_k in {0..k} with P(V_k = j) proportional to exp(-theta j)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not theta > 0 or not np.isfinite(theta):
        raise ValueError(f"theta must be a finite number > 0, got {theta!r}")
    p = -np.expm1(-theta)  # 1 - exp(-theta), accurate for small theta
    v = rng.geometric(p, size=n) - 1
    k = np.arange(n)
    bad = np.flatnonzero(v > k)
    while bad.size:  # rejection: exact truncation to {0..k}
        v[bad] = rng.geometric(p, size=bad.size) - 1
        bad = bad[v[bad] > k[bad]]
    return v


def permutation_from_insertions(v: np.ndarray) -> np.ndarray:
    """order[i] = the item at position i after inserting item k at index k - v[k]."""
    order: list[int] = []
    deque(map(order.insert, (np.arange(len(v)) - v).tolist(), range(len(v))), maxlen=0)
    return np.asarray(order, dtype=np.int64)


def mallows_order(n: int, theta: float, rng: np.random.Generator) -> np.ndarray:
    """A Mallows(identity, theta) permutation of 0..n-1 as an order of items."""
    return permutation_from_insertions(insertion_vector(n, theta, rng))


def kendall_distance(order: np.ndarray) -> int:
    """Number of inversions of `order` (distance to the identity), O(n log n)."""
    a = np.asarray(order)
    n = len(a)
    if n < 2:
        return 0
    # Merge-sort inversion count on numpy halves.
    def count(x: np.ndarray) -> tuple[np.ndarray, int]:
        if len(x) <= 32:
            inv = int(sum((x[i] > x[i + 1:]).sum() for i in range(len(x))))
            return np.sort(x), inv
        mid = len(x) // 2
        left, a_inv = count(x[:mid])
        right, b_inv = count(x[mid:])
        # For each right element, how many left elements exceed it.
        cross = int((len(left) - np.searchsorted(left, right, side="right")).sum())
        return np.concatenate([left, right])[np.argsort(np.concatenate([left, right]), kind="stable")], \
            a_inv + b_inv + cross
    return count(a)[1]


def expected_kendall_distance(n: int, theta: float) -> float:
    """Closed form E[d_K] under Mallows(theta): sum_k E[V_k], V_k truncated geometric."""
    q = np.exp(-theta)
    j = np.arange(1, n + 1, dtype=np.float64)
    qj = np.exp(-theta * j)
    return float(n * q / (1 - q) - np.sum(j * qj / (1 - qj)))


def uniform_order(n: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random permutation of 0..n-1.

    numpy's Generator.permutation is Knuth's Algorithm P (Fisher-Yates) in C:
    each step swaps the current slot with one drawn uniformly from the slots
    not yet fixed, the current one included. RASE Alg. 2 prints j in
    [i+1, n] instead, which is Sattolo's algorithm: it only makes cyclic
    permutations, so no report ever stays in place, which itself leaks.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return rng.permutation(n).astype(np.int64)
