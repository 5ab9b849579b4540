"""Merging the windows of all regions for one timestamp, and turning the
merged reports into an Aggregate. Pure: the service supplies time and storage."""

from __future__ import annotations

from collections import Counter

import numpy as np

from fusion_center.estimators import Estimate, bootstrap_unbiased, mle, sample_mean, windowed
from rase_common.privacy import UnitPrivacy
from fusion_center.ldp.context import add_context
from rase_common.mechanisms import Estimates, Mechanism, Setting, mechanism
from rase_common.protocol.aggregate import Aggregate, EstimateOut, WindowedOut
from rase_common.protocol.control import ControlMessage
from rase_common.protocol.window import WindowMessage

ESTIMATORS = ("mean", "bs", "se", "mle", "count")   # every name an aggregate's estimates may carry


def history_key(kind: str, name: str) -> str:
    """Windowed averages only combine estimates of one kind of report: a
    "mean" in watts and a "mean" share of devices on never share a series."""
    return name if kind == "br" else f"{kind}/{name}"


class TimestampMerger:
    """t closes when every known region has sent its window, or deadline_s
    after its first window arrived. A late batch (revision >= 1) of a t
    already aggregated closes it again at once (`revises`)."""

    def __init__(self, known_regions: set[str], deadline_s: float):
        if deadline_s < 0:
            raise ValueError(f"merge deadline must be >= 0 s, got {deadline_s}")
        self.known = set(known_regions)
        self.deadline_s = deadline_s
        self.pending: dict[int, dict[tuple[str, int], WindowMessage]] = {}
        self.first_seen: dict[int, float] = {}
        self.revising: set[int] = set()

    def add(self, w: WindowMessage, now: float, *, revises: bool = False) -> str:
        """'accepted' or 'duplicate' (same region, t and revision again)."""
        got = self.pending.setdefault(w.t, {})
        if (w.region, w.revision) in got:
            return "duplicate"
        got[(w.region, w.revision)] = w
        self.first_seen.setdefault(w.t, now)
        if revises:
            self.revising.add(w.t)
        return "accepted"

    def due(self, now: float) -> list[int]:
        return sorted(t for t, got in self.pending.items()
                      if t in self.revising or self.known <= {r for r, _ in got}
                      or now - self.first_seen[t] >= self.deadline_s)

    def pop(self, t: int) -> list[WindowMessage]:
        self.first_seen.pop(t, None)
        self.revising.discard(t)
        return [w for _, w in sorted(self.pending.pop(t, {}).items())]


# The paper's estimators, published where the mechanism lists them (Mechanism.extras).
EXTRA_MEANING = {
    "bs": "bootstrap of the same unbiased mean; percentile interval (published for levels of >= 100 reports: "
          "below that it can cover the true mean less than 93% of the time)",
    "se": "the paper's sample mean of the reports: the mean of the CLAMPED reports, biased when clamped; "
          "Student's t interval for that (not for the true mean)",
    "mle": "a MEDIAN, not a mean: the paper's weighted median (eq. 14) of the noisy reports, near the readings' "
           "median; its interval is an order-statistic interval for the median of the reports",
}
# The percentile bootstrap of a mean of few reports covers too rarely (BR: 0.91-0.93 at
# 10-20 reports, 0.926-0.943 at 45 on the bundled houses, 0.940-0.985 at 1,000; benchmarks/coverage.py).
BS_MIN_REPORTS = 100


def _bs(mech: Mechanism, by_level: dict[float, np.ndarray], setting: Setting, level: float, bootstrap_b: int,
        rng) -> Estimate | None:
    if min(v.size for v in by_level.values()) < BS_MIN_REPORTS:
        return None
    return bootstrap_unbiased(by_level, mech, setting, bootstrap_b, level, rng)


def _se(mech: Mechanism, by_level: dict[float, np.ndarray], setting: Setting, level: float, bootstrap_b: int,
        rng) -> Estimate:
    return sample_mean(np.concatenate(list(by_level.values())), level, student=True)


def _mle(mech: Mechanism, by_level: dict[float, np.ndarray], setting: Setting, level: float, bootstrap_b: int,
         rng) -> Estimate:
    z = np.concatenate(list(by_level.values()))
    eps = np.concatenate([np.full(v.size, e) for e, v in by_level.items()])
    return mle(z, setting.calibration.delta / eps, level)


