"""Debiased kRR / OUE frequencies: unbiased, intervals cover the TRUE
frequencies over seeded trials of the exact report distributions."""

import numpy as np
import pytest

from fusion_center.frequencies import krr_counts, krr_frequencies, oue_counts, oue_frequencies

TRIALS = 3000
TRUE = np.array([0.5, 0.25, 0.15, 0.07, 0.03])


def _truth(n):
    x = np.repeat(np.arange(TRUE.size), np.round(TRUE * n).astype(int))
    assert x.size == n
    return x


def _krr_counts(rng, x, k, p):
    keep = rng.random(x.size) < p
    other = rng.integers(0, k - 1, x.size)
    other = np.where(other < x, other, other + 1)
    return np.bincount(np.where(keep, x, other), minlength=k)


def _oue_counts(rng, x, k, q):
    bits = rng.random((x.size, k)) < q
    bits[np.arange(x.size), x] = rng.random(x.size) < 0.5
    return bits.sum(axis=0)


@pytest.mark.parametrize("oracle,eps,n", [("krr", 1.0, 2000), ("krr", 0.5, 5000), ("oue", 1.0, 2000),
                                          ("oue", 0.5, 5000)])
def test_unbiased_and_covering(oracle, eps, n):
    """Per category: mean estimate within 4 standard errors of the truth over
    3,000 trials; 95% interval coverage in [0.93, 0.97] (the whole test fails on
    any category)."""
    k = TRUE.size
    e = np.exp(eps)
    rng = np.random.default_rng(7 + n + (oracle == "oue"))
    x = _truth(n)
    ests = []
    for _ in range(TRIALS):
        if oracle == "krr":
            p = e / (e + k - 1)
            ests.append(krr_frequencies(_krr_counts(rng, x, k, p), n, p))
        else:
            q = 1 / (e + 1)
            ests.append(oue_frequencies(_oue_counts(rng, x, k, q), n, q))
    vals = np.array([[c.value for c in row] for row in ests])
    sd = vals.std(axis=0)
    assert np.all(np.abs(vals.mean(axis=0) - TRUE) < 4 * sd / np.sqrt(TRIALS)), vals.mean(axis=0)
    cover = np.array([[c.lo <= t <= c.hi for c, t in zip(row, TRUE)] for row in ests]).mean(axis=0)
    assert np.all((cover >= 0.93) & (cover <= 0.97)), cover


def test_counting_helpers():
    assert krr_counts([0, 2, 2, 1], 3).tolist() == [1, 1, 2]
    assert oue_counts([0b101, 0b001, 0b110], 3).tolist() == [2, 1, 2]
    with pytest.raises(ValueError):
        krr_counts([3], 3)
    with pytest.raises(ValueError):
        oue_counts([0b1000], 3)
    with pytest.raises(ValueError):
        krr_frequencies([5, 5], 10, 0.4)     # keep p must exceed 1/k
    with pytest.raises(ValueError):
        oue_frequencies([1, 1], 2, 0.5)
