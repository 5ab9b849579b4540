"""Hostile input on the wire against the real service processes: forged
windows at `rase fusion`, forged retained control messages at `rase agent`.
Each is rejected and counted, the service stays up (also across its own
restart: no crash loop), and the good traffic beside it is aggregated exactly."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rase_common.protocol.report import Report
from rase_common.protocol.window import WindowMessage
from simulators.brokers import free_port
from tests.integration.test_fusion_crash import stored, wait_log
from tests.mqtt_helpers import recent_epoch0, Recorder, publish_once, publish_retained

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def good_window(t: int) -> str:
    return WindowMessage.uniform("r1", t, [float(t + i) for i in range(12)]).model_dump_json()


def forged_windows() -> list[tuple[str, bytes]]:
    ok = json.loads(good_window(999))
    out = []
    for reason, change in [("schema", {"t": 2 ** 63}), ("schema", {"t": -1}), ("schema", {"n": 10 ** 9}),
                           ("schema", {"v": 1}), ("schema", {"region": "a/b"})]:
        out.append((reason, json.dumps({**ok, **change}).encode()))
    denormal = json.loads(good_window(998))
    denormal["batches"][0]["eps"] = 5e-324
    out.append(("schema", json.dumps(denormal).encode()))
    nan = good_window(997).replace("997.0", "NaN", 1).encode()
    out.append(("schema", nan))
    out += [("not_json", b"\xff\x00garbage"), ("not_json", b"{" * 5000)]
    return out


def fusion_starter(tmp_path, broker_port: int, name: str, extra_toml: str = ""):
    """A `rase fusion` config for region r1 in tmp_path, its log, and a function
    that starts (or restarts) the process on it."""
    db = tmp_path / "fusion.sqlite"
    cfg = tmp_path / "fusion.toml"
    # epoch0 puts the tests' small t (1, 2, ...) a little behind the wall clock: plausible windows.
    top, _, precision = extra_toml.partition("[precision]\n")
    cfg.write_text(f'name = "{name}"\nregions = ["r1"]\nmerge_deadline_s = 60\nbootstrap_b = 200\n'
                   f'store_path = "{db}"\n{top}[precision]\nepoch0 = {recent_epoch0()}\n{precision}'
                   f'[broker]\nport = {broker_port}\n')
    log_path = tmp_path / "fusion.log"
    log = open(log_path, "ab")

    def start():
        return subprocess.Popen([sys.executable, "-m", "rase.cli", "fusion", "--config", str(cfg)],
                                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)

    return db, log_path, log, start


def test_forged_windows_never_stop_the_fusion_center(own_mosquitto, tmp_path):
    mport = free_port()
    db, log_path, log, start = fusion_starter(tmp_path, own_mosquitto.port, "poison", f"metrics_port = {mport}\n")
    proc = start()
    try:
        wait_log(log_path, "fusion subscribed", 1)     # the SUBACK: windows published now reach it
        forged = forged_windows()
        for t in range(1, 11):      # each forged window once, between good ones
            publish_once(own_mosquitto.port, "rase/v1/windows/r1", good_window(t))
            if t <= len(forged):
                publish_once(own_mosquitto.port, "rase/v1/windows/r1", forged[t - 1][1])
        deadline = time.monotonic() + 30
        while len(stored(db)) < 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, log_path.read_text()[-2000:]
        m = metrics(mport)
        want = {r: sum(1 for reason, _ in forged if reason == r) for r in ("schema", "not_json")}
        assert m['rase_fusion_windows_rejected_total{reason="schema"}'] == want["schema"]
        assert m['rase_fusion_windows_rejected_total{reason="not_json"}'] == want["not_json"]
        assert m['rase_fusion_windows_rejected_total{reason="internal"}'] == 0
        # Its own restart: the forged messages were acknowledged, nothing comes back to kill it.
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        proc = start()
        time.sleep(3.0)
        assert proc.poll() is None, log_path.read_text()[-2000:]
        for t in range(11, 16):
            publish_once(own_mosquitto.port, "rase/v1/windows/r1", good_window(t))
        deadline = time.monotonic() + 30
        while len(stored(db)) < 15 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    assert stored(db) == list(range(1, 16))          # the good traffic, exactly
    con = sqlite3.connect(db)
    rows = [json.loads(p) for (p,) in con.execute("SELECT payload FROM aggregates")]
    quarantined = con.execute("SELECT reason, COUNT(*) FROM quarantine GROUP BY reason").fetchall()
    con.close()
    assert all(r["n"] == 12 and r["estimates"]["mean"]["value"] == pytest.approx(r["t"] + 5.5) for r in rows)
    assert dict(quarantined) == {r: n for r, n in want.items() if n}


FORGED_CONTROLS = [
    '{"v":1,"beta":0.5,"rho":0.9,"x_min":0,"x_max":4000,"gamma":1,"period_s":8,"eps_levels":[1],"epoch0":"0"}',
    '{"v":1,"beta":0.5,"rho":0.9,"x_min":0,"x_max":4000,"gamma":1,"period_s":8,"eps_levels":[1],"epoch0":NaN}',
    '{"v":1,"beta":0.5,"rho":0.9,"x_min":0,"x_max":4000,"gamma":1,"period_s":0.001,"eps_levels":[9]}',
    '{"v":1,"beta":0.5,"rho":0.9,"x_min":0,"x_max":1000000,"gamma":0.1,"period_s":8,"eps_levels":[0.01]}',
]


def test_forged_retained_control_messages_never_stop_or_weaken_an_agent(mosquitto, tmp_path):
    rec = Recorder(mosquitto.port, ["rase/v1/reports/#", "rase/v1/status/#"], persistent=False)
    env = dict(os.environ, RASE_AGENT_BROKER__PORT=str(mosquitto.port), RASE_AGENT_DEVICE="victim",
               RASE_AGENT_SPEEDUP="80", RASE_AGENT_EPS="0.5", RASE_AGENT_LEDGER_PATH=str(tmp_path / "ledger.json"))
    # The per-report stream (eps 1 every period, no fusion center here): an explicit event-level run (issue 28).
    cmd = [sys.executable, "-m", "rase.cli", "agent", "--config", str(ROOT / "configs/agent.example.toml"),
           "--event-level"]
    log_path = tmp_path / "agent.log"
    log = open(log_path, "ab")
    starts: list[int] = []                  # where each run's reports begin in the recording
    try:
        for forged in FORGED_CONTROLS:
            publish_retained(mosquitto.port, "rase/v1/control/precision", forged.encode())
            for _restart in range(2):       # the retained message is waiting again after a restart
                before = len(rec.on("rase/v1/reports/r1/victim"))
                starts.append(before)
                proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
                try:
                    assert rec.wait_for(lambda: len(rec.on("rase/v1/reports/r1/victim")) >= before + 5,
                                        timeout_s=30), log_path.read_text()[-2000:]
                    assert proc.poll() is None
                finally:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(15)
    finally:
        publish_retained(mosquitto.port, "rase/v1/control/precision", b"")
        log.close()
    reports = [Report.model_validate_json(m.payload) for m in rec.on("rase/v1/reports/r1/victim")]
    states = [json.loads(m.payload)["state"] for m in rec.on("rase/v1/status/victim") if m.payload]
    rec.close()
    assert len(reports) >= 40
    assert all(r.eps <= 0.5 for r in reports)        # never above its local maximum (the forged menu said 9)
    assert "control_rejected" in states
    # The forged 1 ms period was refused: t counts 8 s periods (a 1 ms period would put t near 1.7e12),
    # and within each run one report per period. (seq goes on across runs, the ledger keeps it; t does
    # not: each run's sped-up clock starts again from the wall clock.)
    assert all(r.t < 10 ** 9 for r in reports)
    assert len({r.seq for r in reports}) == len(reports)
    for lo, hi in zip(starts, starts[1:] + [len(reports)]):
        run = reports[lo:hi]
        assert all(b.t > a.t for a, b in zip(run, run[1:])), [(r.seq, r.t) for r in run]


FORGED_REPORTS = [b"", b"{", b"[]", b'{"v":1}', b'{"v":1,"t":"5","y":1,"eps":1.0,"seq":1}',
                  b'{"v":1,"t":5,"y":NaN,"eps":1.0,"seq":1}', b'{"v":1,"t":5,"y":1e300,"eps":1.0,"seq":1}',
                  b'{"v":1,"t":5,"y":1,"eps":5e-324,"seq":1}', b'{"v":1,"t":99999999999,"y":1,"eps":1.0,"seq":1}',
                  b"\xff" * 2000]


def test_forged_reports_and_control_never_stop_the_fog_process(own_mosquitto, tmp_path):
    """A real `rase fog`: forged reports beside 12 good devices, and a forged
    retained control message waiting on its restart. It stays up, counts each
    forged input by reason over HTTP, and forwards exactly the good reports."""
    from tests.integration.test_fog_crash import Fog
    from tests.mqtt_helpers import Recorder

    devices = [f"g{i:02d}" for i in range(12)]
    mport = free_port()
    cfg = tmp_path / "fog.toml"
    cfg.write_text(f'name = "poison"\nperiod_s = 1.0\nepoch0 = 0.0\nlateness_periods = 30\nk_min = 10\n'
                   'device_mechanism = "br"\n'
                   f'journal_path = "{tmp_path / "fog.sqlite"}"\nmetrics_port = {mport}\n'
                   f'[broker]\nport = {own_mosquitto.port}\n[regions.r1]\ndevices = {json.dumps(devices)}\n')
    publish_retained(own_mosquitto.port, "rase/v1/control/precision",
                     b'{"v":1,"beta":0.5,"rho":0.9,"x_min":0,"x_max":NaN,"gamma":1,"period_s":1,"eps_levels":[1]}')
    rec = Recorder(own_mosquitto.port, ["rase/v1/windows/#"], persistent=False)
    fog = Fog(cfg, tmp_path / "fog.log")
    sent = 0
    try:
        fog.wait_connected(1)
        for rnd in range(2):
            t = int(time.time()) - 5
            for i, d in enumerate(devices):
                for bad in FORGED_REPORTS:
                    publish_once(own_mosquitto.port, f"rase/v1/reports/r1/{d}", bad)
                publish_once(own_mosquitto.port, f"rase/v1/reports/r1/{d}",
                             json.dumps({"v": 1, "t": t, "y": float(i), "eps": 1.0, "seq": rnd + 1}))
                sent += 1
            assert rec.wait_for(lambda: len(rec.messages) == rnd + 1, timeout_s=30), Path(fog.log_path).read_text()
            assert fog.proc.poll() is None
            if rnd == 0:      # its own restart: the forged retained control message is there again
                fog.proc.send_signal(signal.SIGTERM)
                fog.proc.wait(15)
                fog = Fog(cfg, tmp_path / "fog.log")
                fog.wait_connected(2)
                time.sleep(1.0)
                assert fog.proc.poll() is None
        m = metrics(mport)
    finally:
        fog.proc.terminate()
        fog.proc.wait(10)
        publish_retained(own_mosquitto.port, "rase/v1/control/precision", b"")
    windows = [WindowMessage.model_validate_json(m_.payload) for m_ in rec.messages]
    rec.close()
    assert len(windows) == 2 and sum(w.n for w in windows) == sent     # exactly the good reports
    assert all(sorted(w.values) == [float(i) for i in range(12)] for w in windows)
    assert m['rase_fog_reports_rejected_total{reason="control_invalid"}'] == 1     # seen once by this process
    rejected = sum(v for k, v in m.items() if k.startswith("rase_fog_reports_rejected_total"))
    assert rejected == 1 + len(devices) * len(FORGED_REPORTS)     # the second round, counted by this process


def test_windows_a_deployment_cannot_estimate_are_quarantined_not_fatal(own_mosquitto, tmp_path):
    """A categorical deployment (k = 4, kRR at eps 1) receives windows that
    pass the schema but are no categorical reports (a fraction, a category
    out of range): each timestamp is quarantined as estimate_failed, its
    stored windows dropped, and the service, also after a restart, goes on
    aggregating the good windows around them."""
    db, log_path, log, start = fusion_starter(tmp_path, own_mosquitto.port, "kinds",
                                              '[precision]\nmechanism = "categorical"\n')

    def window(t, values):
        return WindowMessage.uniform("r1", t, values, kind="categorical").model_dump_json()

    proc = start()
    try:
        wait_log(log_path, "fusion subscribed", 1)
        publish_once(own_mosquitto.port, "rase/v1/windows/r1", window(1, [0, 1, 2, 3] * 3))
        publish_once(own_mosquitto.port, "rase/v1/windows/r1", window(2, [0.5] * 12))
        publish_once(own_mosquitto.port, "rase/v1/windows/r1", window(3, [99] * 12))
        publish_once(own_mosquitto.port, "rase/v1/windows/r1", window(4, [1, 1, 2, 2] * 3))
        deadline = time.monotonic() + 30
        while len(stored(db)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        proc = start()                      # nothing left on disk to fail on again
        time.sleep(3.0)
        assert proc.poll() is None, log_path.read_text()[-2000:]
        publish_once(own_mosquitto.port, "rase/v1/windows/r1", window(5, [3] * 12))
        deadline = time.monotonic() + 30
        while len(stored(db)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, log_path.read_text()[-2000:]
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    assert stored(db) == [1, 4, 5]
    con = sqlite3.connect(db)
    quarantined = dict(con.execute("SELECT reason, COUNT(*) FROM quarantine GROUP BY reason").fetchall())
    left = con.execute("SELECT COUNT(*) FROM windows").fetchone()[0]
    rows = {json.loads(p)["t"]: json.loads(p) for (p,) in con.execute("SELECT payload FROM aggregates")}
    con.close()
    assert quarantined == {"estimate_failed": 2} and left == 0
    assert rows[5]["mechanism"] == "categorical" and len(rows[5]["frequencies"]) == 4
