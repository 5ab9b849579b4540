"""The fog's SUBACK handler: a broker that refuses part of the subscription
(its ACL) is reported with a log line and a gauge, and the fog counts as
subscribed only while its report filters were granted.

Called directly with SUBACK reason codes: the Mosquitto here (2.0.11) grants
an MQTT 3.1.1 subscription its ACL denies and then delivers nothing, so a
real broker cannot produce the refusal."""

import logging

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from fog_shuffler.config import FogConfig
from fog_shuffler.service import FogService

GRANTED = ReasonCode(PacketTypes.SUBACK, identifier=1)
REFUSED = ReasonCode(PacketTypes.SUBACK, identifier=0x80)


def fog(tmp_path) -> FogService:
    cfg = FogConfig.load(None, name="sub", regions={"r1": {"devices": ["a"]}, "r2": {"devices": ["b"]}},
                         journal_path=tmp_path / "fog.sqlite")
    service = FogService(cfg)
    service.ctx.link = service.make_link()     # not started: its SUBACK handler is called directly
    return service


def refused(service) -> float:
    return service.metrics.registry.get_sample_value("rase_fog_subscriptions_refused")


def test_every_filter_granted(tmp_path):
    s = fog(tmp_path)
    assert [t for t, _q in s.ctx.link.subscriptions] == ["rase/v1/reports/r1/+", "rase/v1/reports/r2/+",
                                              "rase/v1/control/precision"]
    s.ctx.link._on_subscribe(None, None, 1, [GRANTED] * 3, None)
    assert s.subscribed and refused(s) == 0


def test_a_refused_control_filter_is_reported_but_reports_still_count_as_subscribed(tmp_path, caplog):
    s = fog(tmp_path)
    with caplog.at_level(logging.ERROR):
        s.ctx.link._on_subscribe(None, None, 1, [GRANTED, GRANTED, REFUSED], None)
    assert s.subscribed and refused(s) == 1
    assert "refused the subscription to rase/v1/control/precision" in caplog.text


def test_a_refused_report_filter_means_not_subscribed(tmp_path, caplog):
    s = fog(tmp_path)
    with caplog.at_level(logging.ERROR):
        s.ctx.link._on_subscribe(None, None, 1, [GRANTED, REFUSED, GRANTED], None)
    assert not s.subscribed and refused(s) == 1
    assert "rase/v1/reports/r2/+" in caplog.text
    s.ctx.link._on_subscribe(None, None, 2, [GRANTED] * 3, None)     # the ACL fixed, a reconnect subscribes again
    assert s.subscribed and refused(s) == 0
