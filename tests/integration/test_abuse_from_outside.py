"""Issue 29: what others connected to the broker can do to the pipeline, on a
real Mosquitto with the real fog (and a real agent):

- retained reports (item 5) are never taken: a fog that (re)subscribes is
  handed them with the retain flag and ignores them, counted, not held;
- a late report (item 7) is not dropped silently: the device's receipt says
  it came too late, and the device counts it in its retained status;
- a shared subscription (item 8) is refused by the services' link, and
  subscribers in a `$share` group with the fog's filter take nothing from
  the fog: it still closes every window whole.
"""

from __future__ import annotations

import json
import threading
import time

import paho.mqtt.client as mqtt
import pytest

from edge_agent.config import AgentConfig
from edge_agent.service import AgentService
from fog_shuffler.config import FogConfig
from fog_shuffler.service import FogService
from rase_common.clock import ScaledClock
from rase_common.errors import ConfigError
from rase_common.mqtt import BrokerConfig, MqttLink
from rase_common.protocol.report import Status
from rase_device import wire
from tests.mqtt_helpers import Recorder, ServiceThread, publish_retained

pytestmark = pytest.mark.integration
DEVICES = [f"a{i:02d}" for i in range(12)]


def wait(pred, timeout_s: float = 20.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def fog_service(tmp_path, port: int, **kw) -> FogService:  # noqa: ANN003
    cfg = FogConfig.load(None, name=f"abuse{int(time.time() * 1000) % 100000}", regions={"r1": {"devices": DEVICES}},
                         period_s=8.0, journal_path=tmp_path / "fog.sqlite", broker={"port": port}, k_min=3,
                         **kw)
    return FogService(cfg)


def test_retained_reports_are_ignored_by_a_fog_that_subscribes_and_never_held(mosquitto, tmp_path):
    now_t = int(time.time() // 8.0)
    big = json.dumps({"v": 1, "t": now_t, "y": 1.0, "eps": 1.0, "seq": 1, "pad": "x" * 1_000_000})
    small = wire.encode_report(now_t, 100.0, 1.0, 1)
    publish_retained(mosquitto.port, wire.report_topic("r1", DEVICES[0]), big)
    publish_retained(mosquitto.port, wire.report_topic("r1", DEVICES[1]), small)
    fog = fog_service(tmp_path, mosquitto.port)
    try:
        with ServiceThread(fog):
            assert wait(lambda: fog.metrics.value("reports_rejected", reason="retained") >= 2)
            time.sleep(0.5)           # what else it would take from them
            assert fog.metrics.value("reports_accepted") == 0
            assert fog.ctx.journal.open_reports() == []
            assert fog.metrics.value("reports_rejected", reason="retained") == 2
    finally:
        for topic in (wire.report_topic("r1", d) for d in DEVICES[:2]):
            publish_retained(mosquitto.port, topic, "")      # cleared for the next test on this shared broker


def test_a_late_report_is_told_to_its_device_and_counted_in_its_status(mosquitto, tmp_path):
    """The agent's clock runs a day behind: every report is past the fog's allowed lateness."""
    fog = fog_service(tmp_path, mosquitto.port, allowed_lateness_s=16.0)
    rec = Recorder(mosquitto.port, ["rase/v1/status/#", "rase/v1/feedback/#"], persistent=False)
    cfg = AgentConfig.load(None, device=DEVICES[3], region="r1", eps=1.0, period_s=8.0,
                           ledger_path=tmp_path / "ledger.json", broker={"port": mosquitto.port})

    class Source:
        def read(self, now):  # noqa: ANN001, ANN202
            return 250.0

    agent = AgentService(cfg, source=Source(), clock=ScaledClock(time.time() - 86400, 40.0))
    with ServiceThread(fog):
        assert wait(lambda: fog.subscribed)
        with ServiceThread(agent):
            def late_in_status() -> bool:
                for m in rec.on(f"rase/v1/status/{DEVICES[3]}"):
                    st = Status.model_validate_json(m.payload) if m.payload else None
                    if st is not None and st.counts is not None and st.counts.late_by_fog >= 2:
                        return True
                return False
            assert wait(late_in_status, 30)
        receipts = [json.loads(m.payload) for m in rec.on(f"rase/v1/feedback/r1/{DEVICES[3]}")
                    if b'"kept"' in m.payload]
        assert receipts and sum(r["late"] for r in receipts) == sum(len(r["kept"]) for r in receipts)
        assert fog.metrics.value("reports_late") >= 2 and fog.metrics.value("reports_accepted") == 0
        assert agent.core.outbox.kept >= 2 and agent.core.outbox.resent == 0     # told: not sent again
    rec.close()


def test_a_shared_subscription_is_refused_by_the_services_link():
    with pytest.raises(ConfigError, match="shared subscription"):
        MqttLink(BrokerConfig(), "fog-x", subscriptions=[("$share/fogs/rase/v1/reports/r1/+", 1)])


def test_subscribers_on_a_share_of_the_fogs_filter_take_nothing_from_the_fog(mosquitto, tmp_path):
    """Three clients in one `$share` group on the fog's own filter (each would get a third of the reports):
    the fog's subscription is not shared, so it still gets every report and closes whole windows."""
    got: list[int] = [0, 0, 0]
    lock = threading.Lock()
    members = []
    for i in range(3):
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"share-{i}", protocol=mqtt.MQTTv5)
        def on_message(_c, _u, _m, i=i):  # noqa: ANN001, ANN202
            with lock:
                got[i] += 1
        c.on_message = on_message
        c.connect("127.0.0.1", mosquitto.port)
        c.subscribe("$share/fogs/rase/v1/reports/r1/+", 1)
        c.loop_start()
        members.append(c)
    fog = fog_service(tmp_path, mosquitto.port, device_mechanism="br")     # y = 100.0 is one of BR's outputs
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="share-devices")
    pub.connect("127.0.0.1", mosquitto.port)
    pub.loop_start()
    try:
        with ServiceThread(fog):
            assert wait(lambda: fog.subscribed)
            now_t = fog.now_t()
            infos = [pub.publish(wire.report_topic("r1", d), wire.encode_report(now_t, 100.0, 1.0, 1), qos=1)
                     for d in DEVICES]
            for info in infos:
                info.wait_for_publish(10)
            # Every registered device reported: the fog closes the window early, with all 12 reports.
            assert wait(lambda: fog.metrics.value("reports_accepted") == len(DEVICES)), fog.metrics.summary()
            assert wait(lambda: fog.windows_sent >= 1 or fog.ctx.outbox.size >= 1, 20)
        with lock:
            assert sum(got) == len(DEVICES) and all(0 < n < len(DEVICES) for n in got), got   # shared among them
    finally:
        pub.disconnect()
        pub.loop_stop()
        for c in members:
            c.disconnect()
            c.loop_stop()
