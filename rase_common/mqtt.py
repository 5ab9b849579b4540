"""Broker settings and paho client construction shared by every service."""

from __future__ import annotations

import logging
import socket
import ssl
import struct
from pathlib import Path
from urllib.parse import urlparse

import paho.mqtt.client as mqtt
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rase_common.settings import read_secret

log = logging.getLogger(__name__)


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


def connect_in_background(client: mqtt.Client, broker: BrokerConfig) -> None:
    """Start paho's network thread; it connects, and reconnects with backoff.
    Each failed attempt is logged, so an unreachable broker is visible."""
    if client.on_connect_fail is None:
        client.on_connect_fail = lambda c, u: log.warning(
            "cannot reach MQTT broker %s:%d; retrying with backoff", broker.host, broker.port)
    client.connect_async(broker.host, broker.port, keepalive=broker.keepalive_s)
    client.loop_start()


_PUBACK = struct.Struct("!BBH")       # MQTT 3.1.1 PUBACK: type 0x40, remaining length 2, packet id


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

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._sock, name)


class Client(mqtt.Client):
    """paho's client with buffered reads, and acknowledging a batch of
    messages at once."""

    DRAIN_PACKETS = 256

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
        writes and keepalives still get their turn under a flood."""
        rc = super().loop_read(max_packets)
        for _ in range(self.DRAIN_PACKETS):
            if rc != mqtt.MQTT_ERR_SUCCESS or self._sock is None or not self._sock.pending():
                break
            rc = super().loop_read(1)
        return rc

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
        if not self._manual_ack or not mids or self._thread is None:
            for m in messages:    # no network thread to wake (or nothing to batch): paho's own path
                if m.qos > 0:
                    self.ack(m.mid, m.qos)
            return
        # One outgoing entry holding every PUBACK back to back: paho writes it
        # with one send() (resuming a partial write) instead of one per report.
        acks = b"".join([_PUBACK.pack(0x40, 2, mid) for mid in mids])
        self._out_packet.append({"command": mqtt.PUBACK, "mid": mids[0], "qos": 1, "pos": 0,
                                 "to_process": len(acks), "packet": acks, "info": None})
        for m in messages:
            if m.qos == 2:
                self.ack(m.mid, 2)
        if self._sockpairW is not None:
            try:
                self._sockpairW.send(b"0")
            except BlockingIOError:
                pass
        self._call_socket_register_write()


def paho_client(broker: BrokerConfig, client_id: str, *, clean_session: bool = True,
                manual_ack: bool = False) -> Client:
    """An MQTT 3.1.1 paho client with credentials, TLS and reconnect backoff set."""
    c = Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311,
                    clean_session=clean_session, manual_ack=manual_ack)
    if broker.username:
        c.username_pw_set(broker.username, broker.password if broker.password_file is None
                          else read_secret(broker.password_file, "broker.password_file"))
    if broker.tls:
        c.tls_set(ca_certs=str(broker.ca_file) if broker.ca_file else None, cert_reqs=ssl.CERT_REQUIRED)
    c.reconnect_delay_set(min_delay=1, max_delay=30)
    return c
