"""docker-compose.yml cannot be run here (no Docker engine); keep it valid:
`docker-compose config` accepts it, every file it mounts exists and parses,
the environment it gives each service loads as that service's config, and
the Grafana dashboard queries only metrics the services export."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fog_shuffler.config import FogConfig
from fusion_center.config import FusionConfig
from tests.metric_names import exported_metric_names

ROOT = Path(__file__).resolve().parents[2]
SERVICE_MODELS = {"fog-r1": FogConfig, "fog-r2": FogConfig, "fusion": FusionConfig}


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_docker_compose_accepts_the_file():
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is not installed: run `make test` (it installs Debian's docker-compose)"
    env = {"RASE_FOG_PASSWORD": "x", "RASE_FUSION_PASSWORD": "y", "RASE_BROKER_METRICS_PASSWORD": "z",
           "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([exe, "-f", str(ROOT / "docker-compose.yml"), "config", "--quiet"], capture_output=True,
                          text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    # A required secret left unset is refused, not silently empty.
    proc = subprocess.run([exe, "-f", str(ROOT / "docker-compose.yml"), "config", "--quiet"], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin"}, cwd=ROOT)
    assert proc.returncode != 0 and "RASE_FOG_PASSWORD" in proc.stderr


def test_services_of_the_topology(compose):
    assert {"mosquitto", "kafka", "fog-r1", "fog-r2", "fusion", "prometheus", "grafana"} <= set(compose["services"])


def test_mounted_files_exist_and_parse(compose):
    for svc in compose["services"].values():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if not src.startswith("./"):
                continue
            path = ROOT / src
            assert path.exists(), src
            for f in ([path] if path.is_file() else sorted(path.rglob("*"))):
                if f.suffix in (".yml", ".yaml"):
                    assert yaml.safe_load(f.read_text()) is not None, f
                elif f.suffix == ".json":
                    json.loads(f.read_text())
    assert (ROOT / "Dockerfile").exists()


@pytest.mark.parametrize("service", sorted(SERVICE_MODELS))
def test_service_environment_loads(compose, service, monkeypatch):
    svc = compose["services"][service]
    for k, v in svc["environment"].items():
        monkeypatch.setenv(k, re.sub(r"\$\{[^}]+\}", "secret", str(v)))
    cfg = SERVICE_MODELS[service].load(ROOT / svc["command"][-1])
    assert cfg.broker.host == "mosquitto" and cfg.metrics_host == "0.0.0.0"
    assert cfg.kafka.bootstrap_servers == "kafka:9092"
    assert (cfg.sink if service.startswith("fog") else cfg.source) == "kafka"


def test_two_fogs_own_disjoint_regions_that_the_fusion_center_expects(compose):
    fogs = [FogConfig.load(ROOT / compose["services"][s]["command"][-1]) for s in ("fog-r1", "fog-r2")]
    fusion = FusionConfig.load(ROOT / compose["services"]["fusion"]["command"][-1])
    regions = [set(f.regions) for f in fogs]
    assert not regions[0] & regions[1]
    assert regions[0] | regions[1] == set(fusion.regions)
    devices = [set().union(*(rc.all_devices() for rc in f.regions.values())) for f in fogs]
    assert not devices[0] & devices[1]


def test_prometheus_scrapes_every_service(compose):
    prom = yaml.safe_load((ROOT / "configs/prometheus.yml").read_text())
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    for service in SERVICE_MODELS:
        cfg = SERVICE_MODELS[service].load(ROOT / compose["services"][service]["command"][-1])
        assert f"{service}:{cfg.metrics_port}" in targets


def test_dashboard_queries_only_exported_metrics():
    dash = json.loads((ROOT / "configs/grafana/dashboards/rase.json").read_text())
    ds = yaml.safe_load((ROOT / "configs/grafana/provisioning/datasources/prometheus.yml").read_text())
    uid = ds["datasources"][0]["uid"]
    exported = exported_metric_names()
    used = set()
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == uid
        for target in panel["targets"]:
            used.update(re.findall(r"\brase_[a-z_]+", target["expr"]))
    assert used and used <= exported, sorted(used - exported)
