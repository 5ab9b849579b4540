"""Kafka settings shared by the fog's sink and the fusion center's source.

The topic `rase.windows` carries one window per record, key = region, so the
windows of one region keep their order on one partition.

Security is aiokafka's own: `security_protocol` (PLAINTEXT, SSL, SASL_SSL,
SASL_PLAINTEXT), a CA to verify the broker (and optionally a client
certificate), and SASL with SCRAM-SHA-512 (or -256, or PLAIN) for a user
whose password is given inline or, in a deployment, as a file (a Docker
secret). The password file is read when a client is built, so a restart
picks up a rotated secret.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from rase_common.settings import ConfigError, read_secret

WINDOWS_TOPIC = "rase.windows"


class KafkaConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = WINDOWS_TOPIC
    group_id: str = "rase-fusion"       # the fusion centers' consumer group
    # Idempotent producer (no duplicate on a producer retry). Kafka supports
    # it; Tansu 0.6 does not answer InitProducerId, so switch it off there.
    # The fusion store is idempotent on (region, t) either way.
    idempotent: bool = True
    request_timeout_s: float = Field(10.0, gt=0)
    client_id: str | None = None
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT"] = "PLAINTEXT"
    ssl_ca_file: Path | None = None     # the CA that signed the broker's certificate (None: the system's CAs)
    ssl_cert_file: Path | None = None   # a client certificate, for brokers that require one (mutual TLS)
    ssl_key_file: Path | None = None
    sasl_mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_password_file: Path | None = None   # e.g. /run/secrets/kafka-password (one line)

    @model_validator(mode="after")
    def _security(self) -> "KafkaConfig":
        """Checks what the chosen protocol uses; settings it does not use are
        ignored, so one environment override (RASE_..._KAFKA__SECURITY_PROTOCOL)
        can switch security off for a development broker."""
        if self.security_protocol in ("SSL", "SASL_SSL"):
            if (self.ssl_cert_file is None) != (self.ssl_key_file is None):
                raise ValueError("ssl_cert_file and ssl_key_file go together")
        if self.security_protocol.startswith("SASL_"):
            if not self.sasl_username:
                raise ValueError(f"security_protocol {self.security_protocol} needs sasl_username")
            if (self.sasl_password is None) == (self.sasl_password_file is None):
                raise ValueError("give exactly one of sasl_password and sasl_password_file")
        return self

    def password(self) -> str | None:
        """The SASL password (read from its file now, if it is given as one)."""
        if self.sasl_password_file is not None:
            return read_secret(self.sasl_password_file, "kafka.sasl_password_file")
        return self.sasl_password.get_secret_value() if self.sasl_password is not None else None

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for AIOKafkaProducer and AIOKafkaConsumer:
        bootstrap servers, client id and security. A TLS context always
        verifies the broker's certificate and host name. An unreadable file
        is a ConfigError naming it."""
        opts: dict[str, Any] = {"bootstrap_servers": self.bootstrap_servers, "client_id": self.client_id,
                                "security_protocol": self.security_protocol}
        if self.security_protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            try:
                opts["ssl_context"] = create_ssl_context(cafile=self.ssl_ca_file, certfile=self.ssl_cert_file,
                                                         keyfile=self.ssl_key_file)
            except (OSError, ssl.SSLError) as err:
                raise ConfigError(f"kafka.ssl_*_file ({self.ssl_ca_file}, {self.ssl_cert_file}): {err}") from err
        if self.security_protocol.startswith("SASL_"):
            opts.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.sasl_username,
                        sasl_plain_password=self.password())
        return opts
