"""rase_common.storage: a failing store is a state with a backoff, not a crash."""

import logging

from prometheus_client import CollectorRegistry, Gauge

from rase_common.storage import StorageOutage


def test_backoff_doubles_to_30_s_and_recovery_resets(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("rase_common.storage.time.monotonic", lambda: now[0])
    reg = CollectorRegistry()
    gauge = Gauge("t_storage_ok", "test", registry=reg)
    gauge.set(1)
    s = StorageOutage(gauge, logging.getLogger("test"), "test store", "input")
    assert s.wait_s() is None
    waits = []
    for _ in range(7):
        s.failed(OSError("disk full"))
        waits.append(s.wait_s())
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0] and reg.get_sample_value("t_storage_ok") == 0
    now[0] += 31.0
    assert s.wait_s() == 0.0                       # due: the next write may be tried
    s.recovered()
    assert s.wait_s() is None and reg.get_sample_value("t_storage_ok") == 1
    s.failed(OSError("again"))
    assert s.wait_s() == 1.0                       # the backoff starts over
