"""`rase certs`: a development CA whose server certificate real TLS clients accept."""

import ipaddress
import socket
import ssl
import stat
import threading

import pytest
from cryptography import x509

from rase.cli import main
from rase_common.certs import CertsError, make_pki


def _handshake(pki, ca_file, server_hostname):
    """A real TLS handshake over loopback: CPython's ssl server with the
    PKI's server certificate, a client that trusts ca_file."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(pki.server_cert, pki.server_key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        conn, _ = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError):
            pass  # the client refused us

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    client_ctx = ssl.create_default_context(cafile=str(ca_file))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with client_ctx.wrap_socket(raw, server_hostname=server_hostname) as tls:
                return tls.recv(2)
    finally:
        t.join(10)
        listener.close()


def test_server_certificate_is_accepted_for_its_hosts_only(tmp_path):
    pki = make_pki(tmp_path, ["localhost", "127.0.0.1"])
    assert _handshake(pki, pki.ca_cert, "localhost") == b"ok"
    assert _handshake(pki, pki.ca_cert, "127.0.0.1") == b"ok"
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        _handshake(pki, pki.ca_cert, "broker.example")


def test_another_ca_is_refused(tmp_path):
    pki = make_pki(tmp_path / "a", ["localhost"])
    other = make_pki(tmp_path / "b", ["localhost"])
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        _handshake(pki, other.ca_cert, "localhost")


def test_the_ca_is_reused_and_keys_are_private(tmp_path):
    first = make_pki(tmp_path, ["localhost"])
    ca_pem = first.ca_cert.read_bytes()
    again = make_pki(tmp_path, ["10.0.0.5"], clients=["plug-1"])
    assert again.ca_cert.read_bytes() == ca_pem
    # The new server certificate is signed by the same CA and names the new host.
    cert = x509.load_pem_x509_certificate(again.server_cert.read_bytes())
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.5")]
    client = x509.load_pem_x509_certificate(again.clients["plug-1"][0].read_bytes())
    client.verify_directly_issued_by(ca)
    for key in (again.ca_key, again.server_key, again.clients["plug-1"][1]):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600


@pytest.mark.parametrize("hosts,clients,match", [
    ([], [], "at least one --host"),
    (["mqtt://broker"], [], "host name or an IP address"),
    (["localhost"], ["../evil"], "plain file name"),
])
def test_bad_input_is_one_clear_error(tmp_path, hosts, clients, match):
    with pytest.raises(CertsError, match=match):
        make_pki(tmp_path, hosts, clients=clients)


def test_a_half_ca_is_refused(tmp_path):
    make_pki(tmp_path, ["localhost"])
    (tmp_path / "ca.key").unlink()
    with pytest.raises(CertsError, match="only one of ca.crt and ca.key"):
        make_pki(tmp_path, ["localhost"])


def test_cli_writes_the_pki_and_says_where(tmp_path, capsys):
    assert main(["certs", "--out", str(tmp_path), "--host", "localhost", "--client", "b1"]) == 0
    out = capsys.readouterr().out
    assert "rase flash --ca" in out and (tmp_path / "b1.crt").is_file()
    assert main(["certs", "--out", str(tmp_path), "--host", "a b"]) == 1
    assert capsys.readouterr().err.startswith("rase certs: --host must be")
