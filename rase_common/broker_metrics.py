"""Mosquitto's `$SYS` topics as Prometheus metrics: `rase broker-metrics`.

Mosquitto publishes its own counters and gauges under `$SYS/broker/...` every
`sys_interval` seconds (10 by default). This bridge subscribes to `$SYS/#`,
keeps the newest value of each topic in SYS_METRICS and serves them as
`rase_broker_...` metrics, with `rase_broker_connected` (1 while its own
connection is up) and the time of the newest `$SYS` message, so that a dead
or hung broker raises an alert (configs/prometheus/rules.yml). The broker's
user for it needs `topic read $SYS/#` in the ACL.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Literal

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from rase_common.mqtt import BrokerConfig, connect_in_background, paho_client
from rase_common.settings import TomlSettings

log = logging.getLogger(__name__)
SYS_FILTER = "$SYS/#"


@dataclass(frozen=True)
class SysMetric:
    topic: str                               # under $SYS/broker/
    name: str                                # rase_broker_<name> (counters gain _total)
    kind: Literal["counter", "gauge"]        # counters count since the broker started
    help: str


SYS_METRICS: tuple[SysMetric, ...] = (
    SysMetric("clients/connected", "clients_connected", "gauge", "Clients connected now"),
    SysMetric("clients/disconnected", "clients_disconnected", "gauge",
              "Persistent sessions whose client is away (their QoS 1 messages are queued)"),
    SysMetric("clients/maximum", "clients_maximum", "gauge", "Most clients connected at once since the start"),
    SysMetric("subscriptions/count", "subscriptions", "gauge", "Subscriptions held"),
    SysMetric("retained messages/count", "retained_messages", "gauge", "Retained messages held"),
    SysMetric("store/messages/count", "stored_messages", "gauge",
              "Messages held in the store: retained ones and those queued for clients"),
    SysMetric("store/messages/bytes", "stored_bytes", "gauge", "Payload bytes held in the store"),
    SysMetric("heap/current", "heap_bytes", "gauge", "Heap the broker uses now"),
    SysMetric("heap/maximum", "heap_maximum_bytes", "gauge", "Most heap the broker used since the start"),
    SysMetric("uptime", "uptime_seconds", "gauge", "Seconds since the broker started"),
    SysMetric("messages/received", "messages_received", "counter", "MQTT packets of any kind received"),
    SysMetric("messages/sent", "messages_sent", "counter", "MQTT packets of any kind sent"),
    SysMetric("publish/messages/received", "publish_received", "counter", "PUBLISH messages received"),
    SysMetric("publish/messages/sent", "publish_sent", "counter", "PUBLISH messages sent"),
    SysMetric("publish/messages/dropped", "publish_dropped", "counter",
              "PUBLISH messages dropped (a client's queue full, or a message too large to queue)"),
    SysMetric("bytes/received", "bytes_received", "counter", "Bytes received"),
    SysMetric("bytes/sent", "bytes_sent", "counter", "Bytes sent"),
)
BY_TOPIC = {"$SYS/broker/" + m.topic: m for m in SYS_METRICS}
VERSION_TOPIC = "$SYS/broker/version"


def parse_sys_value(payload: bytes) -> float:
    """A $SYS value: a number, or a number and a unit ("1234 seconds")."""
    text = payload.decode("utf-8", "replace").strip()
    head = text.split(" ", 1)[0]
    try:
        return float(head)
    except ValueError:
        raise ValueError(f"not a number: {text[:40]!r}") from None


class BrokerMetrics:
    """The newest $SYS values, collected as Prometheus metrics (a custom
    collector: a counter is the broker's own count, reset when it restarts,
    which Prometheus's rate() handles). Thread-safe: paho's thread updates,
    the HTTP server's thread collects."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self._lock = threading.Lock()
        self._values: dict[str, float] = {}
        self._version: str | None = None
        self._connected = False
        # The bridge's start until the first $SYS message: a broker that never sends one (sys_interval 0,
        # or an ACL without $SYS) goes stale, and alerts, like one that stopped.
        self._last_update = time.time()
        self._unparsed: set[str] = set()
        self.registry = registry or CollectorRegistry()
        self.registry.register(self)

    def update(self, topic: str, payload: bytes, now: float | None = None) -> bool:
        """Take one $SYS message; True if it is one this bridge exports."""
        with self._lock:
            self._last_update = time.time() if now is None else now
            if topic == VERSION_TOPIC:
                self._version = payload.decode("utf-8", "replace").strip()
                return True
            metric = BY_TOPIC.get(topic)
            if metric is None:
                return False
            try:
                self._values[metric.name] = parse_sys_value(payload)
            except ValueError as err:
                if topic not in self._unparsed:     # once per topic: Mosquitto repeats it every sys_interval
                    self._unparsed.add(topic)
                    log.warning("broker metrics: %s ignored: %s", topic, err)
                return False
            return True

    def set_connected(self, connected: bool) -> None:
        with self._lock:
            self._connected = connected

    def value(self, name: str) -> float | None:
        with self._lock:
            return self._values.get(name)

    def describe(self) -> Iterator[Metric]:
        """Every family this collector may export (prometheus_client checks names with it)."""
        yield from self._families({m.name: 0.0 for m in SYS_METRICS}, "", False, 0.0)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            values, version, connected, last = dict(self._values), self._version, self._connected, self._last_update
        yield from self._families(values, version, connected, last)

    @staticmethod
    def _families(values: dict[str, float], version: str | None, connected: bool, last: float) -> Iterator[Metric]:
        yield GaugeMetricFamily("rase_broker_connected", "1 while this bridge is connected to the broker",
                                value=1.0 if connected else 0.0)
        yield GaugeMetricFamily("rase_broker_last_sys_message_timestamp_seconds",
                                "Unix time of the newest $SYS message (the broker sends them every sys_interval; "
                                "the bridge's start until the first)", value=last)
        if version is not None:
            info = GaugeMetricFamily("rase_broker_info", "The broker's version string", labels=["version"])
            info.add_metric([version], 1.0)
            yield info
        for m in SYS_METRICS:
            if m.name in values:
                family = CounterMetricFamily if m.kind == "counter" else GaugeMetricFamily
                yield family(f"rase_broker_{m.name}", m.help + f" ($SYS/broker/{m.topic})", value=values[m.name])

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        start_http_server(port, addr=host, registry=self.registry)


class BrokerMetricsConfig(TomlSettings):
    """`rase broker-metrics --config configs/broker-metrics.example.toml` (RASE_BROKER_METRICS_... overrides)."""
    model_config = SettingsConfigDict(env_prefix="RASE_BROKER_METRICS_", env_nested_delimiter="__", extra="forbid",
                                      frozen=True)

    name: str = "broker-metrics1"         # MQTT client id broker-metrics-<name>
    metrics_port: int = Field(9103, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"       # 0.0.0.0 in a container
    broker: BrokerConfig = BrokerConfig()


class BrokerMetricsBridge:
    """Subscribes to $SYS/# and serves BrokerMetrics until stopped."""

    def __init__(self, cfg: BrokerMetricsConfig, metrics: BrokerMetrics | None = None):
        self.cfg = cfg
        self.metrics = metrics or BrokerMetrics()
        self.client = paho_client(cfg.broker, f"broker-metrics-{cfg.name}")
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        self._stopping = False

    def _on_message(self, client, userdata, msg) -> None:  # noqa: ANN001 - paho's callback
        self.metrics.update(msg.topic, bytes(msg.payload))

    def _on_connect(self, client, userdata, flags, reason_code, properties):  # noqa: ANN001
        if reason_code.is_failure:
            log.error("broker metrics: connect refused: %s", reason_code)
            return
        self.metrics.set_connected(True)
        client.subscribe(SYS_FILTER, qos=0)
        log.info("broker metrics: connected to %s:%d", self.cfg.broker.host, self.cfg.broker.port)

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties):  # noqa: ANN001
        if any(rc.is_failure for rc in reason_codes):
            log.error("broker metrics: the broker refused %s (the ACL needs `topic read $SYS/#` for this user)",
                      SYS_FILTER)

    def _on_disconnect(self, client, userdata, flags, reason_code, properties):  # noqa: ANN001
        self.metrics.set_connected(False)
        if not self._stopping:
            log.warning("broker metrics: disconnected from the broker (%s); reconnecting", reason_code)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        self.metrics.serve(self.cfg.metrics_port, self.cfg.metrics_host)
        log.info("broker metrics on http://%s:%d/metrics", self.cfg.metrics_host, self.cfg.metrics_port)
        connect_in_background(self.client, self.cfg.broker)
        try:
            await stop.wait()
        finally:
            self._stopping = True
            self.client.disconnect()
            self.client.loop_stop()
