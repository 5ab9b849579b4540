"""Kafka between the fog and the fusion center: settings, a Sink (the fog's
windows) and a Source (the fusion center's consumer group).

The topic `rase.windows` carries one window per record, key = region, so the
windows of one region keep their order on one partition. Kafka errors become
TransportError (retriable) here; the services' retry loops back off on that.

Security is aiokafka's own: `security_protocol` (PLAINTEXT, SSL, SASL_SSL,
SASL_PLAINTEXT), a CA to verify the broker (and optionally a client
certificate), and SASL with SCRAM-SHA-512 (or -256, or PLAIN) for a user
whose password is given inline or, in a deployment, as a file (a Docker
secret). The password file is read when a client is built, so a restart
picks up a rotated secret.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from rase_common.errors import ConfigError, TransportError
from rase_common.loop import within
from rase_common.settings import read_secret

log = logging.getLogger(__name__)
WINDOWS_TOPIC = "rase.windows"
STOP_TIMEOUT_S = 2.0


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


def quiet_aiokafka() -> None:
    """aiokafka logs a warning or an error per internal retry and connection
    attempt (dozens a second while a broker is down). What fails reaches the
    services as an exception, and they report an outage once when it starts
    and once when it ends (rase_common.errors.Outage), with the error; so
    aiokafka's own lines are silenced."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


class KafkaSink:
    """Produces each message to the topic with its key, acks=all, and returns
    once Kafka has it. The producer starts on first use and again after a
    failure, so a Kafka that is down or restarts is waited for, not fatal."""

    def __init__(self, cfg: KafkaConfig):
        self.cfg = cfg
        self.producer = None
        quiet_aiokafka()

    async def _producer(self):  # noqa: ANN202
        if self.producer is None:
            from aiokafka import AIOKafkaProducer

            try:
                producer = AIOKafkaProducer(**self.cfg.client_options(), acks="all",
                                            enable_idempotence=self.cfg.idempotent,
                                            request_timeout_ms=int(self.cfg.request_timeout_s * 1000))
            except ValueError as err:   # an unreadable password file: retried like an unreachable broker
                raise TransportError(f"Kafka client settings: {err}") from err
            try:
                await producer.start()
            except Exception as err:  # aiokafka raises its own and OSError subclasses
                await _quietly(producer.stop())
                raise TransportError(f"Kafka at {self.cfg.bootstrap_servers} unreachable: {err!r}") from err
            self.producer = producer
        return self.producer

    async def send(self, key: str, payload: str) -> None:
        from aiokafka.errors import KafkaError

        producer = await self._producer()
        try:
            await within(producer.send_and_wait(self.cfg.topic, key=key.encode(), value=payload.encode()),
                                   self.cfg.request_timeout_s * 2)
        except (KafkaError, asyncio.TimeoutError, OSError) as err:
            await self.stop()  # a fresh producer on the next try
            raise TransportError(f"Kafka did not take {key}: {err!r}") from err

    async def stop(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            await _quietly(within(producer.stop(), STOP_TIMEOUT_S))


async def _quietly(coro) -> None:  # noqa: ANN001
    """Close a broken producer or consumer: nothing is pending, errors say nothing new."""
    try:
        await coro
    except Exception as err:  # noqa: BLE001
        log.debug("kafka client stop: %r", err)


@dataclass
class Record:
    """One consumed record: its key as `topic` (the region) and its value."""
    topic: str
    payload: bytes
    ack_offset: Callable[[], None]


class KafkaSource:
    """A member of the fusion centers' consumer group. A background task
    fetches records and calls `wakeup`; ack() marks records done and their
    offsets are committed, in order per partition, on the next take (or at
    stop), so a crash replays records instead of losing them; the store's
    idempotence drops the replayed ones."""

    def __init__(self, cfg: KafkaConfig, wakeup: Callable[[], None] | None = None):
        self.cfg = cfg
        self.wakeup = wakeup or (lambda: None)
        self.consumer = None
        self._done: dict = {}     # TopicPartition -> next offset to commit
        self._fetched: list[Record] = []
        self._fetcher: asyncio.Task | None = None
        self._committer: asyncio.Task | None = None
        self.commit_failures = 0
        quiet_aiokafka()

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(self.cfg.topic, **self.cfg.client_options(),
                                    group_id=self.cfg.group_id, enable_auto_commit=False,
                                    auto_offset_reset="earliest",
                                    request_timeout_ms=int(self.cfg.request_timeout_s * 1000) + 30_000)
        await consumer.start()  # aiokafka retries a missing broker itself
        self.consumer = consumer
        self._fetcher = asyncio.create_task(self._fetch_forever())

    async def _fetch_forever(self) -> None:
        while True:
            if len(self._fetched) >= 10_000:      # the service is behind: let it catch up
                await asyncio.sleep(0.01)
                continue
            assert self.consumer is not None
            batches = await self.consumer.getmany(timeout_ms=1000, max_records=10_000)
            got = [Record(rec.key.decode() if rec.key else "", rec.value, functools.partial(self._ack, tp, rec.offset))
                   for tp, records in batches.items() for rec in records]
            if got:
                self._fetched.extend(got)
                self.wakeup()

    def _ack(self, tp, offset: int) -> None:  # noqa: ANN001
        if offset + 1 > self._done.get(tp, -1):
            self._done[tp] = offset + 1

    def take(self, max_items: int) -> list[Record]:
        if self._fetcher is not None and self._fetcher.done() and self._fetcher.exception() is not None:
            raise TransportError(f"Kafka fetcher died: {self._fetcher.exception()!r}")   # never unnoticed
        if self._done and (self._committer is None or self._committer.done()):
            self._committer = asyncio.ensure_future(self.commit())
        out, self._fetched = self._fetched[:max_items], self._fetched[max_items:]
        return out

    def ack(self, items: list[Record]) -> None:
        for r in items:
            r.ack_offset()

    async def commit(self) -> None:
        if not self._done or self.consumer is None:
            return
        from aiokafka.errors import KafkaError
        from aiokafka.structs import OffsetAndMetadata

        done, self._done = self._done, {}
        try:
            await self.consumer.commit({tp: OffsetAndMetadata(off, "") for tp, off in done.items()})
        except KafkaError as err:
            # Not committed: those records come again after a rebalance or a
            # restart, and the store drops them as duplicates.
            self.commit_failures += 1
            log.warning("kafka offset commit failed (records will be replayed): %r", err)

    async def stop(self) -> None:
        for task in (self._fetcher, self._committer):
            if task is not None:
                task.cancel()
                await asyncio.wait({task})     # not `await task`: a cancellation of this stop must not be eaten
                if not task.cancelled():
                    task.exception()           # retrieved: stopping, records not committed are replayed
        self._fetcher = self._committer = None
        if self.consumer is not None:
            # Bounded: a stop (SIGTERM) must not wait on a slow broker. What is not
            # committed is delivered again and dropped by the store as a duplicate.
            await _quietly(within(self.commit(), STOP_TIMEOUT_S))
            await _quietly(within(self.consumer.stop(), STOP_TIMEOUT_S))
            self.consumer = None
