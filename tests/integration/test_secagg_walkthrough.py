"""docs/deployment.md's two-party walkthrough ("Try it on one machine first"),
run as written: the marked shell block, in a fresh copy of configs/ with the
`rase` command on PATH, against a real Mosquitto. Only what a second machine
would differ in is set from outside: the broker's port (RASE_..._BROKER__PORT
for the services, mosquitto_sub's own config file for the client) and the
metrics ports, free ones here. It must end in a secure aggregate with every
wall-clock field and the privacy unit filled, and each party's view of the
window."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rase_common.protocol.aggregate import Aggregate
from simulators.brokers import free_port

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- tested: the two-party walkthrough -->"


def walkthrough() -> str:
    after = (ROOT / "docs/deployment.md").read_text().split(MARKER, 1)[1]
    return re.search(r"```sh\n(.*?)```", after, re.S).group(1)


def test_the_block_is_the_commands_a_person_types():
    lines = [line for line in walkthrough().splitlines() if line.strip()]
    assert [line.split()[0] for line in lines] == ["rase", "cp", "cp", "cp", "sed", "rase", "rase", "rase",
                                                   "mosquitto_sub"]
    assert all("--event-level" in line for line in lines[5:8])     # the per-report stream: an explicit choice
    # The example configs it copies exist, and each one says what the secure mode needs.
    for name in ("fusion", "fog", "agent"):
        text = (ROOT / f"configs/{name}.secagg.example.toml").read_text()
        assert "REPLACE-WITH-THE-KEY-ID" in text and "prio3" in text
    assert "prio3" in (ROOT / "configs/agent.example.toml").read_text()    # says what to change for prio3


def test_the_two_party_walkthrough_ends_in_a_secure_aggregate(mosquitto, tmp_path):
    work = tmp_path / "checkout"
    shutil.copytree(ROOT / "configs", work / "configs")
    conf = tmp_path / "xdg"
    conf.mkdir()
    (conf / "mosquitto_sub").write_text(f"-h 127.0.0.1\n-p {mosquitto.port}\n")
    port = str(mosquitto.port)
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "XDG_CONFIG_HOME": str(conf),
           "RASE_FUSION_BROKER__PORT": port, "RASE_FOG_BROKER__PORT": port, "RASE_AGENT_BROKER__PORT": port,
           "RASE_FUSION_METRICS_PORT": str(free_port()), "RASE_FOG_METRICS_PORT": str(free_port())}
    log, printed = tmp_path / "services.log", tmp_path / "stdout.txt"
    started = time.monotonic()
    with open(log, "w") as services_log, open(printed, "w") as stdout:
        proc = subprocess.Popen(["bash", "-c", walkthrough()], cwd=work, env=env, stdout=stdout,
                                stderr=services_log, start_new_session=True)
        try:
            proc.wait(timeout=150)      # bash ends with its last command, mosquitto_sub
        except subprocess.TimeoutExpired:
            pass
        finally:
            took = time.monotonic() - started
            try:
                os.killpg(proc.pid, signal.SIGTERM)     # the services in the background, as `kill %1 %2 %3`
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and _alive(proc.pid):
                time.sleep(0.1)
            if _alive(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = [line for line in printed.read_text().splitlines() if line.startswith("{")]
    text = log.read_text()
    assert out, f"no aggregate after {took:.0f} s:\n{printed.read_text()[-2000:]}\n{text[-4000:]}"
    agg = Aggregate.model_validate(json.loads(out[-1]))
    assert agg.mechanism == "prio3" and agg.n >= 10 and agg.regions == ["r1"] and "mean" in agg.estimates
    # Every wall-clock field and the privacy unit (issue 26: they were all null).
    for field in ("t_start", "t_end", "t_start_iso", "t_end_iso", "period_s", "privacy_unit", "clipping"):
        assert getattr(agg, field) is not None, field
    assert agg.period_s == 8.0 and agg.t_end - agg.t_start == 8.0 and agg.t_start == agg.t * 8.0
    assert agg.privacy_unit.eps_per_report == 1.0 and agg.privacy_unit.central_eps == 1.0
    assert agg.privacy_unit.central_delta == 0.0 and agg.privacy_unit.shuffle == "none"
    # --event-level: the per-report stream, said so per household per day (issue 28).
    assert agg.privacy_unit.guarantee == "event-level" and "eps 97,200 per household per UTC day" in \
        agg.privacy_unit.statement, agg.privacy_unit.statement
    s = agg.prio3
    assert s.noise["draws"] == 2 and s.noise["off_for_tests"] == "no"
    views = s.regions["r1"]
    assert views.leader.accepted == views.helper.accepted == agg.n and s.discrepancies == {}
    keys = work / "var" / "secagg"
    assert (keys / "helper.key").stat().st_mode & 0o077 == 0
    assert agg.prio3.params_id and "REPLACE" not in (work / "var" / "fog-secagg.toml").read_text()
    assert "Traceback" not in text, text[-4000:]
    assert took < 90, f"the first secure aggregate took {took:.0f} s"


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
