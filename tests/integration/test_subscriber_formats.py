"""What subscribers get, read with software nobody here wrote: a replay on a
real Mosquitto leaves a retained Home Assistant device discovery config and a
retained `latest` aggregate whose MQTT 5 message expiry, content type and
schema user property `mosquitto_sub -V mqttv5` reads, while an MQTT 3.1.1
subscriber reads the same payload; the fusion center's status says online,
then offline when it stops; the JSON paths docs/subscribers.md gives for
Telegraf and Node-RED point at numbers in a real aggregate; and the fusion
center's MQTT 5 session is persistent: windows published while it was away
are estimated after it comes back."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fusion_center.announce.home_assistant import discovery_topic
from rase_common.protocol.aggregate import Aggregate
from rase_common.protocol.topics import AGGREGATE_LATEST_TOPIC, fusion_status_topic
from simulators.brokers import Mosquitto
from tests.unit.fusion_center.announce.test_home_assistant import check_device_discovery

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def sub(port: int, topic: str, *extra: str, count: int = 1, wait_s: int = 5) -> subprocess.CompletedProcess:
    """One retained message with mosquitto_sub (Debian's mosquitto-clients)."""
    return subprocess.run(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-t", topic, "-C", str(count),
                           "-W", str(wait_s), *extra], capture_output=True, text=True, timeout=wait_s + 10)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """A short replay of two houses (18 devices) through the real services, on a Mosquitto of this
    module's own: what is retained there (control, latest, Home Assistant configs) is this replay's."""
    broker = Mosquitto(tmp_path_factory.mktemp("mosquitto")).start()
    out = tmp_path_factory.mktemp("replay") / "r.jsonl"
    proc = subprocess.run([sys.executable, "-m", "rase.cli", "replay", "--houses", "1,2", "--hours", "0.05",
                           "--start", "2015-01-08T08:00", "--broker", f"mqtt://127.0.0.1:{broker.port}",
                           "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    try:
        assert proc.returncode == 0, proc.stderr[-3000:]
        yield broker, out
    finally:
        broker.stop()


def test_replay_leaves_a_home_assistant_device_config(replayed):
    broker, _ = replayed
    got = sub(broker.port, "homeassistant/device/+/config", "-v")
    assert got.returncode == 0, got.stderr
    topic, payload = got.stdout.strip().split(" ", 1)
    name = re.fullmatch(r"homeassistant/device/rase_(.+)/config", topic).group(1)   # the replay's fusion center
    assert topic == discovery_topic(name)
    config = json.loads(payload)
    check_device_discovery(config)
    assert config["availability_topic"] == fusion_status_topic(name)
    assert config["components"]["mean"]["unit_of_measurement"] == "W"
    assert config["components"]["mean"]["expire_after"] == 32
    # The fusion center stopped with the replay: its status (Home Assistant's availability) says so.
    assert sub(broker.port, fusion_status_topic(name)).stdout.strip() == "offline"


def test_latest_carries_mqtt5_expiry_content_type_and_schema(replayed):
    broker, _ = replayed
    got = sub(broker.port, AGGREGATE_LATEST_TOPIC, "-V", "mqttv5", "-F", "%E|%C|%P|%p")
    assert got.returncode == 0, got.stderr
    expiry, content_type, user, payload = got.stdout.rstrip("\n").split("|", 3)
    # 4 periods of 8 s, counted down by the broker since publication.
    assert 0 < int(expiry) <= 32
    assert content_type == "application/json"
    assert user == "rase-schema:1"
    Aggregate.model_validate_json(payload)
    # An MQTT 3.1.1 subscriber gets the same payload, without properties.
    old = sub(broker.port, AGGREGATE_LATEST_TOPIC, "-V", "mqttv311")
    assert old.returncode == 0 and old.stdout.strip() == payload


# Option names from Telegraf's documentation: mqtt_consumer's sample.conf and the json_v2 parser's.
TELEGRAF_MQTT_OPTIONS = {"servers", "topics", "topic_tag", "qos", "connection_timeout", "max_undelivered_messages",
                         "persistent_session", "client_id", "username", "password", "tls_ca", "tls_cert", "tls_key",
                         "insecure_skip_verify", "client_trace", "data_format", "json_v2", "topic_parsing"}
JSON_V2_OPTIONS = {"measurement_name", "measurement_name_path", "timestamp_path", "timestamp_format",
                   "timestamp_timezone", "field", "tag", "object"}
JSON_V2_FIELD_OPTIONS = {"path", "rename", "type", "optional"}


def gjson(doc, path: str):  # noqa: ANN001, ANN201
    """A GJSON path of plain keys and array indexes (what the docs use)."""
    for part in path.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def test_the_documented_telegraf_config_reads_a_real_aggregate(replayed):
    """docs/subscribers.md's Telegraf config is TOML with Telegraf's option
    names, and each json_v2 path finds a number (a field) or a string (a tag)
    in a published aggregate."""
    import tomllib

    broker, _ = replayed
    agg = json.loads(sub(broker.port, AGGREGATE_LATEST_TOPIC).stdout)
    doc = (ROOT / "docs/subscribers.md").read_text()
    block = re.search(r"## Telegraf.*?```toml\n(.*?)```", doc, re.S).group(1)
    (plugin,) = tomllib.loads(block)["inputs"]["mqtt_consumer"]
    assert set(plugin) <= TELEGRAF_MQTT_OPTIONS, set(plugin) - TELEGRAF_MQTT_OPTIONS
    assert plugin["data_format"] == "json_v2" and plugin["topics"] == ["rase/v1/aggregates/t/+"]
    (spec,) = plugin["json_v2"]
    assert set(spec) <= JSON_V2_OPTIONS
    fields = {f["path"] for f in spec["field"]}
    assert {"estimates.mean.value", "estimates.mean.ci.0", "estimates.mean.ci.1", "n", "t"} <= fields
    for f in spec["field"]:
        assert set(f) <= JSON_V2_FIELD_OPTIONS and f["type"] in ("int", "float")
        value = gjson(agg, f["path"])
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f["path"]
    for tag in spec["tag"]:
        assert isinstance(gjson(agg, tag["path"]), str), tag["path"]


def test_the_documented_node_red_flow_reads_a_real_aggregate(replayed):
    """The flow is valid JSON whose wires join its own nodes, and its function
    reads numbers that a published aggregate has."""
    broker, _ = replayed
    agg = json.loads(sub(broker.port, AGGREGATE_LATEST_TOPIC).stdout)
    doc = (ROOT / "docs/subscribers.md").read_text()
    flow = json.loads(re.search(r"## Node-RED.*?```json\n(.*?)```", doc, re.S).group(1))
    ids = {node["id"] for node in flow}
    for node in flow:
        assert all(target in ids for out in node.get("wires", []) for target in out)
    # Loaded as a flows file (not through Menu > Import), a node runs only on a tab: every
    # node but the tab and the broker (a config node, global) names a tab of the flow in `z`.
    tabs = {n["id"] for n in flow if n["type"] == "tab"}
    assert tabs
    for node in flow:
        if node["type"] not in ("tab", "mqtt-broker"):
            assert node.get("z") in tabs, node["id"]
        else:
            assert "z" not in node, node["id"]
    (mqtt_in,) = [n for n in flow if n["type"] == "mqtt in"]
    assert mqtt_in["broker"] in ids and mqtt_in["datatype"] == "json"
    (func,) = [n for n in flow if n["type"] == "function"]
    exprs = re.findall(r"msg\.payload\.([a-z_.\[\]0-9]+)", func["func"])
    assert len(exprs) >= 5
    for expr in exprs:
        value = agg
        for part in re.findall(r"[a-z_]+|\d+", expr):
            value = value[int(part)] if part.isdigit() else value[part]
        assert isinstance(value, (int, float)) and not isinstance(value, bool), expr


def test_latest_expires(own_mosquitto):
    """Mosquitto drops the retained `latest` once its expiry passed: a dead
    fusion center's last number does not live on."""
    from rase_common.mqtt import publish_properties
    from fusion_center.announce.home_assistant import aggregate_properties
    from tests.mqtt_helpers import started_link

    async def publish() -> None:
        link = await started_link(own_mosquitto.port, "expiry-test", mqtt5=True)
        await link.publish(AGGREGATE_LATEST_TOPIC, '{"t": 1}', retain=True,
                           properties=publish_properties(**aggregate_properties(expiry=2)))
        link.stop()

    asyncio.run(publish())
    assert sub(own_mosquitto.port, AGGREGATE_LATEST_TOPIC).stdout.strip() == '{"t": 1}'
    time.sleep(3.2)
    gone = sub(own_mosquitto.port, AGGREGATE_LATEST_TOPIC, wait_s=1)
    assert gone.stdout == ""
