"""Aggregates as Home Assistant sees them: MQTT device discovery, and the
MQTT 5 properties of the published aggregates. Pure builders; the fusion
center's publisher sends what `Announcer.due` returns.

Home Assistant's device-based discovery: one retained JSON config on
`homeassistant/device/<object_id>/config` describes a device and all its
entities. Required by Home Assistant's schema (its MQTT integration's
DEVICE_DISCOVERY_SCHEMA, checked in tests/unit/fusion_center/announce/test_home_assistant.py):
`device` with at least one identifier, `origin` with a name, and `components`,
each with a `platform`; every sensor also needs a `state_topic` (shared here)
and a `unique_id`. An empty retained payload on the same topic removes the
device. Here:

- one sensor per estimate the aggregates carry (mean first: the one to use;
  bs, se, mle; count and the share on for on/off sensors; a share per band
  for load bands), and the windowed mean per w; the value is the estimate,
  its 95% interval bounds, n, t and what it estimates are attributes;
- availability from the fusion center's status topic: "online" when it
  connects, "offline" as its last will (and when it stops);
- expire_after: a sensor goes unavailable when no aggregate came for a few
  periods, as the retained `latest` itself expires (MQTT 5 message expiry).
"""

from __future__ import annotations

import json
import math
import re

from rase_device.mechanisms import MEAN_MECHANISMS
from rase_common.protocol import topics

DISCOVERY_PREFIX = "homeassistant"
SCHEMA_VERSION = "1"                   # Aggregate.v, as the user property "rase-schema"
CONTENT_TYPE = "application/json"
POWER_KINDS = MEAN_MECHANISMS   # mechanisms whose estimates are watts

LABELS = {"mean": "Mean power (unbiased, use this)", "bs": "Mean power, bootstrap",
          "se": "Paper's sample mean (biased when clamped)", "mle": "Paper's weighted median",
          "count": "Devices on"}


def object_id(fusion_name: str) -> str:
    """Home Assistant's discovery topic allows [a-zA-Z0-9_-] in an object id."""
    return "rase_" + re.sub(r"[^a-zA-Z0-9_-]", "_", fusion_name)


def discovery_topic(fusion_name: str, prefix: str = DISCOVERY_PREFIX) -> str:
    return f"{prefix}/device/{object_id(fusion_name)}/config"


def expiry_s(period_s: float, periods: int) -> int:
    """Seconds after which the retained `latest` (and a sensor) counts as stale."""
    return max(1, math.ceil(periods * period_s))


def _attributes(path: str) -> str:
    """Jinja for the JSON attributes of the estimate at `path` (a Jinja expression)."""
    return ("{{ {'ci_low': %(p)s.ci[0], 'ci_high': %(p)s.ci[1], 'n': %(p)s.n, 't': value_json.t, "
            "'revision': value_json.revision, 'level': value_json.level, 'complete': value_json.complete} "
            "| tojson }}" % {"p": path})


def _sensor(oid: str, key: str, name: str, path: str, unit: str | None, expire_after: int,
            attributes: str | None = None, power: bool = False) -> dict:
    s = {"platform": "sensor", "unique_id": f"{oid}_{key}", "name": name,
         "value_template": "{{ %s.value }}" % path,
         "json_attributes_topic": topics.AGGREGATE_LATEST_TOPIC,
         "json_attributes_template": attributes or _attributes(path),
         "state_class": "measurement", "expire_after": expire_after}
    if unit is not None:
        s["unit_of_measurement"] = unit
    if power:
        s["device_class"] = "power"
        s["suggested_display_precision"] = 1
    return s


