"""KafkaConfig's security settings become aiokafka's own options; bad
combinations are one clear error; passwords come from files (secrets)."""

import ssl

import pytest
from pydantic import ValidationError

from rase_common.kafka import KafkaConfig
from rase_common.mqtt import BrokerConfig, paho_client
from rase_common.settings import ConfigError


def test_plaintext_by_default_and_nothing_else():
    assert KafkaConfig(bootstrap_servers="k:9092", client_id="c").client_options() == {
        "bootstrap_servers": "k:9092", "client_id": "c", "security_protocol": "PLAINTEXT"}


def test_sasl_ssl_gives_a_verifying_tls_context_and_scram_credentials(tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    opts = KafkaConfig(security_protocol="SASL_SSL", sasl_username="fog-r1", sasl_password_file=secret).client_options()
    ctx = opts.pop("ssl_context")
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert opts == {"bootstrap_servers": "127.0.0.1:9092", "client_id": None, "security_protocol": "SASL_SSL",
                    "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "fog-r1",
                    "sasl_plain_password": "hunter2"}


def test_settings_the_protocol_does_not_use_are_ignored_so_one_override_turns_security_off():
    cfg = KafkaConfig(security_protocol="PLAINTEXT", sasl_username="u", sasl_password="p", ssl_ca_file="/nonexistent")
    assert "sasl_plain_password" not in cfg.client_options() and "ssl_context" not in cfg.client_options()


@pytest.mark.parametrize("bad, words", [
    ({"security_protocol": "SASL_SSL"}, "needs sasl_username"),
    ({"security_protocol": "SASL_SSL", "sasl_username": "u"}, "exactly one of sasl_password"),
    ({"security_protocol": "SASL_SSL", "sasl_username": "u", "sasl_password": "p", "sasl_password_file": "/f"},
     "exactly one of sasl_password"),
    ({"security_protocol": "SSL", "ssl_cert_file": "/c"}, "go together"),
    ({"security_protocol": "TLS"}, "security_protocol"),
    ({"sasl_mechanism": "GSSAPI"}, "sasl_mechanism"),
])
def test_bad_security_settings_are_one_clear_error(bad, words):
    with pytest.raises(ValidationError, match=words):
        KafkaConfig(**bad)


def test_an_unreadable_secret_or_ca_is_a_config_error_naming_it(tmp_path):
    cfg = KafkaConfig(security_protocol="SASL_PLAINTEXT", sasl_username="u", sasl_password_file=tmp_path / "none")
    with pytest.raises(ConfigError, match="kafka.sasl_password_file"):
        cfg.client_options()
    with pytest.raises(ConfigError, match="ssl"):
        KafkaConfig(security_protocol="SSL", ssl_ca_file=tmp_path / "none.crt").client_options()


def test_the_mqtt_password_can_come_from_a_file(tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    client = paho_client(BrokerConfig(username="fog-r1", password_file=secret), "fog-r1")
    assert client._password == b"s3cret"
    with pytest.raises(ValidationError, match="not both"):
        BrokerConfig(username="u", password="p", password_file=secret)
    with pytest.raises(ConfigError, match="broker.password_file"):
        paho_client(BrokerConfig(username="u", password_file=tmp_path / "none"), "x")
