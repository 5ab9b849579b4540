"""The discrete Laplace sampler against its exact distribution."""

import math
import random

import pytest
from scipy import stats

from rase_device.dlaplace import MAX_SCALE_TERM, DiscreteLaplace, bernoulli_exp
from rase_device.entropy import RandomBits, bit_length
from tests.seeded_bytes import XorShiftBytes
from tests.stats import P_MIN, chisquare_integers, dlaplace_pmf


def seeded_bits(seed: int) -> RandomBits:
    return RandomBits(read=random.Random(seed).randbytes)


@pytest.mark.parametrize("t,s", [(1, 1), (3, 1), (10, 3), (4000 * 65536, 65536 * 2)])
def test_empirical_pmf_matches_exact_pmf(t, s):
    d = DiscreteLaplace(t, s)
    bits = seeded_bits(1000 + t + s)
    n = 100_000
    samples = [d.draw(bits) for _ in range(n)]
    scale = d.t / d.s
    width = max(3, int(6 * scale))
    p, bins = chisquare_integers(samples, dlaplace_pmf(scale), -width, width)
    assert bins >= 5
    assert p > P_MIN, f"chi-square p={p:.2e} over {bins} bins for scale {scale}"


def test_large_scale_moments():
    """Scale 40,000 grid steps (eps 0.1 on 0..4000 W at 1 W): too wide for a
    binned test at 100k draws, so check mean and variance instead."""
    d = DiscreteLaplace(4000 * 65536, 6553)
    bits = seeded_bits(7)
    xs = [d.draw(bits) for _ in range(100_000)]
    scale = d.t / d.s
    q = math.exp(-1 / scale)
    var = 2 * q / (1 - q) ** 2
    mean = sum(xs) / len(xs)
    assert abs(mean) < 5 * math.sqrt(var / len(xs))
    emp_var = sum(x * x for x in xs) / len(xs)
    # Var of x^2 for Laplace ~ 5 var^2 (kurtosis 6): 6 sigma band.
    assert abs(emp_var - var) < 6 * math.sqrt(5 * var * var / len(xs))


def test_bernoulli_is_exact_rational():
    bits = seeded_bits(3)
    for num, den in [(1, 3), (2, 7), (0, 5), (5, 5), (123456, 1000003)]:
        n = 40_000
        k = sum(bits.bernoulli(num, den) for _ in range(n))
        if num == 0:
            assert k == 0            # p = 0 exactly: never true
        elif num == den:
            assert k == n            # p = 1 exactly: always true
        else:
            assert stats.binomtest(k, n, num / den).pvalue > P_MIN


@pytest.mark.parametrize("num,den", [(1, 2), (1, 1), (3, 1), (7, 3)])
def test_bernoulli_exp(num, den):
    bits = seeded_bits(num * 31 + den)
    n = 40_000
    k = sum(bernoulli_exp(num, den, bits) for _ in range(n))
    assert stats.binomtest(k, n, math.exp(-num / den)).pvalue > P_MIN


def test_uniform_below_covers_range_uniformly():
    bits = seeded_bits(11)
    n = 13
    xs = [bits.below(n, bit_length(n - 1)) for _ in range(26_000)]
    counts = [xs.count(i) for i in range(n)]
    assert stats.chisquare(counts).pvalue > P_MIN


def test_reduction_only_rounds_scale_up():
    rng = random.Random(5)
    for _ in range(2000):
        t = rng.randrange(1, 1 << 45)
        s = rng.randrange(1, 1 << 20)
        try:
            d = DiscreteLaplace(t, s)
        except ValueError:
            continue
        assert d.t < MAX_SCALE_TERM and d.s < MAX_SCALE_TERM
        assert d.t * s >= t * d.s  # t'/s' >= t/s


def test_rejects_nonpositive_parameters():
    with pytest.raises(ValueError, match="t, s >= 1"):
        DiscreteLaplace(0, 1)


def test_xorshift_source_is_deterministic():
    a, b = XorShiftBytes(9), XorShiftBytes(9)
    assert a(100) == b(100)
