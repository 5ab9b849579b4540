"""The Home Assistant discovery config against what Home Assistant requires.

The checks follow Home Assistant's MQTT integration (homeassistant/components/
mqtt: schemas.py DEVICE_DISCOVERY_SCHEMA and MQTT_ORIGIN_INFO_SCHEMA,
discovery.py's topic pattern, sensor.py) and its documentation of
device-based discovery: `device` with at least one of identifiers or
connections, `origin` with a name, `components` each with a `platform` (and
a `unique_id` for entities), a sensor's `state_topic` (here shared at the
device level), availability payloads as strings, an object id of
[a-zA-Z0-9_-], and an empty retained payload to remove the device. Home
Assistant itself is not installed here (its current releases need a newer
Python than this project's); this is the schema written out, not a mock of it.
"""

from __future__ import annotations

import json
import re

import pytest

from fusion_center.announce.home_assistant import (Announcer, aggregate_properties, discovery_config, discovery_topic,
                                          expiry_s, object_id)
from rase_common.protocol.topics import AGGREGATE_LATEST_TOPIC, fusion_status_topic

SUPPORTED_PLATFORMS = {"sensor", "binary_sensor"}
SHARED = {"availability", "availability_mode", "availability_template", "availability_topic", "command_topic",
          "payload_available", "payload_not_available", "state_topic", "qos", "encoding"}
TOPIC_MATCHER = re.compile(r"(?P<component>\w+)/(?:(?P<node_id>[a-zA-Z0-9_-]+)/)?(?P<object_id>[a-zA-Z0-9_-]+)/config")


def check_device_discovery(config: dict) -> None:
    """Raise AssertionError where a device discovery payload breaks Home Assistant's required keys."""
    allowed_top = SHARED | {"device", "origin", "components"}
    assert set(config) <= allowed_top, set(config) - allowed_top
    dev = config["device"]
    assert dev.get("identifiers") or dev.get("connections"), "device needs an identifier"
    assert all(isinstance(i, str) for i in dev["identifiers"])
    assert isinstance(config["origin"]["name"], str) and config["origin"]["name"]
    assert isinstance(config["components"], dict) and config["components"]
    for key, comp in config["components"].items():
        assert re.fullmatch(r"[a-zA-Z0-9_-]+", key), key
        assert comp["platform"] in SUPPORTED_PLATFORMS
        assert isinstance(comp["unique_id"], str) and comp["unique_id"]
        assert comp.get("state_topic", config.get("state_topic")), f"{key}: a sensor needs a state_topic"
        assert "{{" in comp["value_template"] and "}}" in comp["value_template"]
        if "expire_after" in comp:
            assert isinstance(comp["expire_after"], int) and comp["expire_after"] > 0
        if comp.get("device_class") == "power":
            assert comp["unit_of_measurement"] in ("W", "kW", "mW", "MW", "GW", "TW", "BTU/h")
        if "state_class" in comp:
            assert comp["state_class"] in ("measurement", "total", "total_increasing")
    uids = [c["unique_id"] for c in config["components"].values()]
    assert len(uids) == len(set(uids)), "unique ids must be unique"
    for k in ("payload_available", "payload_not_available"):
        assert isinstance(config.get(k, ""), str)


def br_aggregate() -> dict:
    est = {"value": 812.5, "ci": [100.0, 1500.0], "n": 45, "method": "exact-noise"}
    win = {"w": 8, "present": 8, "value": 700.0, "ci": [500.0, 900.0]}
    return {"v": 1, "t": 100, "revision": 0, "n": 45, "regions": ["r1"], "complete": True, "level": 0.95,
            "mechanism": "br", "estimates": {k: est for k in ("mle", "se", "bs", "mean")},
            "windowed": {"8": {k: win for k in ("mean", "bs", "se", "mle")},
                         "64": {k: dict(win, w=64) for k in ("mean", "bs", "se", "mle")}},
            "frequencies": [], "clamped": True, "share_at_bound": 0.1}


