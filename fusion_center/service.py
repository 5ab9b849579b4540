"""The fusion center service: `rase fusion --config configs/fusion.example.toml`.

A thin host of roles (fusion_center.roles: the estimation roles the registry
names, the control message, the publisher). It owns the broker link, the
store, the metrics server and two tasks, beside each role's own:
- intake: takes windows from the source (MQTT rase/v1/windows/+ or Kafka),
  routes each to its role, commits what every role staged in ONE fsynced
  transaction, quarantines what a role refused, then acknowledges the batch;
- closer: lets each role close what is due, at least every tick.
A storage failure is an outage: the batch is held unacknowledged and retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from fusion_center.config import FusionConfig
from fusion_center.context import FusionContext
from fusion_center.history import EstimateHistory
from fusion_center.metrics import FusionMetrics
from fusion_center.roles import FusionRoles
from fusion_center.store import AggregateStore
from fusion_center.transport import fusion_link
from rase_common.channels import Source
from rase_common.clock import ScaledClock, SteadyClock
from rase_common.errors import Backoff, Outage, StorageError
from rase_common.kafka import KafkaSource
from rase_common.loop import Wakeup
from rase_common.mqtt import MqttLink, MqttSource
from rase_common.quarantine import Quarantine
from rase_common.service import Service

log = logging.getLogger(__name__)
BATCH = 5000


class FusionService(Service):
    name = "fusion"

    def __init__(self, cfg: FusionConfig, *, config_path: str | Path | None = None, clock=None,
                 source: Source | None = None, metrics: FusionMetrics | None = None):
        self.cfg = cfg
        # Lateness and merge deadlines are judged on time a wall-clock step cannot move (SteadyClock).
        clock = clock or (SteadyClock() if cfg.speedup == 1
                               else ScaledClock.anchored(cfg.sim_clock_anchor, cfg.speedup))
        metrics = metrics or FusionMetrics()
        self.ctx = FusionContext(
            cfg=cfg, clock=clock, metrics=metrics, history=EstimateHistory(tuple(cfg.windows_w)),
            precision=cfg.precision, storage=Outage("fusion store", log, gauge=metrics.storage_ok,
                                                    backoff=Backoff(cap_s=1.0)),
            arrived=Wakeup(), due=Wakeup(), outbox_wakeup=Wakeup(), control_wakeup=Wakeup(), source=source)
        self.roles = FusionRoles(self.ctx, Path(config_path) if config_path else None)
        self.source: Source | None = None
        self._held: list = []              # taken from the source, not yet stored (storage failing)

    @property
    def wakeup(self) -> Wakeup:
        """A driver moved a manual clock: merge deadlines may have passed."""
        return self.ctx.due

    @property
    def metrics(self) -> FusionMetrics:
        return self.ctx.metrics

    @property
    def store(self) -> AggregateStore | None:
        return self.ctx.store

    @property
    def connected(self) -> bool:
        return self.ctx.link is not None and self.ctx.link.connected.is_set()

    # -- start and stop --------------------------------------------------------
    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        ctx, cfg = self.ctx, self.cfg
        for w in (ctx.arrived, ctx.due, ctx.outbox_wakeup, ctx.control_wakeup):
            w.bind()
        ctx.store = AggregateStore(cfg.store_path)
        stack.callback(ctx.store.close)
        ctx.quarantine = Quarantine(ctx.store.db, ctx.metrics.rejected, log)
        self.roles.attach(ctx.store.db)
        if cfg.metrics_port is not None:
            ctx.metrics.serve(cfg.metrics_port, cfg.metrics_host)
        ctx.link = self.make_link()
        await self.roles.open(stack)       # before the link starts: what is stored is restored first
        ctx.link.start()
        stack.callback(ctx.link.stop)
        self.source = ctx.source or (KafkaSource(cfg.kafka, ctx.arrived.set) if cfg.source == "kafka"
                                     else MqttSource(ctx.link))
        await self.source.start()
        stack.push_async_callback(self.source.stop)
        self.roles.started()

    def make_link(self) -> MqttLink:
        return fusion_link(self.ctx, subscribe=self.ctx.source is None and self.cfg.source == "mqtt")

    def tasks(self):
        return [self._intake(), self._closer()] + self.roles.tasks()

    # -- intake -------------------------------------------------------------------
    async def _intake(self) -> None:
        ctx = self.ctx
        while True:
            if ctx.storage.down:
                await asyncio.sleep(ctx.storage.retry_in() or 0)
            assert self.source is not None
            got = self._held or self.source.take(BATCH)
            self._held = []
            if not got:
                await ctx.arrived.wait(None, self.cfg.tick_s)
                continue
            try:
                self.source.ack(self.roles.ingest(got))
                ctx.storage.recovered()
            except StorageError as err:
                self._held = got      # not acknowledged: retried, or redelivered after a restart
                ctx.storage.failed(err)
            await asyncio.sleep(0)

    # -- closing ------------------------------------------------------------------
    async def _closer(self) -> None:
        ctx = self.ctx
        while True:
            if not ctx.storage.down:
                try:
                    await self.roles.close_due()
                except StorageError as err:
                    ctx.storage.failed(err)
            await ctx.due.wait(None, self._idle_s())

    def _idle_s(self) -> float:
        """Until the next merge deadline, at most tick_s (a manual clock is looked at that often)."""
        wait = self.cfg.tick_s
        left = self.roles.next_deadline_s()
        if left is not None and self.ctx.speedup != float("inf"):
            wait = max(0.0005, left / self.ctx.speedup)
        if self.ctx.storage.down:
            wait = min(wait, self.ctx.storage.retry_in() or 0.0)
        return wait
