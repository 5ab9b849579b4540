"""The fog service: `rase fog --config configs/fog.example.toml`.

paho's thread hands raw messages over a queue; the asyncio loop validates
them, journals the accepted ones, and only then acknowledges them to the
broker (manual acks). Windows due to close are shuffled (RS), stored in the
journal's outbox, and forwarded through the sink.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import time
from collections import Counter

import paho.mqtt.client as mqtt

from fog_shuffler.config import FogConfig
from fog_shuffler.ingest import Accepted, IngestRules, Rejected, validate
from fog_shuffler.journal import Journal
from fog_shuffler.metrics import FogMetrics
from fog_shuffler.randomness import window_rng
from fog_shuffler.robust_shuffler import robust_shuffle
from fog_shuffler.schema import WindowCounts, WindowMessage
from fog_shuffler.sinks import MqttWindowSink, SinkError, WindowSink
from fog_shuffler.windows import ClosedWindow, WindowManager
from rase.clock import ScaledClock, WallClock
from rase.loop import wait_or_stop
from rase.mqtt import connect_in_background, paho_client

log = logging.getLogger(__name__)
BATCH = 5000
LARGE_WINDOW = 20_000  # shuffle in a worker thread above this many reports


class FogService:
    def __init__(self, cfg: FogConfig, *, clock=None, sink: WindowSink | None = None,
                 metrics: FogMetrics | None = None):
        self.cfg = cfg
        self.clock = clock or (WallClock() if cfg.speedup == 1 else ScaledClock(WallClock().now(), cfg.speedup))
        self.metrics = metrics or FogMetrics()
        self.graphs = {r: rc.graph() for r, rc in cfg.regions.items()}
        registered = {r: rc.all_devices() for r, rc in cfg.regions.items()}
        self.rules = IngestRules(devices={d: r for r, ds in registered.items() for d in ds},
                                 eps_levels=tuple(cfg.eps_levels), x_min=cfg.x_min, x_max=cfg.x_max,
                                 lateness_periods=cfg.lateness_periods)
        self.windows = WindowManager(registered=registered, k_min=cfg.k_min, lateness_periods=cfg.lateness_periods)
        self.params = cfg.shuffler.params()
        self.journal = Journal(cfg.journal_path)
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.client = paho_client(cfg.broker, f"fog-{cfg.name}", clean_session=False, manual_ack=True)
        self.client.on_connect = self._on_connect
        self.client.on_message = lambda c, u, msg: self.inbox.put(msg)
        self.sink = sink or MqttWindowSink(self.client)
        self.rejected_since: Counter[str] = Counter()
        self.late_reported: Counter[str] = Counter()
        self.suppressed_since: Counter[str] = Counter()
        self.connected = False
        self._restore()

    # -- start-up -----------------------------------------------------------
    def _restore(self) -> None:
        """Reopen journaled windows exactly as they were before a crash."""
        self.windows.closed = self.journal.closed_windows()
        dups = self.journal.duplicate_counts()
        n = 0
        for region, t, device, y, eps, _seq in self.journal.open_reports():
            self.windows.add(Accepted(region, device, t, y, eps))
            n += 1
        for (region, t), k in dups.items():
            if (region, t) in self.windows.open:
                self.windows.open[(region, t)].duplicates = k
        if n or self.windows.closed:
            log.info("fog restored %d open reports in %d windows; %d windows already closed",
                     n, len(self.windows.open), len(self.windows.closed))

    def _on_connect(self, client, userdata, flags, reason_code, properties):  # noqa: ANN001
        if reason_code.is_failure:
            log.error("fog connect refused: %s", reason_code)
            return
        client.subscribe([(f"rase/v1/reports/{r}/+", 1) for r in self.cfg.regions])
        self.connected = True
        log.info("fog connected to %s:%d (session present: %s)", self.cfg.broker.host, self.cfg.broker.port,
                 flags.session_present)

    def now_t(self) -> int:
        return int((self.clock.now() - self.cfg.epoch0) // self.cfg.period_s)

    # -- ingest -------------------------------------------------------------
    def process_inbox(self) -> int:
        """Validate and journal what arrived; ack only after the commit."""
        msgs: list[mqtt.MQTTMessage] = []
        while len(msgs) < BATCH:
            try:
                msgs.append(self.inbox.get_nowait())
            except queue.Empty:
                break
        if not msgs:
            return 0
        now_t = self.now_t()
        rows, dups = [], []
        for msg in msgs:
            try:
                rep = validate(msg.topic, msg.payload, now_t, self.rules)
            except Rejected as err:
                self.metrics.rejected.labels(err.reason).inc()
                parts = msg.topic.split("/")
                if len(parts) == 5 and parts[3] in self.cfg.regions:
                    self.rejected_since[parts[3]] += 1
                log.debug("rejected %s: %s", msg.topic, err)
                continue
            outcome = self.windows.add(rep)
            if outcome == "accepted":
                rows.append((rep.region, rep.t, rep.device, rep.y, rep.eps, 0))
                self.metrics.accepted.inc()
            elif outcome == "duplicate":
                dups.append((rep.region, rep.t))
                self.metrics.duplicates.inc()
            else:
                self.metrics.late.inc()
        self.journal.add_reports(rows, dups)
        for msg in msgs:
            if msg.qos > 0:
                self.client.ack(msg.mid, msg.qos)
        return len(msgs)

    # -- closing and forwarding ----------------------------------------------
    def build_message(self, cw: ClosedWindow) -> tuple[WindowMessage, float]:
        t0 = time.perf_counter()
        res = robust_shuffle(cw.devices, self.graphs[cw.region], self.params, window_rng())
        elapsed = time.perf_counter() - t0
        counts = WindowCounts(duplicates=cw.duplicates, eps_level_dropped=cw.eps_level_dropped,
                              late=self.windows.late[cw.region] - self.late_reported[cw.region],
                              rejected=self.rejected_since[cw.region],
                              suppressed_windows=self.suppressed_since[cw.region])
        msg = WindowMessage(region=cw.region, t=cw.t, n=len(cw.values),
                            values=[cw.values[i] for i in res.order], eps=[cw.eps[i] for i in res.order],
                            mechanism=res.mechanism, alpha=self.params.alpha, theta=res.theta,
                            delta_k=res.delta_k, omega=res.omega, k=res.k, groups=res.groups, counts=counts)
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
            self.metrics.forwarded.labels(msg.mechanism).inc()
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
        if not self.connected or not self.client.is_connected():
            return 0
        for region, t, payload in self.journal.unsent():
            try:
                await self.sink.send(region, t, payload)
            except SinkError as err:
                log.warning("forwarding deferred: %s", err)
                break
            self.journal.mark_sent(region, t)
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
        try:
            while not stop.is_set():
                while self.process_inbox():
                    pass
                await self.close_due()
                await self.forward_outbox()
                await wait_or_stop(stop, self.cfg.tick_s)
        finally:
            self.client.disconnect()
            self.client.loop_stop()
            self.journal.close()
