"""A load generator for benchmarks: MQTT 3.1.1 QoS 1 PUBLISHes written over
plain sockets, encoded before the start, so the generator costs the machine
little and the broker and the services under test are the limit (a paho
publisher spends ~50 us of Python per message)."""

from __future__ import annotations

import socket
import threading
import time

INFLIGHT = 4000            # unacknowledged PUBLISHes per load generator
CHUNK = 200               # PUBLISHes per socket write


def varint(n: int) -> bytes:
    """MQTT's variable byte integer (a remaining length)."""
    out = bytearray()
    while True:
        n, digit = n >> 7, n & 0x7F
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _mqtt_str(s: bytes) -> bytes:
    return len(s).to_bytes(2, "big") + s


def publish_packet(topic: str, payload: str | bytes, mid: int) -> bytes:
    """An MQTT 3.1.1 PUBLISH, QoS 1 (fixed header 0x32)."""
    body = _mqtt_str(topic.encode()) + mid.to_bytes(2, "big") + (payload.encode() if isinstance(payload, str)
                                                                  else bytes(payload))
    return b"\x32" + varint(len(body)) + body


def connect(port: int, cid: str) -> socket.socket:
    """An MQTT 3.1.1 connection over a plain socket, CONNACK read."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # Level 4 (3.1.1), clean session, keepalive 3600 s: it publishes without
    # pause, so it never sends PINGREQ and only PUBACKs come back. (Keepalive 0
    # is refused by Mosquitto >= 2.0.12 under its default max_keepalive.)
    var = _mqtt_str(b"MQTT") + bytes([4, 0x02]) + (3600).to_bytes(2, "big")
    body = var + _mqtt_str(cid.encode())
    sock.settimeout(30)
    sock.sendall(b"\x10" + varint(len(body)) + body)
    connack = b""
    while len(connack) < 4:
        part = sock.recv(4 - len(connack))
        if not part:
            break
        connack += part
    if connack != b"\x20\x02\x00\x00":
        raise RuntimeError(f"the broker refused the load generator's CONNECT: {connack!r}")
    sock.settimeout(None)
    return sock


def publish_all(port: int, cid: str, messages, start_at, pace: tuple[int, float] | None = None) -> None:
    """A load generator, not a device: MQTT 3.1.1 over a plain socket, every
    PUBLISH (QoS 1) encoded before the start, sent in large writes, with at
    most INFLIGHT unacknowledged; returns when the broker has acked them all.
    A paho publisher spends ~50 us of Python per message, so three of them
    could not load Mosquitto beyond ~8,000 msg/s on two cores; this one leaves
    the cores to the broker and the services under test.

    messages: (topic, payload) pairs, or a callable making them in this
    process (prio3 reports are dear to make). start_at: a Unix time, or a
    barrier every load generator waits at once its messages are made. pace:
    (messages per window, seconds): window k's messages leave k x seconds
    after the start."""
    if callable(messages):
        messages = messages()
    packets = [publish_packet(t, p, 1 + i % 65535) for i, (t, p) in enumerate(messages)]
    per_window, pace_s = pace or (len(packets) or 1, 0.0)
    starts = [i for w in range(0, len(packets), per_window) for i in range(w, min(w + per_window, len(packets)),
                                                                             CHUNK)]
    chunks = [b"".join(packets[i:min(i + CHUNK, (i // per_window + 1) * per_window)]) for i in starts]
    sizes = [min(CHUNK, (i // per_window + 1) * per_window - i, len(packets) - i) for i in starts]
    due = [(i // per_window) * pace_s for i in starts]
    sock = connect(port, cid)
    acks = [0]
    cond = threading.Condition()

    def read_acks() -> None:    # nothing but PUBACKs (4 bytes each) comes back: no subscriptions, no PINGREQ
        got = 0
        try:
            while got < 4 * len(packets):
                data = sock.recv(65536)
                if not data:
                    return
                got += len(data)
                with cond:
                    acks[0] = got // 4
                    cond.notify()
        finally:
            with cond:
                acks.append("done")      # wakes a sender waiting for acks that will not come
                cond.notify()

    reader = threading.Thread(target=read_acks, daemon=True)
    reader.start()
    if isinstance(start_at, (int, float)):
        while time.time() < start_at:
            time.sleep(0.001)
    else:
        start_at.wait()
    began = time.time()
    sent = 0
    for chunk, k, at in zip(chunks, sizes, due):
        while time.time() < began + at:
            time.sleep(0.001)
        with cond:
            if not cond.wait_for(lambda: sent + k - acks[0] <= INFLIGHT or len(acks) > 1, timeout=60) \
                    or len(acks) > 1:
                raise RuntimeError(f"the broker stopped acknowledging ({acks[0]} of {sent} acked)")
        sock.sendall(chunk)
        sent += k
    reader.join(120)
    if acks[0] < len(packets):
        raise RuntimeError(f"only {acks[0]} of {len(packets)} PUBLISHes were acknowledged")
    sock.sendall(b"\xe0\x00")     # DISCONNECT
    sock.close()


def publish_paced(port: int, cid: str, messages: list[tuple[str, str]], rate_per_s: float,
                  chunk: int = 20) -> None:
    """Publish at a steady rate (chunk messages per write), reading the
    broker's PUBACKs in a thread; returns once every message was acked."""
    packets = [publish_packet(t, p, 1 + i % 65535) for i, (t, p) in enumerate(messages)]
    sock = connect(port, cid)
    done = threading.Event()

    def drain() -> None:
        got = 0
        while got < 4 * len(packets):
            data = sock.recv(65536)
            if not data:
                break
            got += len(data)
        done.set()

    threading.Thread(target=drain, daemon=True).start()
    start = time.monotonic()
    for i in range(0, len(packets), chunk):
        due = start + i / rate_per_s
        time.sleep(max(0.0, due - time.monotonic()))
        sock.sendall(b"".join(packets[i:i + chunk]))
    if not done.wait(120):
        raise RuntimeError("the broker did not acknowledge every paced PUBLISH")
    sock.sendall(b"\xe0\x00")
    sock.close()
