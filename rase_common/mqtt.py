"""MQTT for every service: broker settings, the one adapter over paho-mqtt,
and an asyncio link that services use as a source and a sink.

paho-mqtt 2.x is the client: fast, and what the tests measure. Four of its
private parts are used, each through a guard checked at import, with paho's
public path as the fallback (paho is pinned below 3):
- batched PUBACKs (`Client.ack_batch`): one outgoing packet for a whole
  batch of manual acks, instead of one wake-up and one send() per message;
- batched reads of PUBLISH packets (`Client.on_message_batch`): QoS 0 and 1
  PUBLISHes are split straight out of the read buffer and handed over as one
  list per read, instead of one paho message object (with its own lock and
  condition variable), one callback and one topic match per message; every
  other packet, and any PUBLISH paho would have to judge (QoS 2, malformed,
  a topic that is not UTF-8, MQTT 5), still goes through paho;
- the reconnect wait (`Client._reconnect_wait`): paho's own doubling delay
  replaced by the shared Backoff (jittered, first retry after 0.1 s), so a
  service is back on its broker within a fraction of a second of a restart.
- plain PUBACKs for our own QoS 1 publishes (`Client._handle_pubackcomp`):
  a PUBACK of two bytes (MQTT 3.1.1, or MQTT 5 success without properties)
  is read with one struct unpack and handed to paho's own completion,
  instead of paho's decoder building a reason code and a property set (a
  fifth of a replay fleet's CPU); a PUBACK with a reason goes through paho.
paho's return codes become TransportError in one place (`check_rc`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import ssl
import struct
import threading
import time
from pathlib import Path
from collections.abc import Sequence
from typing import Callable, Iterable, cast
from urllib.parse import urlparse

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rase_common.settings import read_secret

from rase_common.errors import Backoff, ConfigError, Outage, TransportError
from rase_common.loop import within

log = logging.getLogger(__name__)

# paho's private names the fast paths need; without any of them, the public path.
_BATCH_ACK_NAMES = ("_out_packet", "_sockpairW", "_call_socket_register_write", "_manual_ack", "_thread")
_BATCH_READ_NAMES = ("_in_packet", "_sock", "_manual_ack", "_last_bytes_received", "_msgtime_mutex")
_probe = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
FAST_ACKS = all(hasattr(_probe, n) for n in _BATCH_ACK_NAMES)
# The batched reads also queue auto-acks the way ack_batch does, so they need both sets.
BATCH_READS = FAST_ACKS and all(hasattr(_probe, n) for n in _BATCH_READ_NAMES) and \
    isinstance(getattr(_probe, "_in_packet", None), dict) and _probe._in_packet.get("command") == 0
BACKOFF_RECONNECT = hasattr(mqtt.Client, "_reconnect_wait") and hasattr(_probe, "_thread_terminate")
FAST_PUBACKS = all(hasattr(_probe, n) for n in ("_in_packet", "_out_message_mutex", "_out_messages")) and \
    hasattr(mqtt.Client, "_do_on_publish") and hasattr(mqtt.Client, "_handle_pubackcomp")
# QoS 0 notes (receipts) queued as one write of ready-made PUBLISH packets (publish_qos0).
FAST_QOS0 = hasattr(mqtt.Client, "_packet_queue") and hasattr(_probe, "_protocol") and hasattr(_probe, "_sock")
del _probe
if not (FAST_ACKS and BATCH_READS and BACKOFF_RECONNECT and FAST_PUBACKS):
    log.warning("paho-mqtt %s lacks private names RASE's fast paths use; falling back to its public API",
                getattr(mqtt, "__version__", "?"))


def check_rc(rc: int, what: str) -> None:
    """paho's return codes, turned into errors in one place: NO_CONN is fine
    for QoS >= 1 (paho keeps the message and sends it on reconnect)."""
    if rc in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN):
        return
    raise TransportError(f"{what}: {mqtt.error_string(rc)}", retriable=rc != mqtt.MQTT_ERR_PAYLOAD_SIZE)


class BrokerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    host: str = "127.0.0.1"
    port: int = Field(1883, ge=1, le=65535)
    username: str | None = None
    password: str | None = None
    password_file: Path | None = None   # the password in a file (a Docker secret)
    tls: bool = False
    ca_file: Path | None = None
    keepalive_s: int = Field(60, ge=5)

    @model_validator(mode="after")
    def _password_file(self) -> "BrokerConfig":
        if self.password_file is not None and self.password is not None:
            raise ValueError("give password or password_file, not both")
        return self

    @classmethod
    def from_url(cls, url: str) -> "BrokerConfig":
        """mqtt://[user:pass@]host[:port] or mqtts://... (TLS)."""
        u = urlparse(url)
        if u.scheme not in ("mqtt", "mqtts", "tcp") or not u.hostname:
            raise ValueError(f"broker URL must look like mqtt://host:port, got {url!r}")
        return cls(host=u.hostname, port=u.port or (8883 if u.scheme == "mqtts" else 1883),
                   username=u.username, password=u.password, tls=u.scheme == "mqtts")


