"""The board main loop with the real umqtt.simple against a real Mosquitto.

umqtt.simple is MicroPython code: it imports usocket/ustruct/ubinascii and
calls sock.read/sock.write. Those are given to it here by a thin CPython
socket shim (the names in the test say so); the MQTT client, the transport,
the core and the board loop are the real ones.
"""

import binascii
import json
import socket
import struct
import sys
import types

import pytest

from rase_device import board
from tests.mqtt_helpers import Recorder

pytestmark = pytest.mark.integration


class _StreamSocket:
    """MicroPython-style socket over a CPython socket (read/write, None when
    a non-blocking read finds nothing)."""

    def __init__(self, *a):
        self._s = socket.socket(*a)

    def connect(self, addr):
        self._s.connect(addr)

    def write(self, data, n=None):
        if isinstance(data, str):  # MicroPython streams take str as UTF-8
            data = data.encode()
        data = bytes(data if n is None else data[:n])
        self._s.sendall(data)
        return len(data)

    def read(self, n):
        buf = b""
        while len(buf) < n:
            try:
                chunk = self._s.recv(n - len(buf))
            except BlockingIOError:
                return None if not buf else buf
            if not chunk:
                return buf
            buf += chunk
        return buf

    def setblocking(self, flag):
        self._s.setblocking(flag)

    def settimeout(self, s):
        self._s.settimeout(s)

    def close(self):
        self._s.close()


@pytest.fixture
def umqtt_on_cpython_socket_shim(monkeypatch, umqtt_simple_py):
    usocket = types.ModuleType("usocket")
    usocket.socket = _StreamSocket
    usocket.getaddrinfo = socket.getaddrinfo
    monkeypatch.setitem(sys.modules, "usocket", usocket)
    monkeypatch.setitem(sys.modules, "ustruct", struct)
    monkeypatch.setitem(sys.modules, "ubinascii", binascii)
    src = umqtt_simple_py.read_text()
    mod = types.ModuleType("umqtt.simple")
    exec(compile(src, "umqtt/simple.py", "exec"), mod.__dict__)
    return mod.MQTTClient


def test_board_loop_over_umqtt_with_socket_shim_survives_broker_restart(
        own_mosquitto, tmp_path, umqtt_on_cpython_socket_shim):
    broker = own_mosquitto
    rec = Recorder(broker.port, ["rase/v1/reports/#", "rase/v1/status/#"], client_id="board-rec")
    cfg = {"device": "b1", "region": "r1", "eps": 1.0, "budget_eps": 1e6, "budget_period_s": 86400,
           "period_s": 8, "epoch0": 0, "ledger_path": str(tmp_path / "ledger.json"), "outbox_capacity": 64,
           "confirm_timeout_s": 0,   # no fog here to send receipts (rase_device.outbox)
           "calibration": {"beta": 0.5, "rho": 0.9, "x_min": 0.0, "x_max": 4000.0, "gamma": 1.0},
           "broker": {"host": "127.0.0.1", "port": broker.port}, "board": {"ntp": False}}
    clock = {"t": 1_700_000_000.0}
    step = {"n": 0}

    def sleep(_s):
        # Simulated time: one period per loop; the broker is down for steps 10-19.
        clock["t"] += 8.0
        step["n"] += 1
        if step["n"] == 10:
            broker.stop()
        if step["n"] == 20:
            broker.start()

    MQTTClient = umqtt_on_cpython_socket_shim

    def make():
        return MQTTClient("b1", "127.0.0.1", port=broker.port, keepalive=30)

    loop = board.run(lambda: 1234.0, cfg, clock=lambda: clock["t"], sleep=sleep,
                     make_client=make, max_steps=40)
    core, transport = loop.core, loop.transport
    assert core.seq == 40
    assert transport.disconnects >= 1
    # Backoff may leave the last few queued; drain them.
    for _ in range(20):
        if not len(core.outbox):
            break
        clock["t"] += 60
        transport.poll(clock["t"])
    assert len(core.outbox) == 0
    assert rec.wait_for(lambda: len({json.loads(m.payload)["seq"] for m in rec.on("rase/v1/reports/r1/b1")}) == 40)
    rec.close()


def test_board_loop_over_umqtt_with_socket_shim_survives_refused_password_and_sensor_errors(
        tmp_path, umqtt_on_cpython_socket_shim):
    """Real Mosquitto with a password file refuses the first three connects
    (umqtt raises MQTTException); a sensor raising OSError costs no budget."""
    import subprocess

    from simulators.brokers import Mosquitto

    passwd = tmp_path / "passwd"
    passwd.write_text("")
    subprocess.run(["mosquitto_passwd", "-b", str(passwd), "b2", "right"], check=True, capture_output=True)
    broker = Mosquitto(tmp_path / "mq", extra_conf=f"password_file {passwd}\n")
    broker.conf_path.write_text(broker.conf_path.read_text().replace("allow_anonymous true", "allow_anonymous false"))
    broker.start()
    try:
        rec = Recorder(broker.port, ["rase/v1/reports/#"], client_id="b2-rec", username="b2", password="right")
        cfg = {"device": "b2", "region": "r1", "eps": 1.0, "budget_eps": 1000.0, "budget_period_s": 86400,
               "period_s": 8, "epoch0": 0, "ledger_path": str(tmp_path / "ledger.json"), "outbox_capacity": 64,
           "confirm_timeout_s": 0,   # no fog here to send receipts (rase_device.outbox)
               "calibration": {"beta": 0.5, "rho": 0.9, "x_min": 0.0, "x_max": 4000.0, "gamma": 1.0},
               "broker": {"host": "127.0.0.1", "port": broker.port}, "board": {"ntp": False}}
        clock = {"t": 1_700_000_000.0}
        attempts = []
        MQTTClient = umqtt_on_cpython_socket_shim

        def make():
            attempts.append(1)
            pw = "wrong" if len(attempts) <= 3 else "right"
            return MQTTClient("b2", "127.0.0.1", port=broker.port, user="b2", password=pw, keepalive=30)

        reads = {"n": 0}

        def read():
            reads["n"] += 1
            if reads["n"] % 7 == 0:
                raise OSError(5, "I2C bus error")
            return 512.0

        def sleep(s):
            clock["t"] += s

        loop = board.run(read, cfg, clock=lambda: clock["t"], sleep=sleep, make_client=make, max_steps=30,
                         log=lambda line: None)
        for _ in range(20):
            if not len(loop.core.outbox) and loop.transport.client is not None:
                break
            clock["t"] += 60
            loop.transport.poll(clock["t"])
        assert len(attempts) >= 4 and loop.sensor_errors == 30 // 7
        assert loop.core.seq == 30 - 30 // 7 and len(loop.core.outbox) == 0
        assert loop.core.ledger.remaining(clock["t"]) == pytest.approx(1000.0 - loop.core.seq)
        assert rec.wait_for(lambda: sorted(json.loads(m.payload)["seq"] for m in rec.on("rase/v1/reports/r1/b2"))
                            == list(range(1, loop.core.seq + 1)))
        rec.close()
    finally:
        broker.stop()
