"""TLS with a CA from `rase certs`: Mosquitto's TLS listener (tests/tls.py)
verified by a CPython client, and refused with another CA."""

import threading

import paho.mqtt.client as mqtt
import pytest

from rase_common.mqtt import BrokerConfig, paho_client
from tests.brokers import Mosquitto
from tests.tls import make_test_pki, tls_listener

pytestmark = pytest.mark.integration


def _connects(port, ca_file, host="localhost"):
    """True when a paho client with CERT_REQUIRED and ca_file gets a CONNACK."""
    c = paho_client(BrokerConfig(host=host, port=port, tls=True, ca_file=ca_file), "tls-probe")
    ok = threading.Event()
    c.on_connect = lambda cl, u, f, rc, p: ok.set() if not rc.is_failure else None
    try:
        c.connect(host, port, keepalive=10)
    except OSError:
        return False      # the handshake failed in connect()
    c.loop_start()
    try:
        return ok.wait(5)
    finally:
        c.disconnect()
        c.loop_stop()


def test_tls_listener_from_rase_certs_verifies_with_its_ca_and_not_another(tmp_path):
    pki, conf, port = tls_listener(tmp_path / "pki")
    broker = Mosquitto(tmp_path / "mq", extra_conf=conf).start()
    try:
        assert _connects(port, pki.ca_cert)
        assert _connects(port, pki.ca_cert, host="127.0.0.1")
        other = make_test_pki(tmp_path / "other")
        assert not _connects(port, other.ca_cert)
    finally:
        broker.stop()
