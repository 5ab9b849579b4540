"""Prometheus metrics of the fusion center (rase_fusion_...)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server


class FusionMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        r = self.registry = registry or CollectorRegistry()
        self.consumed = Counter("rase_fusion_windows_consumed", "Valid windows stored", registry=r)
        self.rejected = Counter("rase_fusion_windows_rejected", "Windows that failed validation", registry=r)
        self.duplicates = Counter("rase_fusion_windows_duplicate", "Windows received again", registry=r)
        self.late = Counter("rase_fusion_windows_late", "Windows for a timestamp already closed", registry=r)
        self.closed = Counter("rase_fusion_timestamps_closed", "Timestamps estimated and stored", registry=r)
        self.incomplete = Counter("rase_fusion_timestamps_incomplete",
                                  "Timestamps closed by the deadline without every region", registry=r)
        self.lag = Histogram("rase_fusion_lag_seconds", "First window of t received to aggregate published",
                             registry=r, buckets=(0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100))
        self.estimator_seconds = Histogram("rase_fusion_estimator_seconds", "Time to compute one aggregate",
                                           registry=r, buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3))

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        start_http_server(port, addr=host, registry=self.registry)
