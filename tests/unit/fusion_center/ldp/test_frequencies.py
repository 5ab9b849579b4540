"""Debiased kRR / OUE frequencies: unbiased, intervals cover the TRUE
frequencies over seeded trials of the exact report distributions."""

import math

import numpy as np
import pytest

from fusion_center.ldp.frequencies import krr_counts, krr_frequencies, oue_counts, oue_frequencies

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


@pytest.mark.parametrize("k,levels", [(4, {1.0: 400}), (16, {0.5: 300, 3.0: 300})])
def test_band_frequencies_over_eps_levels_are_unbiased_and_cover(k, levels):
    """Reports from the real device randomizer (seeded bytes) at each level,
    kRR or OUE as it picks; 400 trials: every category's mean error within
    3 standard errors of 0, coverage over all categories in [0.93, 0.97]."""
    from rase_device.categorical import BandRandomizer
    from rase_device.entropy import RandomBits
    from fusion_center.ldp.frequencies import band_frequencies
    from tests.seeded_bytes import XorShiftBytes

    rng = np.random.default_rng(k)
    edges = [float(j) for j in range(1, k)]
    readings = {eps: rng.integers(0, k, n) + 0.5 for eps, n in levels.items()}
    n = sum(levels.values())
    truth = np.bincount(np.concatenate(list(readings.values())).astype(int), minlength=k) / n
    r = BandRandomizer(edges, RandomBits(read=XorShiftBytes(k)))
    errs, hits = [], 0
    trials = 400
    for _ in range(trials):
        reps = {eps: np.array([r.randomize(float(x), eps)[0] for x in xs]) for eps, xs in readings.items()}
        est = band_frequencies(reps, k)
        errs.append([e.value for e in est] - truth)
        hits += sum(e.lo <= f <= e.hi for e, f in zip(est, truth))
    errs = np.array(errs)
    assert np.all(np.abs(errs.mean(axis=0)) < 3 * errs.std(axis=0) / math.sqrt(trials) + 1e-12)
    assert 0.93 <= hits / (trials * k) <= 0.97, hits / (trials * k)
