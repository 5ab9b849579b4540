"""Secure aggregation (Prio3 + central discrete Laplace noise): the registry's
entry "prio3" (issue 20; docs/privacy.md, "Secure aggregation").

Devices send exact quantized readings, secret-shared between two
aggregators who verify them jointly; only the sum over the accepted reports
is reconstructed. Each aggregator adds discrete Laplace noise with scale
sensitivity / eps to its aggregate share before unsharding, each enough on its
own, so a release is (eps, 0)-DP per timestamp if either aggregator is honest.
The published total is

    T = S + Z,   Z = sum of `draws` iid DLap(q),  P(DLap = k) = (1 - q)/(1 + q) q^|k|,

with S the exact sum of the accepted measurements (grid steps, devices on, or
a count per bucket) and q = exp(-s/t) of the sampler's exact scale t/s >=
sensitivity/eps. Z's law is known exactly, so the interval T +- c, with c the
smallest integer such that P(|Z| <= c) >= level, covers S with probability
>= level ("exact-noise"). For draws = 1 and 2 the tails are closed forms:

    P(Z > c) = q^(c+1) / (1 + q)                                        (one draw)
    P(Z > c) = a^2 q^(c+1) [ (c + 1 - c q)/(1 - q)^2 + A/(1 - q) ],     (two draws)
        a = (1 - q)/(1 + q),  A = (1 + q^2)/(1 - q^2)

(the pmf of two draws is a^2 q^|z| (|z| + A)). More draws (several regions'
leaders) sum the negative-binomial representation exactly.

Where the registry's interface does not fit: there is no local randomizer
(the device's Prio3Client seals exact readings: rase_device.secagg), no support
check on a value (a Prio3 report is checked by its proof: every plain value
is impossible here), and no per-report estimator (estimate_total works on the
noisy total). `simulate_total` is the vectorised "sampler" evaluations use.
"""

from __future__ import annotations

import functools
import math
from typing import Any
from dataclasses import dataclass

import numpy as np

from rase_device.dlaplace import DiscreteLaplace
from rase_device.entropy import RandomBits
from rase_device.randomizer import EPS_UNITS, eps_units_floor
from rase_common.mechanisms.base import IMPOSSIBLE, Estimate, Estimates, Mechanism, Setting, Support

MEANING = {
    "sum": {"mean": "mean of the accepted devices' readings on the grid (sum / n), exact under secure aggregation "
                    "plus central discrete Laplace noise; its interval is exact under that known noise"},
    "count": {"count": "devices on (reading > on_above) among the accepted reports, plus central noise; exact "
                       "interval under the known noise",
              "mean": "share of accepted devices that are on: count / n"},
    "histogram": {"frequencies": "per band: share of accepted devices in it (count / n), plus central noise; each "
                                 "interval exact under the known noise"},
}


def central_noise(sensitivity: int, eps: float) -> DiscreteLaplace:
    """The discrete Laplace one aggregator adds: scale t/s >= sensitivity / eps
    (eps rounded down to a multiple of 1/EPS_UNITS; the sampler only rounds the scale up)."""
    if not (isinstance(sensitivity, int) and sensitivity >= 1):
        raise ValueError(f"sensitivity must be an integer >= 1, got {sensitivity!r}")
    units = eps_units_floor(eps)
    if units < 1:
        raise ValueError(f"eps must be >= 1/{EPS_UNITS}, got {eps!r}")
    return DiscreteLaplace(sensitivity * EPS_UNITS, units)


def draw_noise(noise: DiscreteLaplace, k: int, bits: RandomBits | None = None) -> list[int]:
    """k draws with the device core's exact integer sampler, from os.urandom
    unless a test hands its own bits."""
    bits = bits if bits is not None else RandomBits()
    return [noise.draw(bits) for _ in range(k)]


@dataclass(frozen=True)
class NoiseSum:
    """The law of the sum of `draws` iid discrete Laplace(t/s) draws."""
    t: int
    s: int
    draws: int

    @property
    def q(self) -> float:
        return math.exp(-self.s / self.t)

    @property
    def scale(self) -> float:
        return self.t / self.s

    def variance(self) -> float:
        q = self.q
        return self.draws * 2 * q / (1 - q) ** 2

    def tail(self, c: int) -> float:
        """P(Z > c) for an integer c >= 0."""
        if self.draws == 0:
            return 0.0
        q = self.q
        if self.draws == 1:
            return q ** (c + 1) / (1 + q)
        if self.draws == 2:
            a, big_a = (1 - q) / (1 + q), (1 + q * q) / (1 - q * q)
            return a * a * q ** (c + 1) * ((c + 1 - c * q) / (1 - q) ** 2 + big_a / (1 - q))
        return _nb_tail(self.draws, q, c)

    def cover(self, c: int) -> float:
        """P(|Z| <= c)."""
        return 1.0 - 2.0 * self.tail(c)

    @functools.lru_cache(maxsize=64)  # noqa: B019 - the laws are few and frozen; each keeps its cache
    def half_width(self, level: float) -> int:
        """The smallest integer c with P(|Z| <= c) >= level."""
        if self.draws == 0:
            return 0
        lo, hi = 0, max(1, int(self.scale))
        while self.cover(hi) < level:
            hi *= 2
        while lo < hi:
            mid = (lo + hi) // 2
            if self.cover(mid) >= level:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def mean_abs(self) -> float:
        """E|Z| (the MAE the noise alone costs; exact for one and two draws)."""
        if self.draws == 0:
            return 0.0
        q = self.q
        if self.draws == 1:
            return 2 * q / ((1 + q) * (1 - q))
        if self.draws == 2:
            a, big_a = (1 - q) / (1 + q), (1 + q * q) / (1 - q * q)
            return 2 * a * a * (q * (1 + q) / (1 - q) ** 3 + big_a * q / (1 - q) ** 2)
        # Three or more draws (several regions' leaders): near-normal; used only by predictions.
        return math.sqrt(2 / math.pi * self.variance())


