"""The fog service: `rase fog --config configs/fog.example.toml`.

paho's thread hands raw messages over a queue; the asyncio loop validates
them, journals the accepted ones, and only then acknowledges them to the
broker (manual acks). Windows due to close are shuffled (RS), stored in the
journal's outbox, and forwarded through the sink.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import queue
import sqlite3
import time
from collections import Counter

import paho.mqtt.client as mqtt

from edge_agent import wire
from rase_common.amplification import conservative_n, window_guarantee
from fog_shuffler.config import FogConfig
from fog_shuffler.ingest import Accepted, IngestRules, Rejected, validate
from fog_shuffler.protocol import PROTOCOL_FIELDS, Protocol, ProtocolFollower
from fog_shuffler.journal import Journal
from fog_shuffler.metrics import FogMetrics
from fog_shuffler.randomness import window_rng
from fog_shuffler.robust_shuffler import shuffle_window, smallest_batch
from rase_common.protocol.window import LevelBatch, WindowCounts, WindowMessage
from fog_shuffler.sinks import KafkaWindowSink, MqttWindowSink, SinkError, WindowSink
from fog_shuffler.windows import ClosedWindow, WindowManager
from rase_common.protocol import topics
from rase_common.clock import ScaledClock, WallClock
from rase_common.loop import Wakeup, seconds_to_next_period, wait_or_stop
from rase_common.quarantine import Quarantine
from rase_common.storage import StorageOutage
from rase_common.mqtt import connect_in_background, paho_client

log = logging.getLogger(__name__)
BATCH = 5000
LARGE_WINDOW = 20_000  # shuffle in a worker thread above this many reports


def rules_for(rules: IngestRules, p: Protocol) -> IngestRules:
    """The ingest rules under protocol parameters p."""
    return dataclasses.replace(rules, eps_levels=p.eps_levels, x_min=p.x_min, x_max=p.x_max, mechanism=p.mechanism,
                               categories=len(p.bands) + 1, gamma=p.gamma, beta=p.beta, rho=p.rho)


class FogService:
    def __init__(self, cfg: FogConfig, *, clock=None, sink: WindowSink | None = None,
                 metrics: FogMetrics | None = None):
        self.cfg = cfg
        self.clock = clock or (WallClock() if cfg.speedup == 1 else ScaledClock(WallClock().now(), cfg.speedup))
        self.metrics = metrics or FogMetrics()
        self.graphs = {r: rc.graph() for r, rc in cfg.regions.items()}
        registered = {r: rc.all_devices() for r, rc in cfg.regions.items()}
        self.windows = WindowManager(registered=registered, k_min=cfg.k_min, lateness_periods=cfg.lateness_periods)
        # The retained control message owns the protocol parameters; the fog follows it.
        own = Protocol(cfg.period_s, cfg.epoch0, tuple(cfg.eps_levels), cfg.x_min, cfg.x_max,
                       mechanism=cfg.device_mechanism, on_above=cfg.on_above, bands=tuple(cfg.bands))
        self.protocol = ProtocolFollower(own, grace_periods=cfg.lateness_periods + 2)
        self.rules = rules_for(IngestRules(devices={d: r for r, ds in registered.items() for d in ds},
                                           eps_levels=own.eps_levels, x_min=own.x_min, x_max=own.x_max,
                                           lateness_periods=cfg.lateness_periods), own)
        self.controls: queue.SimpleQueue = queue.SimpleQueue()
        self.params = cfg.shuffler.params()
        self.journal = Journal(cfg.journal_path)
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.wakeup = Wakeup()            # set by paho's thread when a report arrives: no polling tick
        self.client = paho_client(cfg.broker, f"fog-{cfg.name}", clean_session=False, manual_ack=True)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.client.on_disconnect = self._on_disconnect
        self.sink = sink or (KafkaWindowSink(cfg.kafka) if cfg.sink == "kafka" else MqttWindowSink(self.client))
        self.quarantine = Quarantine(self.journal.db, self.metrics.rejected, log)
        self._held: list[mqtt.MQTTMessage] = []   # taken, not journaled (storage failing)
        self._rebuild = False
        self.storage = StorageOutage(self.metrics.storage_ok, log, "fog journal", "reports")
        self.rejected_since: Counter[str] = Counter()
        self.late_reported: Counter[str] = Counter()
        self.suppressed_since: Counter[str] = Counter()
        self.connected = False            # to the broker (forwarding needs no more)
        self.subscribed = False           # the broker confirmed the report subscriptions
        self.reports_taken = 0            # messages journaled or rejected since start (a replay driver's progress)
        self.windows_sent = 0             # windows the sink accepted since start
        self._restore()

    # -- start-up -----------------------------------------------------------
    def _restore(self) -> None:
        """Reopen journaled windows exactly as they were before a crash."""
        self.windows.closed = self.journal.closed_windows()
        dups = self.journal.duplicate_counts()
        n = 0
        for region, t, device, y, eps, mech in self.journal.open_reports():
            self.windows.add(Accepted(region, device, t, y, eps, mech))
            n += 1
        for (region, t), k in dups.items():
            if (region, t) in self.windows.open:
                self.windows.open[(region, t)].duplicates = k
        if n or self.windows.closed:
            log.info("fog restored %d open reports in %d windows; %d windows already closed",
                     n, len(self.windows.open), len(self.windows.closed))

    def _on_message(self, client, userdata, msg):  # noqa: ANN001
        (self.controls if msg.topic == topics.CONTROL_TOPIC else self.inbox).put(msg)
        self.wakeup.set()

    def _on_connect(self, client, userdata, flags, reason_code, properties):  # noqa: ANN001
        if reason_code.is_failure:
            log.error("fog connect refused: %s", reason_code)
            return
        self.connected = True
        self.subscribed = False
        self.wakeup.set()  # windows held while offline can go now
        log.info("fog connected to %s:%d (session present: %s)", self.cfg.broker.host, self.cfg.broker.port,
                 flags.session_present)
        client.subscribe(self._filters())

    def _filters(self) -> list[tuple[str, int]]:
        return [(topics.reports_filter(r), 1) for r in self.cfg.regions] + [(topics.CONTROL_TOPIC, 1)]

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties):  # noqa: ANN001
        # Reports published before the SUBACK may not be routed to a new
        # session: "subscribed" (and its log line) is what to wait for.
        refused = [topic for (topic, _q), rc in zip(self._filters(), reason_codes) if rc.is_failure]
        if refused:
            log.error("the broker refused the fog's subscription to %s: check its ACL", ", ".join(refused))
        self.metrics.subscription_refused.set(len(refused))
        self.subscribed = not any(t.startswith(topics.REPORTS_PREFIX) for t in refused)
        if self.subscribed:
            log.info("fog subscribed to the reports of %s", ", ".join(sorted(self.cfg.regions)))

    def _on_disconnect(self, client, userdata, flags, reason_code, properties):  # noqa: ANN001
        self.connected = self.subscribed = False

    def now_t(self) -> int:
        return self.protocol.current.t_of(self.clock.now())

    # -- the control message --------------------------------------------------
    def process_controls(self) -> None:
        """Follow the retained control message, validated with the devices' own parser."""
        while True:
            try:
                msg = self.controls.get_nowait()
            except queue.Empty:
                return
            if msg.payload:          # an empty retained payload only clears the topic
                try:
                    new = Protocol.from_control(wire.parse_control(msg.payload), self.protocol.current)
                except ValueError as err:
                    self.quarantine.put(msg.topic, "control_invalid", str(err), msg.payload)
                else:
                    self._follow(new)
            if msg.qos > 0:
                self.client.ack(msg.mid, msg.qos)

    def _follow(self, new: Protocol) -> None:
        now_t = self.now_t()
        changed = self.protocol.apply(new, now_t)
        if not changed:
            return
        cur = self.protocol.current
        self.rules = rules_for(self.rules, cur)
        log.info("fog follows the control message from t=%d: %s", now_t,
                 ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items()))
        drift = self.protocol.drift()
        for field in PROTOCOL_FIELDS:
            self.metrics.config_drift.labels(field).set(1 if field in drift else 0)
        if drift:
            log.warning("the fog's config disagrees with the control message (%s); following the control "
                        "message: update the fog's config", ", ".join(f"{k}: config {a}, control {b}"
                                                                       for k, (a, b) in drift.items()))

    def _validate(self, msg, now_t: int) -> Accepted:
        """A report is good if the current parameters accept it, or, just after
        a change, the previous ones."""
        try:
            return validate(msg.topic, msg.payload, now_t, self.rules)
        except Rejected as err:
            if err.reason not in ("eps_not_on_menu", "implausible_y", "impossible_y"):
                raise
            first = err
        for old in self.protocol.candidates(now_t)[1:]:
            try:
                return validate(msg.topic, msg.payload, now_t, rules_for(self.rules, old))
            except Rejected:
                pass
        raise first

    # -- ingest -------------------------------------------------------------
    def process_inbox(self) -> int:
        """Validate and journal what arrived; ack only after the commit.
        Counters and quarantine rows follow the commit, so a batch retried
        after a storage failure is counted once."""
        msgs: list[mqtt.MQTTMessage] = self._held
        self._held = []
        while len(msgs) < BATCH:
            try:
                msgs.append(self.inbox.get_nowait())
            except queue.Empty:
                break
        if not msgs:
            return 0
        if self._rebuild:
            self._rebuild_from_journal()
        now_t = self.now_t()
        rows, dups, after = [], [], []
        for msg in msgs:
            try:
                rep = self._validate(msg, now_t)
                outcome = self.windows.add(rep)
            except Rejected as err:
                after.append(("rejected", err.reason, str(err), msg))
                continue
            except Exception as err:  # noqa: BLE001 - a bug one report triggers must not stop the fog
                log.exception("report on %s could not be processed; quarantined", msg.topic)
                after.append(("rejected", "internal", repr(err), msg))
                continue
            if outcome == "accepted":
                rows.append((rep.region, rep.t, rep.device, rep.y, rep.eps, 0, rep.mechanism))
            elif outcome == "duplicate":
                dups.append((rep.region, rep.t))
            after.append((outcome, None, None, msg))
        try:
            self.journal.add_reports(rows, dups)
        except sqlite3.Error:
            self._held = msgs        # not acknowledged: retried, or redelivered by the broker after a restart
            self._rebuild = True     # the in-memory windows took reports the journal did not
            raise
        outcomes: Counter[str] = Counter()
        for kind, reason, detail, msg in after:
            if kind == "rejected":
                self.quarantine.put(msg.topic, reason, detail, msg.payload)   # counts it by reason too
                parts = msg.topic.split("/")
                if len(parts) == 5 and parts[3] in self.cfg.regions:
                    self.rejected_since[parts[3]] += 1
            else:
                outcomes[kind] += 1
        for kind, counter in (("accepted", self.metrics.accepted), ("duplicate", self.metrics.duplicates),
                              ("late", self.metrics.late)):
            if outcomes[kind]:
                counter.inc(outcomes[kind])
        self.client.ack_batch(msgs)
        self.reports_taken += len(msgs)
        return len(msgs)

    def _rebuild_from_journal(self) -> None:
        """After a storage failure: the windows as the journal has them."""
        self.windows = WindowManager(registered=self.windows.registered, k_min=self.cfg.k_min,
                                     lateness_periods=self.cfg.lateness_periods)
        self._restore()
        self._rebuild = False

    # -- closing and forwarding ----------------------------------------------
    def build_message(self, cw: ClosedWindow) -> tuple[WindowMessage, float]:
        """Shuffle each eps level (of each report kind) of a closed window on its own (see schema)."""
        t0 = time.perf_counter()
        batches = []
        mechs = cw.mechanisms or ["br"] * len(cw.eps)
        for level, kind in sorted(set(zip(cw.eps, mechs))):
            idx = [i for i, (e, m) in enumerate(zip(cw.eps, mechs)) if e == level and m == kind]
            res = shuffle_window([cw.devices[i] for i in idx], self.graphs[cw.region], self.params, window_rng())
            # BUDS: a report hides among its batch only, so the smallest batch is the n.
            hidden_among = smallest_batch(res) if res.mechanism == "buds" else len(idx)
            guarantee = window_guarantee(res.mechanism, eps0=level, n=conservative_n(hidden_among),
                                         delta=self.cfg.privacy_delta, alpha=self.params.alpha, theta=res.theta)
            batches.append(LevelBatch(eps=level, kind=kind, values=[cw.values[idx[j]] for j in res.order],
                                      mechanism=res.mechanism, theta=res.theta, delta_k=res.delta_k,
                                      omega=res.omega, k=res.k, groups=res.groups, guarantee=guarantee))
        elapsed = time.perf_counter() - t0
        counts = WindowCounts(duplicates=cw.duplicates, eps_level_dropped=cw.eps_level_dropped,
                              late=self.windows.late[cw.region] - self.late_reported[cw.region],
                              rejected=self.rejected_since[cw.region],
                              suppressed_windows=self.suppressed_since[cw.region])
        msg = WindowMessage(region=cw.region, t=cw.t, n=len(cw.values), alpha=self.params.alpha,
                            batches=batches, counts=counts)
        return msg, elapsed

    async def close_due(self) -> int:
        closed = 0
        for region, t in self.windows.due(self.now_t()):
            cw = self.windows.close(region, t)
            self.metrics.eps_dropped.inc(cw.eps_level_dropped)
            if cw.suppressed:
                self.journal.close_window(region, t, None)
                self.metrics.suppressed.inc()
                self.suppressed_since[region] += 1
                log.info("window (%s, %d) suppressed: %d reports < k_min %d", region, t, len(cw.values),
                         self.cfg.k_min)
                continue
            if len(cw.values) > LARGE_WINDOW:
                msg, elapsed = await asyncio.to_thread(self.build_message, cw)
            else:
                msg, elapsed = self.build_message(cw)
            self.journal.close_window(region, t, msg.model_dump_json())
            self.late_reported[region] = self.windows.late[region]
            self.rejected_since[region] = 0
            self.suppressed_since[region] = 0
            self.metrics.shuffle_seconds.observe(elapsed)
            self.metrics.window_size.observe(msg.n)
            # "mallows" or "buds" when every level got that shuffle, else "uniform".
            mechs = {b.mechanism for b in msg.batches}
            self.metrics.forwarded.labels(mechs.pop() if len(mechs) == 1 else "uniform").inc()
            closed += 1
        t_min = self.now_t() - self.cfg.lateness_periods - 2
        self.windows.forget_before(t_min)
        if closed:
            # Reports older than t_min are rejected as out of range, so their
            # windows' closed markers and sent messages are no longer needed.
            self.journal.prune(t_min)
        return closed

    async def forward_outbox(self) -> int:
        sent = 0
        if self.cfg.sink == "mqtt" and not (self.connected and self.client.is_connected()):
            return 0
        for region, t, payload in self.journal.unsent():
            try:
                await self.sink.send(region, t, payload)
            except SinkError as err:
                log.warning("forwarding deferred: %s", err)
                break
            self.journal.mark_sent(region, t)
            self.windows_sent += 1
            sent += 1
        return sent

    # -- main loop ------------------------------------------------------------
    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        if self.cfg.metrics_port is not None:
            self.metrics.serve(self.cfg.metrics_port, self.cfg.metrics_host)
        connect_in_background(self.client, self.cfg.broker)
        log.info("fog %s started: regions %s, k_min %d, period %.3g s", self.cfg.name,
                 sorted(self.cfg.regions), self.cfg.k_min, self.cfg.period_s)
        self.wakeup.bind()
        try:
            while not stop.is_set():
                wait = self.storage.wait_s()
                if wait:
                    await wait_or_stop(stop, wait)
                    continue
                try:
                    self.process_controls()
                    # One batch at a time, so a flood of reports cannot starve closing.
                    took = self.process_inbox()
                    await self.close_due()
                    await self.forward_outbox()
                    self.storage.recovered()
                except sqlite3.Error as err:   # disk full, read-only, I/O error: a state, not a crash
                    self._rebuild = True       # the in-memory windows may hold what the journal lost
                    self.storage.failed(err)
                    continue
                if took < BATCH and self.inbox.empty() and not self._held:
                    # Idle: wake on the next report or the next period boundary (windows come due).
                    cur = self.protocol.current
                    await self.wakeup.wait(stop, seconds_to_next_period(self.clock, cur.epoch0, cur.period_s,
                                                                        self.cfg.tick_s))
        finally:
            if hasattr(self.sink, "stop"):
                await self.sink.stop()
            self.client.disconnect()
            self.client.loop_stop()
            self.journal.close()
