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
    m.add(rep("d1", 5), 5)
    assert (m.due(now_t) == [("r1", 5)]) is due


def test_early_close_when_every_registered_device_reported():
    m = wm()
    for d in sorted(DEVICES):
        m.add(rep(d, 5), 5)
    assert m.due(5) == [("r1", 5)]


def test_duplicates_dropped_first_wins_and_late_counted():
    m = wm()
    assert m.add(rep("d1", 5, y=10.0), 5) == Outcome.ACCEPTED
    assert m.add(rep("d1", 5, y=99.0), 5) == Outcome.DUPLICATE
    for d in ("d2", "d3"):
        m.add(rep(d, 5), 5)
    cw = m.close("r1", 5)
    assert sorted(cw.values) == [1.0, 1.0, 10.0] and cw.duplicates == 1 and not cw.suppressed
    assert m.add(rep("d4", 5), 5) == Outcome.LATE and m.late["r1"] == 1


def test_window_under_k_min_is_suppressed():
    m = wm(k_min=3)
    m.add(rep("d1", 5), 5)
    m.add(rep("d2", 5), 5)
    assert m.close("r1", 5).suppressed


def test_eps_levels_under_k_min_dropped_and_counted():
    m = wm(k_min=3)
    for i in range(4):
        m.add(rep(f"d{i}", 5, eps=1.0), 5)
    m.add(rep("d8", 5, eps=0.5), 5)           # a lone eps level would single its sender out
    cw = m.close("r1", 5)
    assert cw.eps == [1.0] * 4 and cw.eps_level_dropped == 1 and not cw.suppressed


def test_arrival_order_kept_until_the_shuffle():
    m = wm()
    for i, d in enumerate(["d5", "d1", "d9"]):
        m.add(rep(d, 5, y=float(i)), 5)
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
    assert j.closed_windows() == {("r1", 9): 0}
    assert [(r, t) for r, t, _, _ in j.unsent()] == [("r1", 6)]   # unsent messages are kept whatever their age


def test_a_window_with_two_report_kinds_keeps_them_apart():
    """Around a control change that switches the mechanism: reports checked as
    BR and as binary in one window close into separate (eps, kind) groups,
    each held to k_min on its own."""
    wm = WindowManager(registered={"r1": {f"d{i}" for i in range(30)}}, k_min=5, lateness_periods=1)
    for i in range(12):
        wm.add(Accepted("r1", f"d{i}", 7, float(100 + i), 1.0, "br"), 7)
    for i in range(12, 16):                     # only 4 binary reports: under k_min
        wm.add(Accepted("r1", f"d{i}", 7, 1.0, 1.0, "binary"), 7)
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


def late_wm(**kw):
    return WindowManager(registered={"r1": DEVICES}, **({"k_min": 3, "lateness_periods": 1, "late_periods": 10} | kw))


def test_late_reports_make_a_late_batch_that_waits_for_k_min_and_a_period_boundary():
    m = late_wm()
    for d in ("d1", "d2", "d3"):
        m.add(rep(d, 5), 5)
    assert m.close("r1", 5).revision == 0
    assert m.add(rep("d1", 5), 8) == Outcome.DUPLICATE          # already in the window of t = 5
    for d in ("d4", "d5"):
        assert m.add(rep(d, 5), 8) == Outcome.ACCEPTED
    assert m.due(9) == []                                        # two reports: fewer than k_min
    m.add(rep("d6", 5), 8)
    assert m.due(8) == []                                        # k_min, but the period it opened in is not over
    assert m.due(10) == [("r1", 5)]
    cw = m.close("r1", 5)
    assert (cw.revision, sorted(cw.devices), cw.suppressed) == (1, ["d4", "d5", "d6"], False)
    assert m.add(rep("d7", 5), 10) == Outcome.ACCEPTED and m.open[("r1", 5)].revision == 2


def test_a_late_batch_stays_open_as_long_as_a_window_so_reports_sent_again_together_go_out_together():
    """Issue 29: resent reports spread over a period boundary made a batch and a straggler below k_min."""
    m = late_wm(lateness_periods=2)
    for d in ("d1", "d2", "d3"):
        m.add(rep(d, 5), 5)
    m.close("r1", 5)
    for d in ("d4", "d5", "d6"):
        m.add(rep(d, 5), 9)
    assert m.due(10) == [] and m.due(11) == []                   # open since t = 9: 1 + 2 periods
    m.add(rep("d7", 5), 11)                                      # the straggler joins the batch
    assert m.due(12) == [("r1", 5)]
    assert sorted(m.close("r1", 5).devices) == ["d4", "d5", "d6", "d7"]


def test_a_repeat_of_a_closed_windows_report_opens_no_late_batch():
    """Issue 29: devices send again what no receipt confirmed; a repeat must not open (and close) an empty batch."""
    m = late_wm()
    for d in DEVICES:
        m.add(rep(d, 5), 5)
    m.close("r1", 5)
    for _ in range(3):
        assert m.add(rep("d1", 5), 6) == Outcome.DUPLICATE
    assert ("r1", 5) not in m.open and m.due(7) == []


def test_a_late_batch_short_of_k_min_is_suppressed_when_the_allowed_lateness_ends():
    m = late_wm()
    m.add(rep("d1", 5), 5)
    m.close("r1", 5)
    m.add(rep("d2", 5), 7)
    horizon_end = 5 + 1 + 1 + 10                                 # t + 1 + lateness + late_periods
    assert m.due(horizon_end - 1) == [] and m.due(horizon_end) == [("r1", 5)]
    assert m.close("r1", 5).suppressed


def test_past_the_allowed_lateness_a_report_is_late_not_a_new_window():
    m = late_wm()
    assert m.add(rep("d1", 5), 5 + 1 + 1 + 10 + 1) == Outcome.LATE and m.late["r1"] == 1
    assert ("r1", 5) not in m.open


def test_restore_keeps_late_batches_and_who_was_seen():
    m = late_wm()
    for d in ("d1", "d2", "d3"):
        m.add(rep(d, 5), 5)
    m.close("r1", 5)
    m.add(rep("d4", 5), 8)
    again = late_wm()
    again.restore(dict(m.closed), [("r1", 5, "d4", 1.0, 1.0, "br")], {}, {k: set(v) for k, v in m.seen.items()}, 8)
    assert again.open[("r1", 5)].revision == 1
    assert again.add(rep("d2", 5), 8) == Outcome.DUPLICATE


def test_a_window_that_opens_behind_time_stays_open_as_long_as_one_on_time():
    m = late_wm(lateness_periods=1)
    m.add(rep("d1", 12), 20)                 # the first report of t = 12 comes at t = 20 (an outage's backlog)
    assert m.due(21) == [] and m.due(22) == [("r1", 12)]
