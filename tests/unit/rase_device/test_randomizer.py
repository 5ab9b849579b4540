"""BR (SPEC 2.1): threshold, clamp branch, clipping, grid, noise distribution."""

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rase_device.entropy import RandomBits
from rase_device.randomizer import EPS_UNITS, BudgetRandomizer, Calibration, eps_star
from tests.stats import P_MIN, chisquare_integers, dlaplace_pmf


def br(seed=1, **cal):
    return BudgetRandomizer(Calibration(**cal), RandomBits(read=random.Random(seed).randbytes))


def test_eps_star_at_paper_defaults():
    assert eps_star(0.5, 0.9, 0.0, 4000.0) == pytest.approx(4.605, abs=5e-4)
    assert Calibration().eps_star == pytest.approx(-math.log(0.1) / 0.5)


@pytest.mark.parametrize("eps,clamped", [(0.01, True), (1.0, True), (4.6, True), (4.606, False), (9.0, False)])
def test_clamp_branch_taken_exactly_below_eps_star(eps, clamped):
    r = br()
    outs = [r.randomize(3990.0, eps) for _ in range(3000)]
    assert all(c is clamped for _, c in outs)
    ys = [y for y, _ in outs]
    if clamped:
        assert min(ys) >= 0.0 and max(ys) <= 4000.0
        assert ys.count(4000.0) > 0  # mass piles up at the bound
    else:
        assert max(ys) > 4000.0  # unclamped noise crosses the bound near x_max


def test_input_is_clipped_into_range():
    r = br(x_min=0.0, x_max=4000.0)
    assert r.quantize(-250.0) == 0
    assert r.quantize(1e9) == r.cal.grid_max == 4000
    assert r.quantize(1234.4) == 1234


def test_nonfinite_reading_is_refused():
    r = br()
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ValueError, match="finite"):
            r.randomize(bad, 1.0)


@pytest.mark.parametrize("gamma,x_min", [(0.5, 0.0), (2.5, -10.0), (7.0, 0.0)])
def test_outputs_lie_on_the_gamma_grid(gamma, x_min):
    r = br(gamma=gamma, x_min=x_min, x_max=400.0)
    for _ in range(2000):
        y, _ = r.randomize(123.4, 5.0)
        k = (y - x_min) / gamma
        assert abs(k - round(k)) < 1e-9


def test_unclamped_noise_matches_the_exact_discrete_laplace():
    r = br(seed=4, x_max=40.0, gamma=1.0)  # grid sensitivity 40
    eps = 9.0
    d = r.noise(eps)
    k0 = r.quantize(20.0)
    zs = [int(r.randomize(20.0, eps)[0]) - k0 for _ in range(100_000)]
    scale = d.t / d.s
    p, _ = chisquare_integers(zs, dlaplace_pmf(scale), -int(6 * scale), int(6 * scale))
    assert p > P_MIN
    assert scale >= 40.0 / eps  # lambda / gamma >= Delta / (eps gamma)


@settings(max_examples=300, deadline=None)
@given(eps=st.floats(min_value=1 / EPS_UNITS, max_value=10.0),
       x_max=st.floats(min_value=1.0, max_value=1e5),
       gamma_frac=st.floats(min_value=1e-3, max_value=1.0))
def test_rounding_never_weakens_eps(eps, x_max, gamma_frac):
    cal = Calibration(x_min=0.0, x_max=x_max, gamma=x_max * gamma_frac)
    r = BudgetRandomizer(cal, RandomBits(read=random.Random(0).randbytes))
    assert r.effective_eps(eps) <= eps
    assert r.lambda_(eps) >= cal.delta / eps * (1 - 1e-12)


@pytest.mark.parametrize("field,kwargs,match", [
    ("beta", {"beta": 0.0}, "beta must be in \\(0, 1\\]"),
    ("beta", {"beta": 1.5}, "beta"),
    ("rho", {"rho": 1.0}, "rho must be in \\(0, 1\\)"),
    ("rho", {"rho": 0.0}, "rho"),
    ("x_max", {"x_max": 0.0}, "x_max must be > 0"),
    ("x_min", {"x_min": 5000.0}, "x_min must be < x_max"),
    ("gamma", {"gamma": 0.0}, "gamma must be > 0"),
    ("gamma", {"gamma": -1.0}, "gamma"),
    ("beta", {"beta": float("nan")}, "beta"),
])
def test_bad_calibration_names_the_field(field, kwargs, match):
    with pytest.raises(ValueError, match=match):
        Calibration(**kwargs)


@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan")])
def test_bad_eps_is_refused(eps):
    with pytest.raises(ValueError, match="eps"):
        br().randomize(1.0, eps)