def connect_in_background(client: mqtt.Client, broker: BrokerConfig, outage: Outage | None = None,
                          **v5_connect) -> Outage:  # noqa: ANN003
    """Start paho's network thread: it connects and reconnects with the
    client's backoff. The link's state is an Outage: one warning when the
    broker is lost or unreachable, one when it is back, nothing per attempt.
    Callbacks already set on the client are kept (called after this).
    v5_connect: MQTT 5 only, paho's clean_start and CONNECT properties."""
    outage = outage or Outage(f"MQTT broker {broker.host}:{broker.port}", log)
    user_connect, user_disconnect, user_fail = client.on_connect, client.on_disconnect, client.on_connect_fail

    def on_connect(c, userdata, flags, reason_code, properties):  # noqa: ANN001
        if reason_code.is_failure:
            outage.failed(TransportError(f"connection refused: {reason_code}"))
        else:
            if c.reconnect_backoff is not None:
                c.reconnect_backoff.reset()
            outage.recovered()
        if user_connect:
            user_connect(c, userdata, flags, reason_code, properties)

    def on_disconnect(c, userdata, flags, reason_code, properties):  # noqa: ANN001
        if getattr(reason_code, "is_failure", reason_code != 0) and not getattr(c, "_rase_stopping", False):
            outage.failed(TransportError(f"connection lost: {reason_code}"))
        if user_disconnect:
            user_disconnect(c, userdata, flags, reason_code, properties)

    def on_connect_fail(c, userdata):  # noqa: ANN001
        why = getattr(c, "last_connect_error", None)
        outage.failed(TransportError(f"cannot connect: {why}" if why else "cannot connect"))
        if user_fail:
            user_fail(c, userdata)

    client.on_connect, client.on_disconnect, client.on_connect_fail = on_connect, on_disconnect, on_connect_fail
    client.connect_async(broker.host, broker.port, keepalive=broker.keepalive_s, **v5_connect)
    client.loop_start()
    return outage


_PUBACK = struct.Struct("!BBH")       # MQTT 3.1.1 PUBACK: type 0x40, remaining length 2, packet id
_PACKET_ID = struct.Struct("!H")
# What paho's decoder makes of a two-byte PUBACK, made once (callbacks only read them).
_PUBACK_SUCCESS = ReasonCode(PacketTypes.PUBACK)
_PUBACK_NO_PROPERTIES = Properties(PacketTypes.PUBACK)


class ReadBufferedSocket:
    """A connected socket whose reads come from a 64 KiB buffer.

    paho reads each incoming packet with three recv() calls (type byte,
    length, body): three system calls per report, and a select() between
    packets. Reading whatever the kernel has in one call and serving paho's
    small reads from memory removes most of them. pending() reports the
    buffered bytes, which paho's loop already honours (it is how it drains
    an SSL socket's buffer) by reading again without waiting in select().
    Everything else is the wrapped socket's."""

    READ_SIZE = 65536

    def __init__(self, sock) -> None:  # noqa: ANN001
        self._sock = sock
        self._buf = b""
        self._pos = 0

    def recv(self, bufsize: int) -> bytes:
        if self._pos >= len(self._buf):
            data = self._sock.recv(max(bufsize, self.READ_SIZE))   # BlockingIOError, EOF (b"") pass through
            if len(data) <= bufsize:
                return data
            self._buf, self._pos = data, 0
        out = self._buf[self._pos:self._pos + bufsize]
        self._pos += len(out)
        return out

    def pending(self) -> int:
        inner = self._sock.pending() if hasattr(self._sock, "pending") else 0
        return len(self._buf) - self._pos + inner

    def fill(self) -> bool:
        """Append what the kernel has (up to READ_SIZE) to the buffered bytes,
        without waiting: False when nothing came. An end of stream or an
        error is not raised here; it is left for paho's next recv()."""
        try:
            data = self._sock.recv(self.READ_SIZE)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError, InterruptedError):
            return False
        except OSError:
            self.error = True
            return False
        if not data:
            self.eof = True
            return False
        self._buf = self._buf[self._pos:] + data if self._pos < len(self._buf) else data
        self._pos = 0
        return True

    def take_publishes(self, stamp: float) -> tuple[list[ReceivedMessage], bool]:
        """Split complete QoS 0 and 1 PUBLISH packets (MQTT 3.1.1) off the
        front of the buffer. Returns them and whether paho must read next:
        a packet of another kind, or one this will not judge, is at the front
        (or the connection ended); a partial PUBLISH stays buffered."""
        out, self._pos, other = split_publishes(self._buf, self._pos, stamp)
        return out, other or self.eof or self.error

    eof = False       # fill() saw the end of the stream, or an error: paho's next recv() sees it too
    error = False

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._sock, name)


