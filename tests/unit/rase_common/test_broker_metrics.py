"""The $SYS bridge's parsing and exposition (tests/integration/test_broker_metrics.py
runs it against a real Mosquitto)."""

import logging
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rase_common.broker_metrics import SYS_METRICS, BrokerMetrics, BrokerMetricsConfig, parse_sys_value
from rase_common.settings import ConfigError


@pytest.mark.parametrize("payload, value", [
    (b"12", 12.0), (b"1.80", 1.8), (b"4 seconds", 4.0), (b" 47872\n", 47872.0), (b"0", 0.0)])
def test_parse_sys_value(payload, value):
    assert parse_sys_value(payload) == value


@pytest.mark.parametrize("payload", [b"", b"seconds", b"mosquitto version 2.0.11", b"\xff\xfe"])
def test_parse_sys_value_refuses_what_is_not_a_number(payload):
    with pytest.raises(ValueError, match="not a number"):
        parse_sys_value(payload)


def exposed(m: BrokerMetrics) -> dict[str, float]:
    text = generate_latest(m.registry).decode()
    return {s.name + ("" if not s.labels else str(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_exposes_the_newest_value_of_each_known_topic():
    m = BrokerMetrics()
    assert m.update("$SYS/broker/messages/received", b"10", now=100.0)
    assert m.update("$SYS/broker/messages/received", b"15", now=101.0)       # the newest wins
    assert m.update("$SYS/broker/clients/connected", b"3", now=102.0)
    assert m.update("$SYS/broker/uptime", b"77 seconds", now=103.0)
    assert m.update("$SYS/broker/version", b"mosquitto version 2.0.11", now=104.0)
    assert not m.update("$SYS/broker/load/bytes/sent/1min", b"2182.42", now=105.0)   # not exported
    m.set_connected(True)
    got = exposed(m)
    assert got["rase_broker_messages_received_total"] == 15.0          # a counter: the broker's own count
    assert got["rase_broker_clients_connected"] == 3.0
    assert got["rase_broker_uptime_seconds"] == 77.0
    assert got["rase_broker_connected"] == 1.0
    assert got["rase_broker_last_sys_message_timestamp_seconds"] == 105.0   # any $SYS message counts as alive
    assert got["rase_broker_info[('version', 'mosquitto version 2.0.11')]"] == 1.0
    assert "rase_broker_heap_bytes" not in got                          # not seen yet: absent, not 0


def test_an_unparsable_value_is_ignored_and_logged_once(caplog):
    m = BrokerMetrics()
    m.update("$SYS/broker/heap/current", b"100")
    with caplog.at_level(logging.WARNING, logger="rase_common.broker_metrics"):
        for _ in range(3):
            assert not m.update("$SYS/broker/heap/current", b"lots")
    assert m.value("heap_bytes") == 100.0
    assert len([r for r in caplog.records if "heap/current" in r.getMessage()]) == 1


def test_before_any_message_it_says_disconnected_and_since_when():
    m = BrokerMetrics()
    got = exposed(m)
    assert got["rase_broker_connected"] == 0.0
    assert got["rase_broker_last_sys_message_timestamp_seconds"] > 0     # the start: goes stale, then alerts
    assert not any(k.startswith("rase_broker_messages") for k in got)


def test_describe_names_every_family():
    names = {f.name for f in BrokerMetrics().describe()}
    assert {f"rase_broker_{m.name}" for m in SYS_METRICS} <= names
    assert {"rase_broker_connected", "rase_broker_last_sys_message_timestamp_seconds", "rase_broker_info"} <= names
    assert len({m.topic for m in SYS_METRICS}) == len(SYS_METRICS)


def test_config_from_environment(monkeypatch):
    example = BrokerMetricsConfig.load(Path(__file__).resolve().parents[3] / "configs/broker-metrics.example.toml")
    assert example.metrics_port == BrokerMetricsConfig().metrics_port == 9103
    monkeypatch.setenv("RASE_BROKER_METRICS_BROKER__PORT", "1884")
    monkeypatch.setenv("RASE_BROKER_METRICS_METRICS_PORT", "9200")
    cfg = BrokerMetricsConfig.load(None)
    assert (cfg.broker.port, cfg.metrics_port) == (1884, 9200)
    monkeypatch.setenv("RASE_BROKER_METRICS_METRICS_PORT", "70000")
    with pytest.raises(ConfigError, match="metrics_port"):
        BrokerMetricsConfig.load(None)
