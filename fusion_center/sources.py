"""Where windows come from: MQTT now (rase/v1/windows/+), Kafka later.

A source hands out received windows with an `ack` to call once the window is
stored; nothing is acknowledged before that.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import Callable, Protocol

import paho.mqtt.client as mqtt


@dataclass
class Received:
    payload: bytes
    ack: Callable[[], None]


class WindowSource(Protocol):
    def start(self) -> None: ...
    def poll(self, max_items: int) -> list[Received]: ...
    def stop(self) -> None: ...


class MqttWindowSource:
    def __init__(self, client: mqtt.Client, topic: str = "rase/v1/windows/+"):
        self.client = client
        self.topic = topic
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        client.on_message = lambda c, u, msg: self.inbox.put(msg)
        prev = client.on_connect

        def on_connect(c, userdata, flags, reason_code, properties):  # noqa: ANN001
            if not reason_code.is_failure:
                c.subscribe(self.topic, qos=1)
            if prev:
                prev(c, userdata, flags, reason_code, properties)
        client.on_connect = on_connect

    def start(self) -> None:
        pass  # the service connects the shared client

    def poll(self, max_items: int) -> list[Received]:
        out = []
        while len(out) < max_items:
            try:
                msg = self.inbox.get_nowait()
            except queue.Empty:
                break
            out.append(Received(msg.payload, lambda m=msg: self.client.ack(m.mid, m.qos) if m.qos else None))
        return out

    def stop(self) -> None:
        pass
