"""RS: sigma_0, fallback thresholds, emitted order and metadata."""

import numpy as np
import pytest

from fog_shuffler.shuffle.randomness import window_rng
from fog_shuffler.shuffle.relationship import RelationshipGraph
from fog_shuffler.shuffle.robust_shuffler import ShuffleParams, robust_shuffle


def test_reference_order_is_bfs_from_highest_degree_ties_by_id():
    g = RelationshipGraph(groups=[["b", "c"]], edges=[("a", "b"), ("a", "c"), ("a", "d"), ("x", "y")])
    order, comps = g.reference_order(["y", "x", "d", "c", "b", "a", "z"])
    # a has degree 3; then its neighbours b, c, d in id order; then x-y; then lone z.
    assert order == ["a", "b", "c", "d", "x", "y", "z"]
    assert comps == [(0, 3), (4, 5), (6, 6)]


def test_reference_order_depends_only_on_who_reported():
    g = RelationshipGraph(groups=[["a", "b", "c"], ["d", "e"]])
    assert g.reference_order(["c", "e", "a"]) == g.reference_order(["a", "c", "e"])


def chain(width: int) -> tuple[list[str], RelationshipGraph]:
    """One clique of width + 1 devices plus singletons: omega = width."""
    devs = [f"d{i:03d}" for i in range(width + 1)] + [f"s{i:03d}" for i in range(40)]
    return devs, RelationshipGraph(groups=[devs[:width + 1]])


@pytest.mark.parametrize("omega,delta,mechanism", [
    (6, 21, "uniform"), (7, 28, "uniform"), (8, 36, "mallows"),
    (23, 276, "mallows"), (24, 300, "mallows"), (25, 325, "uniform"),
])
def test_fallback_taken_exactly_outside_alpha_to_ten_alpha(omega, delta, mechanism):
    devs, g = chain(omega)
    res = robust_shuffle(devs, g, ShuffleParams(alpha=30.0, k=len(devs)), window_rng(1))
    assert (res.omega, res.delta_k, res.mechanism) == (omega, delta, mechanism)
    assert (res.theta is None) == (mechanism == "uniform")
    if mechanism == "mallows":
        assert res.theta == pytest.approx(30.0 / delta)


def test_boundaries_exact_at_alpha_and_ten_alpha():
    # Delta_K = 36 exactly: alpha = 36 (theta 1) and alpha = 3.6 (theta 10) are both inside.
    devs, g = chain(8)
    assert robust_shuffle(devs, g, ShuffleParams(alpha=36.0, k=100), window_rng(1)).mechanism == "mallows"
    assert robust_shuffle(devs, g, ShuffleParams(alpha=3.6, k=100), window_rng(1)).mechanism == "mallows"
    assert robust_shuffle(devs, g, ShuffleParams(alpha=36.01, k=100), window_rng(1)).mechanism == "uniform"


def test_order_is_a_permutation_and_groups_are_position_ranges():
    houses = [[f"h{h}a{a}" for a in range(1, 10)] for h in range(4)]
    devs = [d for hs in houses for d in hs][::-1]
    res = robust_shuffle(devs, RelationshipGraph(groups=houses), ShuffleParams(), window_rng(2))
    assert sorted(res.order.tolist()) == list(range(36))
    assert res.groups == [(0, 8), (9, 17), (18, 26), (27, 35)] and res.k == 4


def test_mallows_branch_keeps_order_near_sigma0_uniform_does_not():
    houses = [[f"h{h:02d}a{a}" for a in range(1, 10)] for h in range(30)]
    devs = [d for hs in houses for d in hs]
    g = RelationshipGraph(groups=houses)
    sigma0, _ = g.reference_order(devs)
    pos = {d: i for i, d in enumerate(sigma0)}
    m = robust_shuffle(devs, g, ShuffleParams(), window_rng(3))
    u = robust_shuffle(devs, g, ShuffleParams(alpha=1.0), window_rng(3))
    disp = lambda r: np.mean([abs(pos[devs[j]] - i) for i, j in enumerate(r.order)])  # noqa: E731
    assert m.mechanism == "mallows" and u.mechanism == "uniform"
    assert disp(m) < 3 < 30 < disp(u)


def test_one_report_per_device():
    with pytest.raises(ValueError, match="one report per device"):
        robust_shuffle(["a", "a"], RelationshipGraph(), ShuffleParams(), window_rng(0))


@pytest.mark.parametrize("kw,match", [({"alpha": 0}, "alpha"), ({"k": 3, "group_size": 3}, "exactly one"),
                                      ({"delta_min_factor": 5, "delta_max_factor": 2}, "delta_min_factor")])
def test_bad_params(kw, match):
    with pytest.raises(ValueError, match=match):
        ShuffleParams(**kw)


def test_disjoint_clique_fast_path_equals_the_general_bfs():
    import random

    rng = random.Random(1)
    for _ in range(300):
        pool = [f"d{i}" for i in range(40)]
        rng.shuffle(pool)
        groups, i = [], 0
        while i < len(pool):
            size = rng.randint(1, 6)
            groups.append(pool[i:i + size])
            i += size
        g = RelationshipGraph(groups=groups)
        reporters = rng.sample([f"d{i}" for i in range(45)], rng.randint(1, 45))  # some unknown to the graph
        fast = g.reference_order(reporters)
        g.adj = {"__no_such_device__": set()}   # any edge entry forces the general BFS
        assert g.reference_order(reporters) == fast
