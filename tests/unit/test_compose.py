"""docker-compose.yml cannot be run here (no Docker engine); keep it valid:
its services, the files it mounts, and the environment it gives fog and
fusion must load as their config models."""

import re
from pathlib import Path

import pytest
import yaml

from fog_shuffler.config import FogConfig
from fusion_center.config import FusionConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_services_of_the_spec(compose):
    assert {"mosquitto", "kafka", "fog", "fusion", "prometheus"} <= set(compose["services"])


def test_mounted_files_exist(compose):
    for svc in compose["services"].values():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("./"):
                assert (ROOT / src).exists(), src
    assert (ROOT / "Dockerfile").exists()


@pytest.mark.parametrize("service,model", [("fog", FogConfig), ("fusion", FusionConfig)])
def test_service_environment_loads(compose, service, model, monkeypatch):
    svc = compose["services"][service]
    for k, v in svc["environment"].items():
        monkeypatch.setenv(k, re.sub(r"\$\{[^}]+\}", "secret", str(v)))
    cfg = model.load(ROOT / svc["command"][-1])
    assert cfg.broker.host == "mosquitto" and cfg.metrics_host == "0.0.0.0"
