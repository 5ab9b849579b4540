"""Exactness of the Mallows sampler and the uniform fallback."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from fog_shuffler.shuffle.mallows import (expected_kendall_distance, insertion_vector, kendall_distance,
                                  mallows_order, uniform_order)
from fog_shuffler.shuffle.randomness import window_rng
from tests.stats import P_MIN


def inversions(p) -> int:
    return sum(1 for i in range(len(p)) for j in range(i + 1, len(p)) if p[i] > p[j])


@pytest.mark.parametrize("n,theta", [(3, 0.3), (4, 0.1), (4, 1.0), (5, 0.5), (5, 2.0)])
def test_small_n_matches_exact_mallows_distribution(n, theta):
    perms = list(itertools.permutations(range(n)))
    weights = np.array([math.exp(-theta * inversions(p)) for p in perms])
    probs = weights / weights.sum()
    rng = window_rng(100 + n)
    draws = 400 * len(perms)
    index = {p: i for i, p in enumerate(perms)}
    counts = np.zeros(len(perms))
    for _ in range(draws):
        counts[index[tuple(mallows_order(n, theta, rng).tolist())]] += 1
    if theta <= 1.0:
        assert counts.min() > 0  # every permutation, the identity and the reversal included
    expected = probs * draws
    sparse = expected < 5  # pooled into one bin so the chi-square is valid
    obs = np.append(counts[~sparse], counts[sparse].sum())
    exp = np.append(expected[~sparse], expected[sparse].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    p = stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue
    assert p > P_MIN, f"chi-square p={p:.2e}"


@pytest.mark.parametrize("theta", [0.1, 0.5, 1.0])
def test_mean_kendall_distance_matches_closed_form_at_n_1000(theta):
    rng = window_rng(7)
    ds = np.array([kendall_distance(mallows_order(1000, theta, rng)) for _ in range(400)])
    expected = expected_kendall_distance(1000, theta)
    # Var of d_K is the sum of the truncated-geometric variances.
    q = math.exp(-theta)
    var = sum(q / (1 - q) ** 2 - k * k * q ** k / (1 - q ** k) ** 2 for k in range(1, 1001))
    se = math.sqrt(var / len(ds))
    assert abs(ds.mean() - expected) < 4 * se, (ds.mean(), expected, se)


def test_insertion_vector_is_truncated_geometric():
    rng = window_rng(3)
    v = np.stack([insertion_vector(6, 0.4, rng) for _ in range(20000)])
    assert (v <= np.arange(6)).all() and (v >= 0).all()
    # V_3 takes values 0..3 with weights exp(-0.4 j).
    w = np.exp(-0.4 * np.arange(4))
    counts = np.bincount(v[:, 3], minlength=4)
    assert stats.chisquare(counts, w / w.sum() * len(v)).pvalue > P_MIN


def test_kendall_distance_against_brute_force():
    rng = window_rng(1)
    for n in (0, 1, 2, 7, 33, 100):
        p = rng.permutation(n)
        assert kendall_distance(p) == inversions(p.tolist())


def test_uniform_order_is_uniform_over_all_24_permutations():
    rng = window_rng(9)
    perms = list(itertools.permutations(range(4)))
    index = {p: i for i, p in enumerate(perms)}
    counts = np.zeros(24)
    for _ in range(24_000):
        counts[index[tuple(uniform_order(4, rng).tolist())]] += 1
    assert counts[index[(0, 1, 2, 3)]] > 0  # unlike Sattolo's, the identity occurs
    fixed_points = sum(c for p, c in zip(perms, counts) if any(p[i] == i for i in range(4)))
    assert fixed_points > 0
    assert stats.chisquare(counts).pvalue > P_MIN


@pytest.mark.parametrize("theta", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_theta_refused(theta):
    with pytest.raises(ValueError, match="theta"):
        mallows_order(5, theta, window_rng(0))


def test_fresh_generator_per_window_differs_without_seed():
    a = window_rng().permutation(50)
    b = window_rng().permutation(50)
    assert not np.array_equal(a, b)
