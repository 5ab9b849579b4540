"""Debiased category frequencies from shuffled kRR or OUE reports: the
estimators live with their mechanism (rase_common.mechanisms.categorical);
these names stay importable from here."""

from rase_common.mechanisms.categorical import (band_frequencies, frequency_variance, krr_counts, krr_frequencies,
                                                oue_counts, oue_frequencies)

__all__ = ["band_frequencies", "frequency_variance", "krr_counts", "krr_frequencies", "oue_counts",
           "oue_frequencies"]
