"""fog_shuffler.screen.detection: the per-device sequential test, table- and
statistics-tested. Detection times of the worst attacker (the mechanism's
largest output every period), honest devices at the worst reading never
quarantined beyond the stated rate, and the staging the journal relies on."""

import math

import numpy as np
import pytest

from fog_shuffler.screen.detection import SECONDS_PER_DAY, Detector, DeviceState, plan_for, threshold
from rase_common.mechanisms import Setting, mechanism
from simulators import poison

SETTING = Setting()
FIFTEEN_MINUTES = 15 * 60 // 8      # reports at period 8 s


def largest_output(kind: str, eps: float) -> float:
    """The largest report the fog's ingest check accepts (simulators.poison)."""
    return poison.largest_output(kind, SETTING, eps)


def reports_to_quarantine(kind: str, eps: float, ys, period_s: float = 8.0) -> int | None:
    d = Detector(period_s=period_s, setting=SETTING)
    for n, y in enumerate(ys, start=1):
        if d.observe("a", float(y), eps, kind, n, day=0) is not None:
            return n
    return None


def test_threshold_is_the_union_bound():
    """h = ln(S N / alpha): S CUSUMs, N = ceil(86400 / period) + 1 start points a day."""
    assert threshold(4, 8.0, 1e-6) == pytest.approx(math.log(4 * 10_801 / 1e-6))
    assert threshold(8, 60.0, 1e-3) == pytest.approx(math.log(8 * 1_441 / 1e-3))
    with pytest.raises(ValueError, match="period_s"):
        threshold(4, 0.0)
    with pytest.raises(ValueError, match="false_alarm"):
        threshold(4, 8.0, 0.0)


# Reports of the largest output until quarantine, eps 1, period 8 s (15 minutes = 112).
DETECTION_REPORTS = {"br": 38, "duchi": 83, "piecewise": 4, "hybrid": 3, "binary": 83, "categorical": 36}


@pytest.mark.parametrize("kind", list(DETECTION_REPORTS))
def test_the_largest_output_every_period_is_quarantined_within_15_minutes(kind):
    n = reports_to_quarantine(kind, 1.0, [largest_output(kind, 1.0)] * 1000)
    assert n == DETECTION_REPORTS[kind]
    assert n <= FIFTEEN_MINUTES


@pytest.mark.parametrize("kind", ["br", "duchi", "piecewise", "hybrid"])
def test_the_smallest_output_is_quarantined_too(kind):
    cal = SETTING.calibration
    low = cal.x_min if kind == "br" else float(min(mechanism(kind).device_values(cal, 1.0)))
    assert reports_to_quarantine(kind, 1.0, [low] * 1000) <= FIFTEEN_MINUTES


def test_a_device_that_mixes_in_honest_looking_reports_is_caught_by_the_half_way_cusum():
    """Duchi's +C 90% of the time (an honest device at x_max sends it 73%):
    the largest-output CUSUM alone would not see it; the half-way one does."""
    rng = np.random.default_rng(3)
    lo, hi = mechanism("duchi").device_values(SETTING.calibration, 1.0)
    times = [reports_to_quarantine("duchi", 1.0, np.where(rng.random(10_800) < 0.9, hi, lo)) for _ in range(20)]
    assert all(n is not None for n in times)
    assert np.median(times) < 60 * 60 // 8      # within an hour


