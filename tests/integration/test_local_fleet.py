"""`rase agent --fleet N` as a user runs it, against real Mosquittos: each
simulated device publishes its retained status as a real agent does (online
with its counts, offline when the fleet stops), and with `--passwords` the
fleet feeds a broker with one user per device (the shipped configuration:
TLS, passwords, the generated ACL, client ids bound to users)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rase_common.protocol.report import Report, Status
from simulators.local_fleet import fleet_devices
from tests.integration.shipped import ROOT, ShippedMosquitto, TlsClient, run_deployment_steps
from tests.mqtt_helpers import Recorder

pytestmark = pytest.mark.integration
N = 12


def _fleet(tmp_path: Path, env: dict[str, str], *extra: str) -> subprocess.Popen:
    log = open(tmp_path / "fleet.log", "w")
    # Reports every period (no fusion center's interval product here): an explicit event-level run (issue 28).
    return subprocess.Popen([sys.executable, "-m", "rase.cli", "agent", "--fleet", str(N), "--config",
                             str(ROOT / "configs/agent.example.toml"), "--event-level", *extra], cwd=tmp_path,
                            stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, "RASE_AGENT_PERIOD_S": "1.0", **env})


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.wait(30)


def _latest_by_device(messages, prefix: str) -> dict[str, dict]:
    out = {}
    for m in messages:
        if m.topic.startswith(prefix) and m.payload:
            out[m.topic.rsplit("/", 1)[1]] = json.loads(m.payload)
    return out


def test_the_fleets_devices_publish_their_retained_status(own_mosquitto, tmp_path):
    names = [d for d, _, _ in fleet_devices(N)]
    watch = Recorder(own_mosquitto.port, ["rase/v1/status/+", "rase/v1/reports/r1/+"], persistent=False)
    proc = _fleet(tmp_path, {"RASE_AGENT_BROKER__PORT": str(own_mosquitto.port)})
    try:
        # Every device online, with counts of reports made and delivered, as an agent's status says.
        def online_with_counts() -> bool:
            st = _latest_by_device(watch.on("rase/v1/status/"), "rase/v1/status/")
            return set(st) == set(names) and all(s["state"] == "online" and s.get("counts", {}).get("made", 0) >= 1
                                                 for s in st.values())
        assert watch.wait_for(lambda: len(watch.on("rase/v1/reports/")) >= 2 * N, 60), \
            (tmp_path / "fleet.log").read_text()
        for m in watch.on("rase/v1/reports/"):
            Report.model_validate_json(m.payload)
        # The status after a report names it: made counts reports; it is refreshed when the fog's
        # feedback arrives or every 100 reports, so the first one may say made=0: wait for one with counts.
        for i in range(N):
            watch.client.publish(f"rase/v1/feedback/r1/{names[i]}",
                                 json.dumps({"v": 1, "reason": "unknown_device", "rejected": 1}), qos=1)
        assert watch.wait_for(online_with_counts, 30), (_latest_by_device(watch.on("rase/v1/status/"),
                                                                          "rase/v1/status/"),
                                                        (tmp_path / "fleet.log").read_text())
        for s in _latest_by_device(watch.on("rase/v1/status/"), "rase/v1/status/").values():
            status = Status.model_validate(s)
            assert status.counts is not None and status.counts.rejected_by_fog >= 1
            assert status.privacy is not None and status.privacy.eps_per_report == 1.0
    finally:
        _stop(proc)
        watch.close()
    assert proc.returncode == 0, (tmp_path / "fleet.log").read_text()
    # What a newcomer subscribing now gets: each device's retained status, offline since the fleet stopped.
    late = Recorder(own_mosquitto.port, ["rase/v1/status/+"], persistent=False)
    try:
        assert late.wait_for(lambda: len(_latest_by_device(late.messages, "rase/v1/status/")) == N, 10)
        retained = _latest_by_device(late.messages, "rase/v1/status/")
        assert all(m.retain for m in late.messages)
        assert {d: s["state"] for d, s in retained.items()} == {d: "offline" for d in names}
    finally:
        late.close()


def test_the_fleet_feeds_a_broker_with_one_user_per_device(tmp_path):
    """The shipped Mosquitto (docs/deployment.md's steps): with --passwords each
    device logs in as itself and its reports reach the fog's user; over one
    shared login the fleet says why it cannot."""
    deploy = run_deployment_steps(tmp_path / "deploy")
    broker = ShippedMosquitto(deploy, tmp_path / "shipped-broker").start()
    fog = TlsClient(broker, "fog-r1", "fog-r1")
    fog.sub("rase/v1/reports/r1/+")
    env = {"RASE_AGENT_BROKER__PORT": str(broker.tls_port), "RASE_AGENT_BROKER__TLS": "true",
           "RASE_AGENT_BROKER__CA_FILE": str(broker.ca_file)}
    names = {d for d, _, _ in fleet_devices(N)}
    proc = _fleet(tmp_path, env, "--passwords", str(deploy / "secrets" / "passwords"))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and {m.topic.rsplit("/", 1)[1] for m in fog.got} != names:
            assert proc.poll() is None, (tmp_path / "fleet.log").read_text()
            time.sleep(0.2)
        assert {m.topic.rsplit("/", 1)[1] for m in fog.got} == names, ((tmp_path / "fleet.log").read_text()[-3000:],
                                                                      broker.log()[-3000:])
        assert "each device logged in as itself" in (tmp_path / "fleet.log").read_text()
    finally:
        _stop(proc)
    one_login = _fleet(tmp_path, {**env, "RASE_AGENT_BROKER__USERNAME": "h1a1",
                                  "RASE_AGENT_BROKER__PASSWORD_FILE": str(deploy / "secrets/passwords/h1a1")},
                       "--max-reports", "1")
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "--passwords" not in (tmp_path / "fleet.log").read_text():
            time.sleep(0.1)
        assert "give --passwords DIR" in (tmp_path / "fleet.log").read_text()
    finally:
        _stop(one_login)
        fog.close()
        broker.stop()
