"""Duchi, discrete Piecewise and Hybrid mechanisms: exact pmf, exact
unbiasedness, exact worst-case likelihood ratio, and the sampler against the
pmf (chi-square, seeded byte source, p > P_MIN)."""

from decimal import Decimal, getcontext
from fractions import Fraction

import pytest
from scipy import stats

from rase_device.entropy import RandomBits
from rase_device.ldp_rational import exp_eps_ratio, exp_lower
from rase_device.mechanisms import MECHANISMS, make_randomizer
from rase_device.randomizer import EPS_UNITS, BudgetRandomizer, Calibration, eps_units_floor
from rase_common.mechanisms import Setting, mechanism
from rase_common.mechanisms.bounded import grid_value, reading_position
from tests.seeded_bytes import XorShiftBytes
from tests.stats import P_MIN, chisquare_integers

BOUNDED = ("duchi", "piecewise", "hybrid")
EPS = (0.5, 1.0, 2.0, 4.0, 9.0)
getcontext().prec = 60


def exp_exact(eps: float) -> Decimal:
    """exp of eps rounded down to 1/EPS_UNITS, to 60 digits."""
    return (Decimal(eps_units_floor(eps)) / EPS_UNITS).exp()


@pytest.mark.parametrize("eps", (1 / 65536, 0.01, 0.3, 0.5, 0.61, 1.0, 2.0, 4.0, 9.0, 10.0, 20.0))
def test_rational_exp_is_a_tight_lower_bound(eps):
    for halves in (1, 2):
        a, b = exp_eps_ratio(eps, halves)
        assert a + b < 1 << 29, "drawn against as small ints"
        exact = (Decimal(eps_units_floor(eps)) / (EPS_UNITS * halves)).exp()
        ratio = Decimal(a) / Decimal(b)
        assert ratio <= exact
        # Tight: the effective eps is within 1e-6 of the stated one.
        assert exact.ln() - ratio.ln() < Decimal("1e-6") * Decimal(max(1, eps))


def test_exp_lower_matches_exp_to_its_precision():
    for units in (0, 1, 1000, 65536, 65536 * 9):
        a = exp_lower(units, 65536, 40)
        exact = (Decimal(units) / 65536).exp() * (1 << 40)
        assert a <= exact < a + 64


def report_values(m, cal, eps):
    return mechanism(m).report_values(cal, eps)


def report_pmf(m, cal, eps, k):
    return mechanism(m).report_pmf(cal, eps, k)


def reading_pmf(m, cal, eps, x):
    return mechanism(m).reading_pmf(cal, eps, x)


def report_variance_exact(m, eps, cal, k):
    return mechanism(m).report_variance_exact(cal, eps, k)


def report_variance_at(m, eps, cal, x):
    return mechanism(m).report_variance_at(cal, eps, x)


def worst_case_variance_exact(m, eps, cal):
    return mechanism(m).worst_case_variance_exact(cal, eps)


def worst_case_likelihood_ratio(m, cal, eps):
    return mechanism(m).worst_case_likelihood_ratio(cal, eps)


def report_variance(m, eps, x_min, x_max, gamma, x):
    return mechanism(m).report_variance(Setting(x_min=x_min, x_max=x_max, gamma=gamma), eps, x)


def worst_case_variance(m, eps, x_min, x_max, gamma):
    return mechanism(m).worst_case_variance(Setting(x_min=x_min, x_max=x_max, gamma=gamma), eps)


def calibrations():
    return [Calibration(x_min=0.0, x_max=4000.0, gamma=1.0),     # the paper's range, K = 4000
            Calibration(x_min=-5.0, x_max=7.3, gamma=0.7),       # gamma does not divide Delta
            Calibration(x_min=0.0, x_max=30.0, gamma=1.0)]


