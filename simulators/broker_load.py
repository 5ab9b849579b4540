"""QoS 1 load through a real Mosquitto with acknowledged-against-received
accounting, for the broker persistence test and benchmark.

A publisher (the devices) sends numbered messages at a steady rate and
records each one the broker acknowledged (PUBACK). A consumer (the fog's
session: fixed client id, clean session off, QoS 1 subscription renewed on
every connect, paho's 1 s reconnect backoff as the services use) records
every number it receives. After the broker is SIGKILLed and restarted, lost
= acknowledged numbers never received.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import paho.mqtt.client as mqtt

from rase_common.mqtt import BrokerConfig, paho_client
from simulators.brokers import Mosquitto

TOPIC = "rase/v1/reports/r1/d{}"
FILTER = "rase/v1/reports/r1/+"


class Consumer:
    """The fog's broker session, as the broker sees it."""

    def __init__(self, port: int, client_id: str = "fog-bench"):
        self.received: dict[int, float] = {}
        self.duplicates = 0
        self.lock = threading.Lock()
        # The fog's own paho client (buffered reads), its reconnect backoff (1 s doubling).
        self.c = paho_client(BrokerConfig(port=port), client_id, clean_session=False)
        self.c.on_connect = lambda c, u, f, rc, p: c.subscribe(FILTER, qos=1)
        self.c.on_message = self._on_message
        self.port = port

    def _on_message(self, client, userdata, msg) -> None:  # noqa: ANN001
        number = int(msg.payload.split(b" ", 1)[0])
        with self.lock:
            if number in self.received:
                self.duplicates += 1
            else:
                self.received[number] = time.monotonic()

    def start(self) -> "Consumer":
        self.c.connect_async("127.0.0.1", self.port, keepalive=10)
        self.c.loop_start()
        return self

    def stop(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


class Publisher:
    """Numbered QoS 1 messages at `rate_per_s`, at most `max_inflight`
    unacknowledged; `acked` holds every number the broker acknowledged."""

    def __init__(self, port: int, rate_per_s: float, max_inflight: int = 1000, payload_bytes: int = 100,
                 limit: int | None = None):
        self.rate = rate_per_s
        self.limit = limit
        self.max_inflight = max_inflight
        self.pad = b" " + b"x" * max(0, payload_bytes - 10)
        self.acked: dict[int, float] = {}
        self.sent_at: dict[int, float] = {}
        self._mid: dict[int, int] = {}
        self._early: set[int] = set()
        self.lock = threading.Lock()
        self.next_number = 0
        self.running = threading.Event()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="devices-bench", protocol=mqtt.MQTTv311)
        self.c.reconnect_delay_set(0.1, 0.5)
        self.c.max_inflight_messages_set(max_inflight)
        self.c.on_publish = self._on_publish
        self.port = port
        self._thread: threading.Thread | None = None

    def _on_publish(self, client, userdata, mid, reason_code, properties) -> None:  # noqa: ANN001
        # Never hold self.lock around paho calls: paho runs this callback under its own lock.
        with self.lock:
            number = self._mid.pop(mid, None)
            if number is None:
                self._early.add(mid)         # acknowledged before publish() returned its mid
            else:
                self.acked[number] = time.monotonic()

    def start(self) -> "Publisher":
        self.c.connect_async("127.0.0.1", self.port, keepalive=10)
        self.c.loop_start()
        self.running.set()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        t0 = time.monotonic()
        sent = 0
        while self.running.is_set():
            if self.limit is not None and sent >= self.limit:
                time.sleep(0.01)
                continue
            due = int((time.monotonic() - t0) * self.rate) if self.rate else sent + 100
            if due <= sent or not self.c.is_connected() or len(self._mid) >= self.max_inflight:
                time.sleep(0.001)
                continue
            for _ in range(min(due - sent, 200, (self.limit - sent) if self.limit is not None else 200)):
                number = self.next_number
                now = time.monotonic()
                info = self.c.publish(TOPIC.format(number % 50), b"%d" % number + self.pad, qos=1)
                if info.rc != mqtt.MQTT_ERR_SUCCESS:
                    break            # not queued (disconnected): this number is never acknowledged
                with self.lock:
                    self.sent_at[number] = now
                    if info.mid in self._early:
                        self._early.discard(info.mid)
                        self.acked[number] = time.monotonic()
                    else:
                        self._mid[info.mid] = number
                self.next_number += 1
                sent += 1

    def pause(self) -> None:
        self.running.clear()
        if self._thread is not None:
            self._thread.join()

    def stop(self) -> None:
        self.pause()
        self.c.disconnect()
        self.c.loop_stop()


def _publish_in_child(port: int, rate: float, limit: int | None, stop, out) -> None:  # noqa: ANN001
    pub = Publisher(port, rate, limit=limit).start()
    while not stop.wait(0.05):
        if limit is not None and pub.next_number >= limit and not pub._mid:
            break                  # all sent and acknowledged
    pub.pause()
    wait_until(lambda: not pub._mid, 5.0)   # in-flight publishes: acknowledged, or never
    with pub.lock:
        out.put(dict(pub.acked))     # number -> when acknowledged (CLOCK_MONOTONIC: one clock for all processes)
    pub.c.disconnect()
    pub.c.loop_stop()


