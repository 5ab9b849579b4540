"""Where forwarded windows go. The MQTT sink now; a Kafka sink later.

A sink's send() returns only once the broker has taken the window (PUBACK),
so the journal can mark it sent.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import paho.mqtt.client as mqtt


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
        deadline = time.monotonic() + self.timeout_s
        while not info.is_published():
            if time.monotonic() > deadline:
                raise SinkError(f"no PUBACK for window ({region}, {t}) within {self.timeout_s} s")
            await asyncio.sleep(0.005)
