"""Prio3 (draft-irtf-cfrg-vdaf) for the aggregators, vectorized over a batch,
and HPKE for the helper's input shares. The client side and the encodings are
the device core's (rase_device.prio3, rase_device.prio3_report); docs/api.md
shows the whole flow."""

from rase_device.prio3 import Prio3, prio3_count, prio3_histogram, prio3_sum
from rase_common.vdaf.aggregator import Prio3Aggregator
from rase_common.vdaf.batch import (Rejection, VerifyState, aggregate, merge, verifier_shares_to_message,
                                    verify_init, verify_next)
from rase_common.vdaf.hpke import generate_keypair, open_helper_shares

__all__ = ["Prio3", "prio3_count", "prio3_sum", "prio3_histogram", "Prio3Aggregator", "Rejection", "VerifyState",
           "verify_init", "verifier_shares_to_message", "verify_next", "aggregate", "merge", "generate_keypair",
           "open_helper_shares"]