class ReceivedMessage:
    """A received PUBLISH, as paho's MQTTMessage presents it to its callbacks
    (topic, payload, qos, mid, retain, dup, timestamp: time.monotonic() at
    arrival), without the per-message lock and condition variable paho makes."""

    __slots__ = ("topic", "payload", "qos", "mid", "retain", "dup", "timestamp")
    properties = None        # MQTT 5 only

    def __init__(self, topic: str, payload: bytes, qos: int, mid: int, retain: bool, dup: bool, timestamp: float):
        self.topic, self.payload, self.qos, self.mid = topic, payload, qos, mid
        self.retain, self.dup, self.timestamp = retain, dup, timestamp

    def __repr__(self) -> str:
        return f"ReceivedMessage({self.topic!r}, {self.payload[:40]!r}, qos={self.qos}, mid={self.mid})"


# A PUBLISH is 0x30 | dup 0x08 | qos << 1 | retain 0x01; those with QoS 0 or 1:
_QOS01_PUBLISH = frozenset(0x30 | dup | qos << 1 | retain for dup in (0, 8) for qos in (0, 1) for retain in (0, 1))
LARGE_PACKET = 1 << 16        # left to paho, which reads a large body straight from the socket


def split_publishes(buf: bytes, pos: int, stamp: float) -> tuple[list[ReceivedMessage], int, bool]:
    """The complete QoS 0 and 1 PUBLISH packets (MQTT 3.1.1) in buf from pos
    on: (messages, the position after the last one, whether a packet paho
    must handle comes next). Stops before anything it does not take exactly
    as paho would: another packet type, QoS 2, a malformed length or topic,
    a topic that is not UTF-8, a packet larger than LARGE_PACKET."""
    out: list[ReceivedMessage] = []
    n = len(buf)
    while pos < n:
        cmd = buf[pos]
        if cmd not in _QOS01_PUBLISH:
            return out, pos, True
        i, length, shift = pos + 1, 0, 0
        while True:                      # the remaining length: 1 to 4 bytes, 7 bits each
            if i >= n:
                return out, pos, False
            byte = buf[i]
            i += 1
            length |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
            if shift > 21:
                return out, pos, True
        if length > LARGE_PACKET:
            return out, pos, True
        end = i + length
        if end > n:
            return out, pos, False
        qos = (cmd >> 1) & 3
        if length < 2:
            return out, pos, True
        topic_end = i + 2 + ((buf[i] << 8) | buf[i + 1])
        body = topic_end + 2 * qos
        if topic_end == i + 2 or body > end:
            return out, pos, True
        try:
            topic = buf[i + 2:topic_end].decode()
        except UnicodeDecodeError:
            return out, pos, True
        mid = (buf[topic_end] << 8) | buf[topic_end + 1] if qos else 0
        out.append(ReceivedMessage(topic, buf[body:end], qos, mid, cmd & 1 == 1, cmd & 8 == 8, stamp))
        pos = end
    return out, pos, False


