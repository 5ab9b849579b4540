"""`rase plan` (simulators.plan): the guarantee each mode spends and its
predicted error, checked against simulations of the same readings (local DP
through the registry's exact samplers, secure aggregation through the exact
sum plus both aggregators' noise)."""

import numpy as np
import pytest

from rase_common.mechanisms import Setting
from simulators.evaluation import compare_simulated
from simulators.plan import format_plan, local_mae, plan, plan_prediction, product_readings, secure_mae
from simulators.refit import bundled_dir


def test_every_mode_spends_the_days_budget_and_secure_aggregation_never_divides():
    rows = plan(1000, 8.0, "hourly", 10.0, data_dir=bundled_dir())
    assert all(r.eps_per_day == 10.0 for r in rows)
    secure = [r for r in rows if r.mode == "secure"]
    assert len(secure) == 1 and secure[0].groups == 1 and secure[0].eps_per_release == pytest.approx(10 / 24)
    assert secure[0].mae_w == pytest.approx(1.5 * 4000 / (1000 * 10 / 24), rel=1e-3)   # two draws: 1.5 Delta/(n e)
    for name in ("br", "duchi"):
        mine = [r for r in rows if r.mechanism == name]
        assert mine[0].groups == 1 and (len(mine) == 1 or mine[1].mae_w < mine[0].mae_w)
        assert all(r.eps_per_release == pytest.approx(mine[0].eps_per_release * r.groups) for r in mine)
    text = format_plan(rows, 1000, 8.0, "hourly", 10.0)
    assert "24 releases a day" in text and "prio3" in text


def test_hourly_readings_are_the_devices_rounded_hourly_means():
    s = Setting()
    per_t = product_readings(bundled_dir(), 8.0, "per-t", s)
    hourly = product_readings(bundled_dir(), 8.0, "hourly", s)
    assert hourly.shape == (per_t.shape[0], 24)
    block = per_t[3, :450]
    assert hourly[3, 0] == np.floor(np.nanmean(np.floor(block + 0.5)) + 0.5)


@pytest.mark.parametrize("name", ["br", "duchi", "prio3"])
def test_predictions_agree_with_simulations_within_ten_percent(name):
    """45 devices, 4 hours (1,800 timestamps), eps 1: the plan's prediction for
    these readings against the simulated MAE (its standard error is about 2%)."""
    (row,) = compare_simulated(bundled_dir(), [1, 2, 3, 5, 12], [name], [1.0], hours=4.0, seed=3)
    if name == "prio3":
        predicted = secure_mae(1.0, 45, Setting())
        assert predicted == pytest.approx(plan_prediction("prio3", 1.0, 45, data_dir=bundled_dir()))
    else:
        x = product_readings(bundled_dir(), 8.0, "per-t", Setting())[:, :1800]
        predicted = local_mae(name, x, 1.0, 45, 45, Setting())
    assert row["mae"] == pytest.approx(predicted, rel=0.10)
