"""The fusion center service: `rase fusion --config configs/fusion.example.toml`.

Wiring only; the rules are pure and tested on their own (merge.TimestampMerger
and aggregate(), history.EstimateHistory, the protocol models). Four owned
tasks:

- intake: takes windows from the source (MQTT rase/v1/windows/+ or a Kafka
  consumer group), validates them as hostile input, stores them (one commit,
  fsynced, per batch) and only then acknowledges them;
- closer: a timestamp closes when every known region arrived or its merge
  deadline passed; its aggregate is estimated (large ones in a worker thread)
  and stored once (idempotent on (scope, t));
- publisher (rase_common.outbox): publishes stored aggregates on
  rase/v1/aggregates/t/{t} and, retained, rase/v1/aggregates/latest, and
  marks them published once both PUBACKs came; a broker that is down delays
  publishing, never intake, and never ends the process;
- control: publishes the control message (retained) at every connect and
  whenever the config file's [precision] table changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path

from pydantic import ValidationError

from fusion_center.config import FusionConfig
from fusion_center.prio3.helper import Prio3Helper
from fusion_center.history import EstimateHistory
from fusion_center.announce.home_assistant import Announcer, aggregate_properties, expiry_s
from fusion_center.ldp.merge import TimestampMerger, aggregate
from fusion_center.metrics import FusionMetrics
from fusion_center.store import AggregateStore
from rase_common.channels import Source
from rase_common.clock import ScaledClock, SteadyClock, WallClock
from rase_common.errors import Backoff, ConfigError, Outage, StorageError, TransportError
from rase_common.kafka import KafkaSource
from rase_common.loop import Wakeup, within
from rase_common.mqtt import MqttLink, MqttSource, publish_properties
from rase_common.outbox import OutboxSender
from rase_common.protocol import topics
from rase_common.protocol.control import ControlMessage
from rase_common.protocol.prio3 import is_prio3_message
from rase_common.protocol.window import WindowMessage
from rase_common.quarantine import Quarantine
from rase_common.service import Service

log = logging.getLogger(__name__)
LARGE = 20_000  # estimate in a worker thread above this many reports
BATCH = 5000
STORE_EVERY_S = 0.05   # a backlog of timestamps is stored in commits of this much estimating each


class FusionService(Service):
    name = "fusion"

    def __init__(self, cfg: FusionConfig, *, config_path: str | Path | None = None, clock=None,
                 source: Source | None = None, metrics: FusionMetrics | None = None):
        self.cfg = cfg
        self.config_path = Path(config_path) if config_path else None
        self._config_mtime: float | None = None
        # Lateness and merge deadlines are judged on time a wall-clock step cannot move (SteadyClock).
        self.clock = clock or (SteadyClock() if cfg.speedup == 1 else ScaledClock(WallClock().now(), cfg.speedup))
        self.metrics = metrics or FusionMetrics()
        self.precision = cfg.precision
        self.merger = TimestampMerger(set(cfg.regions), cfg.merge_deadline_s)
        self.history = EstimateHistory(tuple(cfg.windows_w))
        self.arrived, self.due, self.outbox_wakeup, self.control_wakeup = Wakeup(), Wakeup(), Wakeup(), Wakeup()
        self.storage = Outage("fusion store", log, gauge=self.metrics.storage_ok, backoff=Backoff(cap_s=1.0))
        self.publishing = Outage("fusion publishing", log)
        self._source = source
        self.source: Source | None = None
        self.link: MqttLink | None = None
        self.store: AggregateStore | None = None
        self.quarantine: Quarantine | None = None
        self.publisher: OutboxSender | None = None
        # Secure aggregation: the fusion center as Prio3's helper (fusion_center.prio3.helper), when configured.
        self.helper = (Prio3Helper(cfg.prio3, regions=cfg.regions, merge_deadline_s=cfg.merge_deadline_s,
                                   registry=self.metrics.registry, storage=self.storage) if cfg.prio3 else None)
        self._held: list = []              # taken from the source, not yet stored (storage failing)
        self._control_sent: tuple | None = None   # (control message, connection) last published
        self.announcer = Announcer(cfg.name, prefix=cfg.discovery_prefix, enabled=cfg.home_assistant_discovery,
                                   sw_version=_version())   # Home Assistant discovery (docs/subscribers.md)

    @property
    def wakeup(self) -> Wakeup:
        """A driver moved a manual clock: merge deadlines may have passed."""
        return self.due

    @property
    def connected(self) -> bool:
        return self.link is not None and self.link.connected.is_set()

    # -- start and stop --------------------------------------------------------
    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        for w in (self.arrived, self.due, self.outbox_wakeup, self.control_wakeup):
            w.bind()
        if self.config_path is not None:
            self._config_mtime = self.config_path.stat().st_mtime
        self.store = AggregateStore(self.cfg.store_path)
        stack.callback(self.store.close)
        self.quarantine = Quarantine(self.store.db, self.metrics.rejected, log)
        if self.helper is not None:
            self.helper.open(self.store.db)
        self._restore()
        stored = self.store.load_control()
        if stored is not None:
            self.precision = ControlMessage.model_validate_json(stored)
            self._adopt(self.cfg.precision)
        await asyncio.to_thread(self._warm_up)
        if self.cfg.metrics_port is not None:
            self.metrics.serve(self.cfg.metrics_port, self.cfg.metrics_host)
        self.link = self.make_link()
        self.link.start()
        stack.callback(self.link.stop)
        self.source = self._source or (KafkaSource(self.cfg.kafka, self.arrived.set) if self.cfg.source == "kafka"
                                       else MqttSource(self.link))
        await self.source.start()
        stack.push_async_callback(self.source.stop)
        if self.helper is not None:
            await self.helper.connect(stack, self.cfg.source, self.cfg.kafka, link=self.link)
        self.publisher = OutboxSender("fusion publishing", unsent=self.store.unpublished, send=self._publish,
                                      mark_sent=lambda row: self.store.mark_published(row[0], row[1], row[3]),
                                      outage=self.publishing, storage=self.storage, wakeup=self.outbox_wakeup)
        if self.cfg.central_target is not None:
            ct = self.cfg.central_target
            log.info("central target (%g, %g) over windows of %d uniformly shuffled reports: broadcasting eps %.4g "
                     "per report; devices whose own eps is lower report nothing (no_eps_level). It holds only for "
                     "fogs with shuffle_mode = \"uniform\": each aggregate's privacy_unit.central_target says "
                     "whether its windows met it",
                     ct.eps, ct.delta, ct.devices, self.precision.eps_levels[0])

    def _warm_up(self) -> None:
        """Estimate one made-up timestamp before taking any window: the
        estimators' first call imports scipy and builds tables (seconds on a
        busy machine), which must not stall the first real timestamps."""
        p = self.precision
        value = 0.0 if p.mechanism in ("binary", "categorical") else p.x_min
        window = WindowMessage.uniform("warm-up", 0, [value] * 12, eps=p.eps_levels[0], kind=p.mechanism)
        try:
            aggregate(0, [window], p, {"warm-up"}, level=self.cfg.level, bootstrap_b=self.cfg.bootstrap_b)
        except Exception as err:  # noqa: BLE001 - best effort: the real timestamps report real errors
            log.debug("estimator warm-up: %r", err)

    def make_link(self) -> MqttLink:
        subs = [(topics.WINDOWS_FILTER, 1)] if self._source is None and self.cfg.source == "mqtt" else []
        # MQTT 5 (a persistent session, as before): aggregates carry a message expiry, a content type and
        # the schema version; the status topic says online / offline (the will) for Home Assistant.
        status = topics.fusion_status_topic(self.cfg.name)
        link = MqttLink(self.cfg.broker, f"fusion-{self.cfg.name}", subscriptions=subs, clean_session=False,
                        manual_ack=True, name="fusion", mqtt5=True, will=(status, "offline", True),
                        birth=(status, "online", True),
                        wakeup=lambda: (self.arrived.set(), self.outbox_wakeup.set(), self.control_wakeup.set()))
        link.on_subscribed = lambda refused: None if refused else log.info("fusion subscribed to %s",
                                                                          topics.WINDOWS_FILTER)
        return link

    def tasks(self):
        return [self._intake(), self._closer(), self.publisher.run(), self._control()] + (
            self.helper.tasks() if self.helper is not None else [])

    def _restore(self) -> None:
        n = 0
        for region, t, payload, received in self.store.pending_windows():
            self.merger.add(WindowMessage.model_validate_json(payload), received)
            n += 1
        wmax = max(self.cfg.windows_w, default=0)
        if wmax:
            self.history.restore(self.store.latest("all", wmax))
        if n:
            log.info("fusion restored %d stored windows of %d timestamps", n, len(self.merger.pending))

    # -- intake -------------------------------------------------------------------
    async def _intake(self) -> None:
        while True:
            if self.storage.down:
                await asyncio.sleep(self.storage.retry_in() or 0)
            got = self._held or self.source.take(BATCH)
            self._held = []
            if not got:
                await self.arrived.wait(None, self.cfg.tick_s)
                continue
            try:
                self._take_batch(got)
                self.storage.recovered()
            except StorageError as err:
                self._held = got      # not acknowledged: retried, or redelivered after a restart
                self.storage.failed(err)
            await asyncio.sleep(0)

    def _take_batch(self, got: list) -> None:
        """Validate and store a batch of windows; acknowledge only what is
        stored or quarantined."""
        now = self.clock.now()
        valid, invalid, prio3 = [], [], []
        for r in got:
            if is_prio3_message(r.payload):
                prio3.append(r)
                continue
            try:
                valid.append((WindowMessage.model_validate_json(r.payload), r))
            except ValidationError as err:
                reason = "not_json" if any(e["type"] == "json_invalid" for e in err.errors()) else "schema"
                invalid.append((reason, str(err).replace("\n", " ")[:500], r))
            except Exception as err:  # noqa: BLE001 - a bug this input triggers must not stop the service
                log.exception("window could not be processed; quarantined")
                invalid.append(("internal", repr(err), r))
        horizon = self._revise_horizon_t()
        schedule = self.precision.schedule()
        now_t = schedule.t_of(now)
        oldest_t = schedule.t_of(now - self.cfg.max_window_age_s)
        fresh, revises, too_late = [], [], 0
        for w, r in valid:
            if w.region not in self.merger.known:
                invalid.append(("unknown_region", f"region {w.region!r} is not one of {sorted(self.merger.known)}",
                                r))
                continue
            if not oldest_t <= w.t <= now_t + 2:
                invalid.append(("t_implausible", f"t={w.t} is not within [{oldest_t}, {now_t + 2}]", r))
                continue
            stored = self.store.revision("all", w.t)
            if stored is not None and w.t < horizon:
                too_late += 1                  # its t can no longer be revised (its windows are pruned)
                continue
            fresh.append((w, r))
            revises.append(stored is not None)
        added = self.store.add_windows([(w.region, w.t, w.revision, w.model_dump_json(), now) for w, _ in fresh])
        if prio3:
            invalid += self._take_prio3(prio3)
        for reason, detail, r in invalid:
            self.quarantine.put("windows", reason, detail, r.payload, now)
        self.metrics.late.inc(too_late)
        for (w, r), new, revise in zip(fresh, added, revises):
            if new:
                self.merger.add(w, now, revises=revise)
                self.metrics.consumed.inc()
            elif self.store.window_payload(w.region, w.t, w.revision) != w.model_dump_json():
                # The fog re-sends the same bytes; a different window for a stored (region, t) is not its.
                self.metrics.conflicts.inc()
                self.quarantine.put("windows", "conflicting_window", f"a second, different window for region "
                                    f"{w.region}, t={w.t} (revision {w.revision}); the first one stands", r.payload,
                                    now)
            else:
                self.metrics.duplicates.inc()
        self.source.ack(got)
        if fresh:
            self.due.set()

    def _revise_horizon_t(self) -> int:
        schedule = self.precision.schedule()
        now_t = schedule.t_of(self.clock.now())
        return now_t - int(self.cfg.revise_for_s // schedule.period_s) - 1

    def _take_prio3(self, got: list) -> list:
        """Secure aggregation: the leader's messages go to the helper's store; the invalid ones are returned."""
        if self.helper is None:
            return [("prio3_not_configured", "a prio3 message, but this fusion center has no [prio3]", r)
                    for r in got]
        self.helper.follow(self.precision, self.clock.now())   # issue 26: the helper's own params, by t
        bad = self.helper.take([r.payload for r in got], time.time(), lambda t: self.store.has_aggregate("all", t))
        return [(b[0], b[1], r) for b, r in zip(bad, got) if b is not None]

    # -- closing ------------------------------------------------------------------
    async def _closer(self) -> None:
        while True:
            if not self.storage.down:
                try:
                    await self._close_due()
                    if self.helper is not None:
                        self._close_prio3()
                except StorageError as err:
                    self.storage.failed(err)
            await self.due.wait(None, self._idle_s())

    def _idle_s(self) -> float:
        """Until the next merge deadline, at most tick_s (a manual clock is
        looked at that often)."""
        wait = self.cfg.tick_s
        if self.merger.first_seen:
            speedup = getattr(self.clock, "speedup", 1.0)
            left = min(self.merger.first_seen.values()) + self.cfg.merge_deadline_s - self.clock.now()
            if speedup != float("inf"):
                wait = max(0.0005, left / speedup)
        if self.storage.down:
            wait = min(wait, self.storage.retry_in() or 0.0)
        return wait

    def _estimate(self, t: int, windows: list[WindowMessage]):  # noqa: ANN202
        t0 = time.perf_counter()
        agg, est = aggregate(t, windows, self.precision, self.merger.known, level=self.cfg.level,
                             bootstrap_b=self.cfg.bootstrap_b, history=self.history.series,
                             windows_w=tuple(self.cfg.windows_w), central_target=self.cfg.central_target,
                             clip_bias_bound=self.cfg.clipping.bias_bound_w if self.cfg.clipping else None)
        return agg, est, time.perf_counter() - t0

    async def _close_due(self) -> int:
        """Estimate every due timestamp, yielding between them (so intake and
        a stop are never held up), and store their aggregates a few at a time:
        one commit (one fsync) per STORE_EVERY_S of estimating, not per t."""
        done, closed, since = [], 0, time.monotonic()
        for t in self.merger.due(self.clock.now()):
            first = self.merger.first_seen.get(t, self.clock.now())
            windows = self.merger.pop(t)
            before = self.store.revision("all", t)
            # A late batch revises t: its aggregate is estimated again over every window of t.
            everything = windows if before is None else \
                [WindowMessage.model_validate_json(p) for p in self.store.aggregated_windows(t)] + windows
            n = sum(w.n for w in everything)
            try:
                if n > LARGE:
                    agg, est, secs = await asyncio.to_thread(self._estimate, t, everything)
                else:
                    agg, est, secs = self._estimate(t, everything)
                    await asyncio.sleep(0)
                if before is not None:
                    agg = agg.model_copy(update={"revision": before + 1})
            except Exception as err:  # noqa: BLE001 - windows that cannot be estimated must not stop the service
                # Valid windows whose values this deployment cannot estimate (e.g. a kind that does not
                # fit its settings): quarantined and dropped, or every restart would fail on them again.
                log.exception("timestamp %d could not be estimated; its %d windows are quarantined", t, len(windows))
                for w in windows:
                    self.quarantine.put(w.topic(), "estimate_failed", repr(err), w.model_dump_json())
                self.store.drop_windows(t)
                continue
            self.metrics.estimator_seconds.observe(secs)
            # At once, not after the commit: the next timestamp's windowed averages include this one.
            self.history.add(agg.mechanism, t, est)
            done.append((t, first, windows, agg, est))
            if time.monotonic() - since >= STORE_EVERY_S:
                closed += self._store(done)
                done, since = [], time.monotonic()
        return closed + (self._store(done) if done else 0)

    def _store(self, done: list) -> int:
        try:
            stored = self.store.store_aggregates("all", [(t, agg.model_dump_json(), agg.revision)
                                                         for t, _, _, agg, _ in done], self.clock.now())
        except StorageError:
            for _, first, windows, _, _ in done:      # they stay pending, and on disk, until they can be stored
                for w in windows:
                    self.merger.add(w, first)
            raise
        for (t, first, _, agg, est), new in zip(done, stored):
            if new:
                self._stored(agg, est, (self.clock.now() - first) / getattr(self.clock, "speedup", 1))
        self.store.prune_windows(self._revise_horizon_t())
        self.outbox_wakeup.set()
        return len(done)

    def _stored(self, agg, est: dict, lag_s: float) -> None:  # noqa: ANN001
        self.metrics.closed.inc()
        self.metrics.show_aggregate(agg, est)
        if not agg.complete:
            self.metrics.incomplete.inc()
        self.metrics.lag.observe(max(0.0, lag_s))

    def _close_prio3(self) -> None:
        """Secure aggregation: publish every t whose regions are ready (or whose merge deadline passed)."""
        now = time.time()
        for t, ready, first in self.helper.due(now):
            made = self.helper.aggregate(t, ready, self.precision, level=self.cfg.level,
                                         history=self.history.series, windows_w=tuple(self.cfg.windows_w),
                                         clip_bias_bound=self.cfg.clipping.bias_bound_w if self.cfg.clipping
                                         else None)
            if made is not None and self.store.store_aggregate("all", t, made[0].model_dump_json(), self.clock.now()):
                self.history.add(made[0].mechanism, t, made[1])
                self._stored(made[0], made[1], now - first)
                self.outbox_wakeup.set()
            self.helper.aggregated(t, stored=made is not None)

    # -- publishing ------------------------------------------------------------------
    async def _publish(self, row: tuple[str, int, str, int]) -> None:
        _scope, t, payload, _revision = row
        if not self.connected:
            raise TransportError("not connected to the broker")
        # QoS 1 publishes queued at once; marked published once every PUBACK came. A revision
        # of an older t goes to its own topic only: `latest` never goes back in time.
        stale_s = expiry_s(self.precision.period_s, self.cfg.latest_expiry_periods)
        futs = [self.link.publish_nowait(topics.aggregate_topic(t), payload,
                                         properties=publish_properties(**aggregate_properties(expiry=None)))]
        if t >= (self.store.newest_t() or t):
            futs.append(self.link.publish_nowait(topics.AGGREGATE_LATEST_TOPIC, payload, retain=True,
                                                 properties=publish_properties(**aggregate_properties(expiry=stale_s))))
        connection = self.link.connects
        announce = self.announcer.due(payload, connection, bands=list(self.precision.bands), expire_after=stale_s)
        if announce is not None:
            futs.append(self.link.publish_nowait(*announce, retain=True))
        try:
            await within(asyncio.gather(*futs), 10.0)
        except asyncio.TimeoutError:
            raise TransportError(f"no PUBACK for aggregate t={t} within 10 s") from None
        if announce is not None:
            self.announcer.sent(connection, announce[1])

    # -- the control message ------------------------------------------------------------
    async def _control(self) -> None:
        while True:
            self._check_config_change()
            self.metrics.period.set(self.precision.period_s)
            key = (self.precision, self.link.connects)
            if self.connected and self._control_sent != key:
                try:
                    payload = self.precision.model_dump_json(exclude_none=True)
                    self.store.save_control(payload)
                    await self.link.publish(topics.CONTROL_TOPIC, payload, retain=True)
                    self._control_sent = key
                    log.info("control message broadcast: %s", json.dumps(self.precision.model_dump()))
                except TransportError as err:
                    log.debug("control message not published yet: %s", err)
                except StorageError as err:
                    self.storage.failed(err)
            await self.control_wakeup.wait(None, 1.0)

    def _check_config_change(self) -> None:
        if self.config_path is None:
            return
        try:
            mtime = self.config_path.stat().st_mtime
        except OSError:
            return
        if mtime == self._config_mtime:
            return
        self._config_mtime = mtime
        try:
            new = FusionConfig.load(self.config_path)
        except ConfigError as err:
            log.error("config change ignored: %s", err)
            return
        self._adopt(new.precision)

    def _adopt(self, configured: ControlMessage) -> None:
        """Follow the config's [precision]. A new period or epoch0 is not
        applied as is (t would jump, and devices never report a t they have
        passed): it becomes a schedule change at a stated t, continuing t."""
        cur = self.precision
        if cur.same_schedule_as(configured.period_s, configured.epoch0):
            keep = {k: getattr(cur, k) for k in ("epoch0", "since_t", "previous_period_s", "previous_epoch0")}
            new = ControlMessage(**{**configured.model_dump(), **keep})
        else:
            lead = self.cfg.schedule_lead_periods * max(cur.period_s, configured.period_s)
            base = ControlMessage(**{**configured.model_dump(), **{k: getattr(cur, k) for k in (
                "period_s", "epoch0", "since_t", "previous_period_s", "previous_epoch0")}})
            new = base.rescheduled(configured.period_s, configured.epoch0, self.clock.now(), lead)
            log.info("schedule change: period %g s -> %g s from t=%d (%s UTC), t continues", cur.period_s,
                     new.period_s, new.since_t, time.strftime("%Y-%m-%d %H:%M:%S",
                                                              time.gmtime(new.schedule().switch_unix())))
        if new != cur:
            self.precision = new
            log.info("precision changed%s", f" in {self.config_path}" if self.config_path else "")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rase")
    except PackageNotFoundError:
        return "0"
