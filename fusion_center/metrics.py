"""Prometheus metrics of the fusion center (rase_fusion_...)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class FusionMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        r = self.registry = registry or CollectorRegistry()
        self.consumed = Counter("rase_fusion_windows_consumed", "Valid windows stored", registry=r)
        self.rejected = Counter("rase_fusion_windows_rejected", "Windows that failed validation, by reason "
                                "(quarantined and acknowledged)", ["reason"], registry=r)
        for reason in ("not_json", "schema", "internal", "estimate_failed"):
            self.rejected.labels(reason)
        self.storage_ok = Gauge("rase_fusion_storage_ok", "1 while the store can be written; 0 while input is "
                                "held unacknowledged and writes are retried", registry=r)
        self.storage_ok.set(1)
        self.duplicates = Counter("rase_fusion_windows_duplicate", "Windows received again", registry=r)
        self.late = Counter("rase_fusion_windows_late", "Windows for a timestamp already closed", registry=r)
        self.estimate = Gauge("rase_fusion_estimate", "Newest aggregate: each estimator's value and interval "
                              "bounds (bound = value, lo, hi)", ["estimator", "bound"], registry=r)
        self.closed = Counter("rase_fusion_timestamps_closed", "Timestamps estimated and stored", registry=r)
        self.incomplete = Counter("rase_fusion_timestamps_incomplete",
                                  "Timestamps closed by the deadline without every region", registry=r)
        self.lag = Histogram("rase_fusion_lag_seconds", "First window of t received to aggregate published",
                             registry=r, buckets=(0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100))
        self.estimator_seconds = Histogram("rase_fusion_estimator_seconds", "Time to compute one aggregate",
                                           registry=r, buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3))

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        start_http_server(port, addr=host, registry=self.registry)

    def show_estimates(self, estimates: dict) -> None:
        """The newest aggregate's estimates, for dashboards."""
        for name, e in estimates.items():
            for bound, v in (("value", e.value), ("lo", e.lo), ("hi", e.hi)):
                self.estimate.labels(name, bound).set(v)