class PublisherProcess:
    """The Publisher in its own process, so that the consumer (the fog) does
    not share a GIL with the devices and keeps up as the real fog does."""

    def __init__(self, port: int, rate: float, limit: int | None = None):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.stop_event = ctx.Event()
        self.out = ctx.Queue()
        self.proc = ctx.Process(target=_publish_in_child, args=(port, rate, limit, self.stop_event, self.out),
                                daemon=True)

    def start(self) -> "PublisherProcess":
        self.proc.start()
        return self

    def acked(self, when_done: bool = False) -> dict[int, float]:
        """Every number the broker acknowledged, with when: now (publishing
        stops), or `when_done`, once the publisher sent its limit and all
        were acknowledged."""
        if not when_done:
            self.stop_event.set()
        numbers = self.out.get(timeout=60)
        self.proc.join(10)
        return numbers

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


@dataclass
class Accounting:
    acked: int = 0
    lost: int = 0
    duplicates: int = 0
    crashes: list[tuple[float, float]] = field(default_factory=list)   # (SIGKILL, restarted) times
    lost_acked_at: list[float] = field(default_factory=list)          # when each lost number was acknowledged
    lost_numbers: list[int] = field(default_factory=list)

    def lost_outside(self, window_s: float) -> list[float]:
        """Ack times of lost numbers NOT acknowledged within `window_s` before
        a crash. A PUBACK seen while the broker was down (between the kill and
        the restart) was sent before the kill, so that span counts as before it."""
        return [t for t in self.lost_acked_at if not any(k - window_s <= t <= r for k, r in self.crashes)]


def wait_until(pred, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def kill_and_restart(broker: Mosquitto, down_s: float = 0.3) -> tuple[float, float]:
    killed = time.monotonic()
    broker.stop(signal.SIGKILL)
    time.sleep(down_s)
    broker.start()
    return killed, time.monotonic()


def settle(acked: dict[int, float], consumer: Consumer, crashes: list, timeout_s: float = 15.0) -> Accounting:
    """Wait until every acknowledged number arrived (or the timeout) and count."""
    wait_until(lambda: acked.keys() <= consumer.received.keys(), timeout_s)
    lost = sorted(acked.keys() - consumer.received.keys())
    return Accounting(acked=len(acked), lost=len(lost), duplicates=consumer.duplicates, crashes=crashes,
                      lost_acked_at=[acked[n] for n in lost], lost_numbers=lost[:20])


def persistence_conf(autosave_interval: int | None, on_changes: bool) -> str:
    """Extra mosquitto.conf lines for one persistence setting (None: Mosquitto's default, 1800 s)."""
    lines = []
    if autosave_interval is not None:
        lines.append(f"autosave_interval {autosave_interval}")
    if on_changes:
        lines.append("autosave_on_changes true")
    return "\n".join(lines) + "\n"


def broker_with(workdir: Path, extra: str) -> Mosquitto:
    return Mosquitto(workdir, extra_conf=extra)   # max_inflight_messages 0, as configs/mosquitto/mosquitto.conf


def _session(broker: Mosquitto) -> Consumer:
    """The fog's session, connected and old enough to be in a snapshot
    (Mosquitto's time-based autosave runs when two whole seconds passed)."""
    consumer = Consumer(broker.port).start()
    wait_until(consumer.c.is_connected, 10)
    time.sleep(2.5)
    return consumer


def _under_load(broker: Mosquitto, rate: float, kills: int, gap_s: float, fog_away: bool) -> Accounting:
    consumer = _session(broker)
    publisher = PublisherProcess(broker.port, rate).start()
    crashes = []
    try:
        for _ in range(kills):
            time.sleep(gap_s)
            if fog_away:
                consumer.stop()
                time.sleep(gap_s)
            crashes.append(kill_and_restart(broker))
            if fog_away:
                consumer.c.reconnect()
                consumer.c.loop_start()
        time.sleep(gap_s)
        return settle(publisher.acked(), consumer, crashes)
    finally:
        publisher.kill()
        consumer.stop()


def connected_kills(broker: Mosquitto, rate: float, kills: int, every_s: float) -> Accounting:
    """The fog connected; the broker SIGKILLed `kills` times, `every_s` apart."""
    return _under_load(broker, rate, kills, every_s, fog_away=False)


def absent_kills(broker: Mosquitto, rate: float, kills: int, absent_s: float) -> Accounting:
    """The fog away (restarting) while reports are queued for its session; the
    broker SIGKILLed after `absent_s`, then the fog comes back."""
    return _under_load(broker, rate, kills, absent_s, fog_away=True)


def queued_then_kill(broker: Mosquitto, count: int, queued_for_s: float) -> Accounting:
    """The fog away; `count` reports queued for its session; the broker
    SIGKILLed `queued_for_s` after the last was acknowledged, restarted, and
    the fog back."""
    consumer = _session(broker)
    consumer.stop()
    publisher = PublisherProcess(broker.port, 0, limit=count).start()
    try:
        acked = publisher.acked(when_done=True)
        time.sleep(queued_for_s)
        crash = kill_and_restart(broker)
        consumer.c.reconnect()
        consumer.c.loop_start()
        return settle(acked, consumer, [crash])
    finally:
        publisher.kill()
        consumer.stop()
