"""Kafka TLS and SASL through KafkaConfig, wired into the fog's sink and the
fusion center's source, against the real Kafka-protocol broker here (Tansu 0.6).

What Tansu 0.6 can and cannot do, and so what is tested:
- SASL: `tansu broker --authentication` refuses every client that has not
  authenticated; its storage engines here (memory, S3) keep no SCRAM
  credentials, so it also refuses every SCRAM login. Tested: a producer
  without SASL is refused, and the sink's SCRAM-SHA-512 login reaches the
  broker's SASL exchange and is refused as an authentication failure.
  Not tested here: a successful SCRAM login (no broker on this machine keeps
  SCRAM users).
- TLS: Tansu 0.6's CLI puts --cert and --key in one argument group, so it
  refuses both together and serves plaintext with either alone. Tested: the
  sink and the source over TLS to a TLS terminator (Python's ssl, a real
  handshake and certificate check) in front of Tansu, which advertises the
  terminator's address; a client that does not trust the CA is refused.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import subprocess
import threading
from pathlib import Path

import pytest

from rase_common.protocol.window import WindowMessage
from rase_common.errors import TransportError
from rase_common.kafka import KafkaSink, KafkaSource
from tests.integration.test_kafka_path import take
from rase_common.kafka import KafkaConfig
from simulators.brokers import BrokerProcess, free_port, tansu_binary, wait_port

pytestmark = pytest.mark.integration


def make_ca_and_server_cert(directory: Path, name: str = "ca") -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1/localhost signed by it (cryptography)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"test {name}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = directory / f"{name}.crt", directory / f"{name}-server.crt", directory / f"{name}-server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


class TansuProcess(BrokerProcess):
    """Tansu on `port`, advertising `advertised` (the TLS terminator), optionally with --authentication."""

    def __init__(self, workdir: Path, advertised_port: int | None = None, authentication: bool = False):
        self.port = free_port()
        self.advertised_port = advertised_port or self.port
        self.authentication = authentication
        self.log_path = workdir / "tansu.log"
        self.proc = None

    def start(self) -> "TansuProcess":
        cmd = [tansu_binary(), "broker", "--listener-url", f"tcp://127.0.0.1:{self.port}",
               "--advertised-listener-url", f"tcp://127.0.0.1:{self.advertised_port}",
               "--storage-engine", "memory://tansu/"] + (["--authentication"] if self.authentication else [])
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        assert wait_port(self.port, 20, self.proc), self.log_path.read_text()
        return self


class TlsTerminator:
    """TLS on `port` (server certificate from files), plaintext to `upstream`."""

    def __init__(self, port: int, upstream: int, cert: Path, key: Path):
        import ssl

        self.port, self.upstream = port, upstream
        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ctx.load_cert_chain(cert, key)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", self.port, ssl=self.ctx))
        self.ready.set()
        self.loop.run_forever()

    async def _client(self, reader, writer) -> None:  # noqa: ANN001
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.close()
            return

        async def pipe(src, dst):  # noqa: ANN001
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def window(t: int) -> WindowMessage:
    return WindowMessage.uniform("r1", t, [float(i % 7) for i in range(12)])


async def send_and_read(sink_cfg: KafkaConfig, source_cfg: KafkaConfig, ts: list[int]) -> list[int]:
    sink = KafkaSink(sink_cfg)
    try:
        for t in ts:
            await sink.send("r1", window(t).model_dump_json())
    finally:
        await sink.stop()
    source = KafkaSource(source_cfg)
    await source.start()
    try:
        got: list[int] = []
        for _ in range(40):
            got += [WindowMessage.model_validate_json(r.payload).t for r in await take(source, 100, 0.5)]
            if len(got) >= len(ts):
                break
        return got
    finally:
        await source.stop()


def assert_sink_refused(cfg: KafkaConfig) -> None:
    """The fog's sink cannot deliver a window with these settings: a retriable TransportError."""
    async def scenario():
        sink = KafkaSink(cfg)
        try:
            with pytest.raises(TransportError):
                await sink.send("r1", window(1).model_dump_json())
        finally:
            await sink.stop()

    asyncio.run(scenario())


@pytest.fixture
def tls_tansu(tmp_path):
    ca, cert, key = make_ca_and_server_cert(tmp_path)
    proxy_port = free_port()
    tansu = TansuProcess(tmp_path, advertised_port=proxy_port).start()
    proxy = TlsTerminator(proxy_port, tansu.port, cert, key)
    yield f"127.0.0.1:{proxy_port}", ca
    proxy.stop()
    tansu.stop()


def test_windows_travel_over_tls_verified_against_the_deployment_ca(tls_tansu):
    bootstrap, ca = tls_tansu
    tls = {"bootstrap_servers": bootstrap, "security_protocol": "SSL", "ssl_ca_file": ca, "idempotent": False}
    got = asyncio.run(send_and_read(KafkaConfig(**tls), KafkaConfig(**tls, group_id="tls"), [1, 2, 3]))
    assert sorted(got) == [1, 2, 3]


def test_a_broker_certificate_from_another_ca_is_refused(tls_tansu, tmp_path):
    bootstrap, _ = tls_tansu
    other_ca, _, _ = make_ca_and_server_cert(tmp_path, "other")
    assert_sink_refused(KafkaConfig(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_ca_file=other_ca,
                                    idempotent=False, request_timeout_s=3))


@pytest.fixture
def auth_tansu(tmp_path):
    tansu = TansuProcess(tmp_path, authentication=True).start()
    yield tansu
    tansu.stop()


def test_an_unauthenticated_producer_is_refused(auth_tansu):
    assert_sink_refused(KafkaConfig(bootstrap_servers=f"127.0.0.1:{auth_tansu.port}", idempotent=False,
                                    request_timeout_s=3))
    assert "NotAuthenticated" in auth_tansu.log_path.read_text()


def test_the_sinks_scram_login_runs_the_whole_exchange_and_is_refused(auth_tansu, tmp_path, monkeypatch):
    """The password comes from its file; aiokafka runs SCRAM-SHA-512 with it
    through both round trips. Tansu keeps no SCRAM users here, so its final
    SCRAM message is an error (`e=...`, RFC 5802) instead of its signature;
    the sink reports the broker unreachable (retriable) and nothing is sent."""
    from aiokafka.conn import ScramAuthenticator

    server_final: list[str] = []
    original = ScramAuthenticator.process_server_final_message

    def observe(self, message):  # noqa: ANN001
        server_final.append(message)
        return original(self, message)

    monkeypatch.setattr(ScramAuthenticator, "process_server_final_message", observe)
    secret = tmp_path / "kafka-password"
    secret.write_text("s3cret\n")
    assert_sink_refused(KafkaConfig(bootstrap_servers=f"127.0.0.1:{auth_tansu.port}", idempotent=False,
                                    request_timeout_s=3, security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism="SCRAM-SHA-512", sasl_username="fog-r1",
                                    sasl_password_file=secret))
    assert server_final and server_final[0].startswith("e="), server_final
