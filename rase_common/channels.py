"""How messages enter and leave a service: sources and sinks.

A service's rules never touch a broker. Messages come in through a Source
(take a batch without waiting; acknowledge a batch once it is stored) and go
out through a Sink (send one message; return once the far side has it, or
raise TransportError). MQTT and Kafka implement both (rase_common.mqtt,
rase_common.kafka); the in-memory ones here let a service run, and be
tested, without any broker.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Callable, Protocol

from rase_common.errors import TransportError


class Inbound(Protocol):
    """One received message: its topic (or Kafka key) and payload."""
    topic: str
    payload: bytes


class Source(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def take(self, max_items: int) -> list: ...
    def ack(self, items: list) -> None: ...


class Sink(Protocol):
    async def send(self, key: str, payload: str) -> None: ...


@dataclass
class Message:
    """An in-memory message (what MemorySource hands out)."""
    topic: str
    payload: bytes
    qos: int = 1
    mid: int = 0


class MemorySource:
    """Messages put() by a test or a driver; acknowledged ones are recorded in
    `acked`, the rest stay `unacked` (what a broker would redeliver)."""

    def __init__(self, wakeup: Callable[[], None] | None = None):
        self.pending: list[Message] = []
        self.acked: list[Message] = []
        self.unacked: dict[int, Message] = {}
        self.wakeup = wakeup or (lambda: None)
        self._mid = 0

    def put(self, topic: str, payload: bytes | str) -> Message:
        self._mid += 1
        msg = Message(topic, payload.encode() if isinstance(payload, str) else payload, mid=self._mid)
        self.pending.append(msg)
        self.wakeup()
        return msg

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def take(self, max_items: int) -> list[Message]:
        out, self.pending = self.pending[:max_items], self.pending[max_items:]
        for m in out:
            self.unacked[m.mid] = m
        return out

    def ack(self, items: list[Message]) -> None:
        for m in items:
            if self.unacked.pop(m.mid, None) is not None:
                self.acked.append(m)


@dataclass
class MemorySink:
    """Keeps what was sent; `fail` (a count or forever with -1) makes the next
    sends raise a retriable TransportError, `delay_s` makes each send slow,
    and `hold` (an asyncio.Event) makes sends wait until it is set."""
    sent: list[tuple[str, str]] = field(default_factory=list)
    fail: int = 0
    delay_s: float = 0.0
    attempts: int = 0
    hold: asyncio.Event | None = None

    async def send(self, key: str, payload: str) -> None:
        self.attempts += 1
        if self.hold is not None:
            await self.hold.wait()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail:
            self.fail -= 1 if self.fail > 0 else 0
            raise TransportError("memory sink told to fail")
        self.sent.append((key, payload))

    async def stop(self) -> None:
        pass
