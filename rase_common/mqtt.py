"""Broker settings and paho client construction shared by every service."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from urllib.parse import urlparse

import paho.mqtt.client as mqtt
from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)


class BrokerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    host: str = "127.0.0.1"
    port: int = Field(1883, ge=1, le=65535)
    username: str | None = None
    password: str | None = None
    tls: bool = False
    ca_file: Path | None = None
    keepalive_s: int = Field(60, ge=5)

    @classmethod
    def from_url(cls, url: str) -> "BrokerConfig":
        """mqtt://[user:pass@]host[:port] or mqtts://... (TLS)."""
        u = urlparse(url)
        if u.scheme not in ("mqtt", "mqtts", "tcp") or not u.hostname:
            raise ValueError(f"broker URL must look like mqtt://host:port, got {url!r}")
        return cls(host=u.hostname, port=u.port or (8883 if u.scheme == "mqtts" else 1883),
                   username=u.username, password=u.password, tls=u.scheme == "mqtts")


def connect_in_background(client: mqtt.Client, broker: BrokerConfig) -> None:
    """Start paho's network thread; it connects, and reconnects with backoff.
    Each failed attempt is logged, so an unreachable broker is visible."""
    if client.on_connect_fail is None:
        client.on_connect_fail = lambda c, u: log.warning(
            "cannot reach MQTT broker %s:%d; retrying with backoff", broker.host, broker.port)
    client.connect_async(broker.host, broker.port, keepalive=broker.keepalive_s)
    client.loop_start()


def paho_client(broker: BrokerConfig, client_id: str, *, clean_session: bool = True,
                manual_ack: bool = False) -> mqtt.Client:
    """An MQTT 3.1.1 paho client with credentials, TLS and reconnect backoff set."""
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311,
                    clean_session=clean_session, manual_ack=manual_ack)
    if broker.username:
        c.username_pw_set(broker.username, broker.password)
    if broker.tls:
        c.tls_set(ca_certs=str(broker.ca_file) if broker.ca_file else None, cert_reqs=ssl.CERT_REQUIRED)
    c.reconnect_delay_set(min_delay=1, max_delay=30)
    return c
