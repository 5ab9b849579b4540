"""TLS with a CA from `rase certs`: Mosquitto's TLS listener (tests/tls.py)
verified by a CPython client, and refused with another CA."""

import json
import threading

import pytest

from rase_common.mqtt import BrokerConfig, paho_client
from simulators.brokers import Mosquitto
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


# umqtt.simple >= 1.4 takes an SSLContext as ssl= and calls
# ssl.wrap_socket(sock, server_hostname=server) right after the TCP connect.
# Those releases are not on PyPI (only MicroPython's own index has them), so
# this stand-in gives 1.3.4 that API: its ssl=None default (how the board
# tells the two apart) and the same wrap_socket call, made through the
# `ussl` import that 1.3.4 performs (USSL_STANDIN, beside it in the bundle).
UMQTT_14_API_STANDIN = '''

_MQTTClient134 = MQTTClient


class MQTTClient(_MQTTClient134):
    def __init__(self, client_id, server, port=0, user=None, password=None, keepalive=0, ssl=None):
        _MQTTClient134.__init__(self, client_id, server, port, user, password, keepalive,
                                ssl, {"context": ssl, "server_hostname": server})
'''
USSL_STANDIN = '''# Stand-in: forwards 1.3.4's ussl.wrap_socket to the context, as umqtt >= 1.4 calls it.
def wrap_socket(sock, context=None, server_hostname=None):
    print("ussl stand-in: %s.wrap_socket(server_hostname=%r)" % (type(context).__name__, server_hostname))
    return context.wrap_socket(sock, server_hostname=server_hostname)
'''


def _tls_board(tmp_path, port, ca, umqtt=None):
    from tests.integration.test_board_unix_port import UnixBoard, board_toml

    board = UnixBoard(tmp_path, board_toml(port, host="localhost", tls=True), ca=ca, umqtt=umqtt)
    (board.dir / "standins" / "ussl.py").write_text(USSL_STANDIN)
    return board


@pytest.mark.micropython
@pytest.mark.parametrize("umqtt_api", ["1.3.4 (socket wraps itself)", "1.4+ SSLContext (stand-in)"])
def test_bundle_reaches_the_tls_listener_with_the_ca_and_its_reports_are_aggregated(
        tmp_path, umqtt_api, umqtt_simple_py):
    from tests.integration.test_board_unix_port import pipeline, seqs
    from tests.integration.test_fusion_crash import stored
    from tests.mqtt_helpers import Recorder

    umqtt = None
    if umqtt_api.startswith("1.4"):
        umqtt = tmp_path / "umqtt_14_api_standin.py"
        umqtt.write_text(umqtt_simple_py.read_text() + UMQTT_14_API_STANDIN)
    pki, conf, tls_port = tls_listener(tmp_path / "pki")
    with pipeline(tmp_path, conf) as (broker, db, fog_log):
        rec = Recorder(broker.port, ["rase/v1/reports/#"], client_id="tls-rec")
        board = _tls_board(tmp_path, tls_port, pki.ca_cert, umqtt).start()
        try:
            board.wait_line("rase: link up")
            board.wait_for(lambda: len(seqs(rec)) >= 4 and len(set(stored(db))) >= 2, 30, "aggregates")
            ts = {r["t"] for r in (json.loads(m.payload) for m in rec.on("rase/v1/reports/r1/b1"))}
            aggregated = set(stored(db))
        finally:
            board.stop()
            rec.close()
        log = broker.log()
    assert aggregated & ts, (sorted(aggregated), sorted(ts))
    # b1 came in on the TLS listener and nowhere else.
    assert f"on port {tls_port}." in log and f"on port {broker.port}.\n" in log
    assert not any("link down" in line for line in board.lines())
    # Which API carried the context: 1.4+ calls it through ssl=; 1.3.4 never imports ussl.
    via_context = "ussl stand-in: Tls.wrap_socket(server_hostname='localhost')" in board.lines()
    assert via_context == umqtt_api.startswith("1.4"), board.dump(umqtt_api)


@pytest.mark.micropython
def test_bundle_refuses_a_broker_its_ca_did_not_sign_and_says_why(tmp_path):
    pki, conf, tls_port = tls_listener(tmp_path / "pki")
    other = make_test_pki(tmp_path / "other")
    broker = Mosquitto(tmp_path / "mq", extra_conf=conf).start()
    board = _tls_board(tmp_path, tls_port, other.ca_cert).start()
    try:
        board.wait_for(lambda: int(board.status().get("queued", 0)) >= 3, what="3 readings queued")
        status = board.status()
    finally:
        board.stop()
        broker.stop()
    reason = "The certificate is not correctly signed by the trusted CA"
    assert f"rase: link down: ValueError: {reason}" in board.lines(), board.dump("no reason")
    assert status["link"] == "down" and reason in status.get("error", "") + " ".join(board.lines())
    # The handshake failed before CONNECT: the broker never saw b1 (nor its password).
    assert " as b1 " not in broker.log()


def test_the_documented_tls_listener_binds_the_address_it_names(tmp_path):
    """docs/boards.md's TLS listener, its files replaced by a `rase certs` PKI
    and its address and port by loopback ones: Mosquitto listens there only,
    and a client verifying with the CA connects."""
    import re
    from pathlib import Path

    from simulators.brokers import free_port
    from tests.mqtt_helpers import listening_addresses

    doc = (Path(__file__).resolve().parents[2] / "docs/boards.md").read_text()
    block = doc.split("<!-- tested: the boards' TLS listener -->", 1)[1].split("```", 2)[1]
    listener = re.search(r"^listener 8883 (\S+)$", block, re.M)
    assert listener, "the documented listener names no address: it would open every interface"
    pki = make_test_pki(tmp_path / "pki")
    port = free_port()
    conf = (block.replace(f"listener 8883 {listener.group(1)}", f"listener {port} 127.0.0.1")
            .replace("/etc/mosquitto/certs/ca.crt", str(pki.ca_cert))
            .replace("/etc/mosquitto/certs/server.crt", str(pki.server_cert))
            .replace("/etc/mosquitto/certs/server.key", str(pki.server_key)))
    assert "/etc/" not in "".join(line for line in conf.splitlines() if not line.startswith("#"))
    broker = Mosquitto(tmp_path / "mq", extra_conf=conf).start()
    try:
        assert listening_addresses(port) == {"127.0.0.1"}
        assert _connects(port, pki.ca_cert)
    finally:
        broker.stop()