class Client(mqtt.Client):
    """paho's client with buffered reads, the shared reconnect backoff,
    acknowledging a batch of messages at once, and (with on_message_batch
    set) receiving QoS 0 and 1 messages a batch at a time."""

    DRAIN_PACKETS = 256
    FILLS_PER_TURN = 2          # socket reads split per turn of paho's loop, so writes (acks, pings) get their turn
    reconnect_backoff: Backoff | None = None    # set by paho_client; reset on every CONNACK
    # Called in paho's thread with a list of ReceivedMessage; None: paho's on_message, one message at a time.
    on_message_batch: Callable[[list[ReceivedMessage]], None] | None = None
    last_connect_error: OSError | None = None   # why the last (re)connect failed: paho's loop swallows it

    def reconnect(self) -> mqtt.MQTTErrorCode:
        try:
            return super().reconnect()
        except OSError as err:      # refused, unreachable, or a TLS certificate that does not verify
            self.last_connect_error = err
            raise

    def _reconnect_wait(self) -> None:  # noqa: D401 - paho's hook, guarded by BACKOFF_RECONNECT
        if self.reconnect_backoff is None or not BACKOFF_RECONNECT:
            return super()._reconnect_wait()
        deadline = time.monotonic() + self.reconnect_backoff.next_s()
        while not self._thread_terminate and time.monotonic() < deadline:
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def _create_socket(self):  # noqa: ANN202 - paho's socket factory, called on every (re)connect
        sock = super()._create_socket()
        # paho leaves Nagle's algorithm on: a small PUBLISH or PUBACK written
        # while an earlier segment is unacknowledged waits for the peer's
        # delayed ACK (up to 40 ms on Linux), which serialises a stream of reports.
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, AttributeError):
            pass          # not TCP (a unix socket, a websocket wrapper)
        return ReadBufferedSocket(sock)

    def loop_read(self, max_packets: int = 1) -> mqtt.MQTTErrorCode:
        """paho reads one packet per turn of its loop (a select() and the
        loop's own checks per report); while bytes are already in our
        buffer, read on, up to DRAIN_PACKETS more calls per turn (each
        of paho's calls reads one packet, or one per message in flight), so
        writes and keepalives still get their turn under a flood. With
        on_message_batch, PUBLISHes are split off the buffer in bulk and paho
        reads only what comes between them."""
        if self.on_message_batch is not None and BATCH_READS and self.protocol != mqtt.MQTTv5:
            return self._loop_read_batched()
        rc = super().loop_read(max_packets)
        for _ in range(self.DRAIN_PACKETS):
            if rc != mqtt.MQTT_ERR_SUCCESS or self._sock is None or not self._sock.pending():  # type: ignore[union-attr,attr-defined]
                break
            rc = super().loop_read(1)
        return rc

    def _loop_read_batched(self) -> mqtt.MQTTErrorCode:
        """One turn of paho's loop: PUBLISHes split off the buffer, paho
        reading whatever else comes between them, until nothing more is
        there or FILLS_PER_TURN reads were split, so paho's loop writes
        (acks, outgoing messages, pings) between turns under a flood."""
        rc = mqtt.MQTT_ERR_SUCCESS
        fills = [self.FILLS_PER_TURN]
        for _ in range(self.DRAIN_PACKETS):
            sock = cast(ReadBufferedSocket, self._sock)     # _create_socket made it one
            if sock is None:
                return mqtt.MQTT_ERR_NO_CONN
            if self._in_packet["command"] == 0 and not self._read_publishes(sock, fills):
                return rc            # nothing more to read now, or this turn's share is done
            rc = super().loop_read(1)    # paho's turn: one packet of another kind, or the rest of one
            if rc != mqtt.MQTT_ERR_SUCCESS or self._sock is None or not self._sock.pending():  # type: ignore[union-attr,attr-defined]
                return rc
        return rc

    def _read_publishes(self, sock: ReadBufferedSocket, fills: list[int]) -> bool:
        """Hand every complete QoS 0/1 PUBLISH at the front of the stream to
        on_message_batch, reading the socket while fills[0] (this turn's
        share of reads) lasts. True when paho must read next: another kind of
        packet, a partial one, or the end of the stream."""
        while True:
            msgs, paho_next = sock.take_publishes(time.monotonic())
            if msgs:
                with self._msgtime_mutex:
                    self._last_bytes_received = time.monotonic()
                assert self.on_message_batch is not None
                self.on_message_batch(msgs)
                if not self._manual_ack:      # as paho: acknowledged once the callback returned
                    self._queue_pubacks([m.mid for m in msgs if m.qos == 1])
            if paho_next:
                return True
            if fills[0] <= 0:
                return False
            fills[0] -= 1
            if not sock.fill():
                return sock.pending() > 0 or sock.eof or sock.error

    def _queue_pubacks(self, mids: list[int]) -> None:
        """One outgoing entry holding every PUBACK back to back: paho writes it
        with one send() (resuming a partial write) instead of one per report,
        and its thread is woken once."""
        if not mids:
            return
        acks = b"".join([_PUBACK.pack(0x40, 2, mid) for mid in mids])
        self._out_packet.append({"command": mqtt.PUBACK, "mid": mids[0], "qos": 1, "pos": 0,
                                 "to_process": len(acks), "packet": acks, "info": None})
        if self._sockpairW is not None:
            try:
                self._sockpairW.send(b"0")
            except BlockingIOError:
                pass
        self._call_socket_register_write()

    def _handle_pubackcomp(self, cmd):  # noqa: ANN001, ANN202 - paho's handler, guarded by FAST_PUBACKS
        packet = self._in_packet["packet"] if FAST_PUBACKS else b""
        if cmd != "PUBACK" or len(packet) != 2:
            return super()._handle_pubackcomp(cmd)
        (mid,) = _PACKET_ID.unpack(packet)
        with self._out_message_mutex:
            if mid in self._out_messages:
                return self._do_on_publish(mid, _PUBACK_SUCCESS, _PUBACK_NO_PROPERTIES)
        return mqtt.MQTT_ERR_SUCCESS

    def ack_batch(self, messages) -> None:  # noqa: ANN001
        """PUBACK every QoS 1 message of a batch (manual acks), waking paho's
        network thread once instead of once per message.

        paho's ack() writes a byte to its wake-up socket for every PUBACK it
        queues, and its thread then writes every PUBACK with a send() of its
        own: two system calls per report, a sixth of the fog's loop under a
        flood. This queues the same PUBACK packets, concatenated, the way
        ack() queues one (paho 2.x's outgoing packet deque, thread-safe
        appends) and wakes the thread once. paho is pinned below 3;
        tests/unit/rase_common/test_mqtt.py checks the acks reach a real broker."""
        mids = [m.mid for m in messages if m.qos == 1]
        if not FAST_ACKS or not self._manual_ack or not mids or self._thread is None:
            for m in messages:    # no network thread to wake (or nothing to batch): paho's own path
                if m.qos > 0:
                    self.ack(m.mid, m.qos)
            return
        self._queue_pubacks(mids)
        for m in messages:
            if m.qos == 2:
                self.ack(m.mid, 2)


