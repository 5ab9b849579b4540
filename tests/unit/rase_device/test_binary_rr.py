"""Randomized response for on/off readings against its exact distribution."""

import math

import pytest
from scipy import stats

from rase_device.binary_rr import BinaryRR, flip_fraction, local_eps, on_off
from rase_device.entropy import RandomBits
from tests.seeded_bytes import XorShiftBytes
from tests.stats import P_MIN


@pytest.mark.parametrize("num,den", [(1, 2), (3, 7), (129110, 1 << 20), (1, 1)])
@pytest.mark.parametrize("x", [0, 1])
def test_output_matches_exact_distribution(num, den, x):
    """P(report = x) = 1 - p/2 exactly (chi-square on 2 cells, 40,000 draws, p-value > P_MIN)."""
    rr = BinaryRR(num, den, RandomBits(read=XorShiftBytes(1000 * num + 7 * x + den)))
    n = 40_000
    same = sum(rr.randomize(x) == x for _ in range(n))
    p_same = 1 - num / den / 2
    pval = stats.chisquare([same, n - same], [n * p_same, n * (1 - p_same)]).pvalue
    assert pval > P_MIN, (same, n * p_same)


@pytest.mark.parametrize("eps0", [0.1, 0.5, 1.0, 2.7, 5.0])
def test_flip_fraction_never_weaker_than_eps0(eps0):
    from rase_device.randomizer import EPS_UNITS, eps_units_floor

    num = flip_fraction(eps0)
    assert local_eps(num, 1 << 20) <= eps0
    # The smallest such num for eps0 rounded down to 1/EPS_UNITS (the exact integer bound's input).
    assert local_eps(num - 1, 1 << 20) > eps_units_floor(eps0) / EPS_UNITS
    assert num / (1 << 20) == pytest.approx(2 / (math.exp(eps_units_floor(eps0) / EPS_UNITS) + 1), abs=2e-6)


def test_eps_zero_is_a_fair_coin_and_bad_input_rejected():
    assert flip_fraction(0.0, 16) == 16
    assert BinaryRR(16, 16, RandomBits(read=XorShiftBytes(3))).eps0 == 0.0
    for args in [(0, 10), (11, 10), (1.5, 10)]:
        with pytest.raises(ValueError):
            BinaryRR(*args, RandomBits(read=XorShiftBytes(3)))
    with pytest.raises(ValueError):
        flip_fraction(-1.0)


def test_on_off_threshold():
    assert [on_off(w, 10.0) for w in (0.0, 10.0, 10.5)] == [0, 0, 1]
