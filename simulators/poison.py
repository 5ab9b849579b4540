"""`rase eval poison`: m malicious devices among n, what they do to `mean`,
before and after the fog's attacker detection.

The fog's rules are simulated directly (no brokers), with the real classes:
every report goes through the fog's ingest check (fog_shuffler.ingest,
the mechanism's exact output set) and the fog's detector
(fog_shuffler.screen.detection.Detector); the estimates are the registry's
(`mechanism(kind).estimate`, what the fusion center publishes as `mean`).

Readings are the bundled REFIT houses, cloned (each clone shifted by an
hour) to n devices; m = round(fraction x n) of them are attackers. Each
attacker does the most damaging thing the fog accepts:
- "largest output": the mechanism's largest possible report, every period
  (BR clamped: x_max, which debiases to x_max + gamma tau; Duchi: +C;
  PM/HM: PM's top output);
- "false reading": the honest randomizer run on x_max, every period (a
  device lying about its reading: no LDP protocol can tell);
- "beyond range": x_max + 10 Delta (what an unchecked fog would take).
The shift is against a clean run: the same honest reports, with the
attackers reporting their own readings honestly. "After detection" drops
an attacker's reports from the one that tipped its test on (the fog drops
that report from its open window too).

Noise here comes from a seeded generator (evaluation only).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from rase_device.mechanisms import MEAN_MECHANISMS
from fog_shuffler.screen.detection import Detector
from fog_shuffler.ingest import IngestRules, y_rejection
from rase_common.mechanisms import Setting, mechanism
from rase_common.mechanisms.br import is_clamped
from simulators.evaluation import readings_matrix
from simulators.pipeline import fleet
from simulators.refit import epoch0_of, load_house

BEHAVIOURS = ("largest output", "false reading", "beyond range")
DEFAULT_MECHANISMS = MEAN_MECHANISMS


@dataclass(frozen=True)
class PoisonRow:
    mechanism: str
    eps: float
    devices: int
    attackers: int
    behaviour: str
    accepted: float                  # share of the attackers' reports the ingest check accepted
    shift_before: float              # mean over t of (mean with attackers - clean mean), no detection (W)
    ci_shift_before: tuple[float, float]   # the same for the interval's ends
    coverage_before: float           # of the true mean by mean's interval
    quarantined: int                 # attackers the detector quarantined
    minutes_to_quarantine: float | None   # the slowest attacker's, from its first report
    shift_after: float               # over the whole run, with detection
    shift_after_quarantine: float | None   # once every attacker is quarantined
    coverage_after: float
    coverage_clean: float
    honest_quarantined: int          # honest devices quarantined (false positives)


def largest_output(kind: str, setting: Setting, eps: float) -> float:
    """The largest report the fog's ingest check accepts for the mechanism at
    eps (binary: 1; categorical: band 0, or with OUE every band's bit set)."""
    cal = setting.calibration
    m = mechanism(kind)
    if kind == "br":
        sup = m.support(setting, eps)
        return cal.x_max if is_clamped(cal, eps) else sup.value(sup.hi)
    if kind in ("binary", "categorical"):
        top = m.support(setting, eps).top - 1
        return float(top if kind == "binary" or top >= setting.categories else 0)
    support = m.support(setting, eps)
    return float(max(v for v in m.device_values(cal, eps) if support.reason(float(v)) is None))


def _attack_reports(kind: str, behaviour: str, setting: Setting, eps: float, shape: tuple[int, int],
                    rng: np.random.Generator) -> np.ndarray:
    if behaviour == "largest output":
        return np.full(shape, largest_output(kind, setting, eps))
    if behaviour == "false reading":
        return mechanism(kind).sample(setting, eps, np.full(shape, setting.x_max), rng)
    if behaviour == "beyond range":
        return np.full(shape, setting.x_max + 10 * (setting.x_max - setting.x_min))
    raise ValueError(f"behaviour must be one of {BEHAVIOURS}, got {behaviour!r}")


def _estimates(kind: str, setting: Setting, eps: float, columns: list[np.ndarray]) -> np.ndarray:
    """(value, lo, hi) of `mean` per timestamp (NaN where the fog would forward nothing)."""
    out = np.full((len(columns), 3), np.nan)
    m = mechanism(kind)
    for j, z in enumerate(columns):
        if z.size >= 10:        # k_min
            e = m.estimate({eps: z}, setting).named["mean"]
            out[j] = (e.value, e.lo, e.hi)
    return out


class Fleet:
    """One mechanism's honest reports and what the fog makes of them."""

    def __init__(self, kind: str, x: np.ndarray, eps: float, setting: Setting, rng: np.random.Generator,
                 period_s: float):
        self.kind, self.x, self.eps, self.setting, self.period_s = kind, x, eps, setting, period_s
        self.present = ~np.isnan(x)
        self.reports = mechanism(kind).sample(setting, eps, np.nan_to_num(x), rng)
        self.rules = IngestRules(devices={}, eps_levels=(eps,), x_min=setting.x_min, x_max=setting.x_max,
                                 lateness_periods=1, mechanism=kind, gamma=setting.gamma, beta=setting.beta,
                                 rho=setting.rho)
        self.accepted = self.present & self.ingest(self.reports)

    def ingest(self, y: np.ndarray) -> np.ndarray:
        """The fog's ingest check on every report (True: accepted)."""
        values, inverse = np.unique(y, return_inverse=True)
        ok = np.array([y_rejection(float(v), self.eps, self.rules) is None for v in values])
        return ok[inverse].reshape(y.shape)

    def quarantine_times(self, y: np.ndarray, accepted: np.ndarray, rows) -> dict[int, int]:
        """row -> the t of the report that tipped the detector, for the devices in `rows`."""
        det = Detector(period_s=self.period_s, setting=self.setting)
        out = {}
        for i in rows:
            for t in np.flatnonzero(accepted[i]):
                if det.observe(f"d{i}", float(y[i, t]), self.eps, self.kind, int(t), day=0) is not None:
                    out[i] = int(t)
                    break
        return out


def _scenario(fl: Fleet, attackers: np.ndarray, behaviour: str, truth: np.ndarray, clean: np.ndarray,
              honest_quarantine: dict[int, int], rng: np.random.Generator) -> PoisonRow:
    n, n_t = fl.x.shape
    y = fl.reports.copy()
    sent = fl.accepted.copy()
    y[attackers] = _attack_reports(fl.kind, behaviour, fl.setting, fl.eps, (attackers.size, n_t), rng)
    ok = fl.ingest(y[attackers])
    sent[attackers] = ok                                   # attackers report every period
    q_att = fl.quarantine_times(y, sent, attackers)
    stop = np.full(n, n_t)
    for i, t in {**honest_quarantine, **q_att}.items():
        stop[i] = t
    kept = sent & (np.arange(n_t)[None, :] < stop[:, None])
    before = _estimates(fl.kind, fl.setting, fl.eps, [y[sent[:, j], j] for j in range(n_t)])
    after = _estimates(fl.kind, fl.setting, fl.eps, [y[kept[:, j], j] for j in range(n_t)])
    done = max(q_att.values()) + 1 if len(q_att) == attackers.size and q_att else None
    late = slice(done, None) if done is not None and done < n_t else None
    return PoisonRow(
        mechanism=fl.kind, eps=fl.eps, devices=n, attackers=int(attackers.size), behaviour=behaviour,
        accepted=float(ok.mean()), shift_before=_mean(before[:, 0] - clean[:, 0]),
        ci_shift_before=(_mean(before[:, 1] - clean[:, 1]), _mean(before[:, 2] - clean[:, 2])),
        coverage_before=_coverage(before, truth), quarantined=len(q_att),
        minutes_to_quarantine=(max(q_att.values()) + 1) * fl.period_s / 60 if q_att else None,
        shift_after=_mean(after[:, 0] - clean[:, 0]),
        shift_after_quarantine=None if late is None else _mean(after[late, 0] - clean[late, 0]),
        coverage_after=_coverage(after, truth), coverage_clean=_coverage(clean, truth),
        honest_quarantined=len(honest_quarantine))


def _mean(a: np.ndarray) -> float:
    return float(np.nanmean(a))


def _coverage(est: np.ndarray, truth: np.ndarray) -> float:
    ok = ~np.isnan(est[:, 0]) & ~np.isnan(truth)
    return float(np.mean((est[ok, 1] <= truth[ok]) & (truth[ok] <= est[ok, 2])))


def run_poison(data_dir: Path, houses: list[int], *, eps: float = 1.0, hours: float = 1.0, clone: int = 22,
               fractions=(0.01, 0.05), mechanisms=DEFAULT_MECHANISMS, behaviours=BEHAVIOURS, period_s: float = 8.0,
               seed: int | None = None, progress: Callable[[PoisonRow], None] | None = None) -> list[PoisonRow]:
    hs = [load_house(data_dir, h) for h in houses]
    epoch0 = epoch0_of(hs, period_s)
    n_t = int(hours * 3600 // period_s)
    x = readings_matrix(fleet(hs, clone, 3600.0), epoch0, period_s, 0, n_t)
    setting = Setting()
    with np.errstate(invalid="ignore"):
        truth = np.nansum(np.clip(x, setting.x_min, None), axis=0) / (~np.isnan(x)).sum(axis=0)
    rng = np.random.default_rng(seed)
    pick = rng.permutation(x.shape[0])
    rows = []
    for kind in mechanisms:
        fl = Fleet(kind, x, eps, setting, rng, period_s)
        honest_q = fl.quarantine_times(fl.reports, fl.accepted, range(x.shape[0]))
        clean = _estimates(kind, setting, eps, [fl.reports[fl.accepted[:, j], j] for j in range(n_t)])
        for f in fractions:
            attackers = np.sort(pick[:max(1, round(f * x.shape[0]))])
            hq = {i: t for i, t in honest_q.items() if i not in set(attackers)}
            for behaviour in behaviours:
                row = _scenario(fl, attackers, behaviour, truth, clean, hq, rng)
                rows.append(row)
                if progress:
                    progress(row)
    return rows


def format_rows(rows: list[PoisonRow]) -> str:
    head = (f"{'mechanism':<10}{'m/n':>9} {'behaviour':<15}{'accepted':>9}{'shift':>9}{'ci shift':>17}{'cover':>7}"
            f"{'quarantined':>12}{'within':>9}{'shift':>9}{'after q.':>9}{'cover':>7}")
    out = [f"{'':<44}{'--- before detection ---':>34}{'---------- after detection ----------':>46}", head]
    for r in rows:
        within = "-" if r.minutes_to_quarantine is None else f"{r.minutes_to_quarantine:.1f} min"
        after_q = "-" if r.shift_after_quarantine is None else f"{r.shift_after_quarantine:+.0f}"
        ci = f"{r.ci_shift_before[0]:+.0f}/{r.ci_shift_before[1]:+.0f}"
        out.append(f"{r.mechanism:<10}{r.attackers:>4}/{r.devices:<4} {r.behaviour:<15}{r.accepted:>9.0%}"
                   f"{r.shift_before:>+9.0f}{ci:>17}{r.coverage_before:>7.2f}{r.quarantined:>6}/{r.attackers:<5}"
                   f"{within:>9}{r.shift_after:>+9.0f}{after_q:>9}{r.coverage_after:>7.2f}")
    honest = {r.mechanism: r.honest_quarantined for r in rows}
    out.append("honest devices quarantined: " + ", ".join(f"{k} {v}" for k, v in honest.items()))
    return "\n".join(out)


def as_json(rows: list[PoisonRow]) -> list[dict]:
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(r).items()} for r in rows]
