"""The per-timestamp estimates a fusion center keeps for windowed averages.
Pure: one series per kind of report and estimator, trimmed to the longest
window configured."""

from __future__ import annotations

from collections import defaultdict

from fusion_center.estimators import Estimate
from fusion_center.ldp.merge import ESTIMATORS, history_key


class EstimateHistory:
    def __init__(self, windows_w: tuple[int, ...]):
        self.keep = max(windows_w, default=0)
        self.series: dict[str, dict[int, Estimate]] = defaultdict(dict)   # history_key(kind, name) -> {t: est}

    def add(self, kind: str, t: int, estimates: dict[str, Estimate]) -> None:
        for name, est in estimates.items():
            self.series[history_key(kind, name)][t] = est
        self.trim(t)

    def trim(self, newest_t: int) -> None:
        """Forget what no window ending at or after newest_t can use."""
        cutoff = newest_t - self.keep
        for series in self.series.values():
            for old in [k for k in series if k <= cutoff]:
                del series[old]

    def restore(self, aggregates: list[dict]) -> None:
        """From stored aggregates (oldest first), as AggregateStore.latest returns them."""
        for row in aggregates:
            est = {}
            for name in ESTIMATORS:
                e = row["estimates"].get(name)   # rows stored before an estimator existed lack it
                if e is not None:
                    est[name] = Estimate(e["value"], e["ci"][0], e["ci"][1], e["n"])
            self.add(row.get("mechanism", "br"), row["t"], est)
