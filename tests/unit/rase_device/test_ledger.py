"""The privacy budget ledger: refuses overspend, survives restarts."""

import json

import pytest

from rase_device.ledger import BudgetLedger


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


@pytest.mark.parametrize("content", [
    "",                                               # empty: a write that never happened
    '{"v": 1, "period": 0, "spent_un',                # torn
    "\x00\x00\x00\x00",                               # corrupt
    '{"v": 1, "period": "zero", "spent_units": 5}',   # wrong types
    '{"v": 1, "period": 0, "spent_units": -65536}',   # negative spend would refill
    "[]",
])
def test_an_unreadable_ledger_fails_closed_for_the_current_period(tmp_path, content):
    path = tmp_path / "l.json"
    path.write_text(content)
    led = BudgetLedger(str(path), budget_eps=10.0, period_s=100)
    # 0 refilled: nothing can be spent in the period the bad ledger was found ...
    assert led.locked(150.0) and led.remaining(150.0) == 0.0
    assert not led.try_spend(0.5, 160.0)
    # ... and that survives a restart (the lock was written as spend).
    led2 = BudgetLedger(str(path), budget_eps=10.0, period_s=100)
    assert not led2.locked(170.0) and led2.remaining(170.0) == 0.0
    # The next period is a fresh budget.
    assert not led2.locked(200.0) and led2.try_spend(0.5, 200.0)
    assert led2.remaining(200.0) == pytest.approx(9.5)


def test_a_missing_ledger_is_a_new_device(tmp_path):
    led = BudgetLedger(str(tmp_path / "new.json"), budget_eps=1.0, period_s=100)
    assert not led.locked(1.0) and led.try_spend(1.0, 1.0)


def test_the_core_says_ledger_unreadable_and_charges_nothing(tmp_path):
    from rase_device.core import AgentCore
    from rase_device.randomizer import Calibration

    path = tmp_path / "l.json"
    path.write_text("garbage")
    core = AgentCore(device="d", region="r", eps=1.0, calibration=Calibration(), period_s=8,
                     ledger=BudgetLedger(str(path), budget_eps=100.0, period_s=86400))
    assert core.step(5.0, 1000.0) is None and core.status == "ledger_unreadable" and core.sent == 0
    assert core.step(5.0, 86400.0 + 1000.0) is not None and core.status == "online"
    assert core.ledger.remaining(86400.0 + 1000.0) == pytest.approx(99.0)


def _block_writes(path):
    """Make the ledger's next write fail with a real OSError from the file
    system: its .tmp name is taken by a directory (EISDIR; root ignores
    permissions, so a read-only file would not do)."""
    (path.parent / (path.name + ".tmp")).mkdir()


def _allow_writes(path):
    (path.parent / (path.name + ".tmp")).rmdir()


def test_a_reservation_that_cannot_be_written_is_not_spent(tmp_path):
    path = tmp_path / "l.json"
    led = BudgetLedger(str(path), budget_eps=100.0, period_s=86400, reserve_reports=4)
    assert sum(led.try_spend(1.0, 5.0) for _ in range(6)) == 6      # blocks at reports 1 and 5
    _block_writes(path)
    # The second block (reports 5-8) is on flash: reports 7 and 8 may use it ...
    assert led.try_spend(1.0, 5.0) and led.try_spend(1.0, 5.0) and not led.unwritable
    # ... and not one more: the third block was never written.
    assert [led.try_spend(1.0, 5.0) for _ in range(5)] == [False] * 5
    assert led.unwritable and led.write_errors == 5 and "IsADirectoryError" in led.last_write_error
    assert led.remaining(5.0) == pytest.approx(92.0)
    # A reboot now refunds nothing: the file holds exactly what was used.
    assert BudgetLedger(str(path), budget_eps=100.0, period_s=86400).remaining(5.0) == pytest.approx(92.0)
    _allow_writes(path)
    assert led.try_spend(1.0, 5.0) and not led.unwritable
    assert json.loads(path.read_text())["spent_units"] == 12 * 65536


def test_an_unreadable_ledger_stays_locked_when_the_lock_cannot_be_written(tmp_path):
    path = tmp_path / "l.json"
    path.write_text("garbage")
    _block_writes(path)
    led = BudgetLedger(str(path), budget_eps=10.0, period_s=100)
    assert led.locked(150.0) and led.unwritable and not led.try_spend(0.5, 160.0)


def test_the_core_says_ledger_unwritable_and_resumes_when_the_write_works(tmp_path):
    from rase_device.core import AgentCore
    from rase_device.randomizer import Calibration

    path = tmp_path / "l.json"
    core = AgentCore(device="d", region="r", eps=1.0, calibration=Calibration(), period_s=8,
                     ledger=BudgetLedger(str(path), budget_eps=100.0, period_s=86400))
    _block_writes(path)
    assert core.step(5.0, 1000.0) is None and core.status == "ledger_unwritable"
    assert core.sent == 0 and core.skipped_budget == 0 and not len(core.outbox)
    _allow_writes(path)
    assert core.step(5.0, 1008.0) is not None and core.status == "online" and core.sent == 1


def test_sequence_numbers_are_reserved_with_the_budget_and_continue_after_a_reboot(tmp_path):
    from rase_device.core import AgentCore
    from rase_device.randomizer import Calibration

    path = tmp_path / "l.json"

    def core():
        led = BudgetLedger(str(path), budget_eps=1000.0, period_s=86400, reserve_reports=4)
        return AgentCore(device="d1", region="r1", eps=1.0, ledger=led, calibration=Calibration(), period_s=8)

    first = core()
    made = [json.loads(first.step(100.0, 8.0 * t + 1))["seq"] for t in range(6)]
    assert made == [1, 2, 3, 4, 5, 6]
    # Numbers are reserved in the budget's blocks of 4 and its writes: reports 1 and 5 wrote, up to 8.
    assert first.ledger.writes == 2 and json.loads(path.read_text())["seq"] == 8
    again = core()                                   # a reboot: 7 and 8 may have been used, never reused
    assert json.loads(again.step(100.0, 8.0 * 10 + 1))["seq"] == 9
    # A smaller eps on the same budget block still reserves numbers before using them.
    led = again.ledger
    assert led.try_spend(0.25, 100.0, 13) and led.seq_reserved == 16


def test_an_older_ledger_without_numbers_starts_at_one_and_a_failed_write_reserves_none(tmp_path):
    path = tmp_path / "l.json"
    path.write_text(json.dumps({"v": 1, "period": 0, "spent_units": 65536}))
    led = BudgetLedger(str(path), budget_eps=100.0, period_s=86400, reserve_reports=4)
    assert led.seq_reserved == 0 and led.remaining(5.0) == pytest.approx(99.0)
    _block_writes(path)
    assert not led.try_spend(1.0, 5.0, 1) and led.seq_reserved == 0     # nothing on flash: nothing reserved
    _allow_writes(path)
    assert led.try_spend(1.0, 5.0, 1) and json.loads(path.read_text())["seq"] == 4
    for bad in ('{"v": 1, "period": 0, "spent_units": 5, "seq": -1}', '{"v": 1, "period": 0, "spent_units": 5, '
                                                                     '"seq": "x"}'):
        path.write_text(bad)
        assert BudgetLedger(str(path), budget_eps=100.0, period_s=86400).locked(5.0)
