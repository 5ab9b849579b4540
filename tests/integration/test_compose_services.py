"""docker-compose.yml's services as shipped, without Docker: a venv built the
way the Dockerfile builds the image (its COPY lines, its own pip command and
default extras), each compose service's command with its compose config and
the compose environment, against the shipped Mosquitto configuration (TLS,
passwords, generated ACL, from docs/deployment.md's steps) and a real
Kafka-protocol broker (Tansu); 45 real agents, one per registered device,
each with its own user. An aggregate of both regions comes out.

Environment overrides, beyond the compose file's own: broker host and port,
Kafka bootstrap servers, metrics ports (loopback ports here), the paths of the
secrets, journal and store (the container's /run/secrets and /var/lib/rase),
and for Tansu, which can neither terminate TLS nor keep SCRAM credentials
(0.6, docs/deployment.md), Kafka security PLAINTEXT and no idempotent
producer. Kafka's TLS and SCRAM are tested in test_kafka_security.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edge_agent.config import AgentConfig
from edge_agent.service import AgentService
from fog_shuffler.config import FogConfig
from rase_common.protocol.aggregate import Aggregate
from simulators.brokers import free_port
from tests.integration.shipped import ROOT, ShippedMosquitto, TlsClient, compose, run_deployment_steps
from tests.mqtt_helpers import ServiceThread

pytestmark = pytest.mark.integration
DOCKERFILE = ROOT / "Dockerfile"


@pytest.fixture(scope="session")
def image_venv(tmp_path_factory) -> tuple[Path, Path]:
    """(/app, venv): the Dockerfile's COPY lines into an app directory, then
    its RUN pip line with its ARG default, run by a shell whose pip is the venv's."""
    text = DOCKERFILE.read_text()
    python = re.search(r"^FROM python:(\d+\.\d+)", text, re.M).group(1)
    assert f"{sys.version_info.major}.{sys.version_info.minor}" == python, "the image's Python differs from this one"
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    base = tmp_path_factory.mktemp("image")
    app, venv = base / "app", base / "venv"
    app.mkdir()
    for line in re.findall(r"^COPY (.+)$", text, re.M):
        *sources, dest = line.split()
        for src in sources:
            target = app / dest if not dest.endswith("/") and len(sources) == 1 else app / dest / src
            (shutil.copytree if (ROOT / src).is_dir() else shutil.copy)(ROOT / src, target)
    run = re.findall(r"^RUN (pip install .+)$", text, re.M)
    assert len(run) == 1, run
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, **args, "PATH": f"{venv}/bin:/usr/bin:/bin"}
    proc = subprocess.run(["sh", "-c", run[0]], cwd=app, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return app, venv


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    deploy = run_deployment_steps(tmp_path_factory.mktemp("deploy"))
    broker = ShippedMosquitto(deploy, tmp_path_factory.mktemp("shipped-mosquitto")).start()
    yield deploy, broker
    broker.stop()


class ConstantSensor:
    def read(self, now: float) -> float:
        return 150.0


def service_env(service: str, broker: ShippedMosquitto, bootstrap: str, state: Path) -> dict[str, str]:
    svc = compose()["services"][service]
    prefix = "RASE_FOG_" if service.startswith("fog") else "RASE_FUSION_"
    user = {"fog-r1": "fog-r1", "fog-r2": "fog-r2", "fusion": "fusion-main"}[service]
    env = {k: str(v) for k, v in svc.get("environment", {}).items()}
    env.update({
        f"{prefix}BROKER__HOST": "127.0.0.1", f"{prefix}BROKER__PORT": str(broker.tls_port),
        f"{prefix}BROKER__CA_FILE": str(broker.ca_file), f"{prefix}BROKER__PASSWORD_FILE": str(broker.password_file(user)),
        f"{prefix}KAFKA__BOOTSTRAP_SERVERS": bootstrap, f"{prefix}KAFKA__SECURITY_PROTOCOL": "PLAINTEXT",
        f"{prefix}KAFKA__IDEMPOTENT": "false", f"{prefix}METRICS_PORT": str(free_port()),
        f"{prefix}JOURNAL_PATH" if service.startswith("fog") else f"{prefix}STORE_PATH": str(state / f"{service}.sqlite"),
        # An aggregate every 8 s, not every half-hour: the per-report stream, an explicit event-level run
        # (the compose configs ship the half-hourly product at eps 8 per household-day, issue 28).
        f"{prefix}PRIVACY__EVENT_LEVEL": "true",
    })
    return env


READY = {"fusion": "fusion subscribed", "fog-r1": "fog subscribed", "fog-r2": "fog subscribed"}


def start_service(service: str, app: Path, venv: Path, broker: ShippedMosquitto, bootstrap: str, state: Path,
                  tries: int = 3) -> subprocess.Popen:
    """The service as the image runs it, up (subscribed). Its metrics port is a free port picked here; another
    xdist worker's process may take it before the service binds it ('Address already in use'): then again,
    on a fresh port, as tests/observe_stack.py does."""
    cmd = compose()["services"][service]["command"]
    log_path = state / f"{service}.log"
    for attempt in range(tries):
        env = {"PATH": f"{venv}/bin:/usr/bin:/bin", "HOME": str(state),
               **service_env(service, broker, bootstrap, state)}
        with open(log_path, "w") as log:
            proc = subprocess.Popen([str(venv / "bin" / "rase"), *cmd], cwd=app, env=env, stdout=log,
                                    stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and READY[service] not in log_path.read_text():
            time.sleep(0.1)
        if proc.poll() is None:
            return proc
        text = log_path.read_text()
        if "Address already in use" not in text or attempt == tries - 1:
            raise AssertionError(f"{service} exited: {text[-3000:]}")
    raise AssertionError("unreachable")


def test_the_image_runs_every_compose_service_and_an_aggregate_comes_out(image_venv, shipped, tansu, tmp_path):
    app, venv = image_venv
    deploy, broker = shipped
    procs: dict[str, subprocess.Popen] = {}
    agents: list[ServiceThread] = []
    sub = TlsClient(broker, "dashboard")
    sub.sub("rase/v1/aggregates/t/+")
    try:
        for service in ("fusion", "fog-r1", "fog-r2"):
            procs[service] = start_service(service, app, venv, broker, tansu.bootstrap, tmp_path)
        for fog in ("fog-r1", "fog-r2"):
            cfg = FogConfig.load(ROOT / compose()["services"][fog]["command"][-1])
            for region, rc in cfg.regions.items():
                for dev in sorted(rc.all_devices()):
                    broker_cfg = {"host": "127.0.0.1", "port": broker.tls_port, "tls": True,
                                  "ca_file": broker.ca_file, "username": dev, "password_file": broker.password_file(dev)}
                    acfg = AgentConfig.load(None, device=dev, region=region, eps=1.0, period_s=cfg.period_s,
                                            epoch0=cfg.epoch0, ledger_path=tmp_path / f"{dev}.json", broker=broker_cfg)
                    agents.append(ServiceThread(AgentService(acfg, source=ConstantSensor())))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not any(Aggregate.model_validate_json(m.payload).complete
                                                      for m in sub.got):
            for name, p in procs.items():
                assert p.poll() is None, f"{name} exited: {(tmp_path / f'{name}.log').read_text()[-3000:]}"
            time.sleep(0.5)
        aggs = [Aggregate.model_validate_json(m.payload) for m in sub.got]
        complete = [a for a in aggs if a.complete]
        assert complete, ("no complete aggregate", [(a.t, a.n, a.regions) for a in aggs],
                          {n: (tmp_path / f"{n}.log").read_text()[-2000:] for n in procs})
        assert set(complete[0].regions) == {"r1", "r2"} and complete[0].n >= 20
    finally:
        for a in agents:
            a.stop()
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        sub.close()
