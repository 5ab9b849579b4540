"""Merging regions per timestamp, and aggregates with the clamping flag."""

import numpy as np
import pytest

from rase_common.protocol.window import WindowMessage
from fusion_center.ldp.merge import TimestampMerger, aggregate
from rase_common.protocol.control import ControlMessage


def window(region, t, values, eps=1.0):
    """A window of BR reports (the paper's mechanism; clamped below eps_star)."""
    return WindowMessage.uniform(region, t, values, eps, kind="br")


def test_t_closes_when_all_known_regions_arrived():
    m = TimestampMerger({"r1", "r2"}, deadline_s=10)
    m.add(window("r1", 5, [1.0] * 10), now=0)
    assert m.due(1) == []
    assert m.add(window("r1", 5, [2.0] * 10), now=1) == "duplicate"
    m.add(window("r2", 5, [3.0] * 10), now=2)
    assert m.due(2) == [5]
    assert [w.region for w in m.pop(5)] == ["r1", "r2"]


def test_t_closes_at_the_deadline_without_a_missing_region():
    m = TimestampMerger({"r1", "r2"}, deadline_s=10)
    m.add(window("r1", 5, [1.0] * 10), now=100)
    assert m.due(109.9) == [] and m.due(110) == [5]


def test_aggregate_merges_regions_and_flags_clamping():
    p = ControlMessage(x_min=0, x_max=4000, mechanism="br")   # eps_star 4.605: eps 1 is clamped
    ws = [window("r1", 7, [0.0, 4000.0, 100.0, 200.0]), window("r2", 7, [300.0, 4000.0])]
    agg, est = aggregate(7, ws, p, {"r1", "r2", "r3"}, rng=np.random.default_rng(0))
    assert agg.n == 6 and agg.regions == ["r1", "r2"] and not agg.complete
    assert agg.estimates["se"].value == pytest.approx(np.mean([0, 4000, 100, 200, 300, 4000]))
    assert agg.clamped and agg.share_at_bound == pytest.approx(3 / 6)
    agg9, _ = aggregate(7, [window("r1", 7, [5000.0, -50.0], eps=9.0)], p, {"r1"}, rng=np.random.default_rng(0))
    assert not agg9.clamped and agg9.complete


def test_windowed_in_aggregate_uses_history():
    p = ControlMessage(mechanism="br")
    hist = {}
    for t in (1, 2, 4):
        agg, est = aggregate(t, [window("r1", t, [float(t * 100)] * 3)], p, {"r1"}, history=hist,
                             windows_w=(3,), rng=np.random.default_rng(t))
        for k, e in est.items():
            hist.setdefault(k, {})[t] = e   # BR: history_key("br", k) == k
    w3 = agg.windowed["3"]["se"]
    assert w3.present == 2 and w3.value == pytest.approx(300.0)   # t = 2 and 4 of 2..4


def test_the_aggregate_publishes_what_each_shuffle_adds():
    from rase_common.amplification import window_guarantee
    from rase_common.protocol.window import LevelBatch

    uniform = window_guarantee("uniform", eps0=1.0, n=1000, delta=1e-6)
    w = WindowMessage(region="r1", t=3, n=1000, alpha=2.0, batches=[LevelBatch(
        eps=1.0, values=[1.0] * 1000, mechanism="uniform", delta_k=0, omega=0, k=1, groups=[(0, 999)],
        guarantee=uniform)])
    agg, _ = aggregate(3, [w], ControlMessage(), {"r1"}, bootstrap_b=20)
    (p,) = agg.privacy
    assert p["kind"] == "shuffle_dp" and p["eps"] < 0.2 and p["eps0"] == 1.0 and p["region"] == "r1"
    mallows = window_guarantee("mallows", eps0=1.0, n=1000, delta=1e-6, alpha=2.0, theta=0.05)
    assert mallows["kind"] == "d_sigma" and mallows["eps"] is None   # no amplification number claimed


def test_aggregate_estimates_each_kind_as_what_it_is():
    """Windows of two kinds at one t (a mechanism change in flight): the
    deployment's kind is estimated and the other counted; when the deployment's
    kind is absent, the kind most reports have is."""
    binary = WindowMessage.uniform("r1", 9, [1.0, 0.0] * 10, kind="binary")
    br = WindowMessage.uniform("r2", 9, [100.0] * 12, kind="br")
    agg, est = aggregate(9, [binary, br], ControlMessage(mechanism="binary"), {"r1", "r2"},
                         rng=np.random.default_rng(0))
    assert agg.mechanism == "binary" and agg.n == 20 and agg.other_kind_reports == 12
    assert set(agg.estimates) == {"count", "mean"}
    agg, _ = aggregate(9, [binary, br], ControlMessage(mechanism="hybrid"), {"r1", "r2"},
                       rng=np.random.default_rng(0))
    assert agg.mechanism == "binary" and agg.other_kind_reports == 12
    agg, _ = aggregate(9, [br], ControlMessage(mechanism="binary"), {"r2"}, rng=np.random.default_rng(0))
    assert agg.mechanism == "br" and agg.estimates["se"].value == pytest.approx(100.0)


def test_windowed_averages_never_mix_kinds_of_report():
    """Across a mechanism change a windowed "mean" restarts: watts from BR
    and shares of devices on are different series."""
    from fusion_center.ldp.merge import history_key

    hist = {}
    p_br, p_bin = ControlMessage(mechanism="br"), ControlMessage(mechanism="binary")
    for t in (1, 2):
        agg, est = aggregate(t, [window("r1", t, [1000.0] * 12)], p_br, {"r1"}, history=hist, windows_w=(4,),
                             rng=np.random.default_rng(t))
        for k, e in est.items():
            hist.setdefault(history_key(agg.mechanism, k), {})[t] = e
    agg, _ = aggregate(3, [WindowMessage.uniform("r1", 3, [1.0] * 12, kind="binary")], p_bin, {"r1"},
                       history=hist, windows_w=(4,), rng=np.random.default_rng(3))
    assert agg.windowed["4"]["mean"].present == 1          # only t = 3: the BR means are not shares


def test_each_mechanism_publishes_only_what_estimates_something():
    """Duchi, Piecewise and Hybrid publish `mean` alone (no median of +-C, no
    sample-variance interval); BR adds the paper's se and mle (a median, said
    so) and its bootstrap from 100 reports of a level. Every estimate names
    its interval method."""
    from rase_common.mechanisms import Setting, mechanism

    rng = np.random.default_rng(1)
    x = np.r_[np.zeros(110), 150.0, 2500.0, 20.0, 20.0, 3000.0, 7.0, 7.0, 7.0, 7.0, 7.0]
    for name in ("duchi", "piecewise", "hybrid", "br"):
        y = mechanism(name).sample(Setting(), 1.0, x, rng)
        for n, bs in ((120, True), (45, False)):
            w = WindowMessage.uniform("r1", 3, [float(v) for v in y[:n]], 1.0, kind=name)
            agg, est = aggregate(3, [w], ControlMessage(mechanism=name), {"r1"}, bootstrap_b=50, rng=rng)
            expected = {"mean"} if name != "br" else {"mean", "se", "mle"} | ({"bs"} if bs else set())
            assert set(agg.estimates) == expected, (name, n)
            assert all(e.method for e in agg.estimates.values())
            assert set(agg.what) >= expected
    assert "MEDIAN" in agg.what["mle"] and agg.estimates["mean"].method == "score-variance-bound"
