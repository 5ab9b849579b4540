"""RS: the robust shuffler (RASE Alg. 2 with the d_sigma Mallows mechanism),
and the fog's other shuffle modes (SPEC 2.4):

- "rs" (default): RS as in SPEC 2.2.
- "dsigma": the d_sigma mechanism alone (Meehan et al., Alg. 1 of appendix
  5.6): BFS sigma_0, Delta from the width of the public groups in sigma_0,
  theta = alpha / Delta, Mallows; no group refinement and no fallback window
  (a uniform order only when there is nothing to protect, Delta = 0).
- "buds": BUDS's iterative shuffling (seed 003, section 3.2, "IS"): the
  window, in the public sigma_0 order, is cut into t near-equal batches of
  about `batch_size` rows, and each batch is shuffled on its own, batch after
  batch. A report hides among its batch only, so the guarantee is each
  report's eps0-LDP amplified by a uniform shuffle of the smallest batch
  (rase_common.amplification), NOT BUDS's ln(t / (n_1 - 1)^S), which is no
  DP bound (it turns negative, as the paper itself notes for CIS).

Pure: device ids and values in, an emission order and public metadata out.
`robust_shuffle` runs "rs" and "dsigma" (mechanism "mallows" or "uniform");
`shuffle_window`, which the fog calls, runs all three.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fog_shuffler.shuffle.group_refinement import Span, delta_k, refine
from fog_shuffler.shuffle.mallows import mallows_order, uniform_order
from fog_shuffler.shuffle.relationship import RelationshipGraph


DEFAULT_GROUP_SIZE = 9
# The RASE / d_sigma papers' setting (ShuffleParams() defaults): alpha 30, Mallows for
# theta in [0.1, 1]. On REFIT houses (groups of 9, Delta_K = 36, theta = 0.83) the
# order barely leaves sigma_0: `rase eval attack` names the sender ~21% of the time.
PAPER_ALPHA = 30.0
PAPER_DELTA_MAX_FACTOR = 10.0
# The fog's default (fog_shuffler.config), chosen from the alpha x group-size sweep
# in docs/evaluation.md: theta = 2/36 = 0.056 on a house; sender recall 1.2x chance
# while ~29% of a house's reports stay in its sigma_0 range (20% for a uniform shuffle).
PROTECTIVE_ALPHA = 2.0
PROTECTIVE_DELTA_MAX_FACTOR = 20.0
SHUFFLE_MODES = ("rs", "dsigma", "buds", "uniform")   # uniform: every window, the one that amplifies (central eps)
DEFAULT_BUDS_BATCH = 32


@dataclass(frozen=True)
class ShuffleParams:
    """alpha: shuffle privacy. The Mallows branch is used when
    delta_min_factor * alpha <= Delta_K <= delta_max_factor * alpha (theta in
    [1/delta_max_factor, 1/delta_min_factor], [0.1, 1] by default). Groups:
    k fixed, or k = ceil(n / group_size) (group_size 9 when neither is set:
    one REFIT house)."""
    alpha: float = PAPER_ALPHA
    delta_min_factor: float = 1.0
    delta_max_factor: float = PAPER_DELTA_MAX_FACTOR
    k: int | None = None
    group_size: int | None = None
    mode: str = "rs"
    buds_batch_size: int = DEFAULT_BUDS_BATCH

    def __post_init__(self) -> None:
        if self.mode not in SHUFFLE_MODES:
            raise ValueError(f"mode must be one of {SHUFFLE_MODES}, got {self.mode!r}")
        if self.buds_batch_size < 2:
            raise ValueError(f"buds_batch_size must be >= 2, got {self.buds_batch_size}")
        if not (self.alpha > 0 and math.isfinite(self.alpha)):
            raise ValueError(f"alpha must be a finite number > 0, got {self.alpha!r}")
        if not (0 < self.delta_min_factor <= self.delta_max_factor):
            raise ValueError("delta_min_factor must be > 0 and <= delta_max_factor, "
                             f"got {self.delta_min_factor!r}, {self.delta_max_factor!r}")
        if self.k is not None and self.group_size is not None:
            raise ValueError("set exactly one of k and group_size")
        if self.k is not None and self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.group_size is not None and self.group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {self.group_size}")

    def groups_for(self, n: int) -> int:
        if self.k is not None:
            return self.k
        return max(1, math.ceil(n / (self.group_size or DEFAULT_GROUP_SIZE)))

    def uses_mallows(self, delta: int) -> bool:
        return self.delta_min_factor * self.alpha <= delta <= self.delta_max_factor * self.alpha


@dataclass(frozen=True)
class ShuffleResult:
    order: np.ndarray            # emit input item order[i] at position i
    mechanism: str               # "mallows" or "uniform"
    theta: float | None          # None when uniform
    delta_k: int
    omega: int
    k: int
    groups: list[Span]           # refined group layout of sigma_0 (buds: the batches), as position ranges


def layout(components: Sequence[Span], partition: Sequence[Sequence[int]]) -> list[Span]:
    return sorted((min(components[i][0] for i in g), max(components[i][1] for i in g)) for g in partition)


def _check_devices(devices: Sequence[str]) -> None:
    if len(set(devices)) != len(devices):
        raise ValueError("one report per device per window")


def _items_in(devices: Sequence[str], sigma0: Sequence[str]) -> np.ndarray:
    index = {d: i for i, d in enumerate(devices)}
    return np.fromiter((index[d] for d in sigma0), dtype=np.int64, count=len(devices))


def robust_shuffle(devices: Sequence[str], graph: RelationshipGraph, params: ShuffleParams,
                   rng: np.random.Generator) -> ShuffleResult:
    """Shuffle the reports of `devices` (one each, in arrival order) by RS, or
    by the plain d_sigma mechanism when params.mode is "dsigma"."""
    if params.mode == "dsigma":
        return dsigma_shuffle(devices, graph, params.alpha, rng)
    if params.mode != "rs":
        raise ValueError(f"robust_shuffle runs modes 'rs' and 'dsigma'; use shuffle_window for {params.mode!r}")
    n = len(devices)
    _check_devices(devices)
    sigma0, components = graph.reference_order(devices)
    k = params.groups_for(n)
    groups = layout(components, refine(components, k)) if components else []
    omega = max((hi - lo for lo, hi in groups), default=0)
    delta = delta_k(omega)
    if delta > 0 and params.uses_mallows(delta):
        theta = params.alpha / delta
        positions = mallows_order(n, theta, rng)
        mechanism = "mallows"
    else:
        theta = None
        positions = uniform_order(n, rng)
        mechanism = "uniform"
    return ShuffleResult(order=_items_in(devices, sigma0)[positions], mechanism=mechanism, theta=theta,
                         delta_k=delta, omega=omega, k=len(groups), groups=groups)


def sigma0_width(graph: RelationshipGraph, sigma0: Sequence[str]) -> int:
    """omega of the public groups in sigma_0 (d_sigma paper): the largest
    distance in sigma_0 between two devices of one group (a clique) or the two
    ends of an edge."""
    pos = {d: i for i, d in enumerate(sigma0)}
    omega = 0
    for g in graph.groups:
        ps = [pos[d] for d in g if d in pos]
        if len(ps) > 1:
            omega = max(omega, max(ps) - min(ps))
    for a, nbrs in graph.adj.items():
        if a in pos:
            for b in nbrs:
                if b in pos:
                    omega = max(omega, abs(pos[a] - pos[b]))
    return omega


def dsigma_shuffle(devices: Sequence[str], graph: RelationshipGraph, alpha: float,
                   rng: np.random.Generator) -> ShuffleResult:
    """Meehan et al. Alg. 1: sigma_0 = BFS of the public graph, Delta = omega
    (omega + 1) / 2 (Kendall tau), theta = alpha / Delta, sigma_hat ~
    Mallows(sigma_0, theta). No refinement, no fallback; uniform only when
    Delta = 0 (no two reporters related: theta would be infinite)."""
    if not (alpha > 0 and math.isfinite(alpha)):
        raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")
    _check_devices(devices)
    n = len(devices)
    sigma0, components = graph.reference_order(devices)
    omega = sigma0_width(graph, sigma0)
    delta = delta_k(omega)
    if delta > 0:
        positions = mallows_order(n, alpha / delta, rng)
        theta: float | None = alpha / delta
        mechanism = "mallows"
    else:
        theta, positions, mechanism = None, uniform_order(n, rng), "uniform"
    groups = sorted(components)
    return ShuffleResult(order=_items_in(devices, sigma0)[positions], mechanism=mechanism, theta=theta,
                         delta_k=delta, omega=omega, k=len(groups), groups=groups)


def buds_batches(n: int, batch_size: int) -> list[Span]:
    """t = ceil(n / batch_size) contiguous batches whose sizes differ by at most
    one (BUDS: n_1 ~ n_2 ~ ... ~ n_t), as position ranges."""
    if n < 0 or batch_size < 1:
        raise ValueError(f"need n >= 0 and batch_size >= 1, got {n}, {batch_size}")
    if n == 0:
        return []
    t = math.ceil(n / batch_size)
    base, extra = divmod(n, t)
    spans, lo = [], 0
    for b in range(t):
        size = base + (1 if b < extra else 0)
        spans.append((lo, lo + size - 1))
        lo += size
    return spans


def buds_iterative_shuffle(rows: Sequence[Sequence], attribute_groups: Sequence[Sequence[int]], batch_size: int,
                           rng: np.random.Generator) -> list[tuple]:
    """BUDS iterative shuffling (IS) of a table: rows are cut into near-equal
    batches in the given order; within each batch, batch after batch, every
    attribute group (columns tied together, e.g. the attributes a query needs)
    is permuted by its own independent uniform shuffle, so columns of one group
    stay together and different groups are unlinked. BUDS assigns groups to S
    shufflers at random; with independent uniform shuffles that assignment
    does not change the output distribution, so it is not modelled."""
    n = len(rows)
    width = len(rows[0]) if n else 0
    cols = sorted(c for g in attribute_groups for c in g)
    if cols != list(range(width)):
        raise ValueError(f"attribute groups must partition the {width} columns, got {list(attribute_groups)!r}")
    out = [list(r) for r in rows]
    for lo, hi in buds_batches(n, batch_size):
        for g in attribute_groups:
            perm = lo + rng.permutation(hi - lo + 1)
            for i, src in enumerate(perm):
                for c in g:
                    out[lo + i][c] = rows[src][c]
    return [tuple(r) for r in out]


def buds_shuffle(devices: Sequence[str], graph: RelationshipGraph, batch_size: int,
                 rng: np.random.Generator) -> ShuffleResult:
    """The fog's BUDS mode for one-attribute reports: batches over the public
    sigma_0 (never arrival order, which would leak), each shuffled uniformly.
    `groups` holds the batches; the guarantee uses the smallest one."""
    _check_devices(devices)
    n = len(devices)
    sigma0, _ = graph.reference_order(devices)
    spans = buds_batches(n, batch_size)
    positions = np.concatenate([lo + uniform_order(hi - lo + 1, rng) for lo, hi in spans]) if spans \
        else np.zeros(0, dtype=np.int64)
    return ShuffleResult(order=_items_in(devices, sigma0)[positions], mechanism="buds", theta=None,
                         delta_k=0, omega=0, k=len(spans), groups=spans)


def smallest_batch(result: ShuffleResult) -> int:
    """The n that a BUDS window's amplification is computed for."""
    return min((hi - lo + 1 for lo, hi in result.groups), default=0)


def shuffle_window(devices: Sequence[str], graph: RelationshipGraph, params: ShuffleParams,
                   rng: np.random.Generator) -> ShuffleResult:
    """Shuffle one window by params.mode ("rs", "dsigma", "buds" or "uniform")."""
    if params.mode == "buds":
        return buds_shuffle(devices, graph, params.buds_batch_size, rng)
    if params.mode == "uniform":
        _check_devices(devices)
        n = len(devices)
        return ShuffleResult(order=uniform_order(n, rng), mechanism="uniform", theta=None, delta_k=0, omega=0, k=1,
                             groups=[(0, n - 1)] if n else [])
    return robust_shuffle(devices, graph, params, rng)
