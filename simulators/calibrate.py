"""`rase calibrate`: choose the data range from a private histogram of the
readings, on REFIT houses.

Each device reports, for `periods` timestamps, the bucket of its reading
through the device core's categorical eps-LDP randomizer (kRR or OUE,
whichever has the lower variance for the number of buckets), exactly as a
board would, with noise from os.urandom. Those reports cost each device
eps_calibration per report, charged like any report. The debiased bucket
frequencies give a private estimate of high quantiles and, for every
candidate x_max, the clipping bias of the mean against the noise of the mean
at the deployment's eps and n (fusion_center.ldp.range_choice). The chosen x_max
can be written into a fusion config's [precision] table for broadcast.

In a deployment the calibration round would be announced by the control
message and answered by the devices; that protocol is not built yet: this
command runs the same randomizer and estimator over recorded data.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rase_device.categorical import (KaryRR, OptimizedUnaryEncoding, choose_oracle, krr_eps, krr_keep_fraction,
                                    oue_eps, oue_flip_fraction)
from rase_device.entropy import RandomBits
from fusion_center.estimators import Estimate
from fusion_center.ldp.frequencies import krr_counts, krr_frequencies, oue_counts, oue_frequencies
from fusion_center.ldp.range_choice import RangeCandidate, best_range, clip_bias_sd, range_tradeoff
from rase_device.mechanisms import DEFAULT_MECHANISM
from rase_common.mechanisms import Setting, mechanism
from simulators.evaluation import readings_matrix
from simulators.pipeline import fleet
from simulators.refit import epoch0_of, grid_readings, load_house

# Bucket edges in W; the last is the devices' largest range (readings above are clipped into the top bucket).
DEFAULT_EDGES = (0, 5, 20, 50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 4000)
DEFAULT_CANDIDATES = (100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 4000)


def laplace_variance(eps: float) -> "callable":
    """Per-report variance of BR without clamping, 2 (Delta / eps)^2."""
    return lambda x_min, x_max: 2 * ((x_max - x_min) / eps) ** 2


def mechanism_variance(name: str, eps: float) -> "callable":
    """The mechanism's worst-case per-report variance at range [x_min, x_max]
    (rase_common.mechanisms, exact), as range_tradeoff wants it."""
    def var(x_min: float, x_max: float) -> float:
        return mechanism(name).worst_case_variance(Setting(x_min=x_min, x_max=x_max), eps)
    return var


@dataclass
class CalibrationResult:
    oracle: str
    eps_calibration: float       # effective eps of each histogram report (<= the stated one)
    reports: int
    devices: int
    edges: tuple[float, ...]
    freqs: list[Estimate]
    table: list[RangeCandidate]
    chosen: RangeCandidate
    quantiles: dict[str, float]  # private estimates from the histogram
    true_quantiles: dict[str, float]
    true_clip_bias: dict[float, float]   # per candidate, from the recorded readings (simulation only)
    histogram_clip_bias: dict[float, float]  # per candidate, from the recorded readings' exact bucket shares
    clip_bias_se: dict[float, float]     # standard error of each private clip-bias estimate
    mechanism: str = DEFAULT_MECHANISM   # whose noise the table weighs against the clipping
    eps: float = 1.0                     # the deployment's eps per report (the table's noise)
    oracle_hit: float = 0.5              # P(a report names its own bucket): kRR's keep, OUE's 1/2
    oracle_q: float = 0.0                # P(it names another given bucket): kRR (1 - keep)/(k - 1), OUE's flip
    candidates: tuple[float, ...] = DEFAULT_CANDIDATES
    exact_shares: tuple[float, ...] = ()  # the recorded readings' bucket shares (simulation only)


def bucket_of(x: float, edges) -> int:
    return min(len(edges) - 2, max(0, bisect.bisect_right(edges, x) - 1))


def _quantile(edges, freqs: np.ndarray, q: float) -> float:
    """Upper edge of the first bucket where the cumulative share reaches q."""
    f = np.clip(freqs, 0, None)
    c = np.cumsum(f / f.sum())
    return float(edges[min(len(edges) - 1, int(np.searchsorted(c, q)) + 1)])


def report_times(start_t: int, periods: int, span_hours: float, period_s: float) -> list[int]:
    """The timestamps each device reports its bucket at: `periods` of them
    spread evenly over span_hours from start_t (readings a few seconds apart
    repeat each other; readings hours apart tell the histogram more)."""
    span_t = max(periods, int(span_hours * 3600 // period_s))
    return sorted({start_t + i * span_t // periods for i in range(periods)})


def calibrate(data_dir: Path, houses: list[int], *, eps: float, eps_calibration: float, periods: int = 1,
              start_t: int = 0, clone: int = 1, edges=DEFAULT_EDGES, candidates=DEFAULT_CANDIDATES,
              period_s: float = 8.0, bits: RandomBits | None = None, span_hours: float = 24.0,
              mechanism_name: str = DEFAULT_MECHANISM) -> CalibrationResult:
    if periods < 1:
        raise ValueError(f"periods must be >= 1, got {periods}")
    times = report_times(start_t, periods, span_hours, period_s)
    hs = [load_house(data_dir, h) for h in houses]
    epoch0 = epoch0_of(hs, period_s)
    devices = fleet(hs, clone, 3600.0)
    k = len(edges) - 1
    oracle = choose_oracle(k, eps_calibration)
    bits = bits or RandomBits()
    if oracle == "krr":
        num = krr_keep_fraction(eps_calibration, k)
        mech = KaryRR(k, num, 1 << 20, bits=bits)
        eff = krr_eps(num, 1 << 20, k)
    else:
        num = oue_flip_fraction(eps_calibration)
        mech = OptimizedUnaryEncoding(k, num, 1 << 20, bits=bits)
        eff = oue_eps(num, 1 << 20)
    readings, reports = [], []
    for d in devices:
        xs = grid_readings(d.house, d.column, epoch0, period_s, times[-1] + 1, shift_s=d.shift_s)[times]
        for x in xs:
            if math.isnan(x):
                continue
            readings.append(x)
            reports.append(mech.randomize(bucket_of(x, edges)))
    if not reports:
        raise ValueError("no readings in the chosen houses and timestamps")
    n = len(reports)
    if oracle == "krr":
        freqs = krr_frequencies(krr_counts(reports, k), n, num / (1 << 20))
    else:
        freqs = oue_frequencies(oue_counts(reports, k), n, num / (1 << 20))
    f = np.array([e.value for e in freqs])
    variances = [e.var for e in freqs]
    noise = mechanism_variance(mechanism_name, eps)
    table = range_tradeoff(edges, f, len(devices), 0.0, candidates, noise, variances)
    x = np.array(readings)
    exact = np.bincount([bucket_of(v, edges) for v in readings], minlength=k) / len(readings)
    exact_table = range_tradeoff(edges, exact, len(devices), 0.0, candidates, noise)
    return CalibrationResult(
        oracle=oracle, eps_calibration=eff, reports=n, devices=len(devices), edges=tuple(edges), freqs=freqs,
        table=table, chosen=best_range(table),
        quantiles={"p95": _quantile(edges, f, 0.95), "p99": _quantile(edges, f, 0.99)},
        true_quantiles={"p95": float(np.quantile(x, 0.95)), "p99": float(np.quantile(x, 0.99))},
        true_clip_bias={float(c): float(np.minimum(x, c).mean() - x.mean()) for c in candidates},
        histogram_clip_bias={c.x_max: c.clip_bias for c in exact_table},
        clip_bias_se={float(c): clip_bias_sd(edges, variances, c) for c in candidates}, mechanism=mechanism_name,
        eps=eps, oracle_hit=num / (1 << 20) if oracle == "krr" else 0.5,
        oracle_q=(1 - num / (1 << 20)) / (k - 1) if oracle == "krr" else num / (1 << 20),
        candidates=tuple(float(c) for c in candidates), exact_shares=tuple(float(v) for v in exact))


@dataclass(frozen=True)
class ChoiceSpread:
    """How far a calibration's choice moves with the histogram's noise alone."""
    draws: int
    shares: dict[float, float]          # x_max -> share of the simulated calibrations that chose it
    bias_bounds: tuple[float, float]    # the smallest and largest B they came with


def choice_spread(r: CalibrationResult, draws: int = 200, rng: np.random.Generator | None = None,
                  shares: Sequence[float] | None = None) -> ChoiceSpread:
    """The choice made again on `draws` simulated histograms: r.reports readings
    in r's own debiased shares (negative ones as 0), each through the
    same frequency oracle (kRR or OUE, its exact report distribution), then
    debiased and chosen as calibrate() does. It reads only the private
    histogram (post-processing): no device spends anything. `rng` drives the
    simulation, not any privacy noise. `shares`: other bucket shares to draw
    from (a test's exact ones)."""
    rng = rng or np.random.default_rng()
    f = np.clip(np.array([e.value for e in r.freqs] if shares is None else shares, dtype=float), 0.0, None)
    f = f / f.sum()
    k, n = f.size, r.reports
    noise = mechanism_variance(r.mechanism, r.eps)
    picked: Counter = Counter()
    bounds = []
    # The readings stay as the histogram says (n of them in its shares, by largest remainder), as when the
    # same devices are asked again: only the oracle's noise is drawn anew, which is what moves the choice.
    true_counts = np.floor(f * n).astype(np.int64)
    true_counts[np.argsort(true_counts - f * n)[: n - int(true_counts.sum())]] += 1
    for _ in range(draws):
        if r.oracle == "krr":
            kept = rng.binomial(true_counts, r.oracle_hit)
            counts = kept.copy()
            for b in range(k):      # the rest name one of the other k - 1 buckets, uniformly
                moved = rng.multinomial(true_counts[b] - kept[b], np.full(k - 1, 1.0 / (k - 1)))
                counts += np.insert(moved, b, 0)
            freqs = krr_frequencies(counts, n, r.oracle_hit)
        else:
            counts = rng.binomial(true_counts, 0.5) + rng.binomial(n - true_counts, r.oracle_q)
            freqs = oue_frequencies(counts, n, r.oracle_q)
        table = range_tradeoff(r.edges, [e.value for e in freqs], r.devices, 0.0, r.candidates, noise,
                               [e.var for e in freqs])
        choice = best_range(table)
        picked[choice.x_max] += 1
        bounds.append(choice.bias_bound)
    return ChoiceSpread(draws, {x: c / draws for x, c in sorted(picked.items())}, (min(bounds), max(bounds)))


def format_spread(spread: ChoiceSpread, chosen: float) -> str:
    """The output's word on how noisy the choice itself is, and how far it can move."""
    shares = ", ".join(f"{x:g} W in {100 * s:.0f}%" for x, s in spread.shares.items())
    return (f"the choice is itself noisy, as the histogram it rests on is: {spread.draws} calibrations simulated "
            f"from this histogram (no budget spent) chose x_max {shares}, with B "
            f"{spread.bias_bounds[0]:.1f}..{spread.bias_bounds[1]:.1f} W; this run's {chosen:g} W is one draw of "
            "that.\nMore histogram reports (--periods, --calibration-eps) narrow it; --repeats N takes the most "
            "frequent of N runs (each spends budget).")


def write_setting(config: Path, table: str, key: str, value: float) -> None:
    """Set `key` in `[table]` of a fusion config, keeping the rest of the
    file (comments included) as it is."""
    text = Path(config).read_text()
    m = re.search(rf"(?m)^\[{re.escape(table)}\][^\n]*\n", text)
    if m is None:
        text = text.rstrip("\n") + f"\n\n[{table}]\n{key} = {value:g}\n"
    else:
        nxt = re.search(r"(?m)^\[", text[m.end():])
        end = m.end() + (nxt.start() if nxt else len(text) - m.end())
        body = text[m.end():end]
        line = re.compile(rf"(?m)^{re.escape(key)}\s*=\s*[^#\n]*?(?=\s*(#|$))")
        body = line.sub(f"{key} = {value:g}", body, count=1) if line.search(body) else f"{key} = {value:g}\n" + body
        text = text[:m.end()] + body + text[end:]
    Path(config).write_text(text)


def write_x_max(config: Path, x_max: float, bias_bound: float | None = None) -> None:
    """[precision] x_max, and with a bound [clipping] bias_bound_w (the fusion
    center widens mean's interval by it)."""
    write_setting(config, "precision", "x_max", x_max)
    if bias_bound is not None:
        write_setting(config, "clipping", "bias_bound_w", round(bias_bound, 1))


@dataclass(frozen=True)
class Coverage:
    """mean's interval at the chosen range over recorded readings (simulation)."""
    timestamps: int
    clipped: float          # coverage of the mean of the clipped readings
    true: float             # coverage of the true mean
    widened: float          # coverage of the true mean by [lo, hi + bias_bound]
    clip_bias: float        # mean over t of (clipped mean - true mean), W
    worst_clip_bias: float  # its most negative value over t


def coverage_check(data_dir: Path, houses: list[int], *, eps: float, x_max: float, bias_bound: float, hours: float,
                   clone: int = 1, start_t: int = 0, period_s: float = 8.0, mechanism_name: str = DEFAULT_MECHANISM,
                   rng: np.random.Generator | None = None) -> Coverage:
    """Run the deployment at [0, x_max] over `hours` of the recorded readings
    (the registry's exact sampler and estimator): how often mean's interval
    covers the clipped mean, the true mean, and the true mean once widened by
    the bound. Noise from `rng` (simulation only)."""
    hs = [load_house(data_dir, h) for h in houses]
    n_t = int(hours * 3600 // period_s)
    x = readings_matrix(fleet(hs, clone, 3600.0), epoch0_of(hs, period_s), period_s, start_t, n_t)
    setting, mech = Setting(x_max=x_max), mechanism(mechanism_name)
    rng = rng or np.random.default_rng()
    hits = np.zeros(3)
    bias, t_used = [], 0
    for j in range(n_t):
        col = x[~np.isnan(x[:, j]), j]
        if col.size < 10:
            continue
        e = mech.estimate({eps: mech.sample(setting, eps, col, rng)}, setting).named["mean"]
        truth, clipped = float(col.mean()), float(np.clip(col, 0.0, x_max).mean())
        hits += (e.lo <= clipped <= e.hi, e.lo <= truth <= e.hi, e.lo <= truth <= e.hi + bias_bound)
        bias.append(clipped - truth)
        t_used += 1
    if not t_used:
        raise ValueError("no timestamp with k_min readings in the check")
    c = hits / t_used
    return Coverage(t_used, float(c[0]), float(c[1]), float(c[2]), float(np.mean(bias)), float(np.min(bias)))


def format_result(r: CalibrationResult, eps: float) -> str:
    lines = [f"calibration: {r.reports} histogram reports from {r.devices} devices ({r.oracle}, "
             f"eps {r.eps_calibration:.4f} each, charged to each device's budget)",
             f"private p95 <= {r.quantiles['p95']:g} W, p99 <= {r.quantiles['p99']:g} W "
             f"(recorded data: p95 {r.true_quantiles['p95']:.0f} W, p99 {r.true_quantiles['p99']:.0f} W)",
             "",
             f"mean of {r.devices} reports per t at eps {eps:g} ({r.mechanism}), range [0, x_max]; the choice "
             "minimises the error bound sqrt(B^2 + noise sd^2), B an upper 99% bound on the clipping bias:",
             f"{'x_max':>8} {'clip bias':>10} {'+-':>6} {'(recorded)':>11} {'B':>7} {'noise sd':>10} {'rmse':>10}"
             f" {'bound':>8}"]
    for c in r.table:
        mark = "  <- chosen" if c is r.chosen else ""
        lines.append(f"{c.x_max:>8g} {c.clip_bias:>10.1f} {r.clip_bias_se[c.x_max]:>6.1f} "
                     f"{r.true_clip_bias[c.x_max]:>11.1f} {c.bias_bound:>7.1f} {c.noise_sd:>10.1f} {c.rmse:>10.1f}"
                     f" {c.rmse_bound:>8.1f}{mark}")
    return "\n".join(lines)


def format_repeats(chosen: list[tuple[float, float]]) -> str:
    """(x_max, B) of repeated calibrations: how reproducible the choice is."""
    counts = Counter(x for x, _ in chosen)
    spread = ", ".join(f"{x:g} W x{n}" for x, n in sorted(counts.items()))
    bounds = [b for _, b in chosen]
    return (f"over {len(chosen)} calibrations (fresh noise each): x_max {spread}; "
            f"bias bound B {min(bounds):.1f}..{max(bounds):.1f} W (median {float(np.median(bounds)):.1f})")


def consensus(chosen: list[tuple[float, float]]) -> tuple[float, float]:
    """The most frequent x_max (ties: the wider) and the largest B of the runs that chose it."""
    counts = Counter(x for x, _ in chosen)
    x = max(counts, key=lambda c: (counts[c], c))
    return x, max(b for c, b in chosen if c == x)