def paho_client(broker: BrokerConfig, client_id: str, *, clean_session: bool = True,
                manual_ack: bool = False, backoff: Backoff | None = None, mqtt5: bool = False) -> Client:
    """A paho client (MQTT 3.1.1, or 5 with mqtt5) with credentials, verified
    TLS and the shared reconnect backoff (default: first retry after 0.1 s, at
    most 2 s apart). With MQTT 5 the session is chosen at connect
    (v5_session_connect), not here."""
    if mqtt5:
        c = Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5,
                   manual_ack=manual_ack)
    else:
        c = Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311,
                   clean_session=clean_session, manual_ack=manual_ack)
    if broker.username:
        c.username_pw_set(broker.username, broker.password if broker.password_file is None
                          else read_secret(broker.password_file, "broker.password_file"))
    if broker.tls:
        # CERT_REQUIRED and host name checking: a broker without a certificate
        # from this CA (or for another name) is refused before credentials are sent.
        c.tls_set(ca_certs=str(broker.ca_file) if broker.ca_file else None, cert_reqs=ssl.CERT_REQUIRED)
    c.reconnect_backoff = backoff or Backoff()
    c.reconnect_delay_set(min_delay=1, max_delay=2)    # paho's own wait, used only without BACKOFF_RECONNECT
    return c


SESSION_NEVER_EXPIRES = 0xFFFFFFFF   # MQTT 5 session expiry: kept like an MQTT 3.1.1 persistent session


