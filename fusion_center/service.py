"""The fusion center service: `rase fusion --config configs/fusion.example.toml`.

Windows are validated, stored, and only then acknowledged. A timestamp closes
when every known region arrived or the merge deadline passed; its aggregate
is stored once (idempotent on (scope, t)) and then published: retained on
rase/v1/aggregates/latest and on rase/v1/aggregates/t/{t}. The precision
requirement is published retained at start and whenever the config file's
[precision] table changes.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
import logging
import sqlite3
import time
from pathlib import Path

import paho.mqtt.client as mqtt
from pydantic import ValidationError

from fog_shuffler.schema import WindowMessage
from fusion_center.config import FusionConfig
from fusion_center.estimators import Estimate
from fusion_center.merge import ESTIMATORS, TimestampMerger, aggregate, history_key
from fusion_center.metrics import FusionMetrics
from fusion_center.schema import AGGREGATE_LATEST_TOPIC, CONTROL_TOPIC, PrecisionControl, aggregate_topic
from fusion_center.sources import KafkaWindowSource, MqttWindowSource, WindowSource
from fusion_center.store import AggregateStore
from rase_common.quarantine import Quarantine
from rase_common.storage import StorageOutage
from rase_common.clock import ScaledClock, WallClock
from rase_common.loop import Wakeup
from rase_common.mqtt import connect_in_background, paho_client
from rase_common.settings import ConfigError

log = logging.getLogger(__name__)
LARGE = 20_000  # estimate in a worker thread above this many reports


class FusionService:
    def __init__(self, cfg: FusionConfig, *, config_path: str | Path | None = None, clock=None,
                 source: WindowSource | None = None, metrics: FusionMetrics | None = None):
        self.cfg = cfg
        self.config_path = Path(config_path) if config_path else None
        self._config_mtime = self.config_path.stat().st_mtime if self.config_path else None
        self.clock = clock or (WallClock() if cfg.speedup == 1 else ScaledClock(WallClock().now(), cfg.speedup))
        self.metrics = metrics or FusionMetrics()
        self.precision = cfg.precision
        self.store = AggregateStore(cfg.store_path)
        self.merger = TimestampMerger(set(cfg.regions), cfg.merge_deadline_s)
        self.client = paho_client(cfg.broker, f"fusion-{cfg.name}", clean_session=False, manual_ack=True)
        self.client.on_connect = self._on_connect
        self.wakeup = Wakeup()            # set when a window or a PUBACK arrives: no polling tick
        self.client.on_publish = lambda *a: self.wakeup.set()
        self.source = source or (KafkaWindowSource(cfg.kafka, self.wakeup) if cfg.source == "kafka"
                                 else MqttWindowSource(self.client, wakeup=self.wakeup))
        self.history: dict[str, dict[int, Estimate]] = defaultdict(dict)   # history_key(kind, name) -> {t: est}
        self.quarantine = Quarantine(self.store.db, self.metrics.rejected, log)
        self._held: list = []             # taken from the source, not yet stored (storage failing)
        self.storage = StorageOutage(self.metrics.storage_ok, log, "fusion store", "input")
        self.connected = False
        self._control_sent: PrecisionControl | None = None
        self._inflight: dict[tuple[str, int], list[mqtt.MQTTMessageInfo]] = {}
        self._restore()

    def _restore(self) -> None:
        n = 0
        for region, t, payload, received in self.store.pending_windows():
            self.merger.add(WindowMessage.model_validate_json(payload), received)
            n += 1
        wmax = max(self.cfg.windows_w, default=0)
        for row in self.store.latest("all", wmax) if wmax else []:
            for name in ESTIMATORS:
                e = row["estimates"].get(name)   # rows stored before an estimator existed lack it
                if e is not None:
                    key = history_key(row.get("mechanism", "br"), name)
                    self.history[key][row["t"]] = Estimate(e["value"], e["ci"][0], e["ci"][1], e["n"])
        if n:
            log.info("fusion restored %d stored windows of %d timestamps", n, len(self.merger.pending))

    def _on_connect(self, client, userdata, flags, reason_code, properties):  # noqa: ANN001
        if reason_code.is_failure:
            log.error("fusion connect refused: %s", reason_code)
            return
        self.connected = True
        self._control_sent = None  # (re)publish the retained precision after every connect
        self.wakeup.set()
        log.info("fusion connected to %s:%d", self.cfg.broker.host, self.cfg.broker.port)

    # -- precision broadcast ---------------------------------------------------
    def publish_precision(self) -> None:
        self.metrics.period.set(self.precision.period_s)
        if not self.connected or self._control_sent == self.precision:
            return
        self.client.publish(CONTROL_TOPIC, self.precision.model_dump_json(), qos=1, retain=True)
        self._control_sent = self.precision
        log.info("precision broadcast: %s", self.precision.model_dump())

    def check_config_change(self) -> None:
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
        if new.precision != self.precision:
            self.precision = new.precision
            log.info("precision changed in %s", self.config_path)

    # -- windows -----------------------------------------------------------------
    async def process_incoming(self) -> int:
        """Validate and store what arrived; acknowledge only what is stored
        or quarantined. While the store cannot be written nothing is taken or
        acknowledged (the broker keeps it) and the write is retried."""
        if self.storage.wait_s():
            return 0
        got = self._held or await self.source.poll(5000)
        self._held = []
        now = self.clock.now()
        for i, r in enumerate(got):
            try:
                self._take(r, now)
            except sqlite3.Error as err:
                self._held = got[i:]
                self.storage.failed(err)
                return i
            except Exception as err:  # noqa: BLE001 - a bug this input triggers must not stop the service
                log.exception("window could not be processed; quarantined")
                self.quarantine.put("windows", "internal", repr(err), r.payload, now)
                r.ack()
        self.storage.recovered()
        return len(got)

    def _take(self, r, now: float) -> None:
        try:
            w = WindowMessage.model_validate_json(r.payload)
        except ValidationError as err:
            reason = "not_json" if any(e["type"] == "json_invalid" for e in err.errors()) else "schema"
            self.quarantine.put("windows", reason, str(err).replace("\n", " ")[:500], r.payload, now)
            r.ack()
            return
        if self.store.has_aggregate("all", w.t):
            self.metrics.late.inc()
        elif self.store.add_window(w.region, w.t, w.model_dump_json(), now):
            self.merger.add(w, now)
            self.metrics.consumed.inc()
        else:
            self.metrics.duplicates.inc()
        r.ack()

    def _estimate(self, t: int, windows: list[WindowMessage]):
        t0 = time.perf_counter()
        agg, est = aggregate(t, windows, self.precision, self.merger.known, level=self.cfg.level,
                             bootstrap_b=self.cfg.bootstrap_b, history=self.history,
                             windows_w=tuple(self.cfg.windows_w))
        return agg, est, time.perf_counter() - t0

    async def close_due(self) -> int:
        closed = 0
        for t in self.merger.due(self.clock.now()):
            first = self.merger.first_seen.get(t, self.clock.now())
            windows = self.merger.pop(t)
            n = sum(w.n for w in windows)
            try:
                if n > LARGE:
                    agg, est, secs = await asyncio.to_thread(self._estimate, t, windows)
                else:
                    agg, est, secs = self._estimate(t, windows)
            except Exception as err:  # noqa: BLE001 - windows that cannot be estimated must not stop the service
                # Valid windows whose values this deployment cannot estimate (e.g. a kind that does not
                # fit its settings): quarantined and dropped, or every restart would fail on them again.
                log.exception("timestamp %d could not be estimated; its %d windows are quarantined", t, len(windows))
                for w in windows:
                    self.quarantine.put(w.topic(), "estimate_failed", repr(err), w.model_dump_json())
                self.store.drop_windows(t)
                continue
            self.metrics.estimator_seconds.observe(secs)
            try:
                stored = self.store.store_aggregate("all", t, agg.model_dump_json(), self.clock.now())
            except sqlite3.Error:
                for w in windows:                  # they stay pending, and on disk, until it can be stored
                    self.merger.add(w, first)
                raise
            if stored:
                self.metrics.closed.inc()
                self.metrics.show_aggregate(agg, est)
                if not agg.complete:
                    self.metrics.incomplete.inc()
                for name in est:
                    self.history[history_key(agg.mechanism, name)][t] = est[name]
                cutoff = t - max(self.cfg.windows_w, default=0)
                for series in self.history.values():
                    for old in [k for k in series if k <= cutoff]:
                        del series[old]
                self.metrics.lag.observe(max(0.0, (self.clock.now() - first) / getattr(self.clock, "speedup", 1)))
            closed += 1
        return closed

    def publish_unpublished(self) -> int:
        """Publish stored aggregates; mark them published once both PUBACKs came."""
        done = [key for key, infos in self._inflight.items() if all(i.is_published() for i in infos)]
        for scope, t in done:
            self.store.mark_published(scope, t)
            del self._inflight[(scope, t)]
        if not self.connected:
            return len(done)
        for scope, t, payload in self.store.unpublished():
            if (scope, t) in self._inflight:
                continue
            infos = [self.client.publish(aggregate_topic(t), payload, qos=1),
                     self.client.publish(AGGREGATE_LATEST_TOPIC, payload, qos=1, retain=True)]
            if any(i.rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN) for i in infos):
                break
            self._inflight[(scope, t)] = infos
        return len(done)

    def _idle_s(self) -> float:
        """How long the loop may sleep with nothing to do: until the next merge
        deadline, and at most tick_s (the config file is watched that often)."""
        wait = self.cfg.tick_s
        if self.merger.first_seen:
            speedup = getattr(self.clock, "speedup", 1.0)
            left = min(self.merger.first_seen.values()) + self.cfg.merge_deadline_s - self.clock.now()
            if speedup != float("inf"):
                wait = min(wait, max(0.0005, left / speedup))
        return wait

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        if self.cfg.metrics_port is not None:
            self.metrics.serve(self.cfg.metrics_port, self.cfg.metrics_host)
        connect_in_background(self.client, self.cfg.broker)
        self.wakeup.bind()
        await self.source.start()
        if self.cfg.central_target is not None:
            ct = self.cfg.central_target
            log.info("central target (%g, %g) over windows of %d uniformly shuffled reports: broadcasting eps %.4g "
                     "per report; devices whose own eps is lower report nothing (no_eps_level)",
                     ct.eps, ct.delta, ct.devices, self.precision.eps_levels[0])
        last_config_check = 0.0
        try:
            while not stop.is_set():
                self.publish_precision()
                try:
                    took = await self.process_incoming()
                    await self.close_due()
                    self.publish_unpublished()
                except sqlite3.Error as err:   # disk full, read-only, I/O error: a state, not a crash
                    self.storage.failed(err)
                    took = 0
                if time.monotonic() - last_config_check > 1.0:
                    self.check_config_change()
                    last_config_check = time.monotonic()
                if not took:
                    retry_in = self.storage.wait_s()   # while storage fails: until the next write attempt
                    idle = self._idle_s() if retry_in is None else retry_in
                    await self.wakeup.wait(stop, idle)
        finally:
            await self.source.stop()
            self.client.disconnect()
            self.client.loop_stop()
            self.store.close()
