"""Every aggregate's wall-clock time, privacy unit and clipping statement
(fusion_center.ldp.context), from the windows' own statements."""

import pytest

from fusion_center.config import CentralTarget
from fusion_center.ldp.merge import aggregate
from rase_common.amplification import window_guarantee
from rase_common.protocol.aggregate import Aggregate
from rase_common.protocol.control import ControlMessage
from rase_common.protocol.window import LevelBatch, WindowMessage

EPOCH0 = 1_420_675_200.0          # 2015-01-08T00:00:00Z
PRECISION = ControlMessage(epoch0=EPOCH0, period_s=8.0, mechanism="duchi", eps_levels=[1.0])


def window(region: str, n: int, mechanism: str, eps: float = 1.0) -> WindowMessage:
    values = [float(i % 2) * 4000.0 for i in range(n)]
    if mechanism == "mallows":
        g = window_guarantee("mallows", eps0=eps, n=n, delta=1e-6, alpha=2.0, theta=0.056)
        batch = LevelBatch(eps=eps, kind="duchi", values=values, mechanism="mallows", theta=0.056, delta_k=36,
                           omega=8, k=1, groups=[(0, n - 1)], guarantee=g)
    else:
        g = window_guarantee("uniform", eps0=eps, n=n, delta=1e-6)
        batch = LevelBatch(eps=eps, kind="duchi", values=values, mechanism="uniform", delta_k=0, omega=0, k=1,
                           groups=[(0, n - 1)], guarantee=g)
    return WindowMessage(region=region, t=3, n=n, alpha=2.0, batches=[batch])


def agg(windows, **kw) -> Aggregate:
    a, _ = aggregate(3, windows, PRECISION, {w.region for w in windows}, bootstrap_b=50, **kw)
    return Aggregate.model_validate_json(a.model_dump_json())     # as a subscriber reads it


def test_wall_clock_time_of_period_t():
    a = agg([window("r1", 45, "uniform")])
    assert (a.t_start, a.t_end, a.period_s) == (EPOCH0 + 24.0, EPOCH0 + 32.0, 8.0)
    assert (a.t_start_iso, a.t_end_iso) == ("2015-01-08T00:00:24.000Z", "2015-01-08T00:00:32.000Z")


def test_privacy_unit_of_a_uniformly_shuffled_aggregate():
    a = agg([window("r1", 1000, "uniform"), window("r2", 1200, "uniform")])
    u = a.privacy_unit
    assert (u.eps_per_report, u.eps_per_hour, u.eps_per_day) == (1.0, 450.0, 10_800.0)
    assert u.shuffle == "uniform" and u.d_sigma_alpha is None and u.central_delta == 1e-6
    # The weaker of the two windows (the smaller one) is the unit's central eps.
    assert u.central_eps == pytest.approx(window_guarantee("uniform", eps0=1.0, n=1000, delta=1e-6)["eps"])
    assert u.central_eps < 0.2 and "central (0.18" in u.statement and "10,800 per day" in u.statement


def test_privacy_unit_of_a_mallows_aggregate_claims_no_central_eps():
    u = agg([window("r1", 45, "mallows")]).privacy_unit
    assert u.shuffle == "d_sigma" and u.central_eps is None and u.d_sigma_alpha == 2.0
    assert "no amplification by shuffling claimed" in u.statement
    mixed = agg([window("r1", 45, "mallows"), window("r2", 45, "uniform")]).privacy_unit
    assert mixed.shuffle == "mixed" and mixed.central_eps is None


@pytest.mark.parametrize("windows, met, why", [
    ([("r1", 1000, "uniform")], True, "every window uniformly shuffled"),
    ([("r1", 1000, "uniform"), ("r2", 45, "mallows")], False, "window r2 was shuffled by Mallows"),
    ([("r1", 45, "uniform")], False, "window r1 (45 reports at eps 1) is central (0.98"),
])
def test_the_central_target_is_claimed_only_where_every_window_met_it(windows, met, why):
    target = CentralTarget(eps=0.5, delta=1e-6, devices=1000)
    check = agg([window(*w) for w in windows], central_target=target).privacy_unit.central_target
    assert check.met is met and why in check.reason and (check.eps, check.delta) == (0.5, 1e-6)


def test_clipping_bound_widens_the_mean_interval_upwards():
    plain = agg([window("r1", 45, "uniform")])
    assert plain.clipping.bias_bound is None and not plain.clipping.widened
    assert "clipped" in plain.clipping.note
    wide = agg([window("r1", 45, "uniform")], clip_bias_bound=12.5)
    lo, hi = plain.estimates["mean"].ci
    assert wide.estimates["mean"].ci == (lo, pytest.approx(hi + 12.5))
    assert wide.estimates["mean"].value == plain.estimates["mean"].value
    assert wide.estimates["mean"].method.endswith("+clip-bias") and wide.clipping.widened
    # Only mean's interval is about the true mean (Duchi publishes only mean since issue 16).
    assert all(wide.estimates[k].ci == plain.estimates[k].ci for k in plain.estimates if k != "mean")