@pytest.mark.parametrize("mechanism", BOUNDED)
@pytest.mark.parametrize("eps", EPS)
def test_pmf_is_a_distribution_and_exactly_unbiased(mechanism, eps):
    for cal in calibrations():
        K = cal.grid_max
        values = report_values(mechanism, cal, eps)
        for k in sorted({0, 1, K // 3, K // 2, (K + 1) // 2, K - 1, K}):
            pmf = report_pmf(mechanism, cal, eps, k)
            assert set(pmf) == set(values)
            assert all(p > 0 for p in pmf.values())
            assert sum(pmf.values()) == 1
            mean = sum(p * values[o] for o, p in pmf.items())
            assert mean == grid_value(cal, k), "E[y | k] equals the grid reading exactly"
            second = sum(p * values[o] ** 2 for o, p in pmf.items())
            assert second - mean * mean == report_variance_exact(mechanism, eps, cal, k)


@pytest.mark.parametrize("mechanism", BOUNDED)
@pytest.mark.parametrize("eps", (0.5, 1.0, 9.0))
def test_readings_between_grid_points_are_unbiased_for_the_clipped_reading(mechanism, eps):
    """Random rounding: E[y | x] = clip(x) (exactly x_min + f Delta / K for the
    device's float position f; within 1e-9 W of the clipped reading)."""
    for cal in calibrations():
        values = report_values(mechanism, cal, eps)
        for x in (-3.0, cal.x_min, 0.2345, 1.5, 3.999, 2999.25, cal.x_max - 1e-7, 1e6):
            pmf = reading_pmf(mechanism, cal, eps, x)
            assert sum(pmf.values()) == 1
            mean = sum(p * values[o] for o, p in pmf.items())
            assert mean == reading_position(cal, x)
            clipped = min(max(x, cal.x_min), cal.x_max)
            assert abs(float(mean) - clipped) <= 1e-9
            second = sum(p * values[o] ** 2 for o, p in pmf.items())
            assert second - mean * mean == report_variance_at(mechanism, eps, cal, x)


@pytest.mark.parametrize("mechanism", BOUNDED)
def test_worst_case_variance_is_the_maximum_over_all_readings(mechanism):
    """Against a brute-force scan of readings on and between grid points."""
    for cal in (Calibration(x_min=0.0, x_max=3.0, gamma=1.0), Calibration(x_min=0.0, x_max=8.0, gamma=1.0),
                Calibration(x_min=-5.0, x_max=7.3, gamma=0.7)):
        for eps in (0.5, 1.0, 4.0):
            worst = worst_case_variance_exact(mechanism, eps, cal)
            scan = max(report_variance_at(mechanism, eps, cal, cal.x_min + cal.delta * i / 997)
                       for i in range(998))
            assert scan <= worst
            assert float(scan) >= float(worst) * (1 - 1e-4), "the bound is attained"


@pytest.mark.parametrize("mechanism", BOUNDED)
@pytest.mark.parametrize("eps", EPS + (0.05, 0.6, 0.62))
def test_worst_case_likelihood_ratio_over_the_whole_grid_is_at_most_e_eps(mechanism, eps):
    for cal in (Calibration(x_min=0.0, x_max=40.0, gamma=1.0), Calibration(x_min=-5.0, x_max=7.3, gamma=0.7)):
        lr = worst_case_likelihood_ratio(mechanism, cal, eps)
        assert Decimal(lr.numerator) / Decimal(lr.denominator) <= exp_exact(eps) <= Decimal(eps).exp()
        # Not vacuous: the bound is attained (within the rational rounding).
        assert Decimal(lr.numerator) / Decimal(lr.denominator) > exp_exact(eps) * (1 - Decimal("1e-5"))


def test_a_mechanism_that_breaks_the_bound_is_caught():
    """The LR check can fail: a pmf with a zero or a ratio > e^eps is reported."""
    cal = Calibration(x_min=0.0, x_max=10.0, gamma=1.0)
    lr = worst_case_likelihood_ratio("duchi", cal, 1.0)
    assert lr > Fraction(27, 10)   # e^1 = 2.718...; a 1.0 mechanism is not eps 0.99
    assert Decimal(lr.numerator) / Decimal(lr.denominator) > Decimal(0.99).exp()


def goodness_of_fit(samples: list[int], pmf: dict[int, Fraction]) -> tuple[float, int]:
    """Chi-square p-value of output indices against the exact pmf; an exact
    two-sided binomial test when the outputs are two (Duchi's +-C, where at
    large eps one side expects too few counts for a chi-square bin)."""
    if len(pmf) == 2:
        lo, hi = sorted(pmf)
        assert set(samples) <= {lo, hi}
        return stats.binomtest(samples.count(hi), len(samples), float(pmf[hi])).pvalue, 2
    return chisquare_integers(samples, lambda o: float(pmf.get(o, 0)), min(pmf), max(pmf), min_expected=20)


@pytest.mark.parametrize("mechanism", BOUNDED)
@pytest.mark.parametrize("eps,seed", [(0.5, 11), (1.0, 12), (4.0, 13), (9.0, 14)])
def test_sampler_matches_the_exact_pmf(mechanism, eps, seed):
    cal = Calibration(x_min=0.0, x_max=60.0, gamma=1.0)
    r = make_randomizer(mechanism, cal, RandomBits(read=XorShiftBytes(seed)))
    n = 30_000
    for k in (0, 17, 60):
        samples = [r.draw_index(k, eps) for _ in range(n)]
        pmf = report_pmf(mechanism, cal, eps, k)
        p, bins = goodness_of_fit(samples, pmf)
        assert p > P_MIN, f"{mechanism} eps={eps} k={k}: p={p:.2e} over {bins} bins"


@pytest.mark.parametrize("mechanism", BOUNDED)
def test_reading_sampler_matches_the_exact_pmf_with_random_rounding(mechanism):
    cal = Calibration(x_min=0.0, x_max=12.0, gamma=1.0)
    r = make_randomizer(mechanism, cal, RandomBits(read=XorShiftBytes(77)))
    for x in (0.3, 5.75, 11.999):
        samples = [r.draw_reading_index(x, 1.0) for _ in range(30_000)]
        p, bins = goodness_of_fit(samples, reading_pmf(mechanism, cal, 1.0, x))
        assert p > P_MIN, f"{mechanism} x={x}: p={p:.2e} over {bins} bins"


@pytest.mark.parametrize("mechanism", BOUNDED)
def test_sampler_on_the_paper_range(mechanism):
    """K = 4000: PM's 4000 + L outputs, pooled into bins of >= 5 expected."""
    cal = Calibration()
    r = make_randomizer(mechanism, cal, RandomBits(read=XorShiftBytes(99)))
    k = 150
    samples = [r.draw_index(k, 2.0) for _ in range(40_000)]
    pmf = report_pmf(mechanism, cal, 2.0, k)
    p, bins = goodness_of_fit(samples, pmf)
    assert p > P_MIN, f"p={p:.2e} over {bins} bins"


@pytest.mark.parametrize("mechanism", BOUNDED)
def test_randomize_reports_the_value_of_the_drawn_output(mechanism):
    cal = Calibration(x_min=-5.0, x_max=7.3, gamma=0.7)
    a = make_randomizer(mechanism, cal, RandomBits(read=XorShiftBytes(5)))
    b = make_randomizer(mechanism, cal, RandomBits(read=XorShiftBytes(5)))
    values = report_values(mechanism, cal, 1.5)
    for x in (-9.0, -5.0, 0.0, 1.234, 7.3, 100.0):
        for _ in range(50):
            y, clamped = a.randomize(x, 1.5)
            o = b.draw_reading_index(x, 1.5)
            assert not clamped
            assert y == pytest.approx(float(values[o]), rel=1e-12, abs=1e-9)


def test_quantize_clips_and_rounds_to_the_full_range_grid():
    cal = Calibration(x_min=-5.0, x_max=7.3, gamma=0.7)   # K = 18, step 12.3 / 18
    r = make_randomizer("duchi", cal)
    assert r.quantize(-100.0) == 0 and r.quantize(1e9) == 18
    assert float(grid_value(cal, r.quantize(7.3))) == 7.3
    assert r.quantize(-5.0 + 12.3 / 18 * 4.4) == 4
    assert r.grid.position(-5.0 + 12.3 / 18 * 4.5)[0] == 4
    assert r.grid.position(-5.0 + 12.3 / 18 * 4.5)[1] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        r.quantize(float("nan"))
    with pytest.raises(ValueError):
        r.quantize("3")


def test_make_randomizer_names_and_rejects_unknown():
    cal = Calibration()
    assert MECHANISMS == ("br", "duchi", "piecewise", "hybrid", "binary", "categorical")
    assert isinstance(make_randomizer("br", cal), BudgetRandomizer)
    for m in BOUNDED + ("binary", "categorical"):
        assert make_randomizer(m, cal).mechanism == m
    with pytest.raises(ValueError, match="mechanism"):
        make_randomizer("laplace", cal)


def test_variance_formulas_match_known_closed_forms():
    import math
    # Duchi at eps: Var = half^2 (C^2 - t^2), C = (e+1)/(e-1), up to the 1e-6 rational rounding.
    c = (math.e + 1) / (math.e - 1)
    assert report_variance("duchi", 1.0, 0, 4000, 1, 2000.0) == pytest.approx(2000 ** 2 * c * c, rel=1e-5)
    assert report_variance("duchi", 1.0, 0, 4000, 1, 0.0) == pytest.approx(2000 ** 2 * (c * c - 1), rel=1e-5)
    # Continuous PM worst case (t = 1): half^2 (t^2/(e^(eps/2)-1) + (e^(eps/2)+3)/(3(e^(eps/2)-1)^2)).
    s = math.exp(0.5)
    pm = 2000 ** 2 * (1 / (s - 1) + (s + 3) / (3 * (s - 1) ** 2))
    assert worst_case_variance("piecewise", 1.0, 0, 4000, 1) == pytest.approx(pm, rel=2e-3)
    # HM is never worse than the better of the two in the worst case (Wang et al., Lemma 5).
    for eps in EPS:
        hm = worst_case_variance("hybrid", eps, 0, 4000, 1)
        assert hm <= min(worst_case_variance("duchi", eps, 0, 4000, 1),
                         worst_case_variance("piecewise", eps, 0, 4000, 1)) * (1 + 1e-9)
    # BR unclamped (eps 9 >= eps_star): discrete Laplace 2q/(1-q)^2 with q = exp(-eps/K) ~ 2 (K/eps)^2.
    assert report_variance("br", 9.0, 0, 4000, 1, 0.0) == pytest.approx(2 * (4000 / 9) ** 2, rel=1e-3)
    # BR clamped (eps 1), the corrected report at x = 0: (K/eps)^2 (2 - (1 + e^-eps) / 2).
    assert report_variance("br", 1.0, 0, 4000, 1, 0.0) == pytest.approx(4000 ** 2 * (2 - (1 + math.exp(-1)) / 2),
                                                                       rel=1e-3)


def test_bernoulli_float_is_exact_for_dyadic_probabilities():
    from rase_device.ldp_rational import bernoulli_float
    bits = RandomBits(read=XorShiftBytes(31))
    for p, seed_n in ((0.3, 40_000), (0.5, 20_000), (1 - 2 ** -40, 5_000), (2 ** -3, 20_000)):
        hits = sum(bernoulli_float(p, bits) for _ in range(seed_n))
        assert stats.binomtest(hits, seed_n, p).pvalue > P_MIN, (p, hits)
    assert not any(bernoulli_float(0.0, bits) for _ in range(1000))
