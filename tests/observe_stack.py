"""A running RASE deployment for the observability tests, all real parts:
Mosquitto (TCP, MQTT-over-WebSockets, $SYS every second), `rase fog` and
`rase fusion` as processes with metrics ports, `rase broker-metrics`, and
real agents (the agent service, paho) reporting every second.

Region r1 holds REFIT houses 1 and 2 (18 devices: full windows); region r2
holds one device, so each of its windows is under k_min and suppressed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import yaml

from edge_agent.config import AgentConfig
from simulators.refit import refit_source
from edge_agent.service import AgentService
from simulators.brokers import BrokerProcess, Mosquitto, free_port, wait_port
from tests.mqtt_helpers import ServiceThread

ROOT = Path(__file__).resolve().parent.parent
PERIOD_S = 1.0
HOUSES = (1, 2)
LONELY = "lonely1"           # the only device of region r2


@dataclass
class Stack:
    mosquitto: Mosquitto
    ws_port: int
    fog_metrics: int
    fusion_metrics: int
    broker_metrics: int
    work: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    agents: list[ServiceThread] = field(default_factory=list)

    def logs(self) -> str:
        out = [f"---- {p.name} ----\n" + p.read_text(errors="replace") for p in sorted(self.work.glob("*.log"))]
        return "\n".join(out) + "\n---- mosquitto ----\n" + self.mosquitto.log()

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited with {proc.returncode}\n{self.logs()}")


def metrics_text(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def _rase(stack: Stack, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
    log = open(stack.work / f"{name}.log", "ab")
    stack.procs[name] = subprocess.Popen([sys.executable, "-m", "rase.cli", *args], stdout=log,
                                         stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **(env or {})})


def _write_configs(stack: Stack) -> tuple[Path, Path]:
    port = stack.mosquitto.port
    fog = stack.work / "fog.toml"
    fog.write_text(f"""
name = "observe"
period_s = {PERIOD_S}
lateness_periods = 1
k_min = 10
journal_path = "{stack.work / 'fog.sqlite'}"
metrics_port = {stack.fog_metrics}
tick_s = 0.02
[broker]
port = {port}
[regions.r1]
refit_houses = {list(HOUSES)}
[regions.r2]
devices = ["{LONELY}"]
""")
    fusion = stack.work / "fusion.toml"
    fusion.write_text(f"""
name = "observe"
regions = ["r1"]
merge_deadline_s = 3.0
bootstrap_b = 200
windows_w = [8, 64]
store_path = "{stack.work / 'fusion.sqlite'}"
metrics_port = {stack.fusion_metrics}
tick_s = 0.02
[precision]
period_s = {PERIOD_S}
eps_levels = [1.0]
[broker]
port = {port}
""")
    return fog, fusion


def _agent(stack: Stack, device: str, region: str, house: int, appliance: int) -> ServiceThread:
    cfg = AgentConfig.load(None, device=device, region=region, eps=1.0, period_s=PERIOD_S,
                           ledger_path=stack.work / "ledgers" / f"{device}.json",
                           source={"kind": "refit", "house": house, "appliance": appliance}, broker={"port": stack.mosquitto.port})
    return ServiceThread(AgentService(cfg, source=refit_source(cfg.source, device, time.time())))


class PortTaken(AssertionError):
    """A free port picked for a service was bound by another process before the service bound it."""


@contextlib.contextmanager
def running_stack(work: Path, attempts: int = 3):
    """Start everything (again on fresh ports when another test's process took one of ours between
    picking and binding it: pytest-xdist runs other brokers beside us); stop it all however the test ends."""
    for attempt in range(attempts):
        try:
            with _running_stack(work / f"attempt{attempt}") as stack:
                yield stack
            return
        except PortTaken:
            if attempt == attempts - 1:
                raise


@contextlib.contextmanager
def _running_stack(work: Path):
    work.mkdir(parents=True, exist_ok=True)
    ws_port = free_port()
    broker = Mosquitto(work / "mosquitto", extra_conf=f"sys_interval 1\nlistener {ws_port} 127.0.0.1\n"
                                                      "protocol websockets\n")
    stack = Stack(broker, ws_port, free_port(), free_port(), free_port(), work)
    try:
        try:
            broker.start()
        except RuntimeError as err:
            if "Unable to create" in str(err) or "Address already in use" in str(err):
                raise PortTaken(str(err)) from None
            raise
        assert wait_port(ws_port, 10), "mosquitto's websockets listener did not open"
        fog_cfg, fusion_cfg = _write_configs(stack)
        _rase(stack, "fusion", ["fusion", "--config", str(fusion_cfg)])
        _rase(stack, "fog", ["fog", "--config", str(fog_cfg)])
        _rase(stack, "broker-metrics", ["broker-metrics"],
              {"RASE_BROKER_METRICS_BROKER__PORT": str(broker.port),
               "RASE_BROKER_METRICS_METRICS_PORT": str(stack.broker_metrics)})
        for port in (stack.fog_metrics, stack.fusion_metrics, stack.broker_metrics):
            if not wait_port(port, 30) or any(p.poll() is not None for p in stack.procs.values()):
                if "Address already in use" in stack.logs():
                    raise PortTaken(stack.logs())
                stack.check_alive()
                raise AssertionError(f"metrics port {port} did not open\n{stack.logs()}")
        for h in HOUSES:
            for k in range(1, 10):
                stack.agents.append(_agent(stack, f"h{h}a{k}", "r1", h, k))
        stack.agents.append(_agent(stack, LONELY, "r2", 1, 1))
        yield stack
    finally:
        for a in stack.agents:
            with contextlib.suppress(Exception):
                a.stop()
        for proc in stack.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in stack.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        broker.stop()


def wait_until(pred, timeout_s: float, stack: Stack | None = None, what: str = "") -> None:
    """Poll pred() until true; on time-out fail with what was awaited and the logs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if stack is not None:
            stack.check_alive()
        if pred():
            return
        time.sleep(0.25)
    raise AssertionError(f"not reached in {timeout_s:.0f} s: {what}\n" + (stack.logs() if stack else ""))


class Prometheus(BrokerProcess):
    """Debian's Prometheus on a free loopback port with a generated scrape
    config (every second) and the shipped alert rules."""

    def __init__(self, work: Path, jobs: dict[str, list[int]], rules: Path = ROOT / "configs/prometheus/rules.yml"):
        exe = shutil.which("prometheus")
        assert exe, "prometheus is not installed: run `make test` (it installs Debian's prometheus)"
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.config = self.work / "prometheus.yml"
        self.config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports]}]}
                               for job, ports in jobs.items()]}))
        self.log_path = self.work / "prometheus.log"
        self.cmd = [exe, f"--config.file={self.config}", f"--storage.tsdb.path={self.work / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "Prometheus":
        return self.start()

    def __exit__(self, *exc) -> None:  # noqa: ANN002
        self.stop()

    def start(self) -> "Prometheus":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2).status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"prometheus did not become ready:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else "(no prometheus log)"

    def api(self, path: str, **params: str) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}" + (f"?{urlencode(params)}" if params else "")
        body = json.loads(urllib.request.urlopen(url, timeout=10).read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """An instant query's series: [{"metric": {...}, "value": [ts, "v"]}, ...]."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        return data["result"]