@pytest.mark.parametrize("kind", ["duchi", "piecewise", "br"])
def test_honest_devices_at_the_worst_reading_are_quarantined_less_often_than_stated(kind):
    """A short "day" (period 86400/200 s: 201 start points) and alpha 0.05:
    1,000 honest devices reading x_max (the worst case) for a day. The bound
    says at most 5% are quarantined; seeded, tolerance 3 standard errors."""
    period = SECONDS_PER_DAY / 200
    rng = np.random.default_rng(11)
    d = Detector(period_s=period, setting=SETTING, false_alarm=0.05)
    y = mechanism(kind).sample(SETTING, 1.0, np.full((1_000, 200), SETTING.x_max), rng)
    alarms = 0
    for i in range(y.shape[0]):
        for t in range(y.shape[1]):
            if d.observe(f"d{i}", float(y[i, t]), 1.0, kind, t, day=0) is not None:
                alarms += 1
                break
    assert alarms / 1_000 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 1_000)
    # The same test is not blind: every attacker in the same setting is caught.
    top = largest_output(kind, 1.0)
    assert reports_to_quarantine(kind, 1.0, [top] * 200, period) is not None


def test_staging_commit_rollback_and_release():
    d = Detector(period_s=8.0, setting=SETTING)
    top = largest_output("piecewise", 1.0)
    alarm = None
    for t in range(10):
        alarm = alarm or d.observe("att", top, 1.0, "piecewise", t, day=0)
    assert alarm is not None and d.is_quarantined("att")
    d.rollback()                                   # the batch was not journaled
    assert not d.is_quarantined("att") and "att" not in d.states
    for t in range(10):
        d.observe("att", top, 1.0, "piecewise", t, day=0)
    d.observe("ok", 2000.0, 1.0, "piecewise", 0, day=0)
    rows = d.staged_rows()
    assert {r[0] for r in rows} == {"att", "ok"}
    d.commit()
    assert d.quarantined == {"att": alarm.t} and d.staged_rows() == []
    assert d.observe("att", top, 1.0, "piecewise", 99, day=5) is None      # sticky across days
    assert d.is_quarantined("att")
    assert d.release("att") and not d.is_quarantined("att") and "att" not in d.states
    assert not d.release("att")


def test_a_new_day_or_kind_restarts_the_statistics():
    d = Detector(period_s=8.0, setting=SETTING)
    top = largest_output("duchi", 1.0)
    for t in range(50):
        d.observe("a", top, 1.0, "duchi", t, day=0)
    d.commit()
    assert d.states["a"].reports == 50 and max(d.states["a"].cusum) > 10
    d.observe("a", 2000.0, 1.0, "duchi", 10_800, day=1)
    d.commit()
    assert d.states["a"].reports == 1 and d.states["a"].day == 1 and max(d.states["a"].cusum) < 1
    d.observe("a", 1.0, 1.0, "binary", 10_801, day=1)
    d.commit()
    assert d.states["a"].kind == "binary" and d.states["a"].reports == 1


def test_state_rows_round_trip():
    s = DeviceState("duchi", 3, 12, 1234.5, [0.0, 1.25, 3.5, 0.0])
    device, back = DeviceState.from_row(s.as_row("dev"))
    assert device == "dev" and back == s


def test_alarm_line_names_the_device_test_and_rate():
    d = Detector(period_s=8.0, setting=SETTING)
    top = largest_output("duchi", 1.0)
    alarm = None
    t = 0
    while alarm is None:
        t += 1
        alarm = d.observe("h9a1", top, 1.0, "duchi", t, day=0)
    line = alarm.line()
    assert "h9a1" in line and "above (largest output)" in line and "1e-06 per honest device-day" in line
    assert f"after {DETECTION_REPORTS['duchi']} reports" in line and "6,327.9" in line


def test_plans_choose_lams_for_both_attackers():
    plan = plan_for("duchi", 1.0, SETTING)
    assert [c.target for c in plan.cusums] == ["largest output", "half-way"] * 2
    above = plan.tests[0]
    ext = plan.cusums[0]
    # The largest-output CUSUM gains at least 95% of the likelihood ratio's -ln P(+C | x_max) per report.
    assert ext.lam * above.largest - ext.log_mgf >= 0.95 * -math.log(above.largest_prob) - 1e-9


