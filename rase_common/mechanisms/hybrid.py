"""Wang et al.'s Hybrid mechanism (device: rase_device.piecewise.HybridRandomizer):
with the input-independent probability alpha = 1 - sb/sa (sa/sb <= e^(eps/2);
0 below eps* = 0.61) discrete PM at eps, else Duchi at eps. Outputs j < N are
PM's, N and N + 1 Duchi's -C and +C. Var = alpha E_PM[T^2] + (1 - alpha) C^2 - t^2."""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np

from rase_device.piecewise import HybridParams
from rase_device.randomizer import Calibration
from rase_common.mechanisms import duchi, piecewise
from rase_common.mechanisms.bounded import BoundedMechanism, center_half
from rase_common.mechanisms.support import UnionSupport


@functools.lru_cache(maxsize=256)
def alpha(eps: float, k_max: int) -> Fraction:
    """The probability of the PM branch."""
    hm = HybridParams(eps, k_max, duchi.params(eps), piecewise.params(eps, k_max))
    return Fraction(hm.alpha_num, hm.alpha_den)


class Hybrid(BoundedMechanism):
    name = "hybrid"

    def quadratic(self, eps: float, cal: Calibration) -> tuple[Fraction, Fraction]:
        _, half = center_half(cal)
        a_pm, b_pm = piecewise.pm_quadratic(eps, cal)
        w = alpha(eps, cal.grid_max)
        return (half * half * (w * a_pm + (1 - w) * duchi.magnitude(eps) ** 2),
                half * half * (w * b_pm - Fraction(4, cal.grid_max ** 2)))

    def report_values(self, cal: Calibration, eps: float) -> dict[int, Fraction]:
        n_out = piecewise.params(eps, cal.grid_max).n_out
        # HM at eps <= 0.61 never runs PM: its outputs are not possible reports.
        out = piecewise.pm_values(cal, eps) if alpha(eps, cal.grid_max) else {}
        out.update({n_out + s: v for s, v in duchi.DUCHI.report_values(cal, eps).items()})
        return out

    def report_pmf(self, cal: Calibration, eps: float, k: int) -> dict[int, Fraction]:
        w = alpha(eps, cal.grid_max)
        n_out = piecewise.params(eps, cal.grid_max).n_out
        out = piecewise.pm_pmf(cal, eps, k, w) if w else {}
        out.update({n_out + s: (1 - w) * p for s, p in duchi.DUCHI.report_pmf(cal, eps, k).items()})
        return out

    def pmf_array(self, cal: Calibration, eps: float, k: int) -> np.ndarray:
        w = float(alpha(eps, cal.grid_max))
        return np.concatenate([w * piecewise.pm_pmf_array(cal, eps, k), (1 - w) * duchi.DUCHI.pmf_array(cal, eps, k)])

    def exact_interval(self, y: np.ndarray, eps: float, setting, level: float):
        if not alpha(eps, setting.calibration.grid_max):
            return duchi.DUCHI.exact_interval(y, eps, setting, level)     # HM below eps* = 0.61 is Duchi
        return super().exact_interval(y, eps, setting, level)

    def device_values(self, cal: Calibration, eps: float) -> np.ndarray:
        return np.concatenate([piecewise.pm_device_values(cal, eps), duchi.DUCHI.device_values(cal, eps)])

    def sample_indices(self, cal: Calibration, eps: float, k: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        w = alpha(eps, cal.grid_max)
        n_out = piecewise.params(eps, cal.grid_max).n_out
        use_pm = rng.random(np.shape(k)) * w.denominator < w.numerator
        return np.where(use_pm, piecewise.pm_sample_indices(cal, eps, k, rng),
                        n_out + duchi.DUCHI.sample_indices(cal, eps, k, rng))

    def support(self, setting, eps: float):
        cal = setting.calibration
        if not alpha(eps, cal.grid_max):
            return duchi.DUCHI.support(setting, eps)
        return UnionSupport(piecewise.pm_support(cal, eps), duchi.DUCHI.support(setting, eps))

    def effective_eps(self, setting, eps: float) -> float:
        return max(duchi.DUCHI.effective_eps(setting, eps), piecewise.PIECEWISE.effective_eps(setting, eps))


HYBRID = Hybrid()
