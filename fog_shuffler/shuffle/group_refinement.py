"""Group refinement (RASE's grouping refinement problem, SPEC 2.2 step 3).

Groups are sets of positions in sigma_0; a group's width is the span of its
positions (max - min) and the objective omega is the largest width. Starting
from the initial partition (the connected components), groups are merged
until k remain, raising omega as little as possible.

- `agglomerative(spans, k)`: the SPEC's algorithm, O(n log n): candidates are
  neighbours in sigma_0 (groups ordered by their first position), kept in a
  heap keyed on the merged width, stale entries skipped.
- `optimal_contiguous(sizes, k)`: when the groups are contiguous ranges (as
  BFS components are), the exact optimum: binary search on the width with
  greedy packing, O(m log n). Contiguous blocks are optimal among all
  partitions of contiguous groups (the first group of each greedy block must
  sit in a different block of any partition of that width).
- `refine(spans, k)`: what RS uses: the exact optimum for contiguous groups
  (never worse than the agglomerative result; tested against brute force),
  the agglomerative heap otherwise.
- `paper_agglomerative(spans, k)`: the paper's version, every pair examined at
  every step, O(m^3); a baseline for benchmarks and tests.
"""

from __future__ import annotations

import heapq
from typing import Sequence

Span = tuple[int, int]  # (first position, last position) of a group in sigma_0


def delta_k(omega: int) -> int:
    """Kendall tau sensitivity of the Mallows mechanism for width omega."""
    return omega * (omega + 1) // 2


def width(spans: Sequence[Span]) -> int:
    return max((hi - lo for lo, hi in spans), default=0)


def width_of_positions(groups: Sequence[Sequence[int]]) -> int:
    """omega for groups given as sets of sigma_0 positions."""
    return max((max(g) - min(g) for g in groups if g), default=0)


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


def agglomerative(spans: Sequence[Span], k: int) -> list[list[int]]:
    """Merge groups until k remain; returns, for each final group, the
    indices of the input groups it holds (ordered by first position)."""
    _check_k(k)
    m = len(spans)
    order = sorted(range(m), key=lambda i: spans[i])
    lo = [spans[i][0] for i in order]
    hi = [spans[i][1] for i in order]
    members: list[list[int]] = [[i] for i in order]
    nxt = list(range(1, m)) + [-1]
    prv = [-1] + list(range(0, m - 1))
    alive = [True] * m
    version = [0] * m
    heap: list[tuple[int, int, int, int, int]] = []

    def push(a: int) -> None:
        b = nxt[a]
        if a >= 0 and b >= 0:
            w = max(hi[a], hi[b]) - min(lo[a], lo[b])
            heapq.heappush(heap, (w, lo[a], a, version[a], version[b]))

    for a in range(m - 1):
        push(a)
    groups = m
    while groups > k and heap:
        w, _, a, va, vb = heapq.heappop(heap)
        b = nxt[a]
        if not alive[a] or b < 0 or version[a] != va or version[b] != vb:
            continue  # stale: one side changed since this entry was pushed
        lo[a], hi[a] = min(lo[a], lo[b]), max(hi[a], hi[b])
        members[a].extend(members[b])
        alive[b] = False
        nxt[a] = nxt[b]
        if nxt[b] >= 0:
            prv[nxt[b]] = a
        version[a] += 1
        groups -= 1
        push(a)
        if prv[a] >= 0:
            push(prv[a])
    return [sorted(members[i]) for i in range(m) if alive[i]]


def _blocks_needed(sizes: Sequence[int], w: int) -> int:
    blocks, cur = 0, None
    for s in sizes:
        if cur is not None and cur + s - 1 <= w:
            cur += s
        else:
            blocks += 1
            cur = s
    return blocks


def optimal_contiguous(sizes: Sequence[int], k: int) -> list[list[int]]:
    """Exact optimum for contiguous groups of the given sizes laid out in
    order: min(k, m) consecutive blocks minimising the largest span."""
    _check_k(k)
    m = len(sizes)
    if m == 0:
        return []
    if m <= k:
        return [[i] for i in range(m)]
    lo_w, hi_w = max(sizes) - 1, sum(sizes) - 1
    while lo_w < hi_w:
        mid = (lo_w + hi_w) // 2
        if _blocks_needed(sizes, mid) <= k:
            hi_w = mid
        else:
            lo_w = mid + 1
    w = lo_w
    # Pack left to right but leave at least one group for each block still to
    # come, so exactly k blocks are made (splitting never widens a block).
    blocks: list[list[int]] = []
    i = 0
    for b in range(k):
        left_after = k - b - 1
        block = [i]
        span = sizes[i] - 1
        i += 1
        while i < m and m - (i + 1) >= left_after and span + sizes[i] <= w:
            span += sizes[i]
            block.append(i)
            i += 1
        blocks.append(block)
    assert i == m
    return blocks


def refine(spans: Sequence[Span], k: int) -> list[list[int]]:
    """Refined partition as lists of input-group indices: the exact optimum
    when the groups are contiguous ranges, the agglomerative heap otherwise."""
    _check_k(k)
    order = sorted(range(len(spans)), key=lambda i: spans[i])
    contiguous = all(spans[order[j]][0] == spans[order[j - 1]][1] + 1 for j in range(1, len(order)))
    if not contiguous:
        return agglomerative(spans, k)
    sizes = [spans[i][1] - spans[i][0] + 1 for i in order]
    return [[order[j] for j in block] for block in optimal_contiguous(sizes, k)]


def merged_width(spans: Sequence[Span], partition: Sequence[Sequence[int]]) -> int:
    return max((max(spans[i][1] for i in g) - min(spans[i][0] for i in g) for g in partition), default=0)


def paper_agglomerative(groups: Sequence[Sequence[int]], k: int) -> list[list[int]]:
    """RASE's refinement as printed: at every step evaluate every pair of
    groups and merge the pair whose merged width is least. O(m^2) pairs per
    step, O(m^3) in all (pairs evaluated with numpy). A baseline only."""
    import numpy as np

    _check_k(k)
    gs = [list(g) for g in groups]
    lo = np.array([min(g) for g in gs], dtype=np.int64)
    hi = np.array([max(g) for g in gs], dtype=np.int64)
    while len(gs) > k:
        w = np.maximum(hi[:, None], hi[None, :]) - np.minimum(lo[:, None], lo[None, :])
        np.fill_diagonal(w, np.iinfo(np.int64).max)
        a, b = np.unravel_index(int(np.argmin(w)), w.shape)
        a, b = min(a, b), max(a, b)
        gs[a] = gs[a] + gs[b]
        lo[a], hi[a] = min(lo[a], lo[b]), max(hi[a], hi[b])
        del gs[b]
        lo, hi = np.delete(lo, b), np.delete(hi, b)
    return gs
