"""The fault proxy (simulators/faults/proxy.py): MQTT framing from a table,
and each control (forward, drop, refuse, silence, cut at a packet) against a
real TCP server on loopback that records what reaches it and echoes it."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from simulators.faults.proxy import Framer, MqttPacket, TcpProxy, puback, publish_to
from simulators.loadgen import publish_packet

PUBACK_7 = b"\x40\x02\x00\x07"
PINGREQ = b"\xc0\x00"


def packets_of(data: bytes, chunk: int) -> list[MqttPacket]:
    framer = Framer()
    out = []
    for i in range(0, len(data), chunk):
        out += framer.feed(data[i:i + chunk])
    assert not framer.buf
    return out


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 20])
def test_framing_is_the_same_however_the_stream_is_split(chunk):
    big = publish_packet("rase/v1/windows/r1", "x" * 20_000, 9)    # a 3-byte remaining length
    stream = publish_packet("rase/v1/reports/r1/d1", '{"v":1}', 1) + PUBACK_7 + big + PINGREQ
    got = packets_of(stream, chunk)
    assert [(p.kind, p.topic) for p in got] == [(3, "rase/v1/reports/r1/d1"), (4, None),
                                                 (3, "rase/v1/windows/r1"), (12, None)]
    assert b"".join(p.raw for p in got) == stream
    assert publish_to("rase/v1/windows/")(got[2]) and not publish_to("rase/v1/windows/")(got[0])
    assert puback(got[1]) and not puback(got[0])


def test_a_malformed_length_is_refused():
    with pytest.raises(ValueError):
        Framer().feed(b"\x30\xff\xff\xff\xff\x01")


class Server:
    """Accepts connections, records what each sends, echoes it back."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received: list[bytearray] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            buf = bytearray()
            with self.lock:
                self.received.append(buf)
            threading.Thread(target=self._serve, args=(conn, buf), daemon=True).start()

    def _serve(self, conn, buf):
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                with self.lock:
                    buf += data
                try:
                    conn.sendall(data)
                except OSError:
                    return

    def got(self, i: int = -1) -> bytes:
        with self.lock:
            return bytes(self.received[i]) if self.received else b""

    def close(self):
        self.sock.close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


@pytest.fixture
def proxy(server):
    with TcpProxy(server.port) as p:
        yield p


def client(proxy: TcpProxy) -> socket.socket:
    c = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    return c


def recv_exactly(c: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        part = c.recv(n - len(out))
        if not part:
            break
        out += part
    return out


def wait_until(pred, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def closed(c: socket.socket) -> bool:
    """The peer closed or reset the connection (within the socket's timeout)."""
    try:
        return c.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_forward_moves_bytes_both_ways(proxy, server):
    c = client(proxy)
    msg = publish_packet("a/b", "hello", 1)
    c.sendall(msg)
    assert recv_exactly(c, len(msg)) == msg and server.got() == msg


def test_drop_cuts_every_connection_and_accepts_new_ones(proxy, server):
    first, second = client(proxy), client(proxy)
    for c in (first, second):
        c.sendall(PINGREQ)
        assert recv_exactly(c, 2) == PINGREQ
    assert proxy.drop() == 2
    assert closed(first) and closed(second)
    again = client(proxy)
    again.sendall(PUBACK_7)
    assert recv_exactly(again, 4) == PUBACK_7


def test_refuse_stops_listening_until_forward(proxy):
    c = client(proxy)
    proxy.refuse()
    assert closed(c)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
    proxy.forward()
    c = client(proxy)
    c.sendall(PINGREQ)
    assert recv_exactly(c, 2) == PINGREQ


def test_silence_holds_bytes_without_closing_then_delivers_them_in_order(proxy, server):
    c = client(proxy)
    c.sendall(PINGREQ)
    assert recv_exactly(c, 2) == PINGREQ
    proxy.silence()
    c.sendall(PUBACK_7)
    c.settimeout(0.5)
    with pytest.raises(socket.timeout):
        c.recv(4)                                   # nothing comes back, and nothing closes
    assert server.got() == PINGREQ
    proxy.forward()
    c.settimeout(5)
    assert recv_exactly(c, 4) == PUBACK_7 and server.got() == PINGREQ + PUBACK_7


@pytest.mark.parametrize("deliver", [False, True])
def test_a_cut_lands_exactly_at_the_matching_packet(proxy, server, deliver):
    cut = proxy.cut_on("up", publish_to("rase/v1/windows/"), deliver=deliver)
    before = publish_packet("rase/v1/reports/r1/d1", "{}", 1)
    window = publish_packet("rase/v1/windows/r1", "{}", 2)
    after = PUBACK_7
    c = client(proxy)
    c.sendall(before + window + after)               # one write: the cut falls inside it
    assert cut.wait(5) and cut.fired == 1 and cut.packets[0].topic == "rase/v1/windows/r1"
    assert wait_until(lambda: server.got() == (before + window if deliver else before))
    assert closed(c)
    time.sleep(0.1)
    assert server.got(0) == (before + window if deliver else before)
    c = client(proxy)                                 # fired once: the next window passes
    c.sendall(window)
    assert recv_exactly(c, len(window)) == window
    assert proxy.dropped == 1


def test_a_cut_on_the_way_down(proxy, server):
    cut = proxy.cut_on("down", puback)
    c = client(proxy)
    c.sendall(PINGREQ + PUBACK_7)                    # the server echoes both; the PUBACK is cut on its way back
    assert cut.wait(5)
    assert recv_exactly(c, 6) == PINGREQ
