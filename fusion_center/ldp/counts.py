"""Counts of on/off devices, as the fusion center uses them: the estimator
and the choice of the flip probability for a central (eps, delta) target
(`rr_flip_for_central`, by the numerical FMT bound) live with their
mechanism, rase_common.mechanisms.binary; these names stay importable here.
"""

from __future__ import annotations

from rase_common.mechanisms.binary import FlipChoice, count_estimate, count_variance, on_count, rr_flip_for_central

__all__ = ["FlipChoice", "rr_flip_for_central", "count_estimate", "count_variance", "on_count"]
