"""The fusion center is SIGKILLed while consuming and restarted: no aggregate
is lost or stored twice."""

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from rase_common.protocol.window import WindowMessage
from tests.mqtt_helpers import recent_epoch0

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
N = 300


def start(cfg, log):
    return subprocess.Popen([sys.executable, "-m", "rase.cli", "fusion", "--config", str(cfg)],
                            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def stop(proc, log_path) -> None:
    """SIGTERM, and the service's own log if it does not end within 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        raise AssertionError("the fusion center did not end 10 s after SIGTERM; its log:\n"
                             + Path(log_path).read_text()[-6000:]) from None


def stored(db):
    if not Path(db).exists():
        return []
    con = sqlite3.connect(db)
    try:
        return [t for (t,) in con.execute("SELECT t FROM aggregates WHERE scope='all' ORDER BY t")]
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def wait_stored(db, count: int, timeout_s: float, cap_s: float = 300.0) -> int:
    """Until `count` aggregates are stored: the deadline follows measured progress (timeout_s without a
    new aggregate ends the wait, cap_s in all), so a loaded machine's slower fusion center is waited for
    while a stuck one still fails. How many are stored."""
    start = last_change = time.monotonic()
    seen = len(stored(db))
    while seen < count and time.monotonic() - last_change < timeout_s and time.monotonic() - start < cap_s:
        time.sleep(0.1)
        now = len(stored(db))
        if now != seen:
            seen, last_change = now, time.monotonic()
    return seen


def assert_each_window_aggregated_once(db, n: int, detail: str = "") -> None:
    """t = 1..n stored once each, every aggregate over its window's 12 values t..t+11."""
    ts = stored(db)
    assert len(ts) == n, f"{n - len(ts)} aggregates lost" + detail
    assert ts == list(range(1, n + 1))      # each t once: none lost, none twice
    con = sqlite3.connect(db)
    rows = [json.loads(p) for (p,) in con.execute("SELECT payload FROM aggregates")]
    con.close()
    assert all(r["n"] == 12 and r["estimates"]["se"]["value"] == pytest.approx(r["t"] + 5.5) for r in rows)


def wait_log(path, text, count, timeout_s=20):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if Path(path).read_text().count(text) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(Path(path).read_text())


def fusion_and_fog(tmp_path: Path, port: int, name: str, merge_deadline_s: float):  # noqa: ANN201
    """A `rase fusion` process (mechanism br, one region) on the broker at port, and a paho client
    standing in for its fog: (store, config, log path, log file, process, client)."""
    db = tmp_path / "fusion.sqlite"
    cfg = tmp_path / "fusion.toml"
    cfg.write_text(f"""
name = "{name}"
regions = ["r1"]
merge_deadline_s = {merge_deadline_s}
bootstrap_b = 200
store_path = "{db}"
tick_s = 0.01
[precision]
epoch0 = {recent_epoch0()}
mechanism = "br"
[broker]
port = {port}
""")
    log_path = tmp_path / "fusion.log"
    log = open(log_path, "ab")
    proc = start(cfg, log)
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"{name}-fog", protocol=mqtt.MQTTv311)
    pub.connect("127.0.0.1", port)
    pub.loop_start()
    return db, cfg, log_path, log, proc, pub


def test_sigkill_while_consuming_loses_and_duplicates_nothing(own_mosquitto, tmp_path):
    db, cfg, log_path, log, proc, pub = fusion_and_fog(tmp_path, own_mosquitto.port, "crash", 60)
    try:
        wait_log(log_path, "fusion subscribed", 1)
        infos = []
        killed = False
        for t in range(1, N + 1):
            values = [float(t + i) for i in range(12)]
            w = WindowMessage.uniform("r1", t, values, kind="br")
            infos.append(pub.publish("rase/v1/windows/r1", w.model_dump_json(), qos=1))
            time.sleep(0.002)
            if not killed and len(stored(db)) >= 60:
                proc.send_signal(signal.SIGKILL)   # mid-stream, windows in flight
                proc.wait(10)
                killed = True
        for i in infos:
            i.wait_for_publish(10)
        if not killed:
            # A loaded machine: every window is at the broker before 60 are stored. Kill once 60 are,
            # however long the fusion center takes to get there (it is still consuming the rest).
            assert wait_stored(db, 60, 30) >= 60, "the fusion center never got going"
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        assert len(stored(db)) < N, "the kill came after the last window: nothing was in flight"
        proc = start(cfg, log)
        wait_stored(db, N, 60)
    finally:
        stop(proc, log_path)
        log.close()
        pub.disconnect()
        pub.loop_stop()
    assert_each_window_aggregated_once(db, N)
