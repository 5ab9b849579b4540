"""Publishing the stored aggregates, one of the fusion center's roles.

One task (rase_common.outbox) reads the store's unpublished aggregates in
order and publishes each on rase/v1/aggregates/t/{t} and, retained,
rase/v1/aggregates/latest (never back in time: a revision of an older t goes
to its own topic only), with the MQTT 5 properties subscribers read
(fusion_center.announce.home_assistant) and, once per connection and when it
changes, the Home Assistant discovery config. An aggregate is marked
published once every PUBACK came; a broker that is down delays publishing,
never intake; one the broker refuses for good (its ACL) is a dead letter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from importlib.metadata import PackageNotFoundError, version

from fusion_center.announce.home_assistant import Announcer, aggregate_properties, expiry_s
from fusion_center.context import FusionContext
from rase_common import deadletter
from rase_common.errors import Outage, TransportError
from rase_common.loop import within
from rase_common.mqtt import publish_properties
from rase_common.outbox import OutboxSender
from rase_common.protocol import topics
from rase_common.role import Role

log = logging.getLogger("fusion_center.service")


class AggregatePublisher(Role):
    name = "publisher"

    def __init__(self, ctx: FusionContext):
        cfg = ctx.cfg
        self.ctx = ctx
        self.announcer = Announcer(cfg.name, prefix=cfg.discovery_prefix, enabled=cfg.home_assistant_discovery,
                                   sw_version=_version())   # Home Assistant discovery (docs/subscribers.md)
        self.sender: OutboxSender | None = None

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        store = self.ctx.store
        assert store is not None
        self.sender = OutboxSender("fusion publishing", unsent=store.unpublished, send=self._publish,
                                   mark_sent=lambda row: store.mark_published(row[0], row[1], row[3]),
                                   outage=Outage("fusion publishing", log), storage=self.ctx.storage,
                                   wakeup=self.ctx.outbox_wakeup, dead_letter=self._dead_letter,
                                   dead_letters=self.ctx.metrics.dead_letters)

    def tasks(self) -> list:
        assert self.sender is not None
        return [self.sender.run()]

    def _dead_letter(self, row: tuple[str, int, str, int], reason: str) -> None:
        assert self.ctx.store is not None
        deadletter.put(self.ctx.store.db, "aggregates", "published", "scope=? AND t=? AND revision=?",
                       (row[0], row[1], row[3]), reason)

    async def _publish(self, row: tuple[str, int, str, int]) -> None:
        ctx, link, store = self.ctx, self.ctx.link, self.ctx.store
        assert link is not None and store is not None
        _scope, t, payload, _revision = row
        if not link.connected.is_set():
            raise TransportError("not connected to the broker")
        # QoS 1 publishes queued at once; marked published once every PUBACK came. A revision
        # of an older t goes to its own topic only: `latest` never goes back in time.
        stale_s = expiry_s(ctx.precision.window_period_s, ctx.cfg.latest_expiry_periods)   # an interval's, or a period
        futs = [link.publish_nowait(topics.aggregate_topic(t), payload,
                                    properties=publish_properties(**aggregate_properties(expiry=None)))]
        if t >= (store.newest_t() or t):
            futs.append(link.publish_nowait(topics.AGGREGATE_LATEST_TOPIC, payload, retain=True,
                                            properties=publish_properties(**aggregate_properties(expiry=stale_s))))
        connection = link.connects
        announce = self.announcer.due(payload, connection, bands=list(ctx.precision.bands), expire_after=stale_s)
        told = link.publish_nowait(*announce, retain=True) if announce is not None else None
        try:
            await within(asyncio.gather(*futs), 10.0)
            if told is not None and announce is not None:
                await self._announced(told, connection, announce)
        except asyncio.TimeoutError:
            raise TransportError(f"no PUBACK for aggregate t={t} within 10 s") from None

    async def _announced(self, told: asyncio.Future, connection: int, announce: tuple) -> None:
        """The discovery config is best effort: one the broker refuses for good (its ACL) turns it off,
        with one error, rather than holding back every aggregate."""
        try:
            await within(told, 10.0)
        except TransportError as err:
            if err.retriable:
                raise
            self.announcer.enabled = False
            log.error("Home Assistant discovery refused by the broker (%s): not announced again until restart; "
                      "let the fusion center write %s/# or set home_assistant_discovery = false", err,
                      self.ctx.cfg.discovery_prefix)
            return
        self.announcer.sent(connection, announce[1])


def _version() -> str:
    try:
        return version("rase")
    except PackageNotFoundError:
        return "0"
