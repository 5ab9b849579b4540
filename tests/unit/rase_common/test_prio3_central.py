"""Central noise of the secure-aggregation mode (rase_common.mechanisms.prio3,
rase_common.secagg): the exact law of the published total and its intervals,
the aggregators' noise on their shares (the device core's exact sampler), and
the published mean's bias and coverage through the code both aggregators run
(seeded bits: tests only)."""

import math

import numpy as np
import pytest

from rase_device.entropy import RandomBits
from rase_device.prio3 import prio3_count, prio3_sum
from rase_device.randomizer import EPS_UNITS
from rase_common.mechanisms import Setting, mechanism
from rase_common.mechanisms.prio3 import (NoiseSum, central_noise, draw_noise, estimate_total, measurements,
                                          noise_law, simulate_total)
from rase_common.protocol.prio3 import Prio3Params
from rase_common.secagg import noisy_share, tile, unshard_signed
from tests.seeded_bytes import XorShiftBytes
from tests.stats import P_MIN, chisquare_integers


def brute_force_law(law: NoiseSum, span: int) -> tuple[np.ndarray, np.ndarray]:
    q = law.q
    k = np.arange(-span, span + 1)
    one = (1 - q) / (1 + q) * q ** np.abs(k)
    pmf = np.array([1.0])
    for _ in range(law.draws):
        pmf = np.convolve(pmf, one)
    return np.arange(-(len(pmf) // 2), len(pmf) // 2 + 1), pmf


@pytest.mark.parametrize("draws", [1, 2, 3])
def test_the_tails_and_the_mean_error_are_the_exact_law_of_the_sum_of_draws(draws):
    law = NoiseSum(t=5, s=2, draws=draws)          # scale 2.5 grid steps: convolution is exact to 1e-15 here
    z, pmf = brute_force_law(law, 400)
    for c in range(0, 20):
        assert law.tail(c) == pytest.approx(pmf[z > c].sum(), rel=1e-9, abs=1e-15)
    if draws <= 2:
        assert law.mean_abs() == pytest.approx(float(np.sum(np.abs(z) * pmf)), rel=1e-9)
    assert law.variance() == pytest.approx(float(np.sum(z * z * pmf)), rel=1e-9)


@pytest.mark.parametrize("draws,level", [(1, 0.95), (2, 0.95), (2, 0.9), (3, 0.95)])
def test_the_half_width_is_the_smallest_that_covers(draws, level):
    law = noise_law(40, 1.0, draws)
    c = law.half_width(level)
    assert law.cover(c) >= level > law.cover(c - 1)


@pytest.mark.parametrize("sensitivity,eps", [(4000, 1.0), (1, 0.5), (2, 2.0), (4000, 0.3), (4095, 1e-3)])
def test_the_noise_scale_is_never_below_sensitivity_over_eps(sensitivity, eps):
    d = central_noise(sensitivity, eps)
    assert d.scale() >= sensitivity / eps * (1 - 1e-12)
    # and not larger than eps rounded down to a multiple of 1/EPS_UNITS needs (plus the sampler's reduction)
    assert d.scale() <= sensitivity / ((eps * EPS_UNITS - 1) / EPS_UNITS) * 1.0001


def test_the_aggregators_draws_follow_the_law():
    """The device core's exact sampler (CKS) as the aggregators call it, against the exact pmf."""
    d = central_noise(3, 1.0)
    bits = RandomBits(read=XorShiftBytes(11))
    draws = draw_noise(d, 20_000, bits)
    q = math.exp(-d.s / d.t)
    p, _ = chisquare_integers(draws, lambda k: (1 - q) / (1 + q) * q ** abs(k), -15, 15)
    assert p > P_MIN


@pytest.mark.parametrize("kind", ["sum", "count"])
def test_noisy_shares_unshard_to_the_total_plus_both_draws(kind):
    """noisy_share on both aggregate shares, then unshard_signed: the exact total
    plus the two noises, signed (a total near 0 can come out negative)."""
    vdaf = prio3_sum(4000) if kind == "sum" else prio3_count()
    params = Prio3Params.for_deployment(kind, key_id="k", dp_eps=1.0, grid_steps=4000, bands=[1.0])
    rng = np.random.default_rng(1)
    p = vdaf.field.MODULUS
    for total in (0, 3, 4000 * 45):
        r = int(rng.integers(0, 2 ** 62))
        shares = [vdaf.field.encode_vec([r % p]), vdaf.field.encode_vec([(total - r) % p])]
        assert unshard_signed(vdaf, shares) == [total]
        bits = RandomBits(read=XorShiftBytes(total + 1))
        noisy = [noisy_share(vdaf, s, params, bits=bits) for s in shares]
        again = RandomBits(read=XorShiftBytes(total + 1))
        z = draw_noise(central_noise(params.sensitivity, 1.0), 2, again)
        assert unshard_signed(vdaf, noisy) == [total + z[0] + z[1]]
        assert noisy_share(vdaf, shares[0], params, noise=False) == shares[0]


def test_the_published_mean_is_unbiased_and_its_interval_covers_95_percent():
    """4,000 windows of 45 readings, each through both aggregators' noise (the
    device sampler, seeded) and the published estimator: bias within 4
    standard errors, coverage of the true mean in [0.93, 0.97] (sd 0.0034)."""
    from fusion_center.prio3.helper_rules import merge_ready

    params = Prio3Params.for_deployment("sum", key_id="k", dp_eps=1.0, grid_steps=4000, bands=[1.0])
    vdaf = prio3_sum(4000)
    rng = np.random.default_rng(7)
    setting = Setting()
    bits = RandomBits(read=XorShiftBytes(123))
    law = noise_law(4000, 1.0, 2)
    errors, covered = [], 0
    for _ in range(4000):
        readings = rng.choice([0.0, 2.0, 15.0, 60.0, 2500.0, 3900.0], 45)
        truth = float(measurements("sum", readings, setting).mean())
        r = int(rng.integers(0, 2 ** 62))
        total = int(measurements("sum", readings, setting).sum())
        leader = noisy_share(vdaf, vdaf.field.encode_vec([r]), params, bits=bits)
        helper = vdaf.field.encode_vec([(total - r) % vdaf.field.MODULUS])
        record = {"totals": unshard_signed(vdaf, [leader, helper]), "accepted": 45, "leader_draws": 1}
        totals, n, draws = merge_ready([record], params, bits=bits)
        est = estimate_total("sum", totals, n, NoiseSum(law.t, law.s, draws), setting).named["mean"]
        errors.append(est.value - truth)
        covered += est.lo <= truth <= est.hi
    errors = np.array(errors)
    assert abs(errors.mean()) < 4 * errors.std() / math.sqrt(len(errors))
    assert 0.93 <= covered / 4000 <= 0.97
    assert np.mean(np.abs(errors)) == pytest.approx(law.mean_abs() / 45, rel=0.05)   # 1.5 x 4000 / 45 = 133 W


def test_estimates_of_each_kind():
    law = NoiseSum(t=1, s=1, draws=0)          # no noise: the intervals shrink to the value
    s = Setting(x_min=0.0, x_max=4000.0, gamma=2.0)
    mean = estimate_total("sum", [500], 10, law, s).named["mean"]
    assert (mean.value, mean.lo, mean.hi, mean.method) == (100.0, 100.0, 100.0, "exact-noise")
    law2 = noise_law(1, 1.0, 2)
    c = law2.half_width(0.95)
    count = estimate_total("count", [3], 10, law2, s).named
    assert count["count"].lo == 0.0 and count["count"].hi == 3 + c and count["mean"].value == 0.3
    freqs = estimate_total("histogram", [5, 0, 3, 2], 10, noise_law(2, 1.0, 2), s).frequencies
    assert [f.value for f in freqs] == [0.5, 0.0, 0.3, 0.2] and all(0 <= f.lo <= f.hi <= 1 for f in freqs)


def test_simulated_totals_follow_the_law_and_measure_as_the_device_does():
    s = Setting(bands=(10.0, 100.0, 1000.0), on_above=10.0)
    x = np.array([-5.0, 0.4, 9.5, 10.0, 10.2, 150.0, 4001.0])
    assert list(measurements("sum", x, s)) == [0, 0, 10, 10, 10, 150, 4000]
    assert list(measurements("count", x, s)) == [0, 0, 0, 0, 1, 1, 1]
    assert list(measurements("histogram", x, s)) == [0, 0, 0, 0, 1, 2, 3]
    law = NoiseSum(t=3, s=1, draws=2)
    rng = np.random.default_rng(3)
    z = [simulate_total("count", [0.0], s, law, rng)[0] for _ in range(20_000)]
    _, pmf = brute_force_law(law, 200)
    grid = np.arange(-(len(pmf) // 2), len(pmf) // 2 + 1)
    p, _ = chisquare_integers(z, lambda k: float(pmf[grid == k][0]) if abs(k) <= 400 else 0.0, -25, 25)
    assert p > P_MIN


def test_the_registry_entry_says_where_its_interface_does_not_fit():
    m = mechanism("prio3")
    assert m.support(Setting(), 1.0).reason(12.0) == "impossible_y"
    with pytest.raises(ValueError, match="no local randomizer"):
        m.randomizer(Setting())
    with pytest.raises(ValueError, match="noisy total"):
        m.estimate({1.0: [1.0]}, Setting())


def test_tiles_of_parts():
    class P:
        def __init__(self, first, count):
            self.first, self.count = first, count
    assert tile([P(3, 2), P(0, 3)], 5)[0].first == 0
    assert tile([P(0, 3)], 5) is None
    assert tile([], 0) == []
    with pytest.raises(ValueError, match="overlap"):
        tile([P(0, 3), P(2, 3)], 5)
