"""kRR and OUE against their exact distributions; the oracle chooser."""

import math
from collections import Counter

import pytest
from scipy import stats

from rase_device.categorical import (KaryRR, OptimizedUnaryEncoding, choose_oracle, krr_eps, krr_keep_fraction,
                                    oue_eps, oue_flip_fraction)
from rase_device.entropy import RandomBits
from fusion_center.ldp.frequencies import frequency_variance
from tests.seeded_bytes import XorShiftBytes
from tests.stats import P_MIN


@pytest.mark.parametrize("k,eps,x", [(2, 1.0, 1), (5, 1.0, 0), (5, 0.5, 3), (7, 2.0, 6)])
def test_krr_matches_exact_pmf(k, eps, x):
    """Chi-square over the k outputs, 30,000 draws, p-value > P_MIN."""
    num, den = krr_keep_fraction(eps, k), 1 << 20
    rr = KaryRR(k, num, den, RandomBits(read=XorShiftBytes(31 * k + x)))
    n = 30_000
    c = Counter(rr.randomize(x) for _ in range(n))
    p = num / den
    exp = [n * (p if j == x else (1 - p) / (k - 1)) for j in range(k)]
    assert stats.chisquare([c.get(j, 0) for j in range(k)], exp).pvalue > P_MIN


@pytest.mark.parametrize("k,eps,x", [(4, 1.0, 2), (10, 0.5, 0)])
def test_oue_matches_exact_joint_pmf(k, eps, x):
    """Bits are independent: chi-square over the joint of (bit x, bit j, bit j2)
    (8 cells) and over each bit's marginal, 20,000 draws, p-value > P_MIN."""
    num, den = oue_flip_fraction(eps), 1 << 20
    q = num / den
    oue = OptimizedUnaryEncoding(k, num, den, RandomBits(read=XorShiftBytes(77 * k)))
    n = 20_000
    masks = [oue.randomize(x) for _ in range(n)]
    for j in range(k):
        ones = sum((m >> j) & 1 for m in masks)
        pj = 0.5 if j == x else q
        assert stats.chisquare([ones, n - ones], [n * pj, n * (1 - pj)]).pvalue > P_MIN, j
    j, j2 = (x + 1) % k, (x + 2) % k
    cells = Counter(((m >> x) & 1, (m >> j) & 1, (m >> j2) & 1) for m in masks)
    exp, obs = [], []
    for a in (0, 1):
        for b in (0, 1):
            for c in (0, 1):
                exp.append(n * 0.5 * (q if b else 1 - q) * (q if c else 1 - q))
                obs.append(cells.get((a, b, c), 0))
    assert stats.chisquare(obs, exp).pvalue > P_MIN


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("k", [2, 5, 20])
def test_rounding_never_weakens_eps(eps, k):
    assert krr_eps(krr_keep_fraction(eps, k), 1 << 20, k) <= eps + 1e-12
    assert oue_eps(oue_flip_fraction(eps), 1 << 20) <= eps + 1e-12
    assert krr_eps(krr_keep_fraction(eps, k), 1 << 20, k) > eps - 1e-4
    assert oue_eps(oue_flip_fraction(eps), 1 << 20) > eps - 1e-4


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_chooser_picks_the_lower_variance(eps):
    """The rule k < 3 e^eps + 2 agrees with the variance formulas at every k."""
    for k in range(2, 80):
        better = "krr" if frequency_variance("krr", k, eps) < frequency_variance("oue", k, eps) else "oue"
        boundary = abs(k - (3 * math.exp(eps) + 2)) < 1e-9
        assert choose_oracle(k, eps) == better or boundary


def test_bad_category_and_parameters():
    rr = KaryRR(3, 1, 2, RandomBits(read=XorShiftBytes(1)))
    for bad in (-1, 3, 1.0):
        with pytest.raises(ValueError):
            rr.randomize(bad)
    with pytest.raises(ValueError):
        KaryRR(1, 1, 2)
    with pytest.raises(ValueError):
        OptimizedUnaryEncoding(3, 3, 4)
