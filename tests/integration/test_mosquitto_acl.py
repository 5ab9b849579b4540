"""The generated Mosquitto ACL against a real Mosquitto: who may read and write what."""

import subprocess
import sys
import time
import uuid
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from rase.acl import FogUsers, build_acl
from simulators.brokers import Mosquitto

pytestmark = pytest.mark.integration
USERS = {"dev1": "p-dev1", "dev2": "p-dev2", "fog-r1": "p-fog", "fusion-c": "p-fusion", "dashboard": "p-dash"}


@pytest.fixture
def acl_broker(tmp_path):
    passwd = tmp_path / "passwd"
    passwd.write_text("")
    for user, pw in USERS.items():
        subprocess.run(["mosquitto_passwd", "-b", str(passwd), user, pw], check=True, capture_output=True)
    acl = tmp_path / "acl"
    acl.write_text(build_acl([FogUsers("r1", {"r1": ["dev1", "dev2"]})], fusion="fusion-c"))
    b = Mosquitto(tmp_path / "mq", extra_conf=f"password_file {passwd}\nacl_file {acl}\n")
    b.conf_path.write_text(b.conf_path.read_text().replace("allow_anonymous true", "allow_anonymous false"))
    b.start()
    yield b
    b.stop()


class Client:
    def __init__(self, port, user, pw=None):
        self.got: list[str] = []
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"{user}-{uuid.uuid4().hex[:6]}",
                             protocol=mqtt.MQTTv311)
        self.c.username_pw_set(user, pw or USERS.get(user, "wrong"))
        self.c.on_message = lambda c, u, m: self.got.append(m.topic)
        self.connected = None
        self.c.on_connect = lambda c, u, f, rc, p: setattr(self, "connected", not rc.is_failure)
        self.c.connect("127.0.0.1", port)
        self.c.loop_start()
        deadline = time.monotonic() + 5
        while self.connected is None and time.monotonic() < deadline:
            time.sleep(0.02)

    def sub(self, topic):
        self.c.subscribe(topic, qos=1)
        time.sleep(0.2)

    def pub(self, topic):
        self.c.publish(topic, b"{}", qos=1).wait_for_publish(5)


    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def attempt(port, user, topic):
    """Publish from a fresh connection. Mosquitto 2.0.11 answers a denied QoS 1
    publish from an MQTT 3.1.1 client with a v5-style PUBACK, which paho
    treats as a protocol error and drops the connection; a fresh client per
    denied attempt keeps the others unaffected."""
    c = Client(port, user)
    c.c.publish(topic, b"{}", qos=1)
    time.sleep(0.2)
    c.close()


def test_shipped_acl_is_the_generated_one_for_the_example_config():
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "rase.cli", "acl", "--fog-config",
                          str(root / "configs/fog.example.toml")], capture_output=True, text=True, cwd=root)
    assert out.returncode == 0 and out.stdout == (root / "configs/mosquitto/acl").read_text()


def test_acl_enforces_who_reads_and_writes_what(acl_broker):
    p = acl_broker.port
    fog, fusion, dash, dev1 = Client(p, "fog-r1"), Client(p, "fusion-c"), Client(p, "dashboard"), Client(p, "dev1")
    try:
        assert Client(p, "dev1", "bad-password").connected is False
        fog.sub("rase/v1/reports/#")
        fog.sub("rase/v1/aggregates/latest")    # what Home Assistant shows: the fog compares it with its statements
        fusion.sub("rase/v1/#")            # asks for everything (reports, status too); gets only what the ACL grants
        dash.sub("rase/v1/#")
        dev1.sub("rase/v1/#")
        dev1.pub("rase/v1/reports/r1/dev1")        # allowed
        dev1.pub("rase/v1/status/dev1")            # allowed
        attempt(p, "dev1", "rase/v1/reports/r1/dev2")   # impersonation: dropped
        attempt(p, "dev1", "rase/v1/windows/r1")        # not a device's topic: dropped
        attempt(p, "dev1", "rase/v1/aggregates/latest")  # dropped
        fog.pub("rase/v1/windows/r1")              # allowed
        fusion.pub("rase/v1/aggregates/t/1")       # allowed
        fusion.pub("rase/v1/aggregates/latest")    # allowed
        fusion.pub("rase/v1/control/precision")    # allowed
        attempt(p, "dashboard", "rase/v1/aggregates/t/2")  # subscribers cannot write: dropped
        attempt(p, "fusion-c", "rase/v1/reports/r1/dev1")    # the fusion center cannot forge reports
        time.sleep(0.5)
        assert sorted(fog.got) == ["rase/v1/aggregates/latest", "rase/v1/reports/r1/dev1"]
        assert sorted(fusion.got) == ["rase/v1/aggregates/latest", "rase/v1/aggregates/t/1", "rase/v1/control/precision",
                                      "rase/v1/windows/r1"]
        assert sorted(dash.got) == ["rase/v1/aggregates/latest", "rase/v1/aggregates/t/1",
                                    "rase/v1/control/precision"]   # what the numbers mean
        assert dev1.got == ["rase/v1/control/precision"]
    finally:
        for c in (fog, fusion, dash, dev1):
            c.close()
