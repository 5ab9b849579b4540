"""The fog process is SIGKILLed mid-window and restarted: every report the
broker acknowledged ends up in its window, and no window is shuffled twice.

Forwarding is at-least-once: a kill between the broker taking a window and
the journal marking it sent resends it, byte for byte (the outbox holds the
shuffled bytes), and the fusion center drops the repeat by (region, t)."""

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from rase_common.protocol.window import WindowMessage
from tests.mqtt_helpers import Recorder

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
DEVICES = [f"d{i:02d}" for i in range(20)]
PERIOD_S = 1.0


def write_config(tmp_path, port):
    cfg = tmp_path / "fog.toml"
    cfg.write_text(f"""
name = "crash"
device_mechanism = "br"
period_s = {PERIOD_S}
epoch0 = 0.0
lateness_periods = 4
k_min = 5
window_confirm_s = 0     # no fusion center here to confirm windows: each is forwarded once
journal_path = "{tmp_path / 'fog.sqlite'}"
tick_s = 0.02
[broker]
port = {port}
[regions.r1]
groups = [{", ".join("[" + ", ".join(f'"{d}"' for d in DEVICES[i:i + 5]) + "]" for i in range(0, 20, 5))}]
""")
    return cfg


class Fog:
    def __init__(self, cfg, log_path):
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "rase.cli", "--log-level", "INFO", "fog", "--config",
                                      str(cfg)], stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.log_path = log_path

    def wait_connected(self, count, timeout_s=20):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if Path(self.log_path).read_text().count("fog subscribed") >= count:
                return
            assert self.proc.poll() is None, Path(self.log_path).read_text()
            time.sleep(0.05)
        raise AssertionError("fog did not connect:\n" + Path(self.log_path).read_text())

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


class AckedPublisher:
    """Publishes reports at QoS 1 and records which ones the broker PUBACKed."""

    def __init__(self, port):
        self.pending: dict[int, tuple[int, str, float]] = {}
        self.acked: list[tuple[int, str, float]] = []
        self.early: set[int] = set()
        self.lock = threading.Lock()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="crash-pub", protocol=mqtt.MQTTv311)
        self.c.on_publish = self._on_publish
        self.c.connect("127.0.0.1", port)
        self.c.loop_start()

    def _on_publish(self, client, userdata, mid, rc, props):
        with self.lock:
            if mid in self.pending:
                self.acked.append(self.pending.pop(mid))
            else:
                self.early.add(mid)   # PUBACK beat send() to registering the mid

    def send(self, t, device, y):
        # Never hold self.lock across publish(): paho calls on_publish while
        # holding its own message lock, and publish() needs that lock too.
        info = self.c.publish(f"rase/v1/reports/r1/{device}",
                              json.dumps({"v": 1, "t": t, "y": y, "eps": 1.0, "seq": t}), qos=1)
        with self.lock:
            if info.mid in self.early:
                self.early.discard(info.mid)
                self.acked.append((t, device, y))
            else:
                self.pending[info.mid] = (t, device, y)

    def wait_all_acked(self, timeout_s=10):
        deadline = time.monotonic() + timeout_s
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not self.pending

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def now_t():
    return int(time.time() // PERIOD_S)


def test_sigkill_mid_window_loses_nothing_acked_and_forwards_nothing_twice(own_mosquitto, tmp_path):
    cfg = write_config(tmp_path, own_mosquitto.port)
    log_path = tmp_path / "fog.log"
    rec = Recorder(own_mosquitto.port, ["rase/v1/windows/#"], client_id="crash-rec")
    fog = Fog(cfg, log_path)
    pub = AckedPublisher(own_mosquitto.port)
    try:
        fog.wait_connected(1)
        t0 = now_t()
        for i, d in enumerate(DEVICES):               # a complete window: closes early
            pub.send(t0, d, float(i))
        t1 = t0 + 1
        while now_t() < t1:
            time.sleep(0.01)
        for i, d in enumerate(DEVICES[:10]):          # half of window t1 ...
            pub.send(t1, d, 100.0 + i)
        pub.wait_all_acked()
        assert rec.wait_for(lambda: any(m.payload and json.loads(m.payload)["t"] == t0 for m in rec.messages),
                            timeout_s=10)
        fog.kill()                                    # ... then the fog dies mid-window
        fog.stop()
        for i, d in enumerate(DEVICES[10:], start=10):  # the rest arrives while it is dead
            pub.send(t1, d, 100.0 + i)
        for i, d in enumerate(DEVICES[:7]):           # and part of the next window
            pub.send(t1 + 1, d, 200.0 + i)
        pub.wait_all_acked()
        fog = Fog(cfg, log_path)
        fog.wait_connected(2)
        assert rec.wait_for(lambda: len(rec.messages) >= 3, timeout_s=20)
        time.sleep(7 * PERIOD_S)                      # anything forwarded twice would show up by now
    finally:
        fog.stop()
        pub.close()
    payloads = defaultdict(set)
    for m in rec.messages:
        payloads[json.loads(m.payload)["t"]].add(bytes(m.payload))
    assert all(len(p) == 1 for p in payloads.values()), "a window was shuffled twice (different bytes)"
    per_t = Counter(json.loads(m.payload)["t"] for m in rec.messages)
    # Only t0 was forwarded before the kill, so only t0 can be a (byte-identical) resend.
    assert per_t[t1] == 1 and per_t[t1 + 1] == 1, f"forwarded twice: {per_t}"
    windows = [WindowMessage.model_validate_json(p.pop()) for p in payloads.values()]
    got = {w.t: sorted(w.values) for w in windows}
    expected = defaultdict(list)
    for t, _d, y in pub.acked:
        expected[t].append(y)
    assert set(expected) == {t0, t1, t1 + 1}
    for t, ys in expected.items():
        assert got.get(t) == sorted(ys), f"window {t}: forwarded {got.get(t)}, acked {sorted(ys)}"
    rec.close()
