"""`rase eval poison` on a small fleet: the fog's real ingest check refuses
reports beyond the range, its real detector quarantines every extreme
attacker within 15 minutes and then the shift is gone, and a false reading
(which no LDP test can see) shifts the mean by m/n (x_max - the readings)."""

import numpy as np
import pytest

from simulators.poison import format_rows, run_poison
from simulators.refit import bundled_dir


@pytest.fixture(scope="module")
def rows():
    return {r.behaviour: r for r in run_poison(bundled_dir(), [1, 2, 3, 5, 12], eps=1.0, hours=0.5, clone=3,
                                               fractions=(0.05,), mechanisms=("duchi",), seed=3)}


def test_beyond_range_is_refused_by_the_ingest_check(rows):
    r = rows["beyond range"]
    # (not exactly 0: in the clean run those devices' honest reports are in the mean)
    assert r.accepted == 0 and abs(r.shift_before) < 20


def test_the_extreme_output_is_quarantined_and_its_shift_goes(rows):
    r = rows["largest output"]
    assert (r.devices, r.attackers) == (135, 7) and r.accepted == 1
    # Each attacker adds (+C - its reading) / n: about 7 x 6,300 / 135.
    assert 250 < r.shift_before < 400
    assert r.quarantined == 7 and r.minutes_to_quarantine <= 15
    assert abs(r.shift_after_quarantine) < 40 and r.coverage_after > r.coverage_before
    assert r.honest_quarantined == 0


def test_a_false_reading_is_not_detected_and_shifts_by_its_lie(rows):
    r = rows["false reading"]
    assert r.quarantined == 0 and r.accepted == 1
    # 7 devices claim 4,000 W instead of about 20 W: 7 x 3,980 / 135 = 206 W, within the noise of 225 timestamps.
    assert r.shift_before == pytest.approx(206, abs=40)
    assert r.shift_after == pytest.approx(r.shift_before)


def test_the_table_prints(rows):
    text = format_rows(list(rows.values()))
    assert "largest output" in text and "honest devices quarantined: duchi 0" in text
    assert np.isfinite(rows["largest output"].ci_shift_before).all()


@pytest.mark.parametrize("kind", ["br", "duchi", "piecewise", "hybrid"])
def test_a_day_of_the_bundled_houses_quarantines_no_honest_device(kind):
    """The real readings of the 45 bundled devices for 24 h (10,800 reports
    each) through the fog's ingest check and detector at the real
    false-positive rate: no device is quarantined, and the largest CUSUM
    stays well below the threshold."""
    from fog_shuffler.screen.detection import Detector
    from rase_common.mechanisms import Setting
    from simulators.evaluation import readings_matrix
    from simulators.pipeline import fleet
    from simulators.poison import Fleet
    from simulators.refit import epoch0_of, load_house

    hs = [load_house(bundled_dir(), h) for h in (1, 2, 3, 5, 12)]
    x = readings_matrix(fleet(hs, 1, 3600.0), epoch0_of(hs, 8.0), 8.0, 0, 10_800)
    fl = Fleet(kind, x, 1.0, Setting(), np.random.default_rng(17), 8.0)
    assert fl.accepted.sum() == (~np.isnan(x)).sum()          # every honest report passes the ingest check
    det = Detector(period_s=8.0, setting=Setting())
    for i in range(x.shape[0]):
        for t in np.flatnonzero(fl.accepted[i]):
            assert det.observe(f"d{i}", float(fl.reports[i, t]), 1.0, kind, int(t), day=0) is None
    det.commit()
    assert max(max(s.cusum) for s in det.states.values()) < det.threshold_for(kind, 1.0) / 2
