"""Wang et al.'s Piecewise mechanism, discretized (device: rase_device.piecewise).

Outputs j = 0..N-1 (N = K + L), report center + half * w (2j - N + 1) / 2,
w = 2 D / ((a - b) L K), D = L a + K b; input k's window j = k..k+L-1 has
probability a/D per output, every other output b/D. Equivalently: with the
input-independent probability N b / D a uniform output of the whole grid,
else a uniform output of k's window. Var[y | k] = A + B (k - K/2)^2 with
B > 0 at every eps tabulated: largest at the ends of the range."""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from rase_device.piecewise import PiecewiseParams
from rase_device.randomizer import Calibration
from rase_common.mechanisms.bounded import BoundedMechanism, center_half
from rase_common.mechanisms.support import GridSupport


@functools.lru_cache(maxsize=256)
def params(eps: float, k_max: int) -> PiecewiseParams:
    return PiecewiseParams(eps, k_max)


def width(p: PiecewiseParams) -> Fraction:
    """w: output j is T_j = (2j - N + 1) w / 2 in normalized units."""
    return Fraction(2 * p.den, (p.a - p.b) * p.window * p.k_max)


def second_moment(p: PiecewiseParams, k: int) -> Fraction:
    """E[T^2] at grid index k, normalized units."""
    n, L, d = p.n_out, p.window, 2 * k - p.k_max
    all_sq = Fraction(n * (n * n - 1), 3)              # sum over j of (2j - N + 1)^2
    win_sq = L * d * d + Fraction(L * (L * L - 1), 3)  # the same over k's window
    w = width(p)
    return w * w / 4 * (Fraction(p.b, p.den) * all_sq + Fraction(p.a - p.b, p.den) * win_sq)


def second_moment_slope(p: PiecewiseParams) -> Fraction:
    """d E[T^2] / d (k - K/2)^2: (w^2/4) ((a-b)/D) L * 4."""
    w = width(p)
    return w * w * Fraction((p.a - p.b) * p.window, p.den)


def pm_quadratic(eps: float, cal: Calibration) -> tuple[Fraction, Fraction]:
    """(A, B) of E[T^2] = A + B (k - K/2)^2 (normalized units; Var = half^2 (E[T^2] - t^2))."""
    p = params(eps, cal.grid_max)
    slope = second_moment_slope(p)
    return second_moment(p, 0) - slope * Fraction(cal.grid_max ** 2, 4), slope


def device_step(cal: Calibration, eps: float) -> float:
    """The device's output step (rase_device.piecewise.PiecewiseRandomizer.params)."""
    p = params(eps, cal.grid_max)
    return (cal.x_max - cal.x_min) / 2.0 * p.den / ((p.a - p.b) * p.window * p.k_max)


def pm_device_values(cal: Calibration, eps: float) -> np.ndarray:
    p = params(eps, cal.grid_max)
    step, center = device_step(cal, eps), (cal.x_min + cal.x_max) / 2.0
    return center + step * (2 * np.arange(p.n_out) - p.n_out + 1)


def pm_sample_indices(cal: Calibration, eps: float, k: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    p = params(eps, cal.grid_max)
    k = np.asarray(k, dtype=np.int64)
    in_window = rng.random(k.shape) * p.den < p.high
    u = rng.integers(0, p.k_max, size=k.shape)
    outside = np.where(u < k, u, u + p.window)
    return np.where(in_window, k + rng.integers(0, p.window, size=k.shape), outside)


def pm_values(cal: Calibration, eps: float) -> dict[int, Fraction]:
    center, half = center_half(cal)
    p = params(eps, cal.grid_max)
    w = width(p)
    return {j: center + half * w * (2 * j - p.n_out + 1) / 2 for j in range(p.n_out)}


def pm_pmf(cal: Calibration, eps: float, k: int, weight: Fraction = Fraction(1)) -> dict[int, Fraction]:
    p = params(eps, cal.grid_max)
    hi, lo = Fraction(p.a, p.den) * weight, Fraction(p.b, p.den) * weight
    return {j: hi if k <= j < k + p.window else lo for j in range(p.n_out)}


def pm_pmf_array(cal: Calibration, eps: float, k: int) -> np.ndarray:
    p = params(eps, cal.grid_max)
    out = np.full(p.n_out, p.b / p.den)
    out[k:k + p.window] = p.a / p.den
    return out


def pm_support(cal: Calibration, eps: float) -> GridSupport:
    p = params(eps, cal.grid_max)
    return GridSupport((cal.x_min + cal.x_max) / 2.0, device_step(cal, eps), 2, 1 - p.n_out, 0, p.n_out - 1,
                       scale=abs(cal.x_min) + abs(cal.x_max))


def _check_k(cal: Calibration, k: int) -> None:
    if not 0 <= k <= cal.grid_max:
        raise ValueError(f"grid index must be in [0, {cal.grid_max}], got {k}")


class Piecewise(BoundedMechanism):
    name = "piecewise"

    def quadratic(self, eps: float, cal: Calibration) -> tuple[Fraction, Fraction]:
        _, half = center_half(cal)
        a, b = pm_quadratic(eps, cal)
        return half * half * a, half * half * (b - Fraction(4, cal.grid_max ** 2))

    def report_values(self, cal: Calibration, eps: float) -> dict[int, Fraction]:
        return pm_values(cal, eps)

    def report_pmf(self, cal: Calibration, eps: float, k: int) -> dict[int, Fraction]:
        _check_k(cal, k)
        return pm_pmf(cal, eps, k)

    def device_values(self, cal: Calibration, eps: float) -> np.ndarray:
        return pm_device_values(cal, eps)

    def pmf_array(self, cal: Calibration, eps: float, k: int) -> np.ndarray:
        return pm_pmf_array(cal, eps, k)

    def sample_indices(self, cal: Calibration, eps: float, k: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return pm_sample_indices(cal, eps, k, rng)

    def support(self, setting, eps: float) -> GridSupport:
        return pm_support(setting.calibration, eps)

    def effective_eps(self, setting, eps: float) -> float:
        p = params(eps, setting.calibration.grid_max)
        return math.log(p.a) - math.log(p.b)


PIECEWISE = Piecewise()