def test_br_config_has_a_power_sensor_per_estimate_and_windowed_mean():
    config = discovery_config("fusion1", br_aggregate(), bands=[10, 100, 1000], expire_after=32, sw_version="0.1.0")
    check_device_discovery(config)
    comps = config["components"]
    assert list(comps)[0] == "mean"                            # the one to use comes first
    assert set(comps) == {"mean", "bs", "se", "mle", "mean_w8", "mean_w64"}
    mean = comps["mean"]
    assert mean["unit_of_measurement"] == "W" and mean["device_class"] == "power"
    assert mean["value_template"] == "{{ value_json.estimates.mean.value }}"
    assert mean["json_attributes_topic"] == AGGREGATE_LATEST_TOPIC
    assert "ci[0]" in mean["json_attributes_template"] and "ci[1]" in mean["json_attributes_template"]
    assert mean["expire_after"] == 32
    assert config["state_topic"] == AGGREGATE_LATEST_TOPIC
    assert config["availability_topic"] == fusion_status_topic("fusion1")
    assert (config["payload_available"], config["payload_not_available"]) == ("online", "offline")
    assert comps["mean_w64"]["value_template"] == "{{ value_json.windowed['64'].mean.value }}"


def test_on_off_and_band_configs():
    binary = dict(br_aggregate(), mechanism="binary", windowed={},
                  estimates={"count": {"value": 12.0, "ci": [8, 16], "n": 45}, "mean": {"value": 0.27, "ci": [0.2, 0.3],
                                                                                      "n": 45}})
    config = discovery_config("f", binary, bands=[10], expire_after=10, sw_version="0")
    check_device_discovery(config)
    assert config["components"]["count"]["unit_of_measurement"] == "devices"
    assert "unit_of_measurement" not in config["components"]["mean"]          # a share, not watts
    assert "device_class" not in config["components"]["mean"]
    cat = dict(br_aggregate(), mechanism="categorical", windowed={}, estimates={},
               frequencies=[{"value": 0.5, "ci": [0.4, 0.6], "n": 45}] * 4)
    config = discovery_config("f", cat, bands=[10, 100, 1000], expire_after=10, sw_version="0")
    check_device_discovery(config)
    names = [c["name"] for c in config["components"].values()]
    assert names == ["Share of devices at 0-10 W", "Share of devices at 10-100 W", "Share of devices at 100-1000 W",
                     "Share of devices above 1000 W"]
    assert config["components"]["band3"]["value_template"] == "{{ value_json.frequencies[3].value }}"


def test_topic_and_object_id_fit_home_assistants_pattern():
    topic = discovery_topic("fusion 1/main")
    assert topic == "homeassistant/device/rase_fusion_1_main/config"
    m = TOPIC_MATCHER.fullmatch(topic.removeprefix("homeassistant/"))
    assert m and m["component"] == "device" and m["object_id"] == object_id("fusion 1/main")


def test_announcer_sends_once_per_connection_and_again_when_sensors_change():
    ann = Announcer("fusion1", sw_version="0")
    agg = json.dumps(br_aggregate())
    first = ann.due(agg, 1, bands=[], expire_after=32)
    assert first is not None and first[0] == "homeassistant/device/rase_fusion1/config"
    assert ann.due(agg, 1, bands=[], expire_after=32) == first      # not confirmed sent yet: again
    ann.sent(1, first[1])
    assert ann.due(agg, 1, bands=[], expire_after=32) is None
    assert ann.due(agg, 2, bands=[], expire_after=32) == first      # a new connection: announce again
    ann.sent(2, first[1])
    fewer = dict(br_aggregate(), windowed={})
    changed = ann.due(json.dumps(fewer), 2, bands=[], expire_after=32)
    assert changed is not None and "mean_w8" not in json.loads(changed[1])["components"]
    assert Announcer("x", enabled=False).due(agg, 1, bands=[], expire_after=32) is None


def test_latest_expires_after_a_few_periods():
    assert expiry_s(8.0, 4) == 32
    assert expiry_s(0.1, 4) == 1
    props = aggregate_properties(expiry=32)
    assert props == {"expiry_s": 32, "content_type": "application/json", "user": [("rase-schema", "1")]}


@pytest.mark.parametrize("bad", [{"origin": {}}, {"device": {"name": "x"}}, {"components": {"m": {}}}])
def test_the_checker_catches_what_home_assistant_refuses(bad):
    config = discovery_config("f", br_aggregate(), bands=[], expire_after=10, sw_version="0")
    for key, value in bad.items():
        config[key] = value
    with pytest.raises((AssertionError, KeyError)):
        check_device_discovery(config)
