"""Merging the windows of all regions for one timestamp, and turning the
merged reports into an Aggregate. Pure: the service supplies time and storage."""

from __future__ import annotations

from collections import Counter

import numpy as np

from rase_common.protocol.window import WindowMessage
from fusion_center.estimators import (Estimate, bootstrap_counts, br_bootstrap, mle, sample_mean, unbiased_mean,
                                      windowed)
from fusion_center.counts import on_count
from fusion_center.frequencies import band_frequencies
from rase_common.protocol.aggregate import BINARY_MEANING, CATEGORICAL_MEANING, Aggregate, EstimateOut, WindowedOut
from rase_common.protocol.control import ControlMessage

ESTIMATORS = ("mean", "bs", "se", "mle", "count")   # every name an aggregate's estimates may carry


def history_key(kind: str, name: str) -> str:
    """Windowed averages only combine estimates of one kind of report: a
    "mean" in watts and a "mean" share of devices on never share a series."""
    return name if kind == "br" else f"{kind}/{name}"


class TimestampMerger:
    """t closes when every known region has sent its window, or deadline_s
    after its first window arrived."""

    def __init__(self, known_regions: set[str], deadline_s: float):
        if deadline_s < 0:
            raise ValueError(f"merge deadline must be >= 0 s, got {deadline_s}")
        self.known = set(known_regions)
        self.deadline_s = deadline_s
        self.pending: dict[int, dict[str, WindowMessage]] = {}
        self.first_seen: dict[int, float] = {}

    def add(self, w: WindowMessage, now: float) -> str:
        """'accepted' or 'duplicate' (same region and t again)."""
        self.known.add(w.region)
        got = self.pending.setdefault(w.t, {})
        if w.region in got:
            return "duplicate"
        got[w.region] = w
        self.first_seen.setdefault(w.t, now)
        return "accepted"

    def due(self, now: float) -> list[int]:
        return sorted(t for t, got in self.pending.items()
                      if self.known <= set(got) or now - self.first_seen[t] >= self.deadline_s)

    def pop(self, t: int) -> list[WindowMessage]:
        self.first_seen.pop(t, None)
        return [w for _, w in sorted(self.pending.pop(t, {}).items())]


def aggregate(t: int, windows: list[WindowMessage], precision: ControlMessage, known_regions: set[str], *,
              level: float = 0.95, bootstrap_b: int = 1000, history: dict[str, dict[int, Estimate]] | None = None,
              windows_w: tuple[int, ...] = (), rng: np.random.Generator | None = None) -> tuple[Aggregate, dict]:
    """Estimates for one timestamp. `history` maps history_key(kind, estimator)
    -> {t: Estimate} of earlier timestamps (for windowed averages); the new
    ones are returned alongside so the caller can extend it (under
    history_key(agg.mechanism, name))."""
    # Estimate the reports as what they are (each batch's kind): the deployment's
    # mechanism, or around a change of it the kind most reports have; others are counted.
    kinds: Counter[str] = Counter()
    for w in windows:
        for b in w.batches:
            kinds[b.kind] += len(b.values)
    kind = precision.mechanism if precision.mechanism in kinds else kinds.most_common(1)[0][0]
    batches = [b for w in windows for b in w.batches if b.kind == kind]
    z = np.concatenate([np.asarray(b.values, dtype=np.float64) for b in batches])
    eps = np.concatenate([np.full(len(b.values), float(b.eps)) for b in batches])
    by_level: dict[float, np.ndarray] = {}
    for b in batches:
        v = np.asarray(b.values, dtype=np.float64)
        by_level[float(b.eps)] = np.concatenate([by_level[float(b.eps)], v]) if float(b.eps) in by_level else v
    cal = precision.calibration()
    extra: dict = {"mechanism": kind, "other_kind_reports": sum(kinds.values()) - kinds[kind]}
    clamped, at_bound = False, 0.0
    if kind in ("binary", "categorical"):
        if kind == "binary":
            count = on_count(by_level, level)
            n = count.n
            est = {"count": count, "mean": Estimate(count.value / n, count.lo / n, count.hi / n, n)}
            extra["what"] = BINARY_MEANING
        else:
            freqs = band_frequencies(by_level, len(precision.bands) + 1, level)
            est = {}
            extra["what"] = CATEGORICAL_MEANING
            extra["frequencies"] = [EstimateOut(value=e.value, ci=(e.lo, e.hi), n=e.n) for e in freqs]
    else:
        lam = cal.delta / eps
        if kind == "br":
            # BR clamps below eps_star: each clamped report is replaced by its exact conditional expectation.
            mean = unbiased_mean(z, eps, cal, level)
            bs = br_bootstrap(by_level, cal, bootstrap_b, level, rng)
            clamped = bool(np.any(eps < cal.eps_star))
        else:
            # Duchi, Piecewise and Hybrid reports are each unbiased for the clipped reading already.
            mean = sample_mean(z, level)
            bs = bootstrap_counts(z, bootstrap_b, level, rng=rng, step=cal.gamma, origin=cal.x_min)
        est = {"mean": mean, "bs": bs, "se": sample_mean(z, level), "mle": mle(z, lam, level)}
        at_bound = float(np.mean((z == cal.x_min) | (z == cal.x_max)))
    win: dict[str, dict[str, WindowedOut]] = {}
    hist = history or {}
    for w in windows_w:
        per = {}
        for name in est:
            series = dict(hist.get(history_key(kind, name), {}))
            series[t] = est[name]
            per[name] = WindowedOut(**windowed(series, t, w, level))
        win[str(w)] = per
    regions = sorted(w.region for w in windows)
    privacy = [{"region": w.region, "eps0": b.eps, "reports": len(b.values), **(b.guarantee or {})}
               for w in windows for b in w.batches]
    agg = Aggregate(t=t, n=int(z.size), regions=regions, complete=known_regions <= set(regions), level=level,
                    estimates={k: EstimateOut(value=e.value, ci=(e.lo, e.hi), n=e.n) for k, e in est.items()},
                    clamped=clamped, share_at_bound=at_bound, windowed=win, privacy=privacy, **extra)
    return agg, est
