"""`rase agent` as a user runs it: a process, a TOML config, env overrides."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rase_common.protocol.report import Report
from tests.mqtt_helpers import Recorder

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_rase_agent_process_replays_refit_with_env_overrides(mosquitto, tmp_path):
    rec = Recorder(mosquitto.port, ["rase/v1/reports/#"], persistent=False)
    env = dict(os.environ, RASE_AGENT_BROKER__PORT=str(mosquitto.port), RASE_AGENT_DEVICE="cli1",
               RASE_AGENT_SPEEDUP="80", RASE_AGENT_LEDGER_PATH=str(tmp_path / "ledger.json"))
    proc = subprocess.run([sys.executable, "-m", "rase.cli", "agent", "--config",
                           str(ROOT / "configs/agent.example.toml"), "--max-reports", "5"],
                          env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert rec.wait_for(lambda: len(rec.on("rase/v1/reports/r1/cli1")) == 5)
    reps = [Report.model_validate_json(m.payload) for m in rec.on("rase/v1/reports/r1/cli1")]
    assert [r.seq for r in reps] == [1, 2, 3, 4, 5]
    assert (tmp_path / "ledger.json").exists()
    rec.close()


def test_rase_agent_bad_env_value_names_the_field(tmp_path):
    env = dict(os.environ, RASE_AGENT_CALIBRATION__GAMMA="-2")
    proc = subprocess.run([sys.executable, "-m", "rase.cli", "agent", "--config",
                           str(ROOT / "configs/agent.example.toml")],
                          env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert "gamma must be > 0" in proc.stderr
