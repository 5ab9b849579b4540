"""The fog service: `rase fog --config configs/fog.example.toml`.

Wiring only; the rules are pure and tested on their own (protocol.ProtocolGate:
the control message and report validation; windows.WindowManager and
RegionCounters; intake.IntakeHold and OutboxCount: when ingest takes reports;
closing.WindowCloser with release.release_window). Three owned tasks:

- ingest: takes a batch of messages from the source, follows control
  messages, validates reports, journals the accepted ones in one commit
  (fsynced), and only then acknowledges the batch to the broker;
- closer: at each period boundary (or as soon as a region's every device has
  reported) closes due windows, shuffles them, and journals each window's
  message in its outbox;
- forwarder (rase_common.outbox): sends the outbox through the sink in order,
  backing off while the sink fails. It never holds up ingest; only when
  `outbox_max_windows` windows wait does ingest stop taking reports, which the
  broker then keeps.

A storage failure (disk full, read-only) is an outage, not a crash: the
batch is held unacknowledged with the timestamp it arrived at, retried with a
backoff capped at 1 s, and no window closes meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from fog_shuffler.ldp.closing import WindowCloser
from fog_shuffler.config import FogConfig
from fog_shuffler.feedback import RejectionFeedback
from fog_shuffler.ingest import Accepted, IngestRules, Rejected
from fog_shuffler.intake import IntakeHold, OutboxCount
from fog_shuffler.journal import Journal
from fog_shuffler.prio3.leader import Prio3Leader
from fog_shuffler.metrics import FogMetrics
from fog_shuffler.protocol import PROTOCOL_FIELDS, Protocol, ProtocolFollower, ProtocolGate
from fog_shuffler.screen.screening import DeviceScreen
from fog_shuffler.windows import Outcome, RegionCounters, WindowManager
from rase_common.channels import Sink, Source
from rase_common.clock import ScaledClock, SteadyClock, WallClock
from rase_common.errors import Backoff, Outage, ProtocolError, StorageError
from rase_common.kafka import KafkaSink
from rase_common.loop import Wakeup, seconds_to_next_boundary
from rase_common.mqtt import MqttLink, MqttSink, MqttSource
from rase_common.outbox import OutboxSender
from rase_common.protocol import topics
from rase_common.quarantine import Quarantine
from rase_common.service import Service

log = logging.getLogger(__name__)
BATCH = 5000


class Wakeups:
    """Several tasks' wake-ups behind one set()."""

    def __init__(self, *wakeups: Wakeup):
        self.wakeups = wakeups

    def set(self) -> None:
        for w in self.wakeups:
            w.set()


