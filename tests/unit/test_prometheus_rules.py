"""The shipped Prometheus config and alert rules, checked with Debian's
promtool: the config and rules are valid, `promtool test rules` passes,
every alert has a test in which it fires, and the rules read only metrics
the services export."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.metric_names import exported_metric_names

ROOT = Path(__file__).resolve().parents[2]
PROM_DIR = ROOT / "configs/prometheus"
RULES = PROM_DIR / "rules.yml"
RULES_TEST = PROM_DIR / "rules.test.yml"
# Metrics a rule may name before a process exports them (none now: the fog exports rase_fog_devices_quarantined).
PENDING_METRICS: set[str] = set()


def promtool(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("promtool")
    assert exe, "promtool is not installed: run `make test` (it installs Debian's prometheus)"
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=PROM_DIR, timeout=120)


def alerts() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_accepts_the_config_and_its_rules():
    proc = promtool("check", "config", str(ROOT / "configs/prometheus.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 rule files found" in proc.stdout     # prometheus/rules.yml resolved next to the config


def test_promtool_check_rules():
    proc = promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_test_rules():
    proc = promtool("test", "rules", str(RULES_TEST))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_is_tested_firing():
    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    fired = {case["alertname"] for group in tests for case in group.get("alert_rule_test", []) if case.get("exp_alerts")}
    quiet = {case["alertname"] for group in tests for case in group.get("alert_rule_test", [])
             if not case.get("exp_alerts")}
    names = {a["alert"] for a in alerts()}
    assert names - fired == set(), "alerts never tested firing"
    assert names - quiet == set(), "alerts never tested quiet"


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: a["alert"])
def test_rules_read_exported_metrics(alert):
    exported = exported_metric_names() | {"up"} | PENDING_METRICS
    used = set(re.findall(r"\b(rase_[a-z0-9_]+|up)\b(?!\s*\()", alert["expr"]))
    assert used and used <= exported, sorted(used - exported)
    assert alert["labels"]["severity"] in ("warning", "critical")
    assert alert["annotations"]["summary"] and alert["annotations"]["description"]


def test_compose_mounts_the_rules_where_the_config_reads_them():
    from rase_common.broker_metrics import BrokerMetricsConfig

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    prom = yaml.safe_load((ROOT / "configs/prometheus.yml").read_text())
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in compose["services"]["prometheus"]["volumes"])
    assert mounts["./configs/prometheus.yml"] == "/etc/prometheus/prometheus.yml"
    for rule_file in prom["rule_files"]:          # relative to the config file's folder
        assert mounts["./configs/prometheus/" + Path(rule_file).name] == "/etc/prometheus/" + rule_file
    broker_job = next(j for j in prom["scrape_configs"] if j["job_name"] == "rase-broker")
    [target] = broker_job["static_configs"][0]["targets"]
    host, port = target.split(":")
    assert host in compose["services"] and int(port) == BrokerMetricsConfig().metrics_port
    assert compose["services"][host]["command"][0] == "broker-metrics"


def test_compose_broker_metrics_environment_loads(monkeypatch):
    from rase_common.broker_metrics import BrokerMetricsConfig

    svc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["broker-metrics"]
    for key, value in (svc.get("environment") or {}).items():
        monkeypatch.setenv(key, re.sub(r"\$\{[^}]+\}", "secret", str(value)))
    cfg = BrokerMetricsConfig.load(ROOT / svc["command"][svc["command"].index("--config") + 1])
    assert (cfg.broker.host, cfg.broker.username, cfg.metrics_host) == ("mosquitto", "broker-metrics", "0.0.0.0")
