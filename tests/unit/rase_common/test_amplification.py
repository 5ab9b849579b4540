"""Amplification by shuffling (FMT 2021): the closed form against hand
computations, the numerical bound against the closed form, monotonicity, and
the numerical bound against an exact lower bound for binary randomized response."""

import math

import numpy as np
import pytest
from scipy import stats

from rase_common.amplification import (
    closed_form_eps, closed_form_valid, local_eps_for_central, mallows_guarantee, numerical_eps,
    shuffle_amplification, window_guarantee)

# Hand computation, step by step (values to 10+ digits; tolerance 1e-9 relative):
#  eps0 = 1, n = 1000, delta = 1e-6:
#    ln(4/delta) = ln(4e6) = 15.2018049191;  e^eps0 = 2.7182818285
#    a = 8 sqrt(2.7182818285 * 15.2018049191 / 1000) = 8 sqrt(0.0413227) = 1.6262406232
#    c = 8 * 2.7182818285 / 1000 = 0.0217462546;  a + c = 1.6479868779
#    1 - e^-1 = 0.6321205588;  1 + e^(-1 - ln(2.6479868779)) = 1 + 0.3678794412/2.6479868779 = 1.1389279699
#    eps = ln(1 + 0.6321205588 / 1.1389279699 * 1.6479868779) = ln(1.9146486) = 0.6495375524
#    valid: ln(1000 / (16 * 15.2018049191)) = ln(4.111353) = 1.4137523913 >= 1
#  eps0 = 0.5, n = 10000, delta = 1e-5:
#    ln(4e5) = 12.8992198261; e^0.5 = 1.6487212707
#    a = 8 sqrt(1.6487212707 * 12.8992198261 / 1e4) = 0.3689311533;  c = 8 * 1.6487212707 / 1e4 = 0.0013189770
#    1 - e^-0.5 = 0.3934693403;  1 + 0.6065306597 / 1.3702501303 = 1.4426422930
#    eps = ln(1 + 0.3934693403 / 1.4426422930 * 0.3702501303) = 0.0962032458
#  eps0 = 2, n = 100000, delta = 1e-8:
#    ln(4e8) = 19.8069751051; e^2 = 7.3890560989
#    a = 8 sqrt(7.3890560989 * 19.8069751051 / 1e5) = 0.3060508195;  c = 8 * 7.3890560989 / 1e5 = 0.0005911245
#    1 - e^-2 = 0.8646647168;  1 + 0.1353352832 / 1.3066419440 = 1.1035748805
#    eps = ln(1 + 0.8646647168 / 1.1035748805 * 0.3066419440) = 0.2153192588
HAND = [(1.0, 1000, 1e-6, 0.6495375524), (0.5, 10000, 1e-5, 0.0962032458), (2.0, 100000, 1e-8, 0.2153192588)]


@pytest.mark.parametrize("eps0,n,delta,expected", HAND)
def test_closed_form_matches_hand_computation(eps0, n, delta, expected):
    assert closed_form_eps(eps0, n, delta) == pytest.approx(expected, rel=1e-9)


def test_closed_form_validity_condition():
    # ln(1000 / (16 ln 4e6)) = 1.41375...: valid just below, invalid just above.
    assert closed_form_valid(1.41, 1000, 1e-6)
    assert not closed_form_valid(1.42, 1000, 1e-6)
    assert closed_form_eps(1.42, 1000, 1e-6) is None
    assert closed_form_eps(0.1, 100, 1e-6) is None   # ln(100 / 243) < 0: never valid at n = 100


GRID = [(e0, n) for n in (300, 1000, 3000, 10000) for e0 in (0.25, 0.5, 1.0, 2.0, 3.0)]


@pytest.mark.parametrize("eps0,n", GRID)
def test_numerical_never_above_closed_form(eps0, n):
    cf = closed_form_eps(eps0, n, 1e-6)
    nu = numerical_eps(eps0, n, 1e-6)
    assert nu <= eps0
    if cf is not None:
        assert nu <= cf


@pytest.mark.parametrize("delta", [1e-5, 1e-8])
def test_monotone_in_n_and_eps0(delta):
    ns = [100, 300, 1000, 3000, 10000]
    eps0s = [0.1, 0.5, 1.0, 2.0, 4.0]
    tol = 2e-6   # the bisection's resolution
    table = np.array([[numerical_eps(e0, n, delta) for n in ns] for e0 in eps0s])
    assert np.all(np.diff(table, axis=1) <= tol), table        # more reports: never worse
    assert np.all(np.diff(table, axis=0) >= -tol), table       # weaker reports: never better
    cf = [[closed_form_eps(e0, n, delta) for n in ns] for e0 in eps0s]
    for row in cf:
        vals = [v for v in row if v is not None]
        assert all(b <= a for a, b in zip(vals, vals[1:]))
    for j in range(len(ns)):
        vals = [cf[i][j] for i in range(len(eps0s)) if cf[i][j] is not None]
        assert all(b >= a for a, b in zip(vals, vals[1:]))


