"""Counts of on/off devices: the estimator lives with its mechanism
(rase_common.mechanisms.binary); here is what the fusion center adds, the
choice of the flip probability for a central (eps, delta) target.

`rr_flip_for_central` picks p for a central (eps, delta) after a uniform
shuffle of n reports, by the numerical FMT bound (rase_common.amplification).
"""

from __future__ import annotations

from dataclasses import dataclass

from rase_device.binary_rr import DEFAULT_DEN, flip_fraction, local_eps
from rase_common.amplification import local_eps_for_central, numerical_eps
from rase_common.mechanisms.binary import count_estimate, count_variance, on_count

__all__ = ["FlipChoice", "rr_flip_for_central", "count_estimate", "count_variance", "on_count"]


@dataclass(frozen=True)
class FlipChoice:
    flip_num: int
    flip_den: int
    eps0: float            # local eps of each report, ln((2 - p) / p)
    central_eps: float     # after a uniform shuffle of n reports (numerical FMT bound)
    delta: float
    n: int

    @property
    def p(self) -> float:
        return self.flip_num / self.flip_den


def rr_flip_for_central(eps: float, delta: float, n: int, den: int = DEFAULT_DEN) -> FlipChoice:
    """The smallest flip probability p = num/den whose n shuffled reports are
    (eps, delta)-DP: eps0 from the numerical bound, p rounded up."""
    eps0 = local_eps_for_central(eps, delta, n)
    num = flip_fraction(eps0, den)
    e0 = local_eps(num, den)
    return FlipChoice(num, den, e0, numerical_eps(e0, n, delta), delta, n)
