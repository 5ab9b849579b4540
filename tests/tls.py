"""TLS for tests: a development PKI from `rase certs` (rase_common.certs) and
the Mosquitto listener that serves it.

    pki, conf, tls_port = tls_listener(tmp_path / "pki")
    broker = Mosquitto(tmp_path / "mq", extra_conf=conf).start()
    # clients: host "localhost" or "127.0.0.1", port tls_port, CA pki.ca_cert
"""

from __future__ import annotations

from pathlib import Path

from rase_common.certs import Pki, make_pki, mosquitto_listener
from simulators.brokers import free_port

HOSTS = ("localhost", "127.0.0.1")


def make_test_pki(out_dir: Path, hosts: tuple[str, ...] = HOSTS, clients: tuple[str, ...] = ()) -> Pki:
    """A CA and a server certificate for the loopback names (and client certificates)."""
    return make_pki(Path(out_dir), list(hosts), clients=list(clients))


def tls_listener(out_dir: Path, port: int | None = None, hosts: tuple[str, ...] = HOSTS) -> tuple[Pki, str, int]:
    """(pki, the Mosquitto `extra_conf` lines for a TLS listener, its port)."""
    pki = make_test_pki(out_dir, hosts)
    port = port or free_port()
    return pki, mosquitto_listener(pki, port), port
