"""Event-time windows: close times, early close, duplicates, late, k_min."""

import pytest

from fog_shuffler.ingest import Accepted
from fog_shuffler.windows import Outcome, WindowManager

DEVICES = {f"d{i}" for i in range(12)}


def wm(**kw):
    return WindowManager(registered={"r1": DEVICES}, **({"k_min": 3, "lateness_periods": 1} | kw))


def rep(device, t, y=1.0, eps=1.0, region="r1"):
    return Accepted(region, device, t, y, eps)


@pytest.mark.parametrize("now_t,due", [(5, False), (6, False), (7, True), (9, True)])
def test_closes_at_t_plus_one_plus_lateness(now_t, due):
    m = wm()
    m.add(rep("d1", 5))
    assert (m.due(now_t) == [("r1", 5)]) is due


def test_early_close_when_every_registered_device_reported():
    m = wm()
    for d in sorted(DEVICES):
        m.add(rep(d, 5))
    assert m.due(5) == [("r1", 5)]


def test_duplicates_dropped_first_wins_and_late_counted():
    m = wm()
    assert m.add(rep("d1", 5, y=10.0)) == Outcome.ACCEPTED
    assert m.add(rep("d1", 5, y=99.0)) == Outcome.DUPLICATE
    for d in ("d2", "d3"):
        m.add(rep(d, 5))
    cw = m.close("r1", 5)
    assert sorted(cw.values) == [1.0, 1.0, 10.0] and cw.duplicates == 1 and not cw.suppressed
    assert m.add(rep("d4", 5)) == Outcome.LATE and m.late["r1"] == 1


def test_window_under_k_min_is_suppressed():
    m = wm(k_min=3)
    m.add(rep("d1", 5))
    m.add(rep("d2", 5))
    assert m.close("r1", 5).suppressed


def test_eps_levels_under_k_min_dropped_and_counted():
    m = wm(k_min=3)
    for i in range(4):
        m.add(rep(f"d{i}", 5, eps=1.0))
    m.add(rep("d8", 5, eps=0.5))           # a lone eps level would single its sender out
    cw = m.close("r1", 5)
    assert cw.eps == [1.0] * 4 and cw.eps_level_dropped == 1 and not cw.suppressed


def test_arrival_order_kept_until_the_shuffle():
    m = wm()
    for i, d in enumerate(["d5", "d1", "d9"]):
        m.add(rep(d, 5, y=float(i)))
    assert m.close("r1", 5).devices == ["d5", "d1", "d9"]


@pytest.mark.parametrize("kw,match", [({"k_min": 0}, "k_min"), ({"lateness_periods": -1}, "lateness")])
def test_bad_parameters(kw, match):
    with pytest.raises(ValueError, match=match):
        wm(**kw)


def test_journal_prunes_old_closed_windows_and_sent_messages(tmp_path):
    from fog_shuffler.journal import Journal

    j = Journal(tmp_path / "j.sqlite")
    j.add_reports([("r1", 5, "d1", 1.0, 1.0, 0, "br")], [])
    for t in (5, 6, 9):
        j.close_window("r1", t, f"payload {t}")
    j.mark_sent("r1", 5)
    j.mark_sent("r1", 9)
    assert j.open_reports() == []
    j.prune(8)
    assert j.closed_windows() == {("r1", 9)}
    assert [(r, t) for r, t, _ in j.unsent()] == [("r1", 6)]   # unsent messages are kept whatever their age


def test_a_window_with_two_report_kinds_keeps_them_apart():
    """Around a control change that switches the mechanism: reports checked as
    BR and as binary in one window close into separate (eps, kind) groups,
    each held to k_min on its own."""
    wm = WindowManager(registered={"r1": {f"d{i}" for i in range(30)}}, k_min=5, lateness_periods=1)
    for i in range(12):
        wm.add(Accepted("r1", f"d{i}", 7, float(100 + i), 1.0, "br"))
    for i in range(12, 16):                     # only 4 binary reports: under k_min
        wm.add(Accepted("r1", f"d{i}", 7, 1.0, 1.0, "binary"))
    cw = wm.close("r1", 7)
    assert cw.mechanisms == ["br"] * 12 and cw.eps_level_dropped == 4 and not cw.suppressed


def test_a_journal_from_before_report_kinds_opens_with_br_reports(tmp_path):
    import sqlite3

    from fog_shuffler.journal import Journal

    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE reports (region TEXT, t INTEGER, device TEXT, y REAL, eps REAL, seq INTEGER, "
                "PRIMARY KEY (region, t, device))")
    con.execute("INSERT INTO reports VALUES ('r1', 5, 'd1', 12.0, 1.0, 0)")
    con.commit()
    con.close()
    j = Journal(path)
    assert j.open_reports() == [("r1", 5, "d1", 12.0, 1.0, "br")]
    j.add_reports([("r1", 5, "d2", 1.0, 1.0, 0, "binary")], [])
    assert j.open_reports()[-1][-1] == "binary"
    j.close()
