"""A recording MQTT subscriber for tests (paho, persistent session)."""

from __future__ import annotations

import threading
import time
import uuid

import paho.mqtt.client as mqtt


class Recorder:
    """Subscribes to `topics` and keeps every message. clean_session=False and
    a fixed client id, so a persistent broker queues for it while it is away."""

    def __init__(self, port: int, topics: list[str], client_id: str | None = None, persistent: bool = True,
                 username: str | None = None, password: str | None = None):
        self.messages: list[mqtt.MQTTMessage] = []
        self.lock = threading.Lock()
        self.topics = topics
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id or f"rec-{uuid.uuid4().hex[:8]}",
                                  protocol=mqtt.MQTTv311, clean_session=not persistent)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.reconnect_delay_set(0.2, 1)
        if username is not None:
            self.client.username_pw_set(username, password)
        self.subscribed = threading.Event()
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        self.client.connect("127.0.0.1", port, keepalive=10)
        self.client.loop_start()
        assert self.subscribed.wait(10), "subscription not acknowledged"

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        for t in self.topics:
            client.subscribe(t, qos=1)

    def _on_message(self, client, userdata, msg):
        with self.lock:
            self.messages.append(msg)

    def on(self, prefix: str) -> list[mqtt.MQTTMessage]:
        with self.lock:
            return [m for m in self.messages if m.topic.startswith(prefix)]

    def wait_for(self, pred, timeout_s: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.05)
        return pred()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def publish_retained(port: int, topic: str, payload: bytes | str) -> None:
    publish_once(port, topic, payload, retain=True)


def publish_once(port: int, topic: str, payload: bytes | str, retain: bool = False) -> None:
    """Connect, publish one QoS 1 message, wait for its PUBACK, disconnect."""
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    c.connect("127.0.0.1", port)
    c.loop_start()
    c.publish(topic, payload, qos=1, retain=retain).wait_for_publish(10)
    c.disconnect()
    c.loop_stop()


class ServiceThread:
    """Runs an asyncio service's run(stop_event) on its own loop thread."""

    def __init__(self, service):
        import asyncio

        self.service = service
        self.loop = asyncio.new_event_loop()
        self.stop_event = None
        self.error: BaseException | None = None
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.started.wait(10)

    def _run(self):
        import asyncio

        asyncio.set_event_loop(self.loop)
        self.stop_event = asyncio.Event()
        self.started.set()
        try:
            self.loop.run_until_complete(self.service.run(self.stop_event))
        except BaseException as err:  # surfaced by stop()
            self.error = err

    def stop(self):
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(30)
        if self.error is not None:
            raise self.error


def recent_epoch0(period_s: float = 8.0, now_t: int = 1000) -> float:
    """An epoch0 that makes the wall clock's t now_t: a test's small t
    (1, 2, ...) are then a little behind the clock, plausible to the fusion
    center (its max_window_age_s)."""
    return time.time() - period_s * now_t


async def started_link(port: int, client_id: str, timeout_s: float = 5.0, **kw):  # noqa: ANN201
    """An MqttLink (rase_common.mqtt) to the broker on port, started, once
    connected (or after timeout_s: the caller's publish then says why)."""
    import asyncio

    from rase_common.mqtt import BrokerConfig, MqttLink

    link = MqttLink(BrokerConfig(port=port), client_id, **kw)
    link.start()
    deadline = time.monotonic() + timeout_s
    while not link.connected.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return link


RETAINED_TOPICS = ("rase/v1/control/precision", "rase/v1/aggregates/latest")


def clear_retained(broker):
    """No retained RASE state left by an earlier test on a shared broker (a
    retained precision message would recalibrate the next test's agents)."""
    for topic in RETAINED_TOPICS:
        publish_retained(broker.port, topic, b"")
    return broker


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the sockets listening on TCP `port` (/proc/net/tcp, tcp6)."""
    import ipaddress
    from pathlib import Path

    found = set()
    for table, size in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr_hex, port_hex = local.split(":")
            if state != "0A" or int(port_hex, 16) != port:       # 0A: LISTEN
                continue
            raw = bytes.fromhex(addr_hex)
            # /proc prints each 32-bit word in host (little-endian) order.
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, size, 4))
            addr = ipaddress.ip_address(raw)
            found.add(str(getattr(addr, "ipv4_mapped", None) or addr))     # ::ffff:127.0.0.1 -> 127.0.0.1
    return found
