"""Where windows come from: MQTT (rase/v1/windows/+, the embedded default) or
a Kafka consumer group on the windows topic.

A source hands out received windows with an `ack` to call once the window is
durably stored; nothing is acknowledged before that. For Kafka an ack marks
the record done and the offset is committed on the next poll (or at stop),
so a crash replays records instead of losing them, and the store's
idempotence on (region, t) drops the replayed ones.
"""

from __future__ import annotations

import asyncio
import logging
import queue
from dataclasses import dataclass
from typing import Callable, Protocol

import paho.mqtt.client as mqtt

from rase_common.kafka import KafkaConfig
from rase_common.loop import Wakeup

log = logging.getLogger(__name__)


@dataclass
class Received:
    payload: bytes
    ack: Callable[[], None]


class WindowSource(Protocol):
    async def start(self) -> None: ...
    async def poll(self, max_items: int) -> list[Received]: ...
    async def stop(self) -> None: ...


class MqttWindowSource:
    def __init__(self, client: mqtt.Client, topic: str = "rase/v1/windows/+", wakeup: Wakeup | None = None):
        self.client = client
        self.topic = topic
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.wakeup = wakeup

        def on_message(c, u, msg):  # noqa: ANN001
            self.inbox.put(msg)
            if self.wakeup is not None:
                self.wakeup.set()
        client.on_message = on_message
        prev = client.on_connect

        def on_connect(c, userdata, flags, reason_code, properties):  # noqa: ANN001
            if not reason_code.is_failure:
                c.subscribe(self.topic, qos=1)
            if prev:
                prev(c, userdata, flags, reason_code, properties)
        client.on_connect = on_connect

        def on_subscribe(c, userdata, mid, reason_codes, properties):  # noqa: ANN001
            # Windows published before this SUBACK may not reach a new session.
            if any(rc.is_failure for rc in reason_codes):
                log.error("fusion subscription to %s refused by the broker: check its ACL", self.topic)
            else:
                log.info("fusion subscribed to %s", self.topic)
        client.on_subscribe = on_subscribe

    async def start(self) -> None:
        pass  # the service connects the shared client

    async def poll(self, max_items: int) -> list[Received]:
        out = []
        while len(out) < max_items:
            try:
                msg = self.inbox.get_nowait()
            except queue.Empty:
                break
            out.append(Received(msg.payload, lambda m=msg: self.client.ack(m.mid, m.qos) if m.qos else None))
        return out

    async def stop(self) -> None:
        pass


class KafkaWindowSource:
    """A member of the fusion centers' consumer group; offsets committed only
    for records acked (stored), in order per partition. A background task
    fetches records as they come and wakes the service."""

    def __init__(self, cfg: KafkaConfig, wakeup: Wakeup | None = None):
        self.cfg = cfg
        self.wakeup = wakeup
        self.consumer = None
        self._done: dict = {}     # TopicPartition -> next offset to commit
        self._fetched: list[Received] = []
        self._fetcher: asyncio.Task | None = None
        self.commit_failures = 0

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(self.cfg.topic, **self.cfg.client_options(),
                                    group_id=self.cfg.group_id, enable_auto_commit=False,
                                    auto_offset_reset="earliest",
                                    request_timeout_ms=int(self.cfg.request_timeout_s * 1000) + 30_000)
        await consumer.start()  # aiokafka retries a missing broker itself
        self.consumer = consumer
        if self.wakeup is not None:
            self._fetcher = asyncio.create_task(self._fetch_forever())

    async def _fetch_forever(self) -> None:
        while True:
            if len(self._fetched) >= 10_000:      # the service is behind: let it catch up
                await asyncio.sleep(0.01)
                continue
            got = await self._fetch(10_000, 1.0)
            if got:
                self._fetched.extend(got)
                self.wakeup.set()

    def _ack(self, tp, offset: int) -> None:
        if offset + 1 > self._done.get(tp, -1):
            self._done[tp] = offset + 1

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

    async def _fetch(self, max_items: int, timeout_s: float) -> list[Received]:
        batches = await self.consumer.getmany(timeout_ms=int(timeout_s * 1000), max_records=max_items)
        return [Received(rec.value, lambda tp=tp, o=rec.offset: self._ack(tp, o))
                for tp, records in batches.items() for rec in records]

    async def poll(self, max_items: int, timeout_s: float = 0.0) -> list[Received]:
        await self.commit()
        if self._fetcher is None:
            return await self._fetch(max_items, timeout_s)
        if self._fetcher.done() and self._fetcher.exception() is not None:
            raise self._fetcher.exception()   # a dead fetcher must not go unnoticed
        out, self._fetched = self._fetched[:max_items], self._fetched[max_items:]
        return out

    async def stop(self) -> None:
        if self._fetcher is not None:
            self._fetcher.cancel()
            try:
                await self._fetcher
            except (asyncio.CancelledError, Exception):  # stopping: its records are replayed on restart
                pass
            self._fetcher = None
        if self.consumer is not None:
            await self.commit()
            await self.consumer.stop()
            self.consumer = None
