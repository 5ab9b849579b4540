"""Where forwarded windows go: MQTT (the embedded default) or Kafka.

A sink's send() returns only once the broker has taken the window (a PUBACK,
or a Kafka acks=all acknowledgement), so the journal can mark it sent.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import logging

import paho.mqtt.client as mqtt

from rase_common.kafka import KafkaConfig

log = logging.getLogger(__name__)


class SinkError(RuntimeError):
    """The window was not confirmed by the broker; retriable."""
    retriable = True


class WindowSink(Protocol):
    async def send(self, region: str, t: int, payload: str) -> None: ...


class MqttWindowSink:
    """Publishes to rase/v1/windows/{region}, QoS 1, and waits for the PUBACK."""

    def __init__(self, client: mqtt.Client, timeout_s: float = 10.0):
        self.client = client
        self.timeout_s = timeout_s

    async def send(self, region: str, t: int, payload: str) -> None:
        info = self.client.publish(f"rase/v1/windows/{region}", payload, qos=1)
        if info.rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN):
            raise SinkError(f"publish of window ({region}, {t}) refused: {mqtt.error_string(info.rc)}")
        if not info.is_published():
            # paho signals the PUBACK on a condition variable: wait on it off the loop.
            try:
                await asyncio.to_thread(info.wait_for_publish, self.timeout_s)
            except (RuntimeError, ValueError) as err:
                raise SinkError(f"window ({region}, {t}) not sent: {err}") from err
        if not info.is_published():
            raise SinkError(f"no PUBACK for window ({region}, {t}) within {self.timeout_s} s")


class KafkaWindowSink:
    """Produces each window to the windows topic, key = region, acks=all.

    The producer starts on first use and again after a failure, so a Kafka
    that is down at start-up or restarts is waited for, not fatal."""

    def __init__(self, cfg: KafkaConfig):
        self.cfg = cfg
        self.producer = None

    async def _producer(self):
        if self.producer is None:
            from aiokafka import AIOKafkaProducer

            try:
                producer = AIOKafkaProducer(**self.cfg.client_options(), acks="all",
                                            enable_idempotence=self.cfg.idempotent,
                                            request_timeout_ms=int(self.cfg.request_timeout_s * 1000))
            except ValueError as err:   # an unreadable password file: retried like an unreachable broker
                raise SinkError(f"Kafka client settings: {err}") from err
            try:
                await producer.start()
            except Exception as err:
                await producer.stop()
                raise SinkError(f"Kafka at {self.cfg.bootstrap_servers} unreachable: {err!r}") from err
            self.producer = producer
        return self.producer

    async def send(self, region: str, t: int, payload: str) -> None:
        from aiokafka.errors import KafkaError

        producer = await self._producer()
        try:
            await asyncio.wait_for(producer.send_and_wait(self.cfg.topic, key=region.encode(), value=payload.encode()),
                                   self.cfg.request_timeout_s * 2)
        except (KafkaError, asyncio.TimeoutError, OSError) as err:
            await self.stop()  # a fresh producer on the next try
            raise SinkError(f"Kafka did not take window ({region}, {t}): {err!r}") from err

    async def stop(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            try:
                await producer.stop()
            except Exception as err:  # closing a broken producer; nothing is pending
                log.debug("kafka producer stop: %r", err)
