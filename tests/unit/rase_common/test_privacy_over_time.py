"""privacy_over_time: basic and advanced composition, by hand."""

import math

import pytest

from rase_common.privacy import advanced_composition, privacy_over_time


def test_the_issues_example_every_8_s_at_eps_1_for_a_day():
    p = privacy_over_time(1.0, 8.0, 24.0)
    assert p.reports == 10_800 and p.eps_total == 10_800 and p.eps_per_hour == 450
    # advanced: sqrt(2 * 10800 * ln 1e6) + 10800 (e - 1) = 545.99 + 18557.4 > basic
    assert p.eps_advanced == pytest.approx(math.sqrt(2 * 10800 * math.log(1e6)) + 10800 * (math.e - 1))
    assert p.eps_best == 10_800
    assert any("void" in line for line in p.lines())


def test_small_eps_gains_from_advanced_composition():
    p = privacy_over_time(0.01, 60.0, 24.0)
    assert p.reports == 1440 and p.eps_total == pytest.approx(14.4)
    # sqrt(2 * 1440 * 13.8155) * 0.01 + 1440 * 0.01 * (e^0.01 - 1) = 1.9947 + 0.1447
    assert p.eps_advanced == pytest.approx(2.1394, abs=1e-3)
    assert p.eps_best == p.eps_advanced
    assert advanced_composition(1.0, 0, 1e-6) == 0.0


@pytest.mark.parametrize("args", [(0, 8, 1), (1, 0, 1), (1, 8, -1), (math.nan, 8, 1)])
def test_bad_input(args):
    with pytest.raises(ValueError):
        privacy_over_time(*args)