def v5_session_connect(clean_session: bool) -> dict:
    """paho's MQTT 5 connect arguments for what MQTT 3.1.1 calls clean_session.
    In MQTT 5 a session ends when the connection does (expiry 0) unless the
    CONNECT says otherwise: a persistent session (queued QoS 1 messages while
    the service is away, its subscriptions) needs clean_start False and a
    session expiry interval, here never."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    if clean_session:
        return {"clean_start": True}
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = SESSION_NEVER_EXPIRES
    return {"clean_start": False, "properties": props}


def publish_properties(*, expiry_s: int | None = None, content_type: str | None = None,
                       user: Sequence[tuple[str, str]] = ()):  # noqa: ANN201 - paho Properties
    """MQTT 5 PUBLISH properties: message expiry (the broker drops the message,
    a retained one included, this many seconds after it was published), content
    type and user properties. MQTT 3.1.1 subscribers get the same payload
    without them (the broker strips them)."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    props = Properties(PacketTypes.PUBLISH)
    if expiry_s is not None:
        props.MessageExpiryInterval = int(expiry_s)
    if content_type is not None:
        props.ContentType = content_type
    if user:
        props.UserProperty = list(user)
    return props


SHARED_PREFIX = "$share/"


def check_not_shared(subscriptions: Iterable[tuple[str, int]]) -> None:
    """A service must see every message of its filters: on a shared
    subscription ($share/group/filter) the broker gives each member only some
    of them, so three fogs in one group would each close a third of every
    window (issue 29). Refused with ConfigError."""
    shared = [f for f, _ in subscriptions if f.startswith(SHARED_PREFIX)]
    if shared:
        raise ConfigError(f"shared subscription {shared[0]!r}: a service must receive every message of its "
                          "filters, not a share of them (a window would be split across the group's members)")


def qos0_packets(messages: Iterable[tuple[str, str | bytes]], *, mqtt5: bool = False) -> tuple[int, bytearray]:
    """(how many, the bytes of) QoS 0 PUBLISH packets, no retain: MQTT 3.1.1 section 3.3 (MQTT 5: with an
    empty property set), what paho writes for publish(topic, payload, qos=0)."""
    out = bytearray()
    n = 0
    for topic, payload in messages:
        t = topic.encode()
        p = payload.encode() if isinstance(payload, str) else bytes(payload)
        remaining = 2 + len(t) + len(p) + (1 if mqtt5 else 0)
        out.append(0x30)
        while True:                       # the remaining length, 7 bits a byte
            byte, remaining = remaining & 0x7F, remaining >> 7
            out.append(byte | (0x80 if remaining else 0))
            if not remaining:
                break
        out += struct.pack("!H", len(t))
        out += t
        if mqtt5:
            out.append(0)
        out += p
        n += 1
    return n, out


