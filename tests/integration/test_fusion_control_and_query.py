"""The precision broadcast follows config changes; `rase query` reads the store."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rase_common.protocol.window import WindowMessage
from fusion_center.config import FusionConfig
from rase_common.protocol.control import ControlMessage
from fusion_center.service import FusionService
from rase_common.clock import ManualClock
from tests.mqtt_helpers import Recorder, ServiceThread, publish_once, publish_retained

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def config_text(port, store, x_max):
    return f"""
name = "ctl"
regions = ["r1"]
store_path = "{store}"
windows_w = [2]
tick_s = 0.01
[precision]
x_max = {x_max}
eps_levels = [1.0]
mechanism = "br"
[broker]
port = {port}
"""


def test_precision_rebroadcast_on_config_change_and_query(mosquitto, tmp_path):
    cfg_path = tmp_path / "fusion.toml"
    store = tmp_path / "fusion.sqlite"
    cfg_path.write_text(config_text(mosquitto.port, store, 4000.0))
    rec = Recorder(mosquitto.port, ["rase/v1/control/precision"], persistent=False)
    svc = FusionService(FusionConfig.load(cfg_path), config_path=cfg_path, clock=ManualClock(100.0))
    run = ServiceThread(svc)
    try:
        assert rec.wait_for(lambda: len(rec.messages) >= 1)
        first = ControlMessage.model_validate_json(rec.messages[0].payload)
        assert first.x_max == 4000.0
        time.sleep(1.1)  # file mtime resolution
        cfg_path.write_text(config_text(mosquitto.port, store, 2500.0))
        assert rec.wait_for(lambda: any(ControlMessage.model_validate_json(m.payload).x_max == 2500.0
                                        for m in rec.messages if m.payload), timeout_s=10)
        # Two timestamps of windows, then read them back with the CLI.
        for t in (7, 8):
            w = WindowMessage.uniform("r1", t, [float(t * 10 + i) for i in range(10)], kind="br")
            publish_once(mosquitto.port, "rase/v1/windows/r1", w.model_dump_json())
        assert rec.wait_for(lambda: svc.store.count() == 2)
    finally:
        run.stop()
        publish_retained(mosquitto.port, "rase/v1/control/precision", b"")
        rec.close()
    out = subprocess.run([sys.executable, "-m", "rase.cli", "query", "--db", str(store), "--from", "0", "--to", "100",
                          "--json"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["t"] for r in rows] == [7, 8]
    assert rows[0]["estimates"]["se"]["value"] == pytest.approx(74.5)
    assert rows[1]["windowed"]["2"]["se"]["present"] == 2
    table = subprocess.run([sys.executable, "-m", "rase.cli", "query", "--db", str(store), "--from", "8", "--to", "8"],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert table.returncode == 0 and "84.5" in table.stdout
    missing = subprocess.run([sys.executable, "-m", "rase.cli", "query", "--db", str(tmp_path / "nope.sqlite"),
                              "--from", "0", "--to", "1"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert missing.returncode == 1 and "no aggregate store" in missing.stderr
