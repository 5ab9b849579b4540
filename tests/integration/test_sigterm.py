"""SIGTERM (what `docker stop` sends, and a service manager's stop) ends
`rase agent`, `rase fog` and `rase fusion` within 2 s, cleanly, with nothing
lost: the agent delivers what it made, the fog's journaled reports reach a
window after its restart, the fusion center aggregates every window after its
restart. Real processes against a real Mosquitto, period 1 s."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rase_common.protocol.window import WindowMessage
from tests.mqtt_helpers import Recorder

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
DEVICES = [f"d{i}" for i in range(4)]


def write_configs(tmp: Path, port: int) -> dict[str, Path]:
    trace = tmp / "trace.csv"
    trace.write_text("Unix,W\n" + "".join(f"{1_700_000_000 + s},{(s * 37) % 900}\n" for s in range(100_000)))
    common = f"[broker]\nport = {port}\n"
    paths = {"fusion": tmp / "fusion.toml", "fog": tmp / "fog.toml"}
    paths["fusion"].write_text(f'name = "sigterm"\nregions = ["r1"]\nmerge_deadline_s = 3\nbootstrap_b = 50\n'
                               f'store_path = "{tmp}/fusion.sqlite"\n[precision]\nperiod_s = 1.0\n'
                               f'eps_levels = [1.0]\n' + common)
    devices = ", ".join(f'"{d}"' for d in DEVICES)
    paths["fog"].write_text(f'name = "sigterm"\nperiod_s = 1.0\nk_min = 2\nlateness_periods = 2\n'
                            f'journal_path = "{tmp}/fog.sqlite"\n[regions.r1]\ndevices = [{devices}]\n' + common)
    for d in DEVICES:
        paths[d] = tmp / f"{d}.toml"
        paths[d].write_text(f'device = "{d}"\nregion = "r1"\nperiod_s = 1.0\nledger_path = "{tmp}/{d}.json"\n'
                            f'[policy]\nperiod_min_s = 1.0\n[source]\nkind = "csv"\npath = "{trace}"\ncolumn = "W"\n'
                            + common)
    return paths


def start(kind: str, cfg: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rase.cli", kind, "--config", str(cfg)], cwd=ROOT,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def wait_for(pred, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def terminate(proc: subprocess.Popen) -> float:
    """SIGTERM; seconds until the process exited (it must exit 0)."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(10)
    took = time.monotonic() - t0
    assert rc == 0, f"exit code {rc}"
    return took


def test_sigterm_stops_each_service_within_2_s_and_loses_nothing(own_mosquitto, tmp_path):
    paths = write_configs(tmp_path, own_mosquitto.port)
    logs = {k: tmp_path / f"{k}.log" for k in paths}
    rec = Recorder(own_mosquitto.port, ["rase/v1/reports/#", "rase/v1/windows/#", "rase/v1/aggregates/t/#"])
    procs = {"fusion": start("fusion", paths["fusion"], logs["fusion"]),
             "fog": start("fog", paths["fog"], logs["fog"])}
    try:
        assert wait_for(lambda: "fog subscribed" in logs["fog"].read_text(), 30), logs["fog"].read_text()
        for d in DEVICES:
            procs[d] = start("agent", paths[d], logs[d])
        assert wait_for(lambda: len(rec.on("rase/v1/aggregates/t/")) >= 2, 40), logs["fog"].read_text()
        took = {}
        # The agent: stops within 2 s and has delivered every report it made.
        took["agent"] = terminate(procs.pop("d0"))
        stop_line = [ln for ln in logs["d0"].read_text().splitlines() if "stopped: made=" in ln][-1]
        n_made = int(stop_line.split("made=")[1].split()[0])
        assert f"delivered={n_made}" in stop_line, stop_line
        assert wait_for(lambda: len({json.loads(m.payload)["seq"] for m in rec.on("rase/v1/reports/r1/d0")})
                        == n_made, 5)
        # The fog: stops within 2 s; after a restart its journaled reports reach their windows.
        took["fog"] = terminate(procs.pop("fog"))
        time.sleep(1.5)                                     # reports queue at the broker meanwhile
        procs["fog"] = start("fog", paths["fog"], logs["fog"])
        # The fusion center: stops within 2 s; windows published meanwhile are aggregated after its restart.
        time.sleep(2.0)
        took["fusion"] = terminate(procs.pop("fusion"))
        time.sleep(2.0)
        procs["fusion"] = start("fusion", paths["fusion"], logs["fusion"])
        time.sleep(2.0)
        for d in DEVICES[1:]:
            terminate(procs.pop(d))
        # The last t with k_min (2) reports: the agents stop one after another, so the very last
        # t may hold one report only, and such a window is suppressed, never forwarded.
        per_t = Counter(json.loads(m.payload)["t"] for m in rec.on("rase/v1/reports/"))
        last_t = max(t for t, c in per_t.items() if c >= 2)
        windows = lambda: [WindowMessage.model_validate_json(m.payload) for m in rec.on("rase/v1/windows/")]  # noqa: E731
        assert wait_for(lambda: max((w.t for w in windows()), default=0) >= last_t, 20), "the fog's last windows"
        assert wait_for(lambda: {json.loads(m.payload)["t"] for m in rec.on("rase/v1/aggregates/t/")}
                        >= {w.t for w in windows()}, 20), "a window was never aggregated"
    finally:
        for p in procs.values():
            p.kill()
            p.wait(10)
        rec.close()
    assert all(s < 2.0 for s in took.values()), took
    # Every report the broker took is in its window: none lost across the fog's stop.
    reports = Counter((json.loads(m.payload)["t"], json.loads(m.payload)["y"]) for m in rec.on("rase/v1/reports/"))
    got = Counter((w.t, v) for w in windows() for v in w.values)
    forwarded = {w.t for w in windows()}          # windows under k_min (the first and last t) are suppressed
    assert +Counter({k: c for k, c in reports.items() if k[0] in forwarded}) == got
    for kind in ("fog", "fusion"):
        assert "Traceback" not in logs[kind].read_text(), logs[kind].read_text()[-3000:]
