"""Prometheus metrics of the fusion center (rase_fusion_...)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class FusionMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        r = self.registry = registry or CollectorRegistry()
        self.consumed = Counter("rase_fusion_windows_consumed", "Valid windows stored", registry=r)
        self.rejected = Counter("rase_fusion_windows_rejected", "Windows that failed validation, by reason "
                                "(quarantined and acknowledged)", ["reason"], registry=r)
        for reason in ("not_json", "schema", "internal", "estimate_failed", "unknown_region", "t_implausible",
                       "conflicting_window"):
            self.rejected.labels(reason)
        self.conflicts = Counter("rase_fusion_windows_conflicting", "A second, different window for a (region, t) "
                                 "already stored: a forged window or two fogs claiming one region (an alarm)",
                                 registry=r)
        self.storage_ok = Gauge("rase_fusion_storage_ok", "1 while the store can be written; 0 while input is "
                                "held unacknowledged and writes are retried", registry=r)
        self.storage_ok.set(1)
        self.duplicates = Counter("rase_fusion_windows_duplicate", "Windows received again", registry=r)
        self.dead_letters = Counter("rase_fusion_dead_letters", "Aggregates the broker refused for good (its ACL, "
                                    "their size): moved to the dead letters, the queue goes on (`rase deadletters`)",
                                    registry=r)
        self.late = Counter("rase_fusion_windows_late", "Windows for a timestamp already closed", registry=r)
        self.estimate = Gauge("rase_fusion_estimate", "Newest aggregate: each estimator's value and interval "
                              "bounds (bound = value, lo, hi)", ["estimator", "bound"], registry=r)
        # A scrape sees only the newest t of rase_fusion_estimate; each t stays in the windowed average
        # for w periods, so a scrape every few periods misses no timestamp (docs/observability.md).
        self.windowed = Gauge("rase_fusion_windowed_estimate", "Newest windowed average Win(t, w) of each "
                              "estimator over the last w timestamps: value and interval bounds (bound = value, lo, "
                              "hi), and how many of the w were present (bound = present)",
                              ["estimator", "w", "bound"], registry=r)
        self.newest_t = Gauge("rase_fusion_newest_t", "Logical timestamp t of the newest aggregate", registry=r)
        self.last_aggregate = Gauge("rase_fusion_last_aggregate_timestamp_seconds", "Unix time the newest "
                                    "aggregate was stored (the start time until there is one)", registry=r)
        self.last_aggregate.set(time.time())
        self.period = Gauge("rase_fusion_period_seconds", "period_s of the precision broadcast: one logical "
                            "timestamp, simulated seconds", registry=r)
        self.closed = Counter("rase_fusion_timestamps_closed", "Timestamps estimated and stored", registry=r)
        self.incomplete = Counter("rase_fusion_timestamps_incomplete",
                                  "Timestamps closed by the deadline without every region", registry=r)
        self.lag = Histogram("rase_fusion_lag_seconds", "First window of t received to aggregate published",
                             registry=r, buckets=(0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100))
        self.estimator_seconds = Histogram("rase_fusion_estimator_seconds", "Time to compute one aggregate",
                                           registry=r, buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3))

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        start_http_server(port, addr=host, registry=self.registry)

    def show_aggregate(self, agg, estimates: dict) -> None:  # noqa: ANN001 - rase_common.protocol.aggregate.Aggregate
        """The newest stored aggregate (agg) and its estimates, for dashboards and alerts."""
        for name, e in estimates.items():
            for bound, v in (("value", e.value), ("lo", e.lo), ("hi", e.hi)):
                self.estimate.labels(name, bound).set(v)
        for w, per in agg.windowed.items():
            for name, win in per.items():
                self.windowed.labels(name, w, "present").set(win.present)
                if win.value is not None and win.ci is not None:
                    for bound, v in (("value", win.value), ("lo", win.ci[0]), ("hi", win.ci[1])):
                        self.windowed.labels(name, w, bound).set(v)
        self.newest_t.set(agg.t)
        self.last_aggregate.set(time.time())
