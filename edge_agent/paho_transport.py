"""CPython transport for the agent over paho-mqtt 2.x.

- paho's own loop thread reconnects with exponential backoff (1 s .. 30 s).
- Reports wait in the core's bounded outbox while the agent is offline and
  are handed to paho only while connected and while fewer than max_inflight
  await their PUBACK (paho refuses new QoS 1 publishes at 65,535 in flight).
- A report handed to paho stays in paho's session until acknowledged; paho
  resends it after a reconnect. Once the broker acknowledged it, the core's
  outbox keeps it until the fog's receipt on the feedback topic
  (rase_device.outbox): handed to paho again after a reconnect or a timeout,
  so a broker crash or a wiped fog session loses nothing produced.
"""

from __future__ import annotations

import logging
import threading
import time

import paho.mqtt.client as mqtt

from rase_device import wire
from rase_device.core import AgentCore
from edge_agent.diagnostics import FeedbackWatch
from rase_common.mqtt import BrokerConfig, connect_in_background, paho_client

log = logging.getLogger(__name__)


class PahoTransport:
    def __init__(self, core: AgentCore, broker: BrokerConfig, *, max_inflight: int = 100, wakeup=None):
        self.core = core
        self.wakeup = wakeup              # the service's loop, woken on connect, PUBACK and control
        self.broker = broker
        self.max_inflight = max_inflight
        self.lock = threading.Lock()      # guards core (control messages arrive on paho's thread)
        self._mids_lock = threading.Lock()
        self.connected = threading.Event()
        self.published = 0                # written by the caller's thread only
        self.acked = 0                    # written by paho's thread only
        self.delivered = 0                # reports (not status messages) the broker acknowledged
        self._kinds: dict[int, tuple | None] = {}  # packet id -> the report (None: a status), until its PUBACK
        self._acked_early: set[int] = set()   # PUBACKs that came before publish() returned
        self._handed: list[tuple] = []     # reports the broker acknowledged, for the outbox to await receipts
        self._resend_all = False           # set by a (re)connect: what awaits a receipt goes out again
        self.control_errors = 0
        self.connects = 0
        self.control_applied = threading.Event()
        self.subscribed_at: float | None = None   # time.monotonic() of the control SUBACK
        self.started_at = time.monotonic()
        self.feedback_topic = wire.feedback_topic(core.region, core.device)
        self.feedback = FeedbackWatch(log)  # the fog's word on rejected reports (only this device reads it)
        self.client = self._make_client()

    def _make_client(self) -> mqtt.Client:
        c = paho_client(self.broker, f"agent-{self.core.device}")
        c.will_set(wire.status_topic(self.core.device), wire.encode_status("offline"), qos=1, retain=True)
        c.max_inflight_messages_set(self.max_inflight)
        c.on_connect = self._on_connect
        c.on_disconnect = self._on_disconnect
        c.on_publish = self._on_publish
        c.on_message = self._on_message
        c.on_subscribe = self._on_subscribe
        return c

    # paho thread -------------------------------------------------------
    def _on_connect(self, client, userdata, flags, reason_code, properties):  # noqa: ANN001
        if reason_code.is_failure:
            log.warning("agent=%s connect refused: %s", self.core.device, reason_code)
            return
        self.connects += 1
        self._resend_all = True
        client.subscribe([(wire.CONTROL_TOPIC, 1), (self.feedback_topic, 1)])
        self.core.status_changed = True
        self.connected.set()
        self._wake()
        log.info("agent=%s connected to %s:%d", self.core.device, self.broker.host, self.broker.port)

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties):  # noqa: ANN001
        if self.subscribed_at is None:
            self.subscribed_at = time.monotonic()
        self._wake()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties):  # noqa: ANN001
        self.connected.clear()
        log.info("agent=%s disconnected: %s", self.core.device, reason_code)

    def _wake(self) -> None:
        if self.wakeup is not None:
            self.wakeup.set()

    def _on_publish(self, client, userdata, mid, reason_code, properties):  # noqa: ANN001
        self.acked += 1
        with self._mids_lock:
            if mid not in self._kinds:
                self._acked_early.add(mid)
            else:
                item = self._kinds.pop(mid)
                if item is not None:
                    self.delivered += 1
                    self._handed.append(item)    # the outbox takes it on the caller's thread (pump)
        if len(self.core.outbox):
            self._wake()                  # room in flight for what is queued

    def _on_message(self, client, userdata, msg):  # noqa: ANN001
        if msg.topic == self.feedback_topic:
            with self.lock:
                receipt = self.core.on_feedback(msg.payload)     # the fog's receipt: those reports are kept
            if not receipt:
                self.feedback.on_feedback(self.core.device, msg.payload)
                with self.lock:
                    self.core.status_changed = True    # the retained status carries rejected_by_fog at once
            self._wake()
            return
        if msg.topic != wire.CONTROL_TOPIC:
            return
        with self.lock:
            try:
                if not msg.payload:
                    return  # a cleared retained message: keep the current calibration
                cal = self.core.apply_control(msg.payload)
                self.control_applied.set()
                self._wake()
                log.info("agent=%s recalibrated: %s levels=%s", self.core.device, cal.as_dict(), self.core.eps_levels)
            except ValueError as err:
                self.control_errors += 1
                log.warning("agent=%s ignored control message (kept its calibration): %s", self.core.device, err)
            except Exception:  # a bug must not kill paho's network thread: keep the calibration, say so
                self.control_errors += 1
                log.exception("agent=%s could not apply a control message; kept its calibration", self.core.device)

    # caller's thread -----------------------------------------------------
    def calibrated(self, grace_s: float, give_up_s: float) -> bool:
        """True once the agent may take its first reading: a control message
        was applied, or none came within grace_s of subscribing (no fusion
        center: local config), or the broker stayed unreachable for give_up_s."""
        if self.control_applied.is_set():
            return True
        now = time.monotonic()
        if self.subscribed_at is not None and now - self.subscribed_at >= grace_s:
            return True
        return now - self.started_at >= give_up_s

    @property
    def inflight(self) -> int:
        return self.published - self.acked

    def counts(self) -> dict[str, int]:
        """What became of this device's reports (its status carries them)."""
        return {"made": self.core.sent, "delivered": self.delivered,
                "rejected_by_fog": self.feedback.count(self.core.device), "late_by_fog": self.core.late_by_fog}

    def start(self) -> None:
        connect_in_background(self.client, self.broker)

    def pump(self) -> int:
        """Hand queued reports to paho while connected; returns how many."""
        if not self.connected.is_set():
            return 0
        sent = 0
        with self.lock:
            core = self.core
            self._await_receipts(time.monotonic())
            if core.status_changed:
                core.status_changed = False
                self._publish(wire.status_topic(core.device), core.status_payload(self.counts()), retain=True)
            box = core.outbox
            while len(box) and self.inflight < self.max_inflight and self.connected.is_set():
                item = box.pop()
                if not self._publish(item[0], item[1], report=item):
                    box.push_front(item)
                    break
                sent += 1
        return sent

    def _await_receipts(self, now: float) -> None:
        """(Under self.lock.) Acknowledged reports wait in the outbox for the fog's receipt; after a
        reconnect, or a receipt's timeout, they are queued again."""
        box = self.core.outbox
        with self._mids_lock:
            handed, self._handed = self._handed, []
        for item in handed:
            box.handed(item, now)
        if self._resend_all:
            self._resend_all = False
            box.resend_due(now, all_of_them=True)
        else:
            box.resend_due(now)

    def next_resend_s(self) -> float | None:
        """Seconds until a report awaiting its receipt is due again (None: none awaits)."""
        with self.lock:
            return self.core.outbox.next_resend_s(time.monotonic())

    def _publish(self, topic: str, payload: str, retain: bool = False, report: tuple | None = None) -> bool:
        info = self.client.publish(topic, payload, qos=1, retain=retain)
        if info.rc != mqtt.MQTT_ERR_SUCCESS and info.rc != mqtt.MQTT_ERR_NO_CONN:
            return False
        with self._mids_lock:
            if info.mid in self._acked_early:      # the PUBACK came before publish() returned
                self._acked_early.discard(info.mid)
                if report is not None:
                    self.delivered += 1
                    self._handed.append(report)
            else:
                self._kinds[info.mid] = report
        # NO_CONN: paho keeps a QoS 1 message queued and sends it on reconnect.
        self.published += 1
        return True

    def stop(self, timeout_s: float = 5.0) -> None:
        """Say offline (retained), wait briefly for acks, disconnect."""
        if self.connected.is_set():
            with self.lock:
                info = self.client.publish(wire.status_topic(self.core.device), wire.encode_status("offline"),
                                           qos=1, retain=True)
            try:
                info.wait_for_publish(timeout=timeout_s)
            except (RuntimeError, ValueError):
                pass  # not connected any more: the will says offline instead
        self.client.disconnect()
        self.client.loop_stop()