EXTRAS = {"bs": _bs, "se": _se, "mle": _mle}


def estimate_reports(kind: str, by_level: dict[float, np.ndarray], setting: Setting, *, level: float = 0.95,
                     bootstrap_b: int = 1000, rng: np.random.Generator | None = None
                     ) -> tuple[Estimates, dict[str, Estimate], dict[str, str]]:
    """The estimates of one timestamp's reports of one kind, by eps level: the
    mechanism's own (registry) plus the paper's estimators it lists; returns
    (the mechanism's Estimates, every named estimate, what each estimates)."""
    mech = mechanism(kind)
    out = mech.estimate(by_level, setting, level)
    est = dict(out.named)
    for name in mech.extras:
        e = EXTRAS[name](mech, by_level, setting, level, bootstrap_b, rng)
        if e is not None:
            est[name] = e
    return out, est, dict(out.meaning) | {name: EXTRA_MEANING[name] for name in mech.extras}


def aggregate(t: int, windows: list[WindowMessage], precision: ControlMessage, known_regions: set[str], *,
              level: float = 0.95, bootstrap_b: int = 1000, history: dict[str, dict[int, Estimate]] | None = None,
              windows_w: tuple[int, ...] = (), rng: np.random.Generator | None = None, central_target=None,
              clip_bias_bound: float | None = None, unit: UnitPrivacy | None = None) -> tuple[Aggregate, dict]:
    """Estimates for one timestamp, by the registry entry of the kind of
    report (rase_common.mechanisms). `history` maps history_key(kind,
    estimator) -> {t: Estimate} of earlier timestamps (for windowed averages);
    the new ones are returned alongside so the caller can extend it (under
    history_key(agg.mechanism, name)). central_target and clip_bias_bound:
    see fusion_center.ldp.context; unit: the fusion center's own [privacy]
    (default: a device, event-level)."""
    # Estimate the reports as what they are (each batch's kind): the deployment's
    # mechanism, or around a change of it the kind most reports have; others are counted.
    kinds: Counter[str] = Counter()
    for w in windows:
        for b in w.batches:
            kinds[b.kind] += len(b.values)
    kind = precision.mechanism if precision.mechanism in kinds else kinds.most_common(1)[0][0]
    by_level: dict[float, np.ndarray] = {}
    for w in windows:
        for b in w.batches:
            if b.kind == kind:
                v = np.asarray(b.values, dtype=np.float64)
                e = float(b.eps)
                by_level[e] = np.concatenate([by_level[e], v]) if e in by_level else v
    out, est, what = estimate_reports(kind, by_level, Setting.of(precision), level=level, bootstrap_b=bootstrap_b,
                                      rng=rng)
    win: dict[str, dict[str, WindowedOut]] = {}
    hist = history or {}
    for w_len in windows_w:
        per = {}
        for name in est:
            series = dict(hist.get(history_key(kind, name), {}))
            series[t] = est[name]
            per[name] = WindowedOut(**windowed(series, t, w_len, level))
        win[str(w_len)] = per
    regions = sorted(w.region for w in windows)
    privacy = [{"region": w.region, "eps0": b.eps, "reports": len(b.values), **(b.guarantee or {})}
               for w in windows for b in w.batches]
    agg = Aggregate(t=t, n=sum(v.size for v in by_level.values()), regions=regions,
                    complete=known_regions <= set(regions), level=level,
                    estimates={k: _out(e) for k, e in est.items()}, what=what, mechanism=kind,
                    other_kind_reports=sum(kinds.values()) - kinds[kind],
                    frequencies=[_out(e) for e in out.frequencies], clamped=out.clamped,
                    share_at_bound=out.share_at_bound, windowed=win, privacy=privacy)
    agg = add_context(agg, windows, precision, central_target=central_target, clip_bias_bound=clip_bias_bound,
                      unit=unit)
    return agg, est


def _out(e: Estimate) -> EstimateOut:
    return EstimateOut(value=e.value, ci=(e.lo, e.hi), n=e.n, method=e.method or None)
