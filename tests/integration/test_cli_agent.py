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
    # No fusion center here: the agent reports at its own eps 1 every period, the per-report stream, which
    # the shipped config's daily share (eps 8 / 9) does not allow: an explicit event-level run (issue 28).
    proc = subprocess.run([sys.executable, "-m", "rase.cli", "agent", "--config",
                           str(ROOT / "configs/agent.example.toml"), "--max-reports", "5", "--event-level"],
                          env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert rec.wait_for(lambda: len(rec.on("rase/v1/reports/r1/cli1")) == 5)
    reps = [Report.model_validate_json(m.payload) for m in rec.on("rase/v1/reports/r1/cli1")]
    assert [r.seq for r in reps] == [1, 2, 3, 4, 5]
    assert (tmp_path / "ledger.json").exists()
    assert "event-level (--event-level)" in proc.stdout
    rec.close()


def test_rase_agent_with_the_shipped_daily_budget_refuses_reports_past_its_share(mosquitto, tmp_path):
    """The shipped config as it is: a ninth of household h1's eps 8 a day is below one report at eps 1,
    so the agent makes none, says so, and its retained status says when the budget renews (issue 28)."""
    import json

    rec = Recorder(mosquitto.port, ["rase/v1/reports/#", "rase/v1/status/#"], persistent=False)
    env = dict(os.environ, RASE_AGENT_BROKER__PORT=str(mosquitto.port), RASE_AGENT_DEVICE="cli2",
               RASE_AGENT_SPEEDUP="80", RASE_AGENT_LEDGER_PATH=str(tmp_path / "ledger.json"))
    proc = subprocess.Popen([sys.executable, "-m", "rase.cli", "agent", "--config",
                             str(ROOT / "configs/agent.example.toml")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        def exhausted() -> bool:
            for m in rec.on("rase/v1/status/cli2"):
                st = json.loads(m.payload)
                if st["state"] == "budget_exhausted":
                    return True
            return False
        assert rec.wait_for(exhausted, timeout_s=30)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=15)
    assert rec.on("rase/v1/reports/r1/cli2") == []
    st = [json.loads(m.payload) for m in rec.on("rase/v1/status/cli2") if json.loads(m.payload)["state"] ==
          "budget_exhausted"][-1]
    p = st["privacy"]
    assert (p["unit"], p["household"], p["eps_day"], p["share"]) == ("household", "h1", 8.0, 0.1111)
    assert p["renews_at_utc"].endswith("T00:00:00Z") and p["guarantee"] == "per unit per day"
    assert "privacy unit: household" in out and "nothing more today" in out
    rec.close()


def test_rase_agent_bad_env_value_names_the_field(tmp_path):
    env = dict(os.environ, RASE_AGENT_CALIBRATION__GAMMA="-2")
    proc = subprocess.run([sys.executable, "-m", "rase.cli", "agent", "--config",
                           str(ROOT / "configs/agent.example.toml")],
                          env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert "gamma must be > 0" in proc.stderr
