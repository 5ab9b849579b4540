"""The fusion center's gauges for dashboards and alerts: the newest aggregate,
its windowed averages (which no scrape can miss a timestamp of), and when it
was stored."""

import time

import numpy as np
import pytest

from rase_common.protocol.window import WindowMessage
from fusion_center.ldp.merge import aggregate, history_key
from fusion_center.metrics import FusionMetrics
from rase_common.protocol.control import ControlMessage


def gauge(m: FusionMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels or None)


def test_show_aggregate_sets_windowed_estimates_and_the_time():
    m = FusionMetrics()
    started = gauge(m, "rase_fusion_last_aggregate_timestamp_seconds")
    assert started == pytest.approx(time.time(), abs=60)     # until the first aggregate: the start
    p = ControlMessage(x_min=0, x_max=4000)
    history: dict = {}
    for t in (1, 2, 3):
        w = WindowMessage.uniform("r1", t, [100.0 * t] * 12, 9.0)         # eps 9: not clamped, mean = 100 t
        agg, est = aggregate(t, [w], p, {"r1"}, history=history, windows_w=(2, 8), rng=np.random.default_rng(t))
        for name, e in est.items():
            history.setdefault(history_key(agg.mechanism, name), {})[t] = e
        m.show_aggregate(agg, est)
    assert gauge(m, "rase_fusion_newest_t") == 3
    assert gauge(m, "rase_fusion_estimate", estimator="mean", bound="value") == pytest.approx(300.0)
    # Win(3, 2) averages t = 2, 3; Win(3, 8) every t so far: each t stays in it for w periods.
    assert gauge(m, "rase_fusion_windowed_estimate", estimator="mean", w="2", bound="value") == pytest.approx(250.0)
    assert gauge(m, "rase_fusion_windowed_estimate", estimator="mean", w="8", bound="value") == pytest.approx(200.0)
    assert gauge(m, "rase_fusion_windowed_estimate", estimator="mean", w="8", bound="present") == 3
    lo = gauge(m, "rase_fusion_windowed_estimate", estimator="mean", w="8", bound="lo")
    hi = gauge(m, "rase_fusion_windowed_estimate", estimator="mean", w="8", bound="hi")
    assert lo < 200.0 < hi
    assert gauge(m, "rase_fusion_last_aggregate_timestamp_seconds") >= started
