"""The fog service: `rase fog --config configs/fog.example.toml`.

A thin host of roles (fog_shuffler.roles: the control follower, the report
roles the registry names, attacker detection). It owns the broker link, the
journal, the metrics server and three tasks, beside each role's own:
- ingest: takes a batch, routes each message to its role, commits what every
  role staged in ONE fsynced transaction, and only then acknowledges it;
- closer: at each period boundary (or once a region's every device reported)
  closes due windows, each report role taking its part, then the rest;
- forwarder (fog_shuffler.forwarding): sends the outbox in order; only when
  `outbox_max_windows` windows wait does ingest pause (the broker keeps them).
A storage failure is an outage, not a crash: the batch is held
unacknowledged and retried (backoff capped at 1 s); no window closes meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fog_shuffler.config import FogConfig
from fog_shuffler.transport import fog_link, forwarder, subscribed
from fog_shuffler.intake import IntakeHold
from fog_shuffler.journal import Journal
from fog_shuffler.metrics import FogMetrics
from fog_shuffler.roles import FogRoles, new_context
from rase_common.channels import Sink, Source
from rase_common.clock import ScaledClock, SteadyClock
from rase_common.errors import StorageError
from rase_common.loop import Wakeup, Wakeups, seconds_to_next_boundary
from rase_common.mqtt import MqttLink, MqttSource
from rase_common.outbox import OutboxSender
from rase_common.service import Service

log = logging.getLogger(__name__)
BATCH = 5000


class FogService(Service):
    name = "fog"

    def __init__(self, cfg: FogConfig, *, clock=None, sink: Sink | None = None, source: Source | None = None,
                 metrics: FogMetrics | None = None):
        self.cfg = cfg
        # Lateness and merge deadlines are judged on time a wall-clock step cannot move (SteadyClock).
        self.clock = clock or (SteadyClock() if cfg.speedup == 1
                               else ScaledClock.anchored(cfg.sim_clock_anchor, cfg.speedup))
        self.ctx = new_context(cfg, self.clock, metrics or FogMetrics(), source=source, sink=sink, now_t=self.now_t)
        self.arrived = Wakeup()
        self.wakeup = Wakeups(self.arrived, self.ctx.due)   # a driver moved a manual clock: look again
        self.roles = FogRoles(self.ctx)
        self.hold = IntakeHold(BATCH)
        self.forwarder: OutboxSender | None = None

    # -- state others look at ------------------------------------------------
    @property
    def metrics(self) -> FogMetrics:
        return self.ctx.metrics

    @property
    def reports_taken(self) -> int:
        """Reports journaled or rejected since start (a replay driver's progress)."""
        return self.roles.reports_taken

    @property
    def windows_sent(self) -> int:
        return self.forwarder.sent if self.forwarder else 0

    @property
    def subscribed(self) -> bool:
        return subscribed(self.ctx)

    def now_t(self) -> int:
        return self.ctx.gate.current.t_of(self.clock.now())

    # -- start and stop --------------------------------------------------------
    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        ctx, cfg = self.ctx, self.cfg
        for w in (self.arrived, ctx.due, ctx.outbox_wakeup):
            w.bind()
        ctx.journal = Journal(cfg.journal_path)
        stack.callback(ctx.journal.close)
        self.roles.attach(ctx.journal)       # the roles' tables, then the windows as the journal has them
        if cfg.metrics_port is not None:
            ctx.metrics.serve(cfg.metrics_port, cfg.metrics_host)
        if ctx.source is None or (ctx.sink is None and cfg.sink == "mqtt"):
            link = ctx.link = self.make_link()
            link.start()
            stack.callback(link.stop)
        self.source = ctx.source or MqttSource(link)
        await self.source.start()
        stack.push_async_callback(self.source.stop)
        self.forwarder = forwarder(ctx, stack)
        await self.roles.open(stack)
        log.info("fog %s started: regions %s, k_min %d, period %.3g s, forwarding to %s, roles %s", cfg.name,
                 sorted(cfg.regions), cfg.k_min, cfg.period_s, cfg.sink, ", ".join(self.roles.names))

    def tasks(self):
        assert self.forwarder is not None
        return [self._ingest(), self._close_loop(), self.forwarder.run()] + self.roles.tasks()

    def make_link(self) -> MqttLink:
        subs = self.roles.subscriptions() if self.ctx.source is None else []
        return fog_link(self.ctx, subs, self.arrived, self.roles.subscribed)

    # -- ingest -------------------------------------------------------------------
    async def _ingest(self) -> None:
        ctx = self.ctx
        while True:
            if ctx.storage.down:
                await asyncio.sleep(ctx.storage.retry_in() or 0)
            if ctx.outbox.full:
                await ctx.outbox.room(ctx.metrics.ingest_paused)   # the sink is far behind: the broker holds them
                continue
            batch, drained = self.hold.next_batch(self.source.take, self.now_t())
            if drained:
                ctx.due.set()    # what arrived during a storage outage is all taken: windows may close
            if not batch:
                await self.arrived.wait(None, None if ctx.link is not None else self.cfg.tick_s)
                continue
            try:
                if self.hold.stale:
                    self.roles.rebuild()
                    self.hold.stale = False
                self.source.ack(self.roles.ingest(batch))
                ctx.storage.recovered()
            except StorageError as err:
                self.hold.failed(batch)
                ctx.storage.failed(err)
            await asyncio.sleep(0)     # let the closer and the forwarder have a turn between batches

    # -- closing ------------------------------------------------------------------
    async def _close_loop(self) -> None:
        ctx = self.ctx
        while True:
            # Reports held through a storage outage, and those queued behind them, go into their
            # windows before any window closes: the outage extends the lateness horizon.
            if not ctx.storage.down and self.hold.may_close:
                try:
                    await self.roles.close_due(self.now_t())
                except StorageError as err:
                    self.hold.stale = True      # the in-memory windows may be ahead of the journal
                    ctx.storage.failed(err)
            wait = seconds_to_next_boundary(self.clock, ctx.gate.current.schedule, self.cfg.tick_s)
            if ctx.storage.down:
                wait = min(wait, ctx.storage.retry_in() or 0.0)
            await ctx.due.wait(None, wait)