def components(oid: str, aggregate: dict, *, bands: list[float], expire_after: int) -> dict[str, dict]:
    """One sensor per estimate the aggregate carries, and the windowed mean per w."""
    kind = aggregate.get("mechanism", "br")
    power = kind in POWER_KINDS
    out: dict[str, dict] = {}
    for key in sorted(aggregate["estimates"], key=lambda k: (k != "mean", k)):
        unit = "W" if power else ("devices" if key == "count" else None)
        name = LABELS.get(key, key) if power or key == "count" else "Share on"
        out[key] = _sensor(oid, key, name, f"value_json.estimates.{key}", unit, expire_after, power=power)
    if "mean" in aggregate["estimates"]:
        for w in sorted(aggregate.get("windowed", {}), key=int):
            path = f"value_json.windowed['{w}'].mean"
            out[f"mean_w{w}"] = _sensor(
                oid, f"mean_w{w}", f"{'Mean power' if power else 'Share on'}, last {w} timestamps", path,
                "W" if power else None, expire_after, power=power,
                attributes="{{ {'ci_low': (%(p)s.ci or [none, none])[0], 'ci_high': (%(p)s.ci or [none, none])[1], "
                           "'present': %(p)s.present, 'w': %(p)s.w, 't': value_json.t} | tojson }}" % {"p": path})
    edges = [0.0] + [float(b) for b in bands]
    for j, _ in enumerate(aggregate.get("frequencies", [])):
        span = f"at {edges[j]:g}-{edges[j + 1]:g} W" if j + 1 < len(edges) else f"above {edges[-1]:g} W"
        out[f"band{j}"] = _sensor(oid, f"band{j}", f"Share of devices {span}", f"value_json.frequencies[{j}]",
                                  None, expire_after)
    return out


def discovery_config(fusion_name: str, aggregate: dict, *, bands: list[float], expire_after: int,
                     sw_version: str) -> dict:
    """The retained device discovery config for the aggregates of this fusion center."""
    oid = object_id(fusion_name)
    return {
        "device": {"identifiers": [oid], "name": f"RASE private aggregates ({fusion_name})",
                   "manufacturer": "RASE", "model": "fusion center", "sw_version": sw_version},
        "origin": {"name": "RASE", "sw_version": sw_version},
        "state_topic": topics.AGGREGATE_LATEST_TOPIC,
        "availability_topic": topics.fusion_status_topic(fusion_name),
        "payload_available": "online",
        "payload_not_available": "offline",
        "qos": 1,
        "components": components(oid, aggregate, bands=bands, expire_after=expire_after),
    }


def aggregate_properties(*, expiry: int | None) -> dict:
    """The MQTT 5 PUBLISH properties of an aggregate, as keyword arguments of
    rase_common.mqtt.publish_properties: content type, the schema version as
    a user property, and (for the retained `latest`) a message expiry."""
    return {"expiry_s": expiry, "content_type": CONTENT_TYPE, "user": [("rase-schema", SCHEMA_VERSION)]}


class Announcer:
    """What Home Assistant needs besides the aggregates: the discovery config,
    published (retained) once per connection and again whenever the set of
    sensors changes (the first aggregate, a change of mechanism or windows)."""

    def __init__(self, fusion_name: str, *, prefix: str = DISCOVERY_PREFIX, enabled: bool = True,
                 sw_version: str = "0"):
        self.fusion_name = fusion_name
        self.topic = discovery_topic(fusion_name, prefix)
        self.enabled = enabled
        self.sw_version = sw_version
        self._sent: tuple[int, str] | None = None     # (connection, config) last published
        self._built: tuple[tuple, str] | None = None  # (what the sensors depend on, config)

    def due(self, aggregate_json: str, connection: int, *, bands: list[float], expire_after: int
            ) -> tuple[str, str] | None:
        """(topic, retained payload) to publish beside this aggregate, or None."""
        if not self.enabled:
            return None
        agg = json.loads(aggregate_json)
        shape = (agg.get("mechanism"), tuple(sorted(agg["estimates"])), tuple(sorted(agg.get("windowed", {}))),
                 len(agg.get("frequencies", [])), tuple(bands), expire_after)
        if self._built is None or self._built[0] != shape:
            config = json.dumps(discovery_config(self.fusion_name, agg, bands=bands, expire_after=expire_after,
                                                 sw_version=self.sw_version), separators=(",", ":"))
            self._built = (shape, config)
        config = self._built[1]
        if self._sent == (connection, config):
            return None
        return self.topic, config

    def sent(self, connection: int, config: str) -> None:
        self._sent = (connection, config)
