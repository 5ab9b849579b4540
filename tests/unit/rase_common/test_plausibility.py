"""The registry's plausibility laws (what the fog's attacker detection tests
against): for every reading, an honest report's score has a moment
generating function no larger than the law's (the monotonicity claim each
mechanism module states), the law is the sampler's, and a report's float
slack never lifts its score above its exact output's."""

import math

import numpy as np
import pytest

from rase_common.mechanisms import MECHANISMS, Setting, mechanism
from rase_common.mechanisms.br import is_clamped, report_law
from rase_common.mechanisms.plausibility import PlausibilityTest

SMALL = Setting(x_min=0.0, x_max=8.0, gamma=1.0)       # K = 8: every grid reading enumerated
LAMS = (0.01, 0.3, 1.0, 3.0, 10.0, 100.0)
BOUNDED = ("duchi", "piecewise", "hybrid")


def law_at(kind: str, setting: Setting, eps: float, k: int, test: PlausibilityTest) -> PlausibilityTest:
    """The score's law when the reading is grid point k (mean mechanisms)."""
    cal = setting.calibration
    if kind == "br":
        values, probs = report_law(cal, eps, k)
    else:
        m = mechanism(kind)
        exact = m.report_values(cal, eps)
        pmf = m.report_pmf(cal, eps, k)
        values, probs = [float(exact[o]) for o in pmf], [float(p) for p in pmf.values()]
    scale = cal.x_max - cal.x_min
    v = np.asarray(values, dtype=np.float64)
    score = (v - cal.x_max) / scale if test.name == "above" else (cal.x_min - v) / scale
    return PlausibilityTest(test.name, score, np.asarray(probs), test.score)


@pytest.mark.parametrize("kind", ("br",) + BOUNDED)
@pytest.mark.parametrize("eps", (0.5, 1.0, 4.0, 9.0))
def test_no_reading_scores_above_the_worst_one(kind, eps):
    tests = mechanism(kind).plausibility(SMALL, eps)
    assert [t.name for t in tests] == ["above", "below"]
    K = SMALL.calibration.grid_max
    for test in tests:
        worst = K if test.name == "above" else 0
        for k in range(K + 1):
            at_k = law_at(kind, SMALL, eps, k, test)
            for lam in LAMS:
                assert at_k.log_mgf(lam) <= test.log_mgf(lam) + 1e-9, (test.name, k, lam)
            if k == worst:
                assert at_k.log_mgf(1.0) == pytest.approx(test.log_mgf(1.0), abs=1e-12)


@pytest.mark.parametrize("kind", ("br",) + BOUNDED)
@pytest.mark.parametrize("eps", (0.5, 1.0, 9.0))
def test_an_honest_device_at_the_bound_averages_a_score_of_zero(kind, eps):
    """The debiased report is unbiased, so at x_max its score averages 0
    (unclamped BR a hair below: ingest cuts its 1e-9 tails, the far one more)."""
    for test in mechanism(kind).plausibility(Setting(), eps):
        assert -1e-8 <= test.mean <= 1e-12
        assert test.largest > 0


@pytest.mark.parametrize("kind", ("br",) + BOUNDED)
def test_the_law_is_the_samplers(kind):
    """200,000 sampled reports at x_max: the share of the largest output and
    the mean of exp(score) match the law within 5 standard errors."""
    setting, eps = Setting(), 1.0
    above = mechanism(kind).plausibility(setting, eps)[0]
    y = mechanism(kind).sample(setting, eps, np.full(200_000, setting.x_max), np.random.default_rng(7))
    s = np.array([above.score(v) for v in y[:20_000]])
    top = y >= y.max() - 1e-6 * setting.x_max
    p = above.largest_prob
    assert abs(top.mean() - p) <= 5 * math.sqrt(p * (1 - p) / y.size)
    e = np.exp(s)
    assert abs(e.mean() - math.exp(above.log_mgf(1.0))) <= 5 * e.std() / math.sqrt(e.size)


@pytest.mark.parametrize("kind", BOUNDED)
@pytest.mark.parametrize("eps", (0.5, 1.0, 9.0))
def test_float_slack_never_lifts_a_score(kind, eps):
    """Every output as the device computes it (and nudged by the ingest
    check's tolerance) scores at most its exact value."""
    setting = Setting()
    cal = setting.calibration
    m = mechanism(kind)
    device = m.device_values(cal, eps)
    exact = m.report_values(cal, eps)
    above, below = m.plausibility(setting, eps)
    for o, y in enumerate(device):
        if o not in exact:
            continue
        x = float(exact[o])
        for nudge in (0.0, 2.0 ** -18 * (8000 + abs(y)), -2.0 ** -18 * (8000 + abs(y))):
            assert above.score(y + nudge) <= (x - cal.x_max) / cal.delta
            assert below.score(y + nudge) <= (cal.x_min - x) / cal.delta


def test_br_corrected_ends_score_as_their_conditional_expectations():
    setting = Setting()
    cal = setting.calibration
    assert is_clamped(cal, 1.0)
    above, below = mechanism("br").plausibility(setting, 1.0)
    # (scores are lowered by the float slack, 2^-17 of the magnitudes: 2.3e-5 of the range here)
    assert above.largest - 3e-5 <= above.score(cal.x_max) <= above.largest
    assert below.largest - 3e-5 <= below.score(cal.x_min) <= below.largest
    assert above.score(2000.0) == pytest.approx((2000.0 - cal.x_max) / cal.delta, abs=3e-5)


@pytest.mark.parametrize("eps", (0.5, 1.0, 4.0))
def test_bits_and_bands_are_at_most_as_likely_as_for_the_matching_reading(eps):
    setting = Setting()
    b_above, b_below = mechanism("binary").plausibility(setting, eps)
    ones = mechanism("binary").sample(setting, eps, np.full(100_000, 1e4), np.random.default_rng(1))
    assert abs(ones.mean() - b_above.largest_prob) < 5 * math.sqrt(0.25 / ones.size)
    assert b_below.score(0) == 1.0 and b_above.score(0) == 0.0
    bands = mechanism("categorical").plausibility(setting, eps)
    assert len(bands) == setting.categories
    rng = np.random.default_rng(2)
    for reading in (0.0, 50.0, 500.0, 5000.0):        # one per band: no band is named more often than `hit`
        r = mechanism("categorical").sample(setting, eps, np.full(50_000, reading), rng)
        for test in bands:
            share = np.mean([test.score(v) for v in r[:20_000]])
            assert share <= test.largest_prob + 5 * math.sqrt(0.25 / 20_000)


def test_every_mechanism_has_tests():
    for kind in MECHANISMS:
        tests = mechanism(kind).plausibility(Setting(), 1.0)
        assert tests and all(t.largest > t.mean for t in tests)
