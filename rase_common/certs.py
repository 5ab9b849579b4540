"""A development PKI for a RASE deployment: `rase certs`.

One CA, a server certificate for the broker (its host names and IP
addresses in subjectAltName, as TLS clients check them) and optional client
certificates. The CA certificate is what boards get with `rase flash --ca`
and CPython services with `[broker] ca_file`; Mosquitto gets the server's
certificate and key.

A CA already in the folder is reused, so certificates can be added later
without re-flashing every board. Keys are ECDSA P-256 (every mbedTLS that
MicroPython builds verifies them) and written readable by the owner only.
This is for development and small deployments; a production CA keeps its
key offline.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_NAME = "RASE development CA"
DEFAULT_DAYS = 825            # the longest validity Apple and browsers accept for a leaf
CA_DAYS = 3650


class CertsError(ValueError):
    """The PKI cannot be made as asked; the message says why."""


@dataclass(frozen=True)
class Pki:
    """Paths of what `make_pki` wrote."""
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    clients: dict[str, tuple[Path, Path]] = field(default_factory=dict)   # name -> (cert, key)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    os.replace(tmp, path)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    os.replace(tmp, path)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "RASE"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: x509.Name, issuer: x509.Name, public_key, days: int) -> x509.CertificateBuilder:  # noqa: ANN001
    now = dt.datetime.now(dt.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))      # a board's clock may lag a little
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False))


def make_ca(common_name: str = CA_NAME, days: int = CA_DAYS) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _new_key()
    cert = (_builder(_name(common_name), _name(common_name), key.public_key(), days)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _san(hosts: list[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            if not h or any(c in h for c in " /:@"):
                raise CertsError(f"--host must be a host name or an IP address, got {h!r}") from None
            names.append(x509.DNSName(h))
    return x509.SubjectAlternativeName(names)


def issue(ca_key, ca_cert: x509.Certificate, common_name: str, *, hosts: list[str] | None = None,  # noqa: ANN001
          client: bool = False, days: int = DEFAULT_DAYS) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A leaf signed by the CA: a server certificate for `hosts`, or a
    client certificate (common name = the MQTT user) when client=True."""
    if not client and not hosts:
        raise CertsError("a server certificate needs at least one --host (the broker's name or address)")
    key = _new_key()
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    b = (_builder(_name(common_name), ca_cert.subject, key.public_key(), days)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
         .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
    if hosts:
        b = b.add_extension(_san(hosts), critical=False)
    return key, b.sign(ca_key, hashes.SHA256())


def load_ca(out_dir: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate] | None:
    """The CA already in out_dir, or None when there is none."""
    cert_path, key_path = Path(out_dir) / "ca.crt", Path(out_dir) / "ca.key"
    if not cert_path.exists() and not key_path.exists():
        return None
    if not (cert_path.is_file() and key_path.is_file()):
        raise CertsError(f"{out_dir} has only one of ca.crt and ca.key; move it away or add the other")
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError) as err:
        raise CertsError(f"cannot read the CA in {out_dir}: {err}") from None
    if _spki(key.public_key()) != _spki(cert.public_key()):
        raise CertsError(f"{key_path} is not the key of {cert_path}")
    return key, cert  # type: ignore[return-value]


def make_pki(out_dir: Path, hosts: list[str], *, clients: list[str] = (), days: int = DEFAULT_DAYS,  # type: ignore[assignment]
             server_name: str = "server") -> Pki:
    """Write (or reuse) the CA, and a fresh server certificate and client
    certificates, into out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in [server_name, *clients]:
        if not name or any(c in name for c in "/\\ ") or name.startswith("."):
            raise CertsError(f"a certificate name must be a plain file name, got {name!r}")
    found = load_ca(out)
    ca_key, ca_cert = found if found is not None else make_ca()
    if found is None:
        _write_key(out / "ca.key", ca_key)
        _write_cert(out / "ca.crt", ca_cert)
    written: dict[str, tuple[Path, Path]] = {}
    for name, is_client in [(server_name, False)] + [(c, True) for c in clients]:
        key, cert = issue(ca_key, ca_cert, name, hosts=None if is_client else hosts, client=is_client, days=days)
        cert_path, key_path = out / f"{name}.crt", out / f"{name}.key"
        _write_key(key_path, key)
        _write_cert(cert_path, cert)
        written[name] = (cert_path, key_path)
    server_cert, server_key = written.pop(server_name)
    return Pki(ca_cert=out / "ca.crt", ca_key=out / "ca.key", server_cert=server_cert, server_key=server_key,
               clients=written)


def mosquitto_listener(pki: Pki, port: int, bind: str = "127.0.0.1") -> str:
    """Mosquitto configuration lines for a TLS listener with this PKI."""
    return (f"listener {port} {bind}\n"
            f"cafile {pki.ca_cert}\ncertfile {pki.server_cert}\nkeyfile {pki.server_key}\n")


def _spki(public_key) -> bytes:  # noqa: ANN001 - any of cryptography's public key types
    """A public key as its DER SubjectPublicKeyInfo (what two keys are compared by)."""
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
