"""The acknowledged load (simulators/faults/load.py) against a real
Mosquitto: it keeps its schedule through a broker SIGKILL and a dropped
connection, and counts each report the broker acknowledged once, however
often it had to be sent."""

from __future__ import annotations

import signal
import time

import pytest

from simulators.faults.load import AckedLoad, LoadSpec
from simulators.faults.proxy import TcpProxy

pytestmark = pytest.mark.integration


def test_every_report_is_acknowledged_through_a_broker_kill_and_a_drop(own_mosquitto):
    with TcpProxy(own_mosquitto.port) as proxy:
        t_first = int(time.time()) + 2
        spec = LoadSpec(port=proxy.port, regions=("r1", "r2"), devices=500, period_s=1.0, t_first=t_first,
                        t_last=t_first + 3)
        load = AckedLoad(spec).start()
        while load.acked() < 1000:
            time.sleep(0.02)
        own_mosquitto.stop(signal.SIGKILL)
        time.sleep(0.5)
        own_mosquitto.start()
        while load.acked() < 2500:
            time.sleep(0.02)
        proxy.drop()
        result = load.result(60)
    assert result.finished and result.scheduled == 4000
    assert result.acked == {t: 1000 for t in range(t_first, t_first + 4)}
    assert result.reconnects >= 2 and result.published >= 4000
    assert result.published == 4000 + result.resent
