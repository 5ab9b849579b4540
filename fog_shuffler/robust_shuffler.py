"""RS: the robust shuffler (RASE Alg. 2 with the d_sigma Mallows mechanism).

Pure: device ids and values in, an emission order and public metadata out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fog_shuffler.group_refinement import Span, delta_k, refine
from fog_shuffler.mallows import mallows_order, uniform_order
from fog_shuffler.relationship import RelationshipGraph


DEFAULT_GROUP_SIZE = 9


@dataclass(frozen=True)
class ShuffleParams:
    """alpha: shuffle privacy. The Mallows branch is used when
    delta_min_factor * alpha <= Delta_K <= delta_max_factor * alpha (theta in
    [1/delta_max_factor, 1/delta_min_factor], [0.1, 1] by default). Groups:
    k fixed, or k = ceil(n / group_size) (group_size 9 when neither is set:
    one REFIT house)."""
    alpha: float = 30.0
    delta_min_factor: float = 1.0
    delta_max_factor: float = 10.0
    k: int | None = None
    group_size: int | None = None

    def __post_init__(self) -> None:
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
    groups: list[Span]           # refined group layout of sigma_0, as position ranges


def layout(components: Sequence[Span], partition: Sequence[Sequence[int]]) -> list[Span]:
    return sorted((min(components[i][0] for i in g), max(components[i][1] for i in g)) for g in partition)


def robust_shuffle(devices: Sequence[str], graph: RelationshipGraph, params: ShuffleParams,
                   rng: np.random.Generator) -> ShuffleResult:
    """Shuffle the reports of `devices` (one each, in arrival order)."""
    n = len(devices)
    if len(set(devices)) != n:
        raise ValueError("one report per device per window")
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
    index = {d: i for i, d in enumerate(devices)}
    sigma0_items = np.fromiter((index[d] for d in sigma0), dtype=np.int64, count=n)
    return ShuffleResult(order=sigma0_items[positions], mechanism=mechanism, theta=theta,
                         delta_k=delta, omega=omega, k=len(groups), groups=groups)