class FogService(Service):
    name = "fog"

    def __init__(self, cfg: FogConfig, *, clock=None, sink: Sink | None = None, source: Source | None = None,
                 metrics: FogMetrics | None = None):
        self.cfg = cfg
        # Lateness and merge deadlines are judged on time a wall-clock step cannot move (SteadyClock).
        self.clock = clock or (SteadyClock() if cfg.speedup == 1 else ScaledClock(WallClock().now(), cfg.speedup))
        self.metrics = metrics or FogMetrics()
        registered = {r: rc.all_devices() for r, rc in cfg.regions.items()}
        self.windows = WindowManager(registered=registered, k_min=cfg.k_min, lateness_periods=cfg.lateness_periods,
                                     late_periods=cfg.late_periods())
        self.counters = RegionCounters()
        # The retained control message owns the protocol parameters; the fog follows it.
        own = Protocol(cfg.period_s, cfg.epoch0, tuple(cfg.eps_levels), cfg.x_min, cfg.x_max,
                       mechanism=cfg.device_mechanism, on_above=cfg.on_above, bands=tuple(cfg.bands),
                       prio3=cfg.prio3.params if cfg.prio3 else None)
        self.gate = ProtocolGate(own, IngestRules(devices={d: r for r, ds in registered.items() for d in ds},
                                                  eps_levels=own.eps_levels, x_min=own.x_min, x_max=own.x_max,
                                                  lateness_periods=None),
                                 grace_periods=cfg.lateness_periods + 2,
                                 policy=cfg.control_policy.build(cfg.period_s))
        # Attacker detection (fog_shuffler.screen.screening), None when [detection] is off.
        self.screen = (DeviceScreen(own, cfg.detection.false_alarm_per_device_day, self.metrics.devices_quarantined,
                                    checkpoint_s=cfg.detection.checkpoint_s) if cfg.detection.enabled else None)
        self.arrived, self.due, self.outbox_wakeup = Wakeup(), Wakeup(), Wakeup()
        self.wakeup = Wakeups(self.arrived, self.due)   # a driver moved a manual clock: look again
        self.storage = Outage("fog journal", log, gauge=self.metrics.storage_ok, backoff=Backoff(cap_s=1.0))
        self.forwarding = Outage(f"fog forwarding to {cfg.sink}", log, gauge=self.metrics.forwarding_ok,
                                 failures=self.metrics.forward_failures)
        self._source, self._sink = source, sink
        self.source: Source | None = None
        self.sink: Sink | None = None
        self.link: MqttLink | None = None
        self.journal: Journal | None = None
        self.quarantine: Quarantine | None = None
        self.forwarder: OutboxSender | None = None
        self.closer: WindowCloser | None = None
        # Secure aggregation: the fog as Prio3's leader (fog_shuffler.prio3.leader), when configured.
        self.leader = (Prio3Leader(cfg.prio3, name=cfg.name, regions=list(cfg.regions), k_min=cfg.k_min,
                                   registry=self.metrics.registry, storage=self.storage, sink_name=cfg.sink)
                       if cfg.prio3 is not None else None)
        self.hold = IntakeHold(BATCH)
        self.outbox = OutboxCount(cfg.outbox_max_windows, self.metrics.outbox_windows, self.outbox_wakeup.set)
        self.reports_taken = 0            # messages journaled or rejected since start (a replay driver's progress)
        self.feedback = RejectionFeedback(set(cfg.regions))   # tells a device why its reports are rejected

    # -- state others look at ------------------------------------------------
    @property
    def windows_sent(self) -> int:
        return self.forwarder.sent if self.forwarder else 0

    @property
    def subscribed(self) -> bool:
        """The broker confirmed the report subscriptions (a custom source: always)."""
        if self.link is None:
            return self.source is not None
        return self.link.subscribed.is_set() and not any(t.startswith(topics.REPORTS_PREFIX)
                                                        for t in self.link.refused)

    @property
    def protocol(self) -> ProtocolFollower:
        return self.gate.follower

    @property
    def outbox_size(self) -> int:
        return self.outbox.size

    def now_t(self) -> int:
        return self.gate.current.t_of(self.clock.now())

    # -- start and stop --------------------------------------------------------
    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        for w in (self.arrived, self.due, self.outbox_wakeup):
            w.bind()
        self.journal = Journal(self.cfg.journal_path)
        stack.callback(self.journal.close)
        self.quarantine = Quarantine(self.journal.db, self.metrics.rejected, log)
        if self.leader is not None:
            self.leader.open(self.journal.db)
        self._restore()
        if self.screen is not None:
            self.screen.restore(self.journal)
            stack.callback(self.screen.checkpoint_at_stop, self.journal)   # before the journal closes
        self.outbox.restored(len(self.journal.unsent()))
        self.closer = WindowCloser(self.cfg, journal=self.journal, metrics=self.metrics, counters=self.counters,
                                   outbox=self.outbox, gate=self.gate, leader=self.leader)
        if self.cfg.metrics_port is not None:
            self.metrics.serve(self.cfg.metrics_port, self.cfg.metrics_host)
        if self._source is None or (self._sink is None and self.cfg.sink == "mqtt"):
            self.link = self.make_link()
            self.link.start()
            stack.callback(self.link.stop)
        self.source = self._source or MqttSource(self.link)
        await self.source.start()
        stack.push_async_callback(self.source.stop)
        self.sink = self._sink or (KafkaSink(self.cfg.kafka) if self.cfg.sink == "kafka"
                                   else MqttSink(self.link, topics.windows_topic))
        if hasattr(self.sink, "stop"):
            stack.push_async_callback(self.sink.stop)
        if self.leader is not None:
            await self.leader.connect(stack, self.cfg.sink, self.cfg.kafka, link=self.link, sink=self._sink,
                                      replies_from_kafka=self._source is None)
        self.forwarder = OutboxSender(f"fog {self.cfg.name} forwarding", unsent=self.journal.unsent,
                                      send=lambda row: self.sink.send(row[0], row[2]), mark_sent=self._mark_sent,
                                      outage=self.forwarding, storage=self.storage, wakeup=self.outbox_wakeup)
        log.info("fog %s started: regions %s, k_min %d, period %.3g s, forwarding to %s", self.cfg.name,
                 sorted(self.cfg.regions), self.cfg.k_min, self.cfg.period_s, self.cfg.sink)

    def tasks(self):
        return [self._ingest(), self._close_loop(), self.forwarder.run()] + (self.leader.tasks() if self.leader else [])

    def subscriptions(self) -> list[tuple[str, int]]:
        subs = [(topics.reports_filter(r), 1) for r in self.cfg.regions] + [(topics.CONTROL_TOPIC, 1)]
        if self.leader is not None:     # the helper answers over the same transport; aggregates always over MQTT
            subs += self.leader.subscriptions(replies_over_mqtt=self.cfg.sink == "mqtt")
        return subs

    def make_link(self) -> MqttLink:
        """The fog's broker link: a fixed client id and a persistent session
        (the broker keeps reports while the fog is away), manual acks."""
        link = MqttLink(self.cfg.broker, f"fog-{self.cfg.name}",
                        subscriptions=self.subscriptions() if self._source is None else [],
                        clean_session=False, manual_ack=True, name="fog",
                        wakeup=Wakeups(self.arrived, self.outbox_wakeup).set)
        link.on_subscribed = self._on_subscribed
        return link

    def _on_subscribed(self, refused: list[str]) -> None:
        self.metrics.subscription_refused.set(len(refused))
        if not any(t.startswith(topics.REPORTS_PREFIX) for t in refused):
            log.info("fog subscribed to the reports of %s", ", ".join(sorted(self.cfg.regions)))

    def _restore(self) -> None:
        """Reopen journaled windows exactly as they were before a crash."""
        j = self.journal
        prio3 = self.leader.open_reports() if self.leader is not None else []
        if self.leader is not None:
            self.leader.reset()
        n = self.windows.restore(j.closed_windows(), j.open_reports() + prio3, j.duplicate_counts(),
                                 j.seen_devices(), self.now_t())
        if n or self.windows.closed:
            log.info("fog restored %d open reports in %d windows; %d windows already closed",
                     n, len(self.windows.open), len(self.windows.closed))

    # -- ingest -------------------------------------------------------------------
    async def _ingest(self) -> None:
        while True:
            if self.storage.down:
                await asyncio.sleep(self.storage.retry_in() or 0)
            if self.outbox.full:
                # The sink is far behind: let the broker hold new reports.
                await self.outbox_wakeup_for_ingest()
                continue
            batch, drained = self.hold.next_batch(self.source.take, self.now_t())
            if drained:
                self.due.set()       # what arrived during a storage outage is all taken: windows may close
            if not batch:
                await self.arrived.wait(None, None if self.link is not None else self.cfg.tick_s)
                continue
            try:
                self._ingest_batch(batch)
                self.storage.recovered()
            except StorageError as err:
                self.hold.failed(batch)
                self.storage.failed(err)
            await asyncio.sleep(0)     # let the closer and the forwarder have a turn between batches

    async def outbox_wakeup_for_ingest(self) -> None:
        self.metrics.ingest_paused.set(1)
        while self.outbox.full:
            await asyncio.sleep(0.05)
        self.metrics.ingest_paused.set(0)

    def _ingest_batch(self, batch: list[tuple[object, int]]) -> None:
        """Validate and journal one batch; ack only after the commit. Counters
        and quarantine rows follow the commit, so a batch retried after a
        storage failure is counted once."""
        if self.hold.stale:
            self._rebuild_from_journal()
        rows, dups, replies, others = [], [], [], 0
        after: list[tuple[str | None, str, Outcome | None, object]] = []   # (reject reason, detail, outcome, msg)
        complete = False
        for msg, now_t in batch:
            if msg.topic == topics.CONTROL_TOPIC:
                self._control(msg)
                after.append((None, "", None, msg))
                continue
            if self.leader is not None and self.leader.is_reply(msg.topic):
                try:
                    row = self.leader.reply(msg.payload)       # None: a late repeat, nothing to journal
                    replies += [row] if row is not None else []
                    after.append((None, "", None, msg))
                except Rejected as err:
                    after.append((err.reason, str(err), None, msg))
                others += 1
                continue
            if self.leader is not None and self.leader.is_aggregate(msg.topic):
                # Issue 26: a published aggregate, compared with the leader's own statements (an alarm if not).
                self.leader.check_aggregate(msg.payload)
                after.append((None, "", None, msg))
                others += 1
                continue
            try:
                rep = self._validate(msg, now_t)
                if self.screen is not None:
                    self.screen.screen(rep)
                outcome = self.windows.add(rep, now_t)
            except Rejected as err:
                after.append((err.reason, str(err), None, msg))
                continue
            except Exception as err:  # noqa: BLE001 - a bug one report triggers must not stop the fog
                log.exception("report on %s could not be processed; quarantined", msg.topic)
                after.append(("internal", repr(err), None, msg))
                continue
            if outcome is Outcome.ACCEPTED and rep.mechanism == "prio3":
                self.leader.accepted(rep)
                complete = complete or self.windows.complete(rep.region, rep.t)
            elif outcome is Outcome.ACCEPTED:
                rows.append((rep.region, rep.t, rep.device, rep.y, rep.eps, 0, rep.mechanism))
                if self.screen is not None:
                    self.screen.observe(rep, self.protocol)
                complete = complete or self.windows.complete(rep.region, rep.t)
            elif outcome is Outcome.DUPLICATE:
                dups.append((rep.region, rep.t))
            after.append((None, "", outcome, msg))
        try:
            self.journal.add_reports(rows, dups, self.screen.write(self.clock.now()) if self.screen else None)
        except StorageError:
            if self.screen is not None:
                self.screen.rollback()
            raise
        if self.screen is not None:
            self.screen.commit(self.windows.drop_device)
        if self.leader is not None:
            self.leader.commit(replies)
        self._count(after)
        self.source.ack([m for *_, m in after])
        self.reports_taken += len(after) - others
        if complete:
            self.due.set()

    def _count(self, after: list[tuple[str | None, str, Outcome | None, object]]) -> None:
        """Metrics, quarantine rows and per-region counts of a committed batch."""
        taken = {Outcome.ACCEPTED: 0, Outcome.DUPLICATE: 0, Outcome.LATE: 0}
        with self.quarantine.batch():     # one commit for a flood of rejected reports, not one each
            for reason, detail, outcome, msg in after:
                if reason is not None:
                    self.quarantine.put(msg.topic, reason, detail, msg.payload)   # counts it by reason too
                    self._tell_device(msg.topic, reason, detail)
                    where = topics.parse_report_topic(msg.topic)
                    if where is not None and where[0] in self.cfg.regions:
                        self.counters.reject(where[0], reason)
                elif outcome is not None:
                    taken[outcome] += 1
                    if outcome is Outcome.LATE:
                        self.counters.late[topics.parse_report_topic(msg.topic)[0]] += 1
        for outcome, counter in ((Outcome.ACCEPTED, self.metrics.accepted), (Outcome.DUPLICATE,
                                 self.metrics.duplicates), (Outcome.LATE, self.metrics.late)):
            if taken[outcome]:
                counter.inc(taken[outcome])

    def _tell_device(self, topic: str, reason: str, detail: str) -> None:
        """The device hears why its report was rejected, on its own topic (fog_shuffler.feedback)."""
        note = self.feedback.note(topic, reason, detail, time.monotonic())
        if note is None or self.link is None or not self.link.connected.is_set():
            return
        try:
            self.link.publish_nowait(*note).add_done_callback(lambda f: f.cancelled() or f.exception())
        except Exception as err:  # noqa: BLE001 - feedback is best effort; ingest goes on
            log.debug("feedback to %s not sent: %s", note[0], err)

    def _validate(self, msg, now_t: int) -> Accepted:  # noqa: ANN001
        if self.leader is not None and self.leader.is_report(msg.payload):
            return self.gate.validate_prio3(msg.topic, msg.payload, now_t, self.leader)
        return self.gate.validate(msg.topic, msg.payload, now_t)

    def _rebuild_from_journal(self) -> None:
        """After a storage failure: the windows as the journal has them."""
        self.windows = WindowManager(registered=self.windows.registered, k_min=self.cfg.k_min,
                                     lateness_periods=self.cfg.lateness_periods, late_periods=self.cfg.late_periods())
        self._restore()
        self.hold.stale = False

    # -- the control message --------------------------------------------------------
    def _control(self, msg) -> None:  # noqa: ANN001
        """Follow the retained control message (protocol.ProtocolGate)."""
        try:
            changed = self.gate.follow(msg.payload, self.now_t())
        except ProtocolError as err:
            self.quarantine.put(msg.topic, err.reason, err.detail, msg.payload)
            if self.leader is not None:           # issue 26: other prio3 params are an alarm at the leader
                self.leader.control_checked(err)
            return
        if self.leader is not None:
            self.leader.control_checked(None)
        if not changed:
            return
        if self.screen is not None:
            self.screen.follow(self.gate.current)
        log.info("fog follows the control message from t=%d: %s", self.now_t(),
                 ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items()))
        drift = self.protocol.drift()
        for field in PROTOCOL_FIELDS:
            self.metrics.config_drift.labels(field).set(1 if field in drift else 0)
        if drift:
            log.warning("the fog's config disagrees with the control message (%s); following the control "
                        "message: update the fog's config", ", ".join(f"{k}: config {a}, control {b}"
                                                                       for k, (a, b) in drift.items()))
        self.due.set()

    # -- closing ------------------------------------------------------------------
    async def _close_loop(self) -> None:
        while True:
            # Reports held through a storage outage, and those queued behind them, go into their
            # windows before any window closes: the outage extends the lateness horizon (windows
            # close late, counted in close_delay).
            if not self.storage.down and self.hold.may_close:
                try:
                    if self.screen is not None:
                        self.screen.between_batches(self.journal)   # releases; a checkpoint when due
                    await self.closer.close_due(self.windows, self.now_t())
                except StorageError as err:
                    self.hold.stale = True      # the in-memory windows may be ahead of the journal
                    self.storage.failed(err)
            wait = seconds_to_next_boundary(self.clock, self.gate.current.schedule, self.cfg.tick_s)
            if self.storage.down:
                wait = min(wait, self.storage.retry_in() or 0.0)
            await self.due.wait(None, wait)

    def _mark_sent(self, row: tuple[str, int, str, int]) -> None:
        self.journal.mark_sent(row[0], row[1], row[3])
        self.outbox.sent()

