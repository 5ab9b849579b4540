"""The privacy budget ledger: refuses overspend, survives restarts."""

import json

import pytest

from edge_agent.ledger import BudgetLedger


def test_refuses_overspend(tmp_path):
    led = BudgetLedger(str(tmp_path / "l.json"), budget_eps=3.0, period_s=86400)
    assert [led.try_spend(1.0, 100.0) for _ in range(4)] == [True, True, True, False]
    assert led.remaining(100.0) == 0.0


def test_state_survives_restart(tmp_path):
    path = str(tmp_path / "l.json")
    led = BudgetLedger(path, budget_eps=2.5, period_s=86400)
    assert led.try_spend(1.0, 10.0) and led.try_spend(1.0, 20.0)
    again = BudgetLedger(path, budget_eps=2.5, period_s=86400)
    assert again.remaining(30.0) == pytest.approx(0.5)
    assert not again.try_spend(1.0, 30.0)


def test_new_period_refills_but_clock_going_back_does_not(tmp_path):
    led = BudgetLedger(str(tmp_path / "l.json"), budget_eps=1.0, period_s=100)
    assert led.try_spend(1.0, 50.0)
    assert not led.try_spend(1.0, 99.0)
    assert led.try_spend(1.0, 150.0)        # period 1
    assert not led.try_spend(1.0, 20.0)     # clock jumped back into period 0


def test_charges_round_up(tmp_path):
    led = BudgetLedger(str(tmp_path / "l.json"), budget_eps=1.0, period_s=100)
    # 0.1 is not a multiple of 1/65536: ten charges must not fit in 1.0.
    spent = sum(led.try_spend(0.1, 1.0) for _ in range(10))
    assert spent == 9


def test_torn_write_falls_back_to_tmp_copy(tmp_path):
    path = tmp_path / "l.json"
    (tmp_path / "l.json.tmp").write_text(json.dumps({"v": 1, "period": 0, "spent_units": 65536}))
    led = BudgetLedger(str(path), budget_eps=1.0, period_s=100)
    assert not led.try_spend(0.5, 1.0)


@pytest.mark.parametrize("kw,match", [({"budget_eps": 0}, "budget_eps"), ({"period_s": 0}, "period_s")])
def test_bad_arguments(tmp_path, kw, match):
    args = {"budget_eps": 1.0, "period_s": 10} | kw
    with pytest.raises(ValueError, match=match):
        BudgetLedger(str(tmp_path / "l.json"), **args)


def test_reserving_blocks_writes_less_and_a_reboot_counts_the_block_spent(tmp_path):
    path = str(tmp_path / "l.json")
    led = BudgetLedger(path, budget_eps=100.0, period_s=86400, reserve_reports=10)
    assert all(led.try_spend(1.0, 5.0) for _ in range(25))
    assert led.writes == 3                       # blocks of 10 reports: at report 1, 11, 21
    assert led.remaining(5.0) == pytest.approx(75.0)
    again = BudgetLedger(path, budget_eps=100.0, period_s=86400, reserve_reports=10)
    assert again.remaining(5.0) == pytest.approx(70.0)   # the unused 5 of the block are gone, not refilled
    assert sum(again.try_spend(1.0, 6.0) for _ in range(100)) == 70


def test_reservation_never_exceeds_the_budget(tmp_path):
    led = BudgetLedger(str(tmp_path / "l.json"), budget_eps=3.5, period_s=86400, reserve_reports=50)
    assert [led.try_spend(1.0, 1.0) for _ in range(4)] == [True, True, True, False]
    assert json.loads((tmp_path / "l.json").read_text())["spent_units"] <= 3.5 * 65536
