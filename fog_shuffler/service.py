"""The fog service: `rase fog --config configs/fog.example.toml`.

A thin host of roles (rase_common.role): the control follower, the report
roles the mechanism registry names (the local-DP window-and-shuffle role and,
with a `[prio3]` table, the secure mode's leader) and attacker detection
(`[detection]`). It owns the broker link, the journal, the metrics server
and three tasks, beside each role's own:

- ingest: takes a batch of messages, routes each to its role, lets every role
  write what it staged in ONE journal transaction (fsynced), and only then
  acknowledges the batch to the broker;
- closer: at each period boundary (or as soon as a region's every device has
  reported) closes due windows, each report role taking its part
  (fog_shuffler.reports.WindowCloser), and lets the other roles close theirs;
- forwarder (rase_common.outbox): sends the journal's outbox through the sink
  in order; only when `outbox_max_windows` windows wait does ingest stop
  taking reports, which the broker then keeps.

A storage failure (disk full, read-only) is an outage, not a crash: the batch
is held unacknowledged with the timestamp it arrived at, retried with a
backoff capped at 1 s, and no window closes meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fog_shuffler.config import FogConfig
from fog_shuffler.context import FogContext
from fog_shuffler.intake import IntakeHold, OutboxCount
from fog_shuffler.journal import Journal
from fog_shuffler.metrics import FogMetrics
from fog_shuffler.roles import FogRoles, make_gate, make_windows
from fog_shuffler.windows import RegionCounters
from rase_common.channels import Sink, Source
from rase_common.clock import ScaledClock, SteadyClock, WallClock
from rase_common.errors import Backoff, Outage, StorageError
from rase_common.kafka import KafkaSink
from rase_common.loop import Wakeup, Wakeups, seconds_to_next_boundary
from rase_common.mqtt import MqttLink, MqttSink, MqttSource
from rase_common.outbox import OutboxSender
from rase_common.protocol import topics
from rase_common.service import Service

log = logging.getLogger(__name__)
BATCH = 5000


class FogService(Service):
    name = "fog"

    def __init__(self, cfg: FogConfig, *, clock=None, sink: Sink | None = None, source: Source | None = None,
                 metrics: FogMetrics | None = None):
        self.cfg = cfg
        # Lateness and merge deadlines are judged on time a wall-clock step cannot move (SteadyClock).
        self.clock = clock or (SteadyClock() if cfg.speedup == 1 else ScaledClock(WallClock().now(), cfg.speedup))
        metrics = metrics or FogMetrics()
        self.arrived, due, outbox_wakeup = Wakeup(), Wakeup(), Wakeup()
        self.wakeup = Wakeups(self.arrived, due)   # a driver moved a manual clock: look again
        self.ctx = FogContext(
            cfg=cfg, now=self.clock.now, now_t=self.now_t, metrics=metrics, windows=make_windows(cfg),
            counters=RegionCounters(),
            gate=make_gate(cfg), outbox=OutboxCount(cfg.outbox_max_windows, metrics.outbox_windows, outbox_wakeup.set),
            storage=Outage("fog journal", log, gauge=metrics.storage_ok, backoff=Backoff(cap_s=1.0)),
            due=due, outbox_wakeup=outbox_wakeup, source=source, sink=sink)
        self.roles = FogRoles(self.ctx)
        self.hold = IntakeHold(BATCH)
        self.forwarder: OutboxSender | None = None

    # -- state others look at ------------------------------------------------
    @property
    def metrics(self) -> FogMetrics:
        return self.ctx.metrics

    @property
    def link(self) -> MqttLink | None:
        return self.ctx.link

    @property
    def journal(self) -> Journal | None:
        return self.ctx.journal

    @property
    def protocol(self):  # noqa: ANN201 - fog_shuffler.protocol.ProtocolFollower
        return self.ctx.gate.follower

    @property
    def outbox_size(self) -> int:
        return self.ctx.outbox.size

    @property
    def windows_sent(self) -> int:
        return self.forwarder.sent if self.forwarder else 0

    @property
    def subscribed(self) -> bool:
        """The broker confirmed the report subscriptions (a custom source: always)."""
        link = self.ctx.link
        if link is None:
            return self.ctx.source is not None
        return link.subscribed.is_set() and not any(t.startswith(topics.REPORTS_PREFIX) for t in link.refused)

    def now_t(self) -> int:
        return self.ctx.gate.current.t_of(self.clock.now())

    # -- start and stop --------------------------------------------------------
    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        ctx, cfg = self.ctx, self.cfg
        for w in (self.arrived, ctx.due, ctx.outbox_wakeup):
            w.bind()
        ctx.journal = Journal(cfg.journal_path)
        stack.callback(ctx.journal.close)
        self.roles.attach(ctx.journal)
        self.roles.restore()
        ctx.outbox.restored(len(ctx.journal.unsent()))
        if cfg.metrics_port is not None:
            ctx.metrics.serve(cfg.metrics_port, cfg.metrics_host)
        if ctx.source is None or (ctx.sink is None and cfg.sink == "mqtt"):
            ctx.link = self.make_link()
            ctx.link.start()
            stack.callback(ctx.link.stop)
        source = ctx.source or MqttSource(ctx.link)
        await source.start()
        stack.push_async_callback(source.stop)
        sink = ctx.forward_sink = ctx.sink or (KafkaSink(cfg.kafka) if cfg.sink == "kafka"
                                               else MqttSink(ctx.link, topics.windows_topic))
        if hasattr(sink, "stop"):
            stack.push_async_callback(sink.stop)
        await self.roles.open(stack)
        self.forwarder = OutboxSender(
            f"fog {cfg.name} forwarding", unsent=ctx.journal.unsent, send=lambda row: sink.send(row[0], row[2]),
            mark_sent=self._mark_sent, outage=Outage(f"fog forwarding to {cfg.sink}", log,
                                                     gauge=ctx.metrics.forwarding_ok,
                                                     failures=ctx.metrics.forward_failures),
            storage=ctx.storage, wakeup=ctx.outbox_wakeup, dead_letter=self._dead_letter,
            dead_letters=ctx.metrics.dead_letters)
        self.source = source
        log.info("fog %s started: regions %s, k_min %d, period %.3g s, forwarding to %s, roles %s", cfg.name,
                 sorted(cfg.regions), cfg.k_min, cfg.period_s, cfg.sink, ", ".join(self.roles.names))

    def tasks(self):
        assert self.forwarder is not None
        return [self._ingest(), self._close_loop(), self.forwarder.run()] + self.roles.tasks()

    def make_link(self) -> MqttLink:
        """The fog's broker link: a fixed client id and a persistent session
        (the broker keeps reports while the fog is away), manual acks."""
        link = MqttLink(self.cfg.broker, f"fog-{self.cfg.name}",
                        subscriptions=self.roles.subscriptions() if self.ctx.source is None else [],
                        clean_session=False, manual_ack=True, name="fog",
                        wakeup=Wakeups(self.arrived, self.ctx.outbox_wakeup).set)
        link.on_subscribed = self._on_subscribed
        return link

    def _on_subscribed(self, refused: list[str]) -> None:
        self.ctx.metrics.subscription_refused.set(len(refused))
        if not any(t.startswith(topics.REPORTS_PREFIX) for t in refused):
            log.info("fog subscribed to the reports of %s", ", ".join(sorted(self.cfg.regions)))

    # -- ingest -------------------------------------------------------------------
    async def _ingest(self) -> None:
        ctx = self.ctx
        while True:
            if ctx.storage.down:
                await asyncio.sleep(ctx.storage.retry_in() or 0)
            if ctx.outbox.full:
                await self._wait_for_outbox()     # the sink is far behind: the broker holds new reports
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

    async def _wait_for_outbox(self) -> None:
        self.ctx.metrics.ingest_paused.set(1)
        while self.ctx.outbox.full:
            await asyncio.sleep(0.05)
        self.ctx.metrics.ingest_paused.set(0)

    @property
    def reports_taken(self) -> int:
        """Reports journaled or rejected since start (a replay driver's progress)."""
        return self.roles.reports_taken

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

    def _mark_sent(self, row: tuple[str, int, str, int]) -> None:
        assert self.ctx.journal is not None
        self.ctx.journal.mark_sent(row[0], row[1], row[3])
        self.ctx.outbox.sent()

    def _dead_letter(self, row: tuple[str, int, str, int], reason: str) -> None:
        assert self.ctx.journal is not None
        self.ctx.journal.dead_letter(row, reason)
        self.ctx.outbox.sent()
