"""`rase eval counts`: the on/off and load-class evaluations score the real
device randomizers and estimators against the truth."""

import numpy as np

from simulators.evaluation import count_errors, frequency_errors, load_classes


def test_load_classes():
    x = np.array([0.0, 10.0, 10.5, 99.0, 150.0, 2500.0, np.nan])
    c = load_classes(x)
    assert c[:-1].tolist() == [0, 0, 1, 1, 2, 3] and np.isnan(c[-1])


def test_errors_shrink_with_eps_and_intervals_cover():
    """60 devices x 400 timestamps of synthetic power. Coverage of the 95%
    intervals pooled over timestamps within [0.92, 0.98] (400 or 1,600
    intervals: sd about 0.011 / 0.005); errors fall as eps grows."""
    rng = np.random.default_rng(5)
    x = np.where(rng.random((60, 400)) < 0.3, rng.gamma(2.0, 300.0, (60, 400)), 0.0)
    x[rng.random(x.shape) < 0.05] = np.nan
    c = count_errors(x, [0.5, 2.0], seed=1)
    f = frequency_errors(x, [0.5, 2.0], seed=1)
    for eps in (0.5, 2.0):
        assert 0.92 <= c[eps]["coverage"] <= 0.98
        assert 0.92 <= f[eps]["coverage"] <= 0.98
        assert c[eps]["timestamps"] == 400
    assert c[2.0]["mae"] < c[0.5]["mae"] / 2
    assert f[2.0]["mae"] < f[0.5]["mae"] / 2
