"""docker-compose.yml cannot be run here (no Docker engine); keep it valid:
`docker-compose config` accepts it, every file it mounts exists and parses,
the environment it gives each service loads as that service's config, and
the Grafana dashboard queries only metrics the services export."""

import json
import os
import re
import shutil
import subprocess
import sys
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


def test_docker_compose_accepts_the_file_with_its_secrets(tmp_path):
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is not installed: run `make test` (it installs Debian's docker-compose)"
    proc = subprocess.run([exe, "-f", str(ROOT / "docker-compose.yml"), "config"], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin"}, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    resolved = yaml.safe_load(proc.stdout)
    # Every secret a service takes is defined, as a file under ./secrets (never in the image, never in git).
    for name, svc in resolved["services"].items():
        for secret in svc.get("secrets", []):
            assert secret["source"] in resolved["secrets"], (name, secret)
    for spec in resolved["secrets"].values():
        assert Path(spec["file"]).is_relative_to(ROOT / "secrets"), spec
    assert "/secrets/" in (ROOT / ".gitignore").read_text() and "secrets/" in (ROOT / ".dockerignore").read_text()


def test_no_password_in_the_environment_or_the_configs(compose):
    for name, svc in compose["services"].items():
        for key, value in (svc.get("environment") or {}).items():
            assert "PASSWORD" not in key or key.endswith("__FILE"), (name, key)
    for f in sorted((ROOT / "configs").rglob("*.toml")):
        assert not re.search(r"^\s*(sasl_)?password\s*=", f.read_text(), re.M), f
    tracked = subprocess.run(["git", "ls-files", "configs"], capture_output=True, text=True, cwd=ROOT).stdout
    assert not re.search(r"passwd$|\.key$|\.pem$", tracked, re.M), tracked


def test_grafana_admin_password_is_a_secret_and_there_is_no_anonymous_access(compose):
    env = compose["services"]["grafana"]["environment"]
    assert env["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/secrets/grafana_admin_password"
    assert "grafana_admin_password" in compose["services"]["grafana"]["secrets"]
    assert env.get("GF_AUTH_ANONYMOUS_ENABLED", "false") == "false"


def test_images_are_pinned_to_versions():
    pinned = re.compile(r":v?\d+\.\d+\.\d+[\w.-]*$|@sha256:[0-9a-f]{64}$")
    images = [svc["image"] for svc in yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"].values()]
    images += re.findall(r"^FROM\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    for image in images:
        assert pinned.search(image), image


def test_every_service_has_a_healthcheck_and_starts_after_what_it_needs(compose):
    services = compose["services"]
    for name, svc in services.items():
        assert svc.get("healthcheck", {}).get("test"), name
    for name in SERVICE_MODELS:
        deps = services[name]["depends_on"]
        assert deps == {"mosquitto": {"condition": "service_healthy"}, "kafka": {"condition": "service_healthy"}}
    assert services["grafana"]["depends_on"] == {"prometheus": {"condition": "service_healthy"}}


def test_kafka_keeps_its_data_on_the_volume(compose):
    kafka = compose["services"]["kafka"]
    props = (ROOT / "configs/compose/kafka.properties").read_text()
    log_dirs = re.search(r"^log\.dirs=(\S+)$", props, re.M).group(1)
    assert f"kafka-data:{log_dirs}" in kafka["volumes"]
    assert "./configs/compose/kafka.properties:/etc/rase/kafka.properties:ro" in kafka["volumes"]
    # Clients only over TLS with SCRAM; the plaintext listeners are the container's loopback.
    listeners = dict(x.split("://") for x in re.search(r"^listeners=(\S+)$", props, re.M).group(1).split(","))
    protocols = dict(x.split(":") for x in re.search(r"^listener\.security\.protocol\.map=(\S+)$", props,
                                                      re.M).group(1).split(","))
    for name, address in listeners.items():
        assert protocols[name] == "SASL_SSL" or address.startswith("localhost:"), (name, address)
    # Every Kafka user formatted with a SCRAM credential is a service's sasl_username, with its password secret.
    users = kafka["environment"]["RASE_KAFKA_USERS"].split()
    names = {SERVICE_MODELS[s].load(ROOT / compose["services"][s]["command"][-1]).kafka.sasl_username
             for s in SERVICE_MODELS}
    assert set(users) == names
    assert {f"password-{u}" for u in users} <= set(kafka["secrets"])


def mosquitto_conf() -> list[list[str]]:
    lines = (ROOT / "configs/mosquitto/mosquitto.conf").read_text().splitlines()
    return [ln.split() for ln in lines if ln.strip() and not ln.startswith("#")]


def test_mosquitto_is_tls_for_clients_plaintext_only_on_loopback_and_binds_client_ids():
    listeners: list[dict] = []
    for words in mosquitto_conf():
        if words[0] == "listener":
            listeners.append({"address": words[2] if len(words) > 2 else "", "opts": {}})
        elif listeners and words[0] in ("certfile", "keyfile", "use_username_as_clientid"):
            listeners[-1]["opts"][words[0]] = words[1]
    assert listeners
    for lst in listeners:
        assert lst["opts"].get("use_username_as_clientid") == "true", lst
        assert lst["address"] == "127.0.0.1" or {"certfile", "keyfile"} <= set(lst["opts"]), lst
    assert ["allow_anonymous", "false"] in mosquitto_conf()


def test_message_size_limit_fits_the_largest_window_and_no_more():
    """The largest legitimate message: a window of n = 1,000,000 reports (the
    largest n the shuffler and estimators are benchmarked at), every value
    the longest JSON float the schema admits, one group per report, the
    longest region and guarantee; serialized as the fog does."""
    from rase_common.protocol.window import MAX_T, LevelBatch, WindowCounts, WindowMessage

    n = 1_000_000
    batch = LevelBatch(eps=1.0, kind="br", values=[-1.2345678901234567e-300] * n, mechanism="mallows",
                       theta=0.05555555555555555, delta_k=n, omega=n, k=n, groups=[(i, i) for i in range(n)],
                       guarantee={f"k{i:02d}" + "x" * 37: "y" * 200 for i in range(12)})
    big = 10 ** 7
    window = WindowMessage(region="r" * 64, t=MAX_T - 1, n=n, alpha=1e6 - 1e-9, batches=[batch],
                           counts=WindowCounts(duplicates=big, eps_level_dropped=big, late=big, rejected=big,
                                               suppressed_windows=big))
    largest = len(window.model_dump_json().encode())
    conf = {w[0]: w[1] for w in mosquitto_conf() if len(w) == 2}
    limit, packet = int(conf["message_size_limit"]), int(conf["max_packet_size"])
    assert largest <= limit <= 1.05 * largest, (largest, limit)
    # The packet adds the topic (rase/v1/windows/ + a 64-character region) and a few header bytes.
    assert limit + 2 + len("rase/v1/windows/") + 64 + 5 <= packet <= limit + 128 * 1024
    assert packet < 100 * 1024 * 1024


def test_the_compose_acl_is_the_generated_one():
    out = subprocess.run([sys.executable, "-m", "rase.cli", "acl",
                          "--fog-config", "configs/compose/fog-r1.toml", "--fog-config", "configs/compose/fog-r2.toml",
                          "--fusion-config", "configs/compose/fusion.toml", "--subscriber", "dashboard"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (ROOT / "configs/compose/mosquitto.acl").read_text()


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
def test_service_config_loads_and_uses_only_the_secrets_it_is_given(compose, service, monkeypatch):
    svc = compose["services"][service]
    for k, v in svc["environment"].items():
        monkeypatch.setenv(k, str(v))
    cfg = SERVICE_MODELS[service].load(ROOT / svc["command"][-1])
    assert cfg.metrics_host == "0.0.0.0"
    assert (cfg.broker.host, cfg.broker.port, cfg.broker.tls) == ("mosquitto", 8883, True)
    assert cfg.kafka.bootstrap_servers == "kafka:9092" and cfg.kafka.security_protocol == "SASL_SSL"
    assert (cfg.sink if service.startswith("fog") else cfg.source) == "kafka"
    # Its MQTT and Kafka user is its bound client id (fog-<name> / fusion-<name>).
    prefix = "fog" if service.startswith("fog") else "fusion"
    assert cfg.broker.username == cfg.kafka.sasl_username == f"{prefix}-{cfg.name}"
    mounted = {f"/run/secrets/{s if isinstance(s, str) else s.get('target', s['source'])}" for s in svc["secrets"]}
    used = {str(p) for p in (cfg.broker.ca_file, cfg.broker.password_file, cfg.kafka.ssl_ca_file,
                             cfg.kafka.sasl_password_file)}
    assert used <= mounted, used - mounted


def test_compose_configs_serve_metrics_on_loopback_and_only_compose_opens_them(compose, monkeypatch):
    """Run outside Docker (docs/deployment.md, "Without Docker"), no compose
    config serves its metrics on every interface: each service's file keeps
    the loopback default, and docker-compose.yml's environment opens 0.0.0.0
    inside its network."""
    from rase_common.broker_metrics import BrokerMetricsConfig

    models = {**SERVICE_MODELS, "broker-metrics": BrokerMetricsConfig}
    for service, model in sorted(models.items()):
        svc = compose["services"][service]
        path = ROOT / svc["command"][-1]
        assert not re.search(r'(?m)^\s*metrics_host\s*=\s*"0\.0\.0\.0"', path.read_text()), path
        for k in [k for k in os.environ if k.startswith("RASE_")]:
            monkeypatch.delenv(k)
        assert model.load(path).metrics_host == "127.0.0.1", service
        prefix = {"broker-metrics": "RASE_BROKER_METRICS_"}.get(service, "RASE_FOG_" if service.startswith("fog")
                                                                else "RASE_FUSION_")
        assert svc["environment"][f"{prefix}METRICS_HOST"] == "0.0.0.0", service


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


def test_the_image_entry_point_receives_docker_stops_signal():
    """Exec form (no shell between docker and rase, which would swallow SIGTERM), SIGTERM as the stop signal."""
    text = (ROOT / "Dockerfile").read_text()
    entry = re.findall(r"^ENTRYPOINT\s+(.+)$", text, re.M)
    assert entry and json.loads(entry[-1])[0] == "rase"
    assert re.search(r"^STOPSIGNAL\s+SIGTERM$", text, re.M)
