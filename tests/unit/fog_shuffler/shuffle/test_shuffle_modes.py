"""The fog's other shuffle modes: plain d_sigma (Meehan Alg. 1) and BUDS
iterative shuffling, against their exact distributions."""

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from fog_shuffler.config import ShufflerConfig
from fog_shuffler.shuffle.mallows import kendall_distance
from fog_shuffler.shuffle.randomness import window_rng
from fog_shuffler.shuffle.relationship import RelationshipGraph
from fog_shuffler.shuffle.robust_shuffler import (ShuffleParams, buds_batches, buds_iterative_shuffle, dsigma_shuffle, robust_shuffle, shuffle_window, sigma0_width,
                                          smallest_batch)
from tests.stats import P_MIN


def test_width_counts_cliques_and_edges():
    g = RelationshipGraph(groups=[["a", "b", "c"]], edges=[("c", "x"), ("x", "y")])
    order, _ = g.reference_order(["a", "b", "c", "x", "y", "z"])
    pos = {d: i for i, d in enumerate(order)}
    expected = max(max(pos[d] for d in "abc") - min(pos[d] for d in "abc"), abs(pos["c"] - pos["x"]),
                   abs(pos["x"] - pos["y"]))
    assert sigma0_width(g, order) == expected


def test_dsigma_matches_mallows_around_sigma0_exactly():
    """n = 4: the emitted device sequences follow exp(-theta d_K(., sigma_0)) / Z
    over all 24 orders (chi-square, 48,000 windows, p-value > P_MIN)."""
    devices = ["d", "b", "a", "c"]                    # arrival order: irrelevant
    g = RelationshipGraph(groups=[["a", "b"], ["b", "c", "d"]])
    sigma0, _ = g.reference_order(devices)
    alpha = 3.0
    omega = sigma0_width(g, sigma0)
    theta = alpha / (omega * (omega + 1) / 2)
    rng = window_rng(99)
    trials = 48_000
    seen = Counter()
    for _ in range(trials):
        res = dsigma_shuffle(devices, g, alpha, rng)
        seen[tuple(devices[i] for i in res.order)] += 1
    assert res.mechanism == "mallows" and res.theta == pytest.approx(theta)
    index = {d: i for i, d in enumerate(sigma0)}
    perms = list(itertools.permutations(sigma0))
    w = np.array([math.exp(-theta * kendall_distance(np.array([index[d] for d in p]))) for p in perms])
    exp = trials * w / w.sum()
    obs = np.array([seen.get(p, 0) for p in perms])
    assert obs.sum() == trials
    assert stats.chisquare(obs, exp).pvalue > P_MIN


def test_dsigma_has_no_refinement_and_no_fallback():
    houses = [[f"h{h}a{a}" for a in range(1, 10)] for h in range(1, 6)]
    g = RelationshipGraph(groups=houses)
    devs = [d for h in houses for d in h]
    res = dsigma_shuffle(devs, g, 30.0, window_rng(1))
    # omega = 8 (one house), Delta = 36; RS with one group of everything would
    # refine to omega 44 and fall back to uniform, d_sigma keeps Mallows.
    assert (res.omega, res.delta_k, res.mechanism) == (8, 36, "mallows")
    rs = robust_shuffle(devs, g, ShuffleParams(alpha=30.0, k=1), window_rng(1))
    assert (rs.omega, rs.mechanism) == (44, "uniform")
    # alpha far below Delta: RS falls back, d_sigma does not.
    assert dsigma_shuffle(devs, g, 1.0, window_rng(2)).mechanism == "mallows"
    assert robust_shuffle(devs, g, ShuffleParams(alpha=1.0), window_rng(2)).mechanism == "uniform"
    # through the configured mode
    via_mode = robust_shuffle(devs, g, ShuffleParams(alpha=30.0, mode="dsigma"), window_rng(5))
    assert (via_mode.omega, via_mode.mechanism) == (8, "mallows")
    assert sorted(via_mode.order.tolist()) == list(range(len(devs)))


def test_dsigma_with_nothing_related_is_uniform():
    res = dsigma_shuffle(["a", "b", "c"], RelationshipGraph(), 30.0, window_rng(3))
    assert res.mechanism == "uniform" and res.theta is None and res.delta_k == 0


@pytest.mark.parametrize("n,b,sizes", [(10, 4, [4, 3, 3]), (8, 4, [4, 4]), (3, 32, [3]), (0, 5, [])])
def test_buds_batches_near_equal(n, b, sizes):
    spans = buds_batches(n, b)
    assert [hi - lo + 1 for lo, hi in spans] == sizes
    assert all(spans[i][1] + 1 == spans[i + 1][0] for i in range(len(spans) - 1))


