"""`rase calibrate`: choose the data range from a private histogram of the
readings, on REFIT houses.

Each device reports, for `periods` timestamps, the bucket of its reading
through the device core's categorical eps-LDP randomizer (kRR or OUE,
whichever has the lower variance for the number of buckets), exactly as a
board would, with noise from os.urandom. Those reports cost each device
eps_calibration per report, charged like any report. The debiased bucket
frequencies give a private estimate of high quantiles and, for every
candidate x_max, the clipping bias of the mean against the noise of the mean
at the deployment's eps and n (fusion_center.range_choice). The chosen x_max
can be written into a fusion config's [precision] table for broadcast.

In a deployment the calibration round would be announced by the control
message and answered by the devices; that protocol is not built yet: this
command runs the same randomizer and estimator over recorded data.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_agent.categorical import (KaryRR, OptimizedUnaryEncoding, choose_oracle, krr_eps, krr_keep_fraction,
                                    oue_eps, oue_flip_fraction)
from edge_agent.entropy import RandomBits
from fusion_center.estimators import Estimate
from fusion_center.frequencies import krr_counts, krr_frequencies, oue_counts, oue_frequencies
from fusion_center.range_choice import RangeCandidate, best_range, clip_bias_sd, range_tradeoff
from simulators.pipeline import fleet
from simulators.refit import epoch0_of, grid_readings, load_house

# Bucket edges in W; the last is the devices' largest range (readings above are clipped into the top bucket).
DEFAULT_EDGES = (0, 5, 20, 50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 4000)
DEFAULT_CANDIDATES = (100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 4000)


def laplace_variance(eps: float) -> "callable":
    """Per-report variance of BR without clamping, 2 (Delta / eps)^2."""
    return lambda x_min, x_max: 2 * ((x_max - x_min) / eps) ** 2


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


def bucket_of(x: float, edges) -> int:
    return min(len(edges) - 2, max(0, bisect.bisect_right(edges, x) - 1))


def _quantile(edges, freqs: np.ndarray, q: float) -> float:
    """Upper edge of the first bucket where the cumulative share reaches q."""
    f = np.clip(freqs, 0, None)
    c = np.cumsum(f / f.sum())
    return float(edges[min(len(edges) - 1, int(np.searchsorted(c, q)) + 1)])


def calibrate(data_dir: Path, houses: list[int], *, eps: float, eps_calibration: float, periods: int = 1,
              start_t: int = 0, clone: int = 1, edges=DEFAULT_EDGES, candidates=DEFAULT_CANDIDATES,
              period_s: float = 8.0, bits: RandomBits | None = None) -> CalibrationResult:
    if periods < 1:
        raise ValueError(f"periods must be >= 1, got {periods}")
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
        xs = grid_readings(d.house, d.column, epoch0, period_s, start_t + periods, shift_s=d.shift_s)[start_t:]
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
    table = range_tradeoff(edges, f, len(devices), 0.0, candidates, laplace_variance(eps))
    x = np.array(readings)
    exact = np.bincount([bucket_of(v, edges) for v in readings], minlength=k) / len(readings)
    exact_table = range_tradeoff(edges, exact, len(devices), 0.0, candidates, laplace_variance(eps))
    variances = [((e.hi - e.lo) / (2 * 1.959963984540054)) ** 2 for e in freqs]
    return CalibrationResult(
        oracle=oracle, eps_calibration=eff, reports=n, devices=len(devices), edges=tuple(edges), freqs=freqs,
        table=table, chosen=best_range(table),
        quantiles={"p95": _quantile(edges, f, 0.95), "p99": _quantile(edges, f, 0.99)},
        true_quantiles={"p95": float(np.quantile(x, 0.95)), "p99": float(np.quantile(x, 0.99))},
        true_clip_bias={float(c): float(np.minimum(x, c).mean() - x.mean()) for c in candidates},
        histogram_clip_bias={c.x_max: c.clip_bias for c in exact_table},
        clip_bias_se={float(c): clip_bias_sd(edges, variances, c) for c in candidates})


def write_x_max(config: Path, x_max: float) -> None:
    """Set x_max in the [precision] table of a fusion config, keeping the rest
    of the file (comments included) as it is."""
    text = Path(config).read_text()
    m = re.search(r"(?m)^\[precision\][^\n]*\n", text)
    if m is None:
        text = text.rstrip("\n") + f"\n\n[precision]\nx_max = {x_max:g}\n"
    else:
        nxt = re.search(r"(?m)^\[", text[m.end():])
        end = m.end() + (nxt.start() if nxt else len(text) - m.end())
        body = text[m.end():end]
        line = re.compile(r"(?m)^x_max\s*=\s*[^#\n]*?(?=\s*(#|$))")
        body = line.sub(f"x_max = {x_max:g}", body, count=1) if line.search(body) else f"x_max = {x_max:g}\n" + body
        text = text[:m.end()] + body + text[end:]
    Path(config).write_text(text)


def format_result(r: CalibrationResult, eps: float) -> str:
    lines = [f"calibration: {r.reports} histogram reports from {r.devices} devices ({r.oracle}, "
             f"eps {r.eps_calibration:.4f} each, charged to each device's budget)",
             f"private p95 <= {r.quantiles['p95']:g} W, p99 <= {r.quantiles['p99']:g} W "
             f"(recorded data: p95 {r.true_quantiles['p95']:.0f} W, p99 {r.true_quantiles['p99']:.0f} W)",
             "",
             f"mean of {r.devices} reports per t at eps {eps:g} (BR, Laplace noise), range [0, x_max]:",
             f"{'x_max':>8} {'clip bias':>10} {'+-':>6} {'(recorded)':>11} {'noise sd':>10} {'rmse':>10}"]
    for c in r.table:
        mark = "  <- chosen" if c is r.chosen else ""
        lines.append(f"{c.x_max:>8g} {c.clip_bias:>10.1f} {r.clip_bias_se[c.x_max]:>6.1f} "
                     f"{r.true_clip_bias[c.x_max]:>11.1f} {c.noise_sd:>10.1f} {c.rmse:>10.1f}{mark}")
    return "\n".join(lines)