def plain_observe(plan, h: float, state: dict, y: float) -> bool:
    """The detector's update as the module docstring defines it, one report,
    nothing remembered: W = max(0, W + lam s(y) - log_mgf); True when max W >= h."""
    state["reports"] += 1
    state["total"] += plan.value(y)
    state["cusum"] = [max(0.0, w + inc) for w, inc in zip(state["cusum"], plan.increments(y))]
    return max(state["cusum"]) >= h


def test_the_detector_gives_exactly_the_plain_definitions_numbers():
    """Seeded reports (honest, attackers, -0.0, mixed eps, a day change and
    another kind mid-stream) from 40 devices through Detector.observe, with
    a rolled-back batch among them, against plain_observe: the same floats
    and the same alarms, report by report."""
    rng = np.random.default_rng(17)
    d = Detector(period_s=8.0, setting=SETTING)
    plain: dict[str, dict] = {}
    quarantined: set[str] = set()
    kinds = ["br", "duchi", "piecewise", "binary", "categorical"]
    for batch in range(30):
        saved = ({k: {**v, "cusum": list(v["cusum"])} for k, v in plain.items()}, set(quarantined))
        for _ in range(100):
            i = int(rng.integers(40))             # d0..d9 attack: the largest output, or often
            dev, kind = f"d{i}", kinds[i % 5] if batch < 20 or i % 2 else "duchi"
            eps = float(rng.choice([0.5, 1.0])) if i >= 10 else 1.0
            day = 0 if batch < 25 else 1
            if i < 5 or (i < 10 and rng.random() < 0.6):
                y = largest_output(kind, eps)
            elif rng.random() < 0.05:
                y = -0.0
            else:
                y = float(mechanism(kind).sample(SETTING, eps, np.array([3000.0]), rng)[0])
            alarm = d.observe(dev, y, eps, kind, batch, day)
            if dev in quarantined:
                assert alarm is None
                continue
            plan = plan_for(kind, eps, SETTING)
            h = threshold(len(plan.cusums), 8.0)
            s = plain.get(dev)
            if s is None or (s["kind"], s["day"], len(s["cusum"])) != (kind, day, len(plan.cusums)):
                s = plain[dev] = {"kind": kind, "day": day, "reports": 0, "total": 0.0,
                                  "cusum": [0.0] * len(plan.cusums)}
            assert (alarm is not None) == plain_observe(plan, h, s, y)
            if alarm is not None:
                quarantined.add(dev)
                assert alarm.statistic == max(s["cusum"]) and alarm.reports_today == s["reports"]
        if batch % 7 == 3:
            d.rollback()
            plain, quarantined = saved
        else:
            d.commit()
        for dev, s in plain.items():
            got = d.states[dev]
            assert (got.kind, got.day, got.reports, got.total, got.cusum) == tuple(s.values()), dev
    assert set(d.quarantined) == quarantined and len(quarantined) >= 4


def test_checkpoint_rows_are_the_devices_changed_since_the_last_checkpoint():
    d = Detector(period_s=8.0, setting=SETTING)
    d.observe("a", 100.0, 1.0, "duchi", 0, day=0)
    d.commit()
    d.observe("b", 100.0, 1.0, "duchi", 0, day=0)
    assert {r[0] for r in d.checkpoint_rows()} == {"a", "b"}      # committed batches and this one
    d.rollback()                                                  # b's batch was not journaled
    assert {r[0] for r in d.checkpoint_rows()} == {"a"}
    d.checkpointed()
    assert d.checkpoint_rows() == []
    d.observe("c", 100.0, 1.0, "duchi", 1, day=0)
    d.commit()
    d.release("c")                                                # its row goes with the release
    assert d.checkpoint_rows() == []
    d.observe("a", 100.0, 1.0, "duchi", 2, day=0)
    d.commit()
    rows = d.checkpoint_rows()
    assert [DeviceState.from_row(r) for r in rows] == [("a", d.states["a"])] and d.states["a"].reports == 2
