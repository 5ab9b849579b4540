"""Prometheus metrics of the fog (rase_fog_...), on a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from fog_shuffler import ingest
from fog_shuffler.protocol import PROTOCOL_FIELDS

WINDOW_MECHANISMS = ("mallows", "uniform", "buds")   # how a forwarded window was shuffled


class FogMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        r = self.registry = registry or CollectorRegistry()
        self.accepted = Counter("rase_fog_reports_accepted", "Reports accepted into a window", registry=r)
        self.rejected = Counter("rase_fog_reports_rejected", "Reports rejected, by reason", ["reason"], registry=r)
        self.duplicates = Counter("rase_fog_reports_duplicate", "Repeated (device, t) reports dropped", registry=r)
        self.late = Counter("rase_fog_reports_late", "Reports that came after their window closed and past "
                            "the allowed lateness (not forwarded; not hostile)", registry=r)
        self.eps_dropped = Counter("rase_fog_reports_eps_level_dropped",
                                   "Reports dropped because their eps level had fewer than k_min", registry=r)
        self.forwarded = Counter("rase_fog_windows_forwarded", "Windows forwarded, by mechanism", ["mechanism"],
                                 registry=r)
        self.suppressed = Counter("rase_fog_windows_suppressed", "Windows under k_min, never forwarded", registry=r)
        self.window_size = Histogram("rase_fog_window_size", "Reports per forwarded window", registry=r,
                                     buckets=(10, 30, 100, 300, 1000, 3000, 10_000, 100_000, 1_000_000))
        self.shuffle_seconds = Histogram("rase_fog_shuffle_seconds", "Time to run RS on one window", registry=r,
                                         buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10))
        self.storage_ok = Gauge("rase_fog_storage_ok", "1 while the journal can be written; 0 while reports are "
                                "held unacknowledged and writes are retried", registry=r)
        self.storage_ok.set(1)
        self.late_batches = Counter("rase_fog_late_batches", "Late batches forwarded: reports that came after "
                                    "their window closed, within the allowed lateness", registry=r)
        self.close_delay = Histogram("rase_fog_window_close_delay_periods", "Periods a window closed behind "
                                     "schedule (a storage outage held its reports)", registry=r,
                                     buckets=(0, 1, 2, 4, 8, 16, 64, 256))
        self.forwarding_ok = Gauge("rase_fog_forwarding_ok", "1 while the sink takes windows; 0 while forwarding "
                                   "fails and is retried with backoff", registry=r)
        self.forwarding_ok.set(1)
        self.forward_failures = Counter("rase_fog_forward_failures", "Failed attempts to forward a window "
                                        "(each retried)", registry=r)
        self.dead_letters = Counter("rase_fog_dead_letters", "Outgoing messages the sink refused for good (an ACL, "
                                    "their size): moved to the dead letters, the queue goes on (`rase deadletters`)",
                                    registry=r)
        self.outbox_windows = Gauge("rase_fog_outbox_windows", "Windows closed and journaled, not yet forwarded",
                                    registry=r)
        self.ingest_paused = Gauge("rase_fog_ingest_paused", "1 while the outbox is full and the fog takes no "
                                   "reports (the broker holds them)", registry=r)
        self.subscription_refused = Gauge("rase_fog_subscriptions_refused", "Topic filters the broker refused "
                                          "at the last subscribe (its ACL): reports or control messages that "
                                          "will not arrive", registry=r)
        self.config_drift = Gauge("rase_fog_config_drift", "1 where the fog's own config disagrees with the "
                                  "control message it follows, by field", ["field"], registry=r)
        self.devices_quarantined = Gauge("rase_fog_devices_quarantined", "Devices whose reports the plausibility "
                                         "test found impossible for every reading in the range: their reports are "
                                         "rejected (quarantined_device) until an operator releases them", registry=r)
        for field in PROTOCOL_FIELDS:
            self.config_drift.labels(field).set(0)
        self.add_reasons(ingest.BASE_REASONS + ("internal",))
        for mech in WINDOW_MECHANISMS:
            self.forwarded.labels(mech)

    def add_reasons(self, reasons: tuple[str, ...]) -> None:
        """Rejection reasons (a role's) whose counters start at 0."""
        ingest.add_reasons(tuple(r for r in reasons if r != "internal" and not r.startswith("control_")))
        for reason in reasons:
            self.rejected.labels(reason)

    def value(self, name: str, **labels: str) -> float:
        """Current value of a counter, e.g. value("reports_rejected", reason="oversized")."""
        v = self.registry.get_sample_value(f"rase_fog_{name}_total", labels or None)
        return v or 0.0

    def summary(self) -> dict[str, int]:
        """The counts a run report shows."""
        v = self.value
        by_mech = {m: int(v("windows_forwarded", mechanism=m)) for m in WINDOW_MECHANISMS}
        return {"windows_forwarded": sum(by_mech.values()), **by_mech,
                "windows_suppressed": int(v("windows_suppressed")),
                "rejected": int(sum(v("reports_rejected", reason=r) for r in ingest.REASONS)),
                "late": int(v("reports_late")), "accepted": int(v("reports_accepted")),
                "devices_quarantined": int(self.registry.get_sample_value("rase_fog_devices_quarantined") or 0)}

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        start_http_server(port, addr=host, registry=self.registry)
