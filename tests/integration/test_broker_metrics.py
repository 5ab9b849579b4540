"""`rase broker-metrics` against a real Mosquitto publishing $SYS every second:
its counters follow the broker's traffic, it says when the broker goes away,
and it reconnects when the broker comes back."""

import urllib.request

import paho.mqtt.client as mqtt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rase_common.broker_metrics import BrokerMetricsBridge, BrokerMetricsConfig
from simulators.brokers import Mosquitto, free_port, wait_port
from tests.mqtt_helpers import ServiceThread
from tests.observe_stack import wait_until

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name.startswith("rase_broker_")}


def test_bridge_follows_a_real_mosquitto(tmp_path):
    broker = Mosquitto(tmp_path / "mosquitto", extra_conf="sys_interval 1\n").start()
    port = free_port()
    cfg = BrokerMetricsConfig.load(None, metrics_port=port, broker={"port": broker.port})
    bridge = ServiceThread(BrokerMetricsBridge(cfg))
    try:
        assert wait_port(port, 10), "the bridge's metrics port did not open"
        wait_until(lambda: scrape(port).get("rase_broker_uptime_seconds") is not None, 15,
                   what="the first $SYS values")
        # The first values are the broker's retained ones, from before the bridge connected.
        wait_until(lambda: scrape(port)["rase_broker_clients_connected"] >= 1, 15, what="the bridge itself counted")
        got = scrape(port)
        assert got["rase_broker_connected"] == 1
        assert got["rase_broker_heap_bytes"] > 0
        before = got["rase_broker_publish_received_total"]

        pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bm-publisher")
        pub.connect("127.0.0.1", broker.port)
        pub.loop_start()
        for i in range(40):
            pub.publish("bm/test", str(i), qos=1).wait_for_publish(10)
        wait_until(lambda: scrape(port)["rase_broker_publish_received_total"] >= before + 40, 15,
                   what="40 more PUBLISH messages received")
        wait_until(lambda: scrape(port)["rase_broker_clients_connected"] >= 2, 15, what="the publisher counted")
        pub.disconnect()
        pub.loop_stop()

        uptime = scrape(port)["rase_broker_uptime_seconds"]
        broker.stop()
        wait_until(lambda: scrape(port)["rase_broker_connected"] == 0, 15, what="the bridge noticing the broker gone")
        broker.start()
        wait_until(lambda: scrape(port)["rase_broker_connected"] == 1, 30, what="the bridge reconnecting")
        # A restart shows as uptime starting again (and counters reset, which rate() handles).
        wait_until(lambda: scrape(port)["rase_broker_uptime_seconds"] < uptime + 1
                   and scrape(port)["rase_broker_publish_received_total"] < before + 40, 15,
                   what="the restarted broker's own values")
    finally:
        bridge.stop()
        broker.stop()
