"""Fog service invariants on the wire: bad traffic beside good traffic,
suppressed windows never leave, counts are aggregate only."""

import json
import time

import paho.mqtt.client as mqtt
import pytest

from fog_shuffler.config import FogConfig
from rase_common.protocol.window import WindowMessage
from fog_shuffler.service import FogService
from rase_common.clock import ManualClock
from tests.mqtt_helpers import Recorder, ServiceThread

pytestmark = pytest.mark.integration
GOOD = [f"g{i:02d}" for i in range(12)]
SMALL = ["s1", "s2", "s3"]
BAD_PAYLOADS = [b"", b"{", b"[]", b'{"v":1}', b'{"v":1,"t":"5","y":1,"eps":1.0,"seq":1}',
                b'{"v":1,"t":5,"y":NaN,"eps":1.0,"seq":1}', b'{"v":1,"t":5,"y":1e12,"eps":1.0,"seq":1}',
                b'{"v":1,"t":5,"y":1,"eps":3.0,"seq":1}', b'{"v":1,"t":900,"y":1,"eps":1.0,"seq":1}',
                b"x" * 1000]


def test_bad_traffic_beside_good_and_small_windows_never_leave(mosquitto, tmp_path):
    clock = ManualClock(5 * 8.0 + 1)   # logical t = 5
    cfg = FogConfig.load(None, name="inv", regions={"r1": {"devices": GOOD}, "r2": {"devices": SMALL}},
                         period_s=8.0, k_min=10, journal_path=tmp_path / "fog.sqlite", device_mechanism="br",
                         broker={"port": mosquitto.port})
    service = FogService(cfg, clock=clock)
    rec = Recorder(mosquitto.port, ["rase/v1/windows/#"], persistent=False)
    fog = ServiceThread(service)
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    pub.connect("127.0.0.1", mosquitto.port)
    pub.loop_start()
    try:
        deadline = time.monotonic() + 10
        while not service.subscribed and time.monotonic() < deadline:
            time.sleep(0.02)
        # The intruder first: r1's window closes as soon as its 12 devices reported,
        # and one publisher's messages arrive in order.
        infos = [pub.publish("rase/v1/reports/r1/intruder", json.dumps(
            {"v": 1, "t": 5, "y": 1.0, "eps": 1.0, "seq": 1}), qos=1)]
        for i, d in enumerate(GOOD):
            for bad in BAD_PAYLOADS:                   # garbage interleaved on the same topic
                infos.append(pub.publish(f"rase/v1/reports/r1/{d}", bad, qos=1))
            infos.append(pub.publish(f"rase/v1/reports/r1/{d}",
                                     json.dumps({"v": 1, "t": 5, "y": float(i), "eps": 1.0, "seq": 1}), qos=1))
        for d in SMALL:
            infos.append(pub.publish(f"rase/v1/reports/r2/{d}", json.dumps(
                {"v": 1, "t": 5, "y": 7.0, "eps": 1.0, "seq": 1}), qos=1))
        for info in infos:
            info.wait_for_publish(10)
        assert rec.wait_for(lambda: len(rec.messages) >= 1)   # r1 closes early: all 12 reported
        # The fog must have taken r2's three reports before its clock moves on.
        assert rec.wait_for(lambda: service.metrics.value("reports_accepted") >= 15)
        clock.set(9 * 8.0)                                     # r2 (3 < k_min) closes by time
        assert rec.wait_for(lambda: service.metrics.value("windows_suppressed") >= 1)
        time.sleep(0.5)
    finally:
        pub.disconnect()
        pub.loop_stop()
        fog.stop()
        rec.close()
    assert [m.topic for m in rec.messages] == ["rase/v1/windows/r1"]   # r2 never left the fog
    w = WindowMessage.model_validate_json(rec.messages[0].payload)
    assert sorted(w.values) == [float(i) for i in range(12)]
    assert w.counts.rejected == len(GOOD) * len(BAD_PAYLOADS) + 1
    rej = {lbl: service.metrics.value("reports_rejected", reason=lbl) for lbl in
           ("oversized", "malformed_json", "wrong_type", "non_finite", "impossible_y", "eps_not_on_menu",
            "t_out_of_range", "unknown_device")}
    assert rej == {"oversized": 12, "malformed_json": 36, "wrong_type": 24, "non_finite": 12,
                   "impossible_y": 12, "eps_not_on_menu": 12, "t_out_of_range": 12, "unknown_device": 1}
