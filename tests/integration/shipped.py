"""The deployment as shipped, run here without Docker: docs/deployment.md's
set-up steps executed as written, and a real Mosquitto started from
configs/mosquitto/mosquitto.conf with only its paths (secrets, ACL, data) and
ports adjusted, the paths taken from docker-compose.yml's own mounts."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import paho.mqtt.client as mqtt
import yaml

from simulators.brokers import BrokerProcess, free_port, mosquitto_binary, wait_port

ROOT = Path(__file__).resolve().parents[2]
STEPS_MARKER = "<!-- tested: the set-up steps -->"


def deployment_steps() -> str:
    """The shell block that follows STEPS_MARKER in docs/deployment.md."""
    text = (ROOT / "docs/deployment.md").read_text()
    after = text.split(STEPS_MARKER, 1)[1]
    return re.search(r"```sh\n(.*?)```", after, re.S).group(1)


def run_deployment_steps(workdir: Path) -> Path:
    """Run the documented steps in a copy of configs/ (as a checkout would
    have it), with `rase` and `mosquitto_passwd` on PATH; return `workdir`."""
    shutil.copytree(ROOT / "configs", workdir / "configs")
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(workdir)}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", deployment_steps()], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"deployment steps failed:\n{proc.stdout}\n{proc.stderr}"
    return workdir


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def secret_files(workdir: Path) -> dict[str, Path]:
    """/run/secrets/<name> -> the file docker-compose.yml names for it, under workdir."""
    return {name: workdir / spec["file"] for name, spec in compose()["secrets"].items()}


class ShippedMosquitto(BrokerProcess):
    """configs/mosquitto/mosquitto.conf on loopback ports, with the secrets
    and ACL that the deployment steps made in `deploy_dir`."""

    def __init__(self, deploy_dir: Path, workdir: Path):
        self.deploy = deploy_dir
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.tls_port = free_port()
        self.local_port = free_port()
        self.log_path = self.workdir / "mosquitto.log"
        self.conf_path = self.workdir / "mosquitto.conf"
        self.conf_path.write_text(self.adjusted_conf())
        self.proc = None

    def adjusted_conf(self) -> str:
        conf = (ROOT / "configs/mosquitto/mosquitto.conf").read_text()
        mounts = {}
        for vol in compose()["services"]["mosquitto"]["volumes"]:
            src, dst = vol.split(":")[:2]
            if src.startswith("./"):
                mounts[dst] = self.deploy / src
        for name, path in secret_files(self.deploy).items():
            conf = conf.replace(f"/run/secrets/{name}", str(path))
        conf = conf.replace("acl_file /mosquitto/config/acl", f"acl_file {mounts['/mosquitto/config/acl']}")
        conf = conf.replace("persistence_location /mosquitto/data/", f"persistence_location {self.workdir}/")
        conf = conf.replace("listener 8883\n", f"listener {self.tls_port} 127.0.0.1\n")
        conf = conf.replace("listener 1883 127.0.0.1\n", f"listener {self.local_port} 127.0.0.1\n")
        assert "/run/secrets/" not in conf and "/mosquitto/" not in conf, conf
        # As root, mosquitto drops to user `mosquitto`, which cannot read the test's private tmp dir.
        conf += ("user root\n" if os.geteuid() == 0 else "") + f"log_dest file {self.log_path}\nlog_type all\n"
        return conf

    def start(self, timeout_s: float = 10.0) -> "ShippedMosquitto":
        self.proc = subprocess.Popen([mosquitto_binary(), "-c", str(self.conf_path)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if not (wait_port(self.tls_port, timeout_s, self.proc) and wait_port(self.local_port, timeout_s, self.proc)):
            err = self.proc.stderr.read().decode() if self.proc.poll() is not None and self.proc.stderr else ""
            self.stop()
            raise RuntimeError(f"shipped mosquitto did not start:\n{err}\n{self.log()}")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else "(no mosquitto log)"

    @property
    def ca_file(self) -> Path:
        return secret_files(self.deploy)["ca_cert"]

    def password_file(self, user: str) -> Path:
        return self.deploy / "secrets" / "passwords" / user

    def password(self, user: str) -> str:
        return self.password_file(user).read_text().strip()


class TlsClient:
    """A paho client of the shipped broker: TLS verified against the
    deployment's CA, a user and its generated password, any client id."""

    def __init__(self, broker: ShippedMosquitto, user: str, client_id: str | None = None, *,
                 persistent: bool = False, password: str | None = None):
        self.got: list[mqtt.MQTTMessage] = []
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id or f"{user}-{uuid.uuid4().hex[:6]}",
                             protocol=mqtt.MQTTv311, clean_session=not persistent)
        self.c.tls_set(ca_certs=str(broker.ca_file))
        self.c.username_pw_set(user, password if password is not None else broker.password(user))
        self.c.on_message = lambda c, u, m: self.got.append(m)
        self.connected: bool | None = None
        self.disconnects = 0
        self.c.on_connect = lambda c, u, f, rc, p: setattr(self, "connected", not rc.is_failure)
        self.c.on_disconnect = self._on_disconnect
        self.c.connect("127.0.0.1", broker.tls_port, keepalive=30)
        self.c.loop_start()
        deadline = time.monotonic() + 10
        while self.connected is None and time.monotonic() < deadline:
            time.sleep(0.02)

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:  # noqa: ANN001
        self.disconnects += 1

    def sub(self, topic: str) -> None:
        done = []
        self.c.on_subscribe = lambda *a: done.append(1)
        self.c.subscribe(topic, qos=1)
        deadline = time.monotonic() + 5
        while not done and time.monotonic() < deadline:
            time.sleep(0.02)

    def pub(self, topic: str, payload: bytes = b"{}", retain: bool = False) -> mqtt.MQTTMessageInfo:
        info = self.c.publish(topic, payload, qos=1, retain=retain)
        info.wait_for_publish(10)
        return info

    def topics(self) -> list[str]:
        return [m.topic for m in self.got]

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()