def test_buds_shuffle_is_uniform_within_each_batch_and_never_across():
    """7 devices, batches of 4 and 3 over sigma_0: every report stays in its
    batch, and each batch's order is uniform over its 4! and 3! orders
    (chi-square, 24,000 windows, p-value > P_MIN)."""
    devs = [f"d{i}" for i in range(7)]
    g = RelationshipGraph(groups=[devs[:4], devs[4:]])
    sigma0, _ = g.reference_order(devs)
    rng = window_rng(11)
    first, second = Counter(), Counter()
    trials = 24_000
    for _ in range(trials):
        res = shuffle_window(devs, g, ShuffleParams(mode="buds", buds_batch_size=4), rng)
        seq = [devs[i] for i in res.order]
        assert set(seq[:4]) == set(sigma0[:4]) and set(seq[4:]) == set(sigma0[4:])
        first[tuple(seq[:4])] += 1
        second[tuple(seq[4:])] += 1
    assert res.mechanism == "buds" and res.groups == [(0, 3), (4, 6)] and smallest_batch(res) == 3
    for c, k in ((first, 24), (second, 6)):
        assert len(c) == k
        assert stats.chisquare(list(c.values())).pvalue > P_MIN


def test_buds_iterative_shuffle_keeps_tied_columns_and_unlinks_groups():
    """Columns 0 and 1 are tied (one attribute group), column 2 is another:
    pairs (c0, c1) survive intact within their batch, and which c2 lands beside
    a given pair is uniform over its batch (chi-square, p-value > P_MIN)."""
    rows = [(i, 10 * i, 100 * i) for i in range(6)]
    rng = window_rng(21)
    beside = Counter()
    for _ in range(12_000):
        out = buds_iterative_shuffle(rows, [[0, 1], [2]], 3, rng)
        assert all(r[1] == 10 * r[0] for r in out)
        assert {r[0] for r in out[:3]} == {0, 1, 2} and {r[2] for r in out[3:]} == {300, 400, 500}
        beside[next(r[2] for r in out if r[0] == 0)] += 1
    assert set(beside) == {0, 100, 200}
    assert stats.chisquare(list(beside.values())).pvalue > P_MIN
    with pytest.raises(ValueError):
        buds_iterative_shuffle(rows, [[0], [2]], 3, rng)


def test_fog_config_modes():
    assert ShufflerConfig().params().mode == "rs"
    assert ShufflerConfig(shuffle_mode="dsigma").params().mode == "dsigma"
    assert ShufflerConfig(shuffle_mode="buds", buds_batch_size=8).params().buds_batch_size == 8
    with pytest.raises(ValueError):
        ShuffleParams(mode="other")
    with pytest.raises(ValueError):
        robust_shuffle(["a"], RelationshipGraph(), ShuffleParams(mode="buds"), window_rng(1))


def test_the_fog_forwards_buds_windows_with_the_smallest_batch_guarantee():
    """A fog in BUDS mode: each level's batch says mechanism "buds", its groups
    are the batches over sigma_0, it validates as a window, and its stated
    amplification is that of a uniform shuffle of the smallest batch."""
    from rase_common.amplification import window_guarantee
    from fog_shuffler.config import FogConfig
    from fog_shuffler.shuffle.randomness import window_rng
    from fog_shuffler.ldp.release import release_window
    from rase_common.protocol.window import WindowCounts, WindowMessage
    from fog_shuffler.windows import ClosedWindow

    devices = [f"d{i:03d}" for i in range(150)]
    cfg = FogConfig.load(None, regions={"r1": {"groups": [devices[i:i + 10] for i in range(0, 150, 10)]}},
                         shuffler={"shuffle_mode": "buds", "buds_batch_size": 64})
    cw = ClosedWindow("r1", 5, devices, [float(i) for i in range(150)], [1.0] * 150, 0, 0, False)
    msg = release_window(cw, cfg.regions["r1"].graph(), cfg.shuffler.params(), WindowCounts(),
                         privacy_delta=cfg.privacy_delta, rng_factory=lambda: window_rng(seed=7))
    again = WindowMessage.model_validate_json(msg.model_dump_json())
    (b,) = again.batches
    assert b.mechanism == "buds" and b.groups == [(0, 49), (50, 99), (100, 149)]
    assert sorted(b.values) == [float(i) for i in range(150)]
    assert b.guarantee == window_guarantee("buds", eps0=1.0, n=50, delta=cfg.privacy_delta)


def test_buds_batches_are_never_smaller_than_k_min():
    """With buds_batch_size >= 2 k_min (the fog's rule), every batch of a
    window of at least k_min reports holds at least k_min; smaller batch sizes
    are refused."""
    from fog_shuffler.config import FogConfig

    for k_min in range(1, 25):
        for n in range(k_min, 1500):
            assert min(hi - lo + 1 for lo, hi in buds_batches(n, 2 * k_min)) >= k_min
    regions = {"r1": {"groups": [["a", "b"]]}}
    FogConfig.load(None, regions=regions, k_min=10, shuffler={"shuffle_mode": "buds", "buds_batch_size": 20})
    with pytest.raises(Exception, match="buds_batch_size"):
        FogConfig.load(None, regions=regions, k_min=10, shuffler={"shuffle_mode": "buds", "buds_batch_size": 19})
