"""The two-party secure-aggregation services of docker-compose.yml (profile
"secagg"): each party's service gets exactly its keys, its environment loads
as its config, and the two agree on the key id devices pinned."""

import re
from pathlib import Path

import pytest
import yaml

from fog_shuffler.config import FogConfig
from fusion_center.config import FusionConfig

ROOT = Path(__file__).resolve().parents[1].parent


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def load(compose, service, model, monkeypatch):
    svc = compose["services"][service]
    for k, v in svc["environment"].items():
        monkeypatch.setenv(k, re.sub(r"\$\{RASE_SECAGG_KEY_ID:-[^}]+\}", "fc-0123456789ab",
                                     re.sub(r"\$\{[^}]+\?[^}]+\}", "secret", str(v))))
    return svc, model.load(ROOT / svc["command"][-1])


def test_each_party_holds_only_its_keys(compose, monkeypatch):
    fog_svc, fog = load(compose, "fog-secagg", FogConfig, monkeypatch)
    fusion_svc, fusion = load(compose, "fusion-secagg", FusionConfig, monkeypatch)
    assert fog_svc["profiles"] == fusion_svc["profiles"] == ["secagg"]
    keys = lambda svc: sorted(x for x in svc["secrets"] if isinstance(x, str) and x.startswith("secagg"))  # noqa: E731
    assert keys(fog_svc) == ["secagg_verify_key"]                      # no helper key at the fog
    assert keys(fusion_svc) == ["secagg_helper_key", "secagg_verify_key"]
    # They stand in for fog-r1 and the fusion center: those users, those passwords.
    assert (fog.name, fog.broker.username, fusion.name, fusion.broker.username) == ("r1", "fog-r1", "main",
                                                                                    "fusion-main")
    assert str(fog.prio3.verify_key_file) == str(fusion.prio3.verify_key_file) == "/run/secrets/secagg_verify_key"
    assert str(fusion.prio3.private_key_file) == "/run/secrets/secagg_helper_key"
    assert fog.prio3.params.key_id == fusion.prio3.key_id == fusion.precision.prio3.key_id == "fc-0123456789ab"
    assert fog.prio3.params == fusion.precision.prio3 and fog.device_mechanism == "prio3"
    assert fog.sink == fusion.source == "kafka" and not fog.prio3.unsafe_no_noise_for_tests
    assert not fusion.prio3.unsafe_no_noise_for_tests
    secrets = compose["secrets"]
    assert secrets["secagg_helper_key"]["file"].startswith("./secrets/") and "secagg_helper_key" not in str(fog_svc)