class MqttLink:
    """One service's connection to its broker, for asyncio code.

    - Connects in the background and reconnects with the shared backoff;
      `state` is an Outage (one warning when lost, one when back).
    - `subscriptions` are (re)made on every connect; `subscribed` is set once
      the broker's SUBACK accepted every filter (refused ones are logged and
      counted in `refused`).
    - Incoming messages queue in `inbox` (a deque: paho's thread appends a
      whole read's messages at once, the loop takes); `wakeup` is called after
      each read, so the loop waits on events, not a tick.
    - publish() awaits the broker's PUBACK and raises TransportError (retriable)
      when it does not come in time; a lost connection never raises anywhere
      else. A QoS 1 message not yet acknowledged when the link drops stays in
      paho's session and is sent again on reconnect.
    Nothing happens in the constructor; start() and stop() do the I/O.
    """

    def __init__(self, broker: BrokerConfig, client_id: str, *, subscriptions: Sequence[tuple[str, int]] = (),
                 clean_session: bool = True, manual_ack: bool = False, wakeup: Callable[[], None] | None = None,
                 will: tuple[str, str, bool] | None = None, name: str | None = None, mqtt5: bool = False,
                 birth: tuple[str, str, bool] | None = None):
        self.broker = broker
        self.mqtt5 = mqtt5                # MQTT 5: publishes may carry properties (expiry, content type)
        self.client_id = client_id
        self.subscriptions = list(subscriptions)
        check_not_shared(self.subscriptions)
        self.clean_session = clean_session
        self.manual_ack = manual_ack
        self.wakeup = wakeup or (lambda: None)
        self.will = will
        self.birth = birth                # (topic, payload, retain) published at every connect; the will on stop
        self.name = name or client_id
        self.inbox: collections.deque = collections.deque()
        self.client: Client | None = None
        self.state: Outage | None = None
        self.connected = threading.Event()
        self.subscribed = threading.Event()
        self.refused: list[str] = []
        self.connects = 0                 # successful connections so far (a new one: republish retained state)
        self.on_subscribed: Callable[[list[str]], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._waiting: dict[int, asyncio.Future] = {}
        self._acked_early: dict[int, TransportError | None] = {}   # PUBACKs before publish() returned

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        c = self.client = paho_client(self.broker, self.client_id, clean_session=self.clean_session,
                                      manual_ack=self.manual_ack, mqtt5=self.mqtt5)
        if self.will is not None:
            topic, payload, retain = self.will
            c.will_set(topic, payload, qos=1, retain=retain)
        c.on_connect = self._on_connect
        c.on_disconnect = self._on_disconnect
        c.on_message = self._on_message
        c.on_message_batch = self._on_messages
        c.on_subscribe = self._on_subscribe
        c.on_publish = self._on_publish
        self.state = connect_in_background(c, self.broker, Outage(f"{self.name}: MQTT broker {self.broker.host}:"
                                                                  f"{self.broker.port}", log),
                                           **(v5_session_connect(self.clean_session) if self.mqtt5 else {}))

    def stop(self) -> None:
        c = self.client
        if c is None:
            return
        c._rase_stopping = True  # type: ignore[attr-defined]  # our own disconnect is not an outage
        if self.birth is not None and self.will is not None and self.connected.is_set():
            # A clean stop says what the will would have said (a disconnect does not fire it).
            try:
                c.publish(self.will[0], self.will[1], qos=1, retain=self.will[2]).wait_for_publish(2.0)
            except (RuntimeError, ValueError):
                pass      # the connection went meanwhile: the broker sends the will
        c.disconnect()
        c.loop_stop()
        self.connected.clear()
        self.subscribed.clear()
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for fut in waiting.values():
            self._resolve(fut, TransportError("link stopped"))

    # -- paho's thread -------------------------------------------------------
    def _on_connect(self, client, userdata, flags, reason_code, properties):  # noqa: ANN001
        if reason_code.is_failure:
            log.error("%s: the broker refused the connection: %s", self.name, reason_code)
            return
        self.connects += 1
        self.connected.set()
        self.subscribed.clear()
        log.info("%s connected to %s:%d (session present: %s)", self.name, self.broker.host, self.broker.port,
                 flags.session_present)
        if self.birth is not None:
            topic, payload, retain = self.birth
            client.publish(topic, payload, qos=1, retain=retain)
        if self.subscriptions:
            client.subscribe(self.subscriptions)
        else:
            self.subscribed.set()
        self.wakeup()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties):  # noqa: ANN001
        self.connected.clear()
        self.subscribed.clear()
        self.wakeup()

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties):  # noqa: ANN001
        refused = [topic for (topic, _q), rc in zip(self.subscriptions, reason_codes) if rc.is_failure]
        self.refused = refused
        if refused:
            log.error("%s: the broker refused the subscription to %s: check its ACL", self.name, ", ".join(refused))
        if self.on_subscribed is not None:
            self.on_subscribed(refused)
        self.subscribed.set()
        self.wakeup()

    def _on_message(self, client, userdata, msg):  # noqa: ANN001
        self.inbox.append(msg)
        self.wakeup()

    def _on_messages(self, msgs: list[ReceivedMessage]) -> None:
        self.inbox.extend(msgs)
        self.wakeup()

    def _on_publish(self, client, userdata, mid, reason_code, properties):  # noqa: ANN001
        # MQTT 5: a PUBACK may refuse the message (e.g. 0x87, not authorized by the ACL).
        err = TransportError(f"{self.name}: the broker refused the message: {reason_code}", retriable=False) \
            if getattr(reason_code, "is_failure", False) else None
        with self._lock:
            fut = self._waiting.pop(mid, None)
            if fut is None:
                self._acked_early[mid] = err
        if fut is not None:
            self._resolve(fut, err)

    def _resolve(self, fut: asyncio.Future, err: BaseException | None) -> None:
        def settle() -> None:
            if not fut.done():
                fut.set_exception(err) if err is not None else fut.set_result(None)
        try:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(settle)
        except RuntimeError:
            pass          # the loop has closed: nobody waits any more

    # -- the loop's side -----------------------------------------------------
    def publish_nowait(self, topic: str, payload: str | bytes, *, qos: int = 1, retain: bool = False,
                       properties=None) -> asyncio.Future:  # noqa: ANN001
        """Queue a QoS 1 publish; the future completes on its PUBACK."""
        if self.client is None:
            raise TransportError(f"{self.name}: link not started")
        if qos != 1:
            # Only QoS 1 is confirmed; paho reports QoS 0 sends by packet id too,
            # and such an id would later complete a QoS 1 publish that reuses it.
            raise ValueError("MqttLink publishes with QoS 1 only")
        info = self.client.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        check_rc(info.rc, f"publish to {topic}")
        assert self._loop is not None
        fut = self._loop.create_future()
        with self._lock:
            if info.mid in self._acked_early:
                err = self._acked_early.pop(info.mid)
                fut.set_exception(err) if err is not None else fut.set_result(None)
            else:
                self._waiting[info.mid] = fut
        return fut

    def publish_qos0(self, messages: Iterable[tuple[str, str | bytes]]) -> int:
        """Best-effort notes (end-to-end receipts): QoS 0, no future, no PUBACK; dropped while the link
        is down (the receiver asks again). How many were handed to paho."""
        c = self.client
        if c is None or not self.connected.is_set():
            return 0
        if not FAST_QOS0:
            return sum(c.publish(topic, payload, qos=0).rc == mqtt.MQTT_ERR_SUCCESS for topic, payload in messages)
        # paho's publish() costs about 20 us a message (a message info, topic checks, a log line, a packet
        # queued and a wake-up each); a receipt per report made that half the fog's CPU. Here every
        # message is a QoS 0 PUBLISH packet built as paho would, and all of them are one write.
        packets = qos0_packets(messages, mqtt5=c._protocol == mqtt.MQTTv5)
        if not packets[0]:
            return 0
        if c._sock is None:
            return 0
        # qos=1 on the queue entry only: paho then treats the write as a whole, with no on_publish or
        # message info for it (a QoS 0 entry would expect both); the bytes are QoS 0 PUBLISHes.
        c._packet_queue(mqtt.PUBLISH, packets[1], 0, 1)
        return packets[0]

    async def publish(self, topic: str, payload: str | bytes, *, qos: int = 1, retain: bool = False,
                      timeout_s: float = 10.0, properties=None) -> None:  # noqa: ANN001
        """Publish and wait for the broker's PUBACK, or raise TransportError."""
        fut = self.publish_nowait(topic, payload, qos=qos, retain=retain, properties=properties)
        try:
            await within(fut, timeout_s, cancel=False)
        except asyncio.TimeoutError:
            raise TransportError(f"no PUBACK for {topic} within {timeout_s:g} s"
                                 + ("" if self.connected.is_set() else " (not connected)")) from None

    def take(self, max_items: int) -> list[mqtt.MQTTMessage | ReceivedMessage]:
        """Up to max_items received messages, oldest first, without waiting."""
        inbox = self.inbox
        # Only this thread takes, so at least len() messages are there to pop.
        return [inbox.popleft() for _ in range(min(max_items, len(inbox)))]

    def ack(self, messages: list[mqtt.MQTTMessage]) -> None:
        """PUBACK messages taken with manual_ack (a no-op for QoS 0)."""
        if self.client is not None and messages:
            self.client.ack_batch(messages)


class MqttSource:
    """The messages of a service's MqttLink as a Source (the link itself is
    started and stopped by the service that owns it)."""

    def __init__(self, link: MqttLink):
        self.link = link

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def take(self, max_items: int) -> list[mqtt.MQTTMessage | ReceivedMessage]:
        return self.link.take(max_items)

    def ack(self, items: list[mqtt.MQTTMessage]) -> None:
        self.link.ack(items)


class MqttSink:
    """Publishes each message to topic_of(key), QoS 1, and returns on its PUBACK."""

    def __init__(self, link: MqttLink, topic_of: Callable[[str], str], timeout_s: float = 10.0):
        self.link = link
        self.topic_of = topic_of
        self.timeout_s = timeout_s

    async def send(self, key: str, payload: str) -> None:
        if not self.link.connected.is_set():
            raise TransportError(f"{self.link.name}: not connected to the broker")
        await self.link.publish(self.topic_of(key), payload, timeout_s=self.timeout_s)

    async def stop(self) -> None:
        pass
