"""Poisoning against the real processes: Mosquitto, `rase fog` and `rase
fusion` with a Duchi deployment at eps 1 (period 8 s, simulated 100x
faster). A registered device that sends x_max + 10 Delta has that report
rejected with a reason; one that sends Duchi's +C every period is
quarantined within 15 minutes of simulated time, its later reports are
rejected (quarantined_device), and `rase fog release` lets it in again while
the fog runs. Nothing that leaves the fog names a device. An aggregate read
from the broker with `mosquitto_sub` shows its wall-clock time and privacy
unit. Then a replay of the bundled houses with detection on quarantines no
honest device. (About 30 s.)"""

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
import pytest

from rase_common.clock import ScaledClock
from rase_common.mechanisms import Setting, mechanism
from rase_common.protocol.aggregate import Aggregate
from simulators.brokers import free_port
from tests.integration.test_fusion_crash import stored, wait_log
from tests.mqtt_helpers import Recorder

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SPEEDUP = 100.0
PERIOD = 8.0
HONEST = [f"h{i:02d}" for i in range(10)]
ATTACKER, LIAR = "plugx", "plugy"
FIFTEEN_MINUTES = int(15 * 60 / PERIOD)      # 112 periods


def noon_anchor() -> tuple[float, float]:
    """Every process's simulated clock reads today's 12:00 UTC now: the test's simulated hour never
    crosses a UTC day, where the detector's per-day statistics start again (a run at 23:50 UTC failed)."""
    wall = time.time()
    return (wall // 86400) * 86400 + 43200.0, wall


ANCHOR = noon_anchor()


def metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def write_configs(tmp_path: Path, broker_port: int, metrics_port: int) -> tuple[Path, Path]:
    devices = ", ".join(f'"{d}"' for d in HONEST + [ATTACKER, LIAR])
    fog = tmp_path / "fog.toml"
    fog.write_text(f"""name = "poison"
period_s = {PERIOD}
speedup = {SPEEDUP}
sim_clock_anchor = [{ANCHOR[0]}, {ANCHOR[1]}]
lateness_periods = 60
k_min = 10
device_mechanism = "duchi"
eps_levels = [1.0]
journal_path = "{tmp_path / 'fog.sqlite'}"
metrics_port = {metrics_port}
tick_s = 0.02
[broker]
port = {broker_port}
[regions.r1]
devices = [{devices}]
""")
    fusion = tmp_path / "fusion.toml"
    fusion.write_text(f"""name = "poison"
regions = ["r1"]
merge_deadline_s = 1000
bootstrap_b = 100
speedup = {SPEEDUP}
sim_clock_anchor = [{ANCHOR[0]}, {ANCHOR[1]}]
store_path = "{tmp_path / 'fusion.sqlite'}"
[precision]
mechanism = "duchi"
eps_levels = [1.0]
period_s = {PERIOD}
[broker]
port = {broker_port}
""")
    return fog, fusion


def start(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rase.cli", "--log-level", "INFO", *args],
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, cwd=ROOT)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class Devices:
    """The registered devices, one paho client publishing for all of them,
    on the fog's simulated clock (the same anchor)."""

    def __init__(self, port: int):
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
        self.c.connect("127.0.0.1", port)
        self.c.loop_start()
        self.clock = ScaledClock.anchored(ANCHOR, SPEEDUP)
        self.rng = np.random.default_rng(8)
        self.setting = Setting()
        self.low, self.top = (float(v) for v in mechanism("duchi").device_values(self.setting.calibration, 1.0))

    def now_t(self) -> int:
        return int(self.clock.now() // PERIOD)

    def send(self, device: str, t: int, y: float) -> None:
        self.c.publish(f"rase/v1/reports/r1/{device}", json.dumps({"v": 1, "t": t, "y": y, "eps": 1.0, "seq": t}),
                       qos=1).wait_for_publish(10)

    def period(self, attacker_y: float | None) -> int:
        """Every device reports for the current t; then wait for the next one."""
        t = self.now_t()
        for d, y in zip(HONEST, mechanism("duchi").sample(self.setting, 1.0, np.full(len(HONEST), 60.0), self.rng)):
            self.send(d, t, float(y))
        if attacker_y is not None:
            self.send(ATTACKER, t, attacker_y)
        while self.now_t() <= t:
            time.sleep(0.005)
        return t

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def test_poisoning_against_real_processes(own_mosquitto, tmp_path):
    mport = free_port()
    fog_cfg, fusion_cfg = write_configs(tmp_path, own_mosquitto.port, mport)
    fog_log, fusion_log = tmp_path / "fog.log", tmp_path / "fusion.log"
    rec = Recorder(own_mosquitto.port, ["rase/v1/windows/#", "rase/v1/aggregates/#"], persistent=False)
    fusion = start(["fusion", "--config", str(fusion_cfg)], fusion_log)
    fog = start(["fog", "--config", str(fog_cfg)], fog_log)
    devices = None
    try:
        wait_log(fusion_log, "fusion subscribed", 1)
        wait_log(fog_log, "fog subscribed", 1)
        devices = Devices(own_mosquitto.port)
        # A registered device sends x_max + 10 Delta: rejected with a reason.
        devices.send(LIAR, devices.now_t(), 4000.0 + 10 * 4000.0)
        # +C every period until quarantined (counting the attacker's reports).
        sent = 0
        while metrics(mport).get("rase_fog_devices_quarantined", 0) < 1 and sent < FIFTEEN_MINUTES + 20:
            devices.period(devices.top)
            sent += 1
        assert metrics(mport)["rase_fog_devices_quarantined"] == 1, fog_log.read_text()[-3000:]
        line = next(ln for ln in fog_log.read_text().splitlines() if "quarantined device plugx" in ln)
        n_reports = int(line.split(" after ")[1].split(" reports")[0])
        assert n_reports <= FIFTEEN_MINUTES and sent <= n_reports + 2      # within 15 simulated minutes
        for _ in range(5):                        # its reports are now rejected, with a reason
            devices.period(devices.top)
        m = metrics(mport)
        assert m['rase_fog_reports_rejected_total{reason="impossible_y"}'] == 1
        assert m['rase_fog_reports_rejected_total{reason="quarantined_device"}'] >= 4
        # The operator lets it in again, against the running fog.
        out = subprocess.run([sys.executable, "-m", "rase.cli", "fog", "release", "--config", str(fog_cfg), ATTACKER],
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert out.returncode == 0 and f"released {ATTACKER}" in out.stdout, out.stdout + out.stderr
        assert metrics(mport)["rase_fog_devices_quarantined"] == 0
        before = metrics(mport)["rase_fog_reports_accepted_total"]
        devices.period(devices.low)
        assert rec.wait_for(lambda: metrics(mport)["rase_fog_reports_accepted_total"] >= before + 11, 10)
        assert rec.wait_for(lambda: len(stored(tmp_path / "fusion.sqlite")) >= 20, 30)

        # An aggregate as any subscriber reads it from the broker: wall-clock time and privacy unit.
        sub = shutil.which("mosquitto_sub")
        assert sub, "mosquitto_sub is not installed: `make deps-test` installs mosquitto-clients"
        got = subprocess.run([sub, "-h", "127.0.0.1", "-p", str(own_mosquitto.port), "-t",
                              "rase/v1/aggregates/latest", "-C", "1", "-W", "20"],
                             capture_output=True, text=True, timeout=30)
        agg = json.loads(got.stdout)
        assert agg["t_end"] - agg["t_start"] == PERIOD and agg["period_s"] == PERIOD
        assert agg["t_start"] == agg["t"] * PERIOD                    # epoch0 0
        assert agg["t_start_iso"].endswith("Z") and agg["t_start_iso"][:4] >= "2024"
        unit = agg["privacy_unit"]
        assert (unit["eps_per_report"], unit["eps_per_hour"], unit["eps_per_day"]) == (1.0, 450.0, 10_800.0)
        assert unit["shuffle"] in ("d_sigma", "uniform") and "per report" in unit["statement"]
        Aggregate.model_validate(agg)
    finally:
        if devices is not None:
            devices.close()
        stop(fog)
        stop(fusion)
        rec.close()
    # Nothing that left the fog names a device.
    assert rec.on("rase/v1/windows/")
    for msg in rec.messages:
        for d in HONEST + [ATTACKER, LIAR]:
            assert d.encode() not in msg.payload


def test_a_replay_with_detection_quarantines_no_honest_device(tmp_path):
    """The in-process pipeline (real agents, broker, fog with detection,
    fusion center) over 2 h of the bundled houses with Duchi at eps 1. The
    full day is in docs/evaluation.md (`rase replay --hours 24`, 11 minutes);
    tests/unit/simulators/test_poison.py runs the day through the same
    detector without brokers for every mean mechanism."""
    out = subprocess.run([sys.executable, "-m", "rase.cli", "replay", "--houses", "1,2,3,5,12", "--hours", "2",
                          "--fast", "--mechanism", "duchi", "--eps", "1", "--out", str(tmp_path / "r.jsonl")],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "fog: 0 device(s) quarantined by the plausibility test, 0 reports rejected" in out.stdout