def _binary_rr_exact_delta(eps0: float, n: int, eps: float) -> float:
    """Exact D_{e^eps} between the shuffled outputs (= the count of ones) of
    randomized response on (1, 0, ..., 0) and (0, 0, ..., 0): a lower bound on
    what any valid amplification bound must cover."""
    keep = math.exp(eps0) / (math.exp(eps0) + 1)
    s = np.arange(n + 1)
    rest = stats.binom.pmf(s, n - 1, 1 - keep)                     # the n-1 zeros
    p = keep * np.concatenate([[0], rest[:-1]]) + (1 - keep) * rest
    q = (1 - keep) * np.concatenate([[0], rest[:-1]]) + keep * rest
    return float(np.maximum(p - math.exp(eps) * q, 0).sum())


@pytest.mark.parametrize("eps0,n,tight", [(0.5, 1000, True), (1.0, 1000, True), (2.0, 3000, True),
                                          (3.0, 300, False)])
def test_numerical_bound_covers_an_exact_instance(eps0, n, tight):
    delta = 1e-6
    eps = numerical_eps(eps0, n, delta)
    assert _binary_rr_exact_delta(eps0, n, eps) <= delta
    if not tight:   # small n, large eps0: next to no amplification is claimed
        assert 0.95 * eps0 <= eps <= eps0
        return
    # Not vacuous where n is large: within a factor 3 of this one instance's exact eps.
    lo, hi = 0.0, eps0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _binary_rr_exact_delta(eps0, n, mid) <= delta else (mid, hi)
    assert hi <= eps <= 3 * hi + 1e-3


def test_shuffle_amplification_picks_the_smaller_and_flags_none():
    a = shuffle_amplification(1.0, 1000, 1e-6)
    assert a.amplified and a.method == "numerical" and a.eps == numerical_eps(1.0, 1000, 1e-6)
    c = shuffle_amplification(1.0, 1000, 1e-6, method="closed_form")
    assert c.method == "closed_form" and c.eps == pytest.approx(0.6495375524, rel=1e-9)
    none = shuffle_amplification(5.0, 20, 1e-6)
    assert not none.amplified and none.method == "none" and none.eps == 5.0
    assert shuffle_amplification(5.0, 20, 1e-6, method="closed_form").method == "none"
    assert a.as_dict()["kind"] == "shuffle_dp"


def test_local_eps_for_central_inverts_the_bound():
    eps0 = local_eps_for_central(0.5, 1e-6, 2000)
    assert eps0 > 0.5
    assert numerical_eps(eps0, 2000, 1e-6) <= 0.5
    assert numerical_eps(eps0 + 0.01, 2000, 1e-6) > 0.5


def test_mallows_branch_states_d_sigma_not_a_number():
    g = window_guarantee("mallows", eps0=1.0, n=1000, delta=1e-6, alpha=30.0, theta=0.83)
    assert g == mallows_guarantee(30.0, 0.83)
    assert g["kind"] == "d_sigma" and g["eps"] is None and g["alpha"] == 30.0 and g["theta"] == 0.83
    assert window_guarantee("uniform", eps0=1.0, n=1000, delta=1e-6)["kind"] == "shuffle_dp"
    with pytest.raises(ValueError):
        window_guarantee("mallows", eps0=1.0, n=10, delta=1e-6)


@pytest.mark.parametrize("args", [(0.0, 10, 1e-6), (1.0, 0, 1e-6), (1.0, 10, 0.0), (1.0, 10, 1.0),
                                  (math.inf, 10, 1e-6)])
def test_bad_input_is_a_clear_error(args):
    with pytest.raises(ValueError):
        shuffle_amplification(*args)


def test_levels_take_the_smaller_of_the_two_bounds():
    from rase_common.amplification import levels_amplification
    res = levels_amplification({0.5: 900, 2.0: 100}, 1e-6)
    # eps 0.5 reports: 900 of them at 0.5 beat all 1000 counted at 2.0.
    assert res[0.5].eps == shuffle_amplification(0.5, 900, 1e-6).eps
    assert res[0.5].eps < shuffle_amplification(2.0, 1000, 1e-6).eps
    # eps 2 reports: only the whole window at 2.0 (all 1000 are 2-LDP).
    assert res[2.0].eps == shuffle_amplification(2.0, 1000, 1e-6).eps
    assert all(r.eps <= e for e, r in res.items())
    with pytest.raises(ValueError):
        levels_amplification({}, 1e-6)


@pytest.mark.parametrize("n,expected", [(0, 0), (45, 45), (100, 100), (101, 100), (987, 980), (12345, 12000),
                                        (100000, 100000)])
def test_conservative_n_rounds_down(n, expected):
    from rase_common.amplification import conservative_n
    assert conservative_n(n) == expected
    if n >= 300:
        assert numerical_eps(1.0, conservative_n(n), 1e-6) >= numerical_eps(1.0, n, 1e-6) - 2e-6