def _nb_tail(m: int, q: float, c: int) -> float:
    """P(X - Y > c), X, Y iid negative binomial(m, 1 - q) (failures before m
    successes): a sum of m discrete Laplace(q) draws is X - Y."""
    from scipy import stats       # on first use: importing scipy.stats costs a service a second at start

    p = 1 - q
    j_max = int(stats.nbinom.isf(1e-16, m, p)) + 1
    if j_max > 20_000_000:
        raise ValueError("noise scale too large for the exact tail of more than two draws")
    j = np.arange(j_max + 1)
    return float(np.sum(stats.nbinom.pmf(j, m, p) * stats.nbinom.sf(c + j, m, p)))


def noise_law(sensitivity: int, eps: float, draws: int) -> NoiseSum:
    d = central_noise(sensitivity, eps)
    return NoiseSum(d.t, d.s, draws)


def estimate_total(kind: str, totals: list[int], n: int, noise: NoiseSum, setting: Setting,
                   level: float = 0.95) -> Estimates:
    """The published estimates from the noisy total(s) T (sum: grid steps;
    count: devices on; histogram: one per bucket) of n accepted reports."""
    if n < 1:
        raise ValueError("an aggregate needs at least one accepted report")
    c = noise.half_width(level)
    var = noise.variance()
    meaning = MEANING[kind]
    if kind == "sum":
        g = setting.gamma
        value = setting.x_min + g * totals[0] / n
        half = g * c / n
        return Estimates({"mean": Estimate(value, value - half, value + half, n, "exact-noise",
                                           var * g * g / n ** 2)}, meaning)
    if kind == "count":
        total = float(totals[0])
        count = Estimate(total, max(0.0, total - c), min(float(n), total + c), n, "exact-noise", var)
        share = Estimate(total / n, count.lo / n, count.hi / n, n, "exact-noise", var / n ** 2)
        return Estimates({"count": count, "mean": share}, meaning)
    freqs = [Estimate(x / n, max(0.0, (x - c) / n), min(1.0, (x + c) / n), n, "exact-noise", var / n ** 2)
             for x in map(float, totals)]
    return Estimates({}, meaning, frequencies=freqs)


def measurements(kind: str, readings, setting: Setting) -> np.ndarray:
    """Each reading's Prio3 measurement, as the device's Prio3Client computes it."""
    x = np.asarray(readings, dtype=np.float64)
    if kind == "sum":
        cal = setting.calibration
        k = np.floor((np.clip(x, cal.x_min, cal.x_max) - cal.x_min) / cal.gamma + 0.5).astype(np.int64)
        return np.minimum(k, cal.grid_max)
    if kind == "count":
        return (x > setting.on_above).astype(np.int64)
    return np.searchsorted(np.asarray(setting.bands), x, side="left").astype(np.int64)


def simulate_total(kind: str, readings, setting: Setting, noise: NoiseSum, rng: np.random.Generator) -> list[int]:
    """T for one timestamp's readings (no report dropped): the exact sum plus
    `draws` discrete Laplace draws from rng (evaluations only; the aggregators
    draw from os.urandom with the exact sampler). A discrete Laplace(q) is the
    difference of two geometric variables with success probability 1 - q."""
    m = measurements(kind, readings, setting)
    if kind == "histogram":
        exact = np.bincount(m, minlength=setting.categories)
    else:
        exact = np.array([int(m.sum())])
    z = np.zeros(exact.size, dtype=np.int64)
    for _ in range(noise.draws):
        z += rng.geometric(1 - noise.q, exact.size) - rng.geometric(1 - noise.q, exact.size)
    return [int(v) for v in exact + z]


class NoValues(Support):
    """A prio3 deployment takes Prio3 reports only: no plain value is an output."""

    def reason(self, y: float) -> str | None:
        return IMPOSSIBLE


class Prio3Mechanism(Mechanism):
    name = "prio3"
    # The fog is Prio3's leader and the fusion center its helper and collector.
    fog_role = "fog_shuffler.prio3.role:LeaderRole"
    fusion_role = "fusion_center.prio3.role:HelperRole"
    # A leader's schedule and params are its own (issue 26): a control message stating others is refused.
    own_fields = ("mechanism", "period_s", "epoch0", "since_t", "previous_period_s", "previous_epoch0", "mode_params",
                  "interval_s")

    def params_of(self, msg: dict) -> Any:
        from rase_common.protocol.prio3 import Prio3Params

        return Prio3Params(**msg["prio3"]) if "prio3" in msg else None
    output = "mean"        # for the default kind (sum); count -> "count", histogram -> "frequencies"
    outputs = {"sum": "mean", "count": "count", "histogram": "frequencies"}

    def randomizer(self, setting: Setting, bits=None):
        raise ValueError("prio3 has no local randomizer: a device's Prio3Client (rase_device.secagg) is built from "
                         "the control message and its pinned helper key")

    def support(self, setting: Setting, eps: float) -> Support:
        return NoValues()

    def estimate(self, by_level: dict, setting: Setting, level: float = 0.95) -> Estimates:
        raise ValueError("prio3 estimates come from the noisy total: rase_common.mechanisms.prio3.estimate_total")


PRIO3 = Prio3Mechanism()
