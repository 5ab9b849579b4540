"""What the fog (Prio3's leader) sees does not depend on the readings: the
leader shares and public shares of two very different fleets (every device at
0 W, every device at the range's top; all off against all on; the lowest band
against the highest) are uniformly random field elements and bytes, the same
for both fleets.

Reports are the device's bytes (rase_common.vdaf.fast_client is tested to
shard byte for byte as the device core) from a seeded byte source (tests
only). For every field element of the leader share: a chi-square test of
uniformity over 8 bins per fleet, and a two-sample test between the fleets;
the smallest p-value over all the tests must exceed P_MIN / tests (Bonferroni)."""

import numpy as np
import pytest
from scipy import stats

from rase_common.protocol.prio3 import Prio3Params
from rase_common.vdaf import generate_keypair
from rase_common.vdaf.fast_client import FastPrio3, fast_make_report
from tests.seeded_bytes import XorShiftBytes
from tests.stats import P_MIN

_, PK = generate_keypair()
REPORTS = 800
BINS = 8


def leader_view(kind: str, measurement: int, seed: int) -> tuple[np.ndarray, list[bytes]]:
    """(leader-share field elements, reports x elements; public shares) of REPORTS reports."""
    params = Prio3Params.for_deployment(kind, key_id="k", dp_eps=1.0, grid_steps=4000, bands=[10.0, 100.0, 1000.0])
    vdaf = FastPrio3(params.vdaf())
    read = XorShiftBytes(seed)
    ctx = params.ctx("r1", 7)
    rows, publics = [], []
    for _ in range(REPORTS):
        _, public, leader, _ = fast_make_report(vdaf, ctx, measurement, PK, read)
        body = leader[:len(leader) - (32 if vdaf.uses_joint_rand else 0)]
        rows.append(vdaf.field.decode_vec(body))
        publics.append(public)
    return np.array(rows, dtype=object), publics, vdaf.field.MODULUS


def bins_of(column, modulus: int) -> np.ndarray:
    return np.array([x * BINS // modulus for x in column], dtype=np.int64)


@pytest.mark.parametrize("kind,low,high", [("sum", 0, 4000), ("count", 0, 1), ("histogram", 0, 3)])
def test_leader_shares_are_uniform_and_the_same_for_opposite_fleets(kind, low, high):
    a, pub_a, p = leader_view(kind, low, seed=101)
    b, pub_b, _ = leader_view(kind, high, seed=202)
    pvalues = []
    for j in range(a.shape[1]):
        ca = np.bincount(bins_of(a[:, j], p), minlength=BINS)
        cb = np.bincount(bins_of(b[:, j], p), minlength=BINS)
        pvalues += [stats.chisquare(ca).pvalue, stats.chisquare(cb).pvalue,
                    stats.chi2_contingency(np.vstack([ca, cb]))[1]]
    if pub_a[0]:                           # joint randomness parts (histogram): uniform bytes alike
        ba = np.frombuffer(b"".join(pub_a), dtype=np.uint8) >> 5
        bb = np.frombuffer(b"".join(pub_b), dtype=np.uint8) >> 5
        pvalues.append(stats.chi2_contingency(np.vstack([np.bincount(ba, minlength=8),
                                                         np.bincount(bb, minlength=8)]))[1])
    assert min(pvalues) > P_MIN / len(pvalues), f"{kind}: min p {min(pvalues):.2e} over {len(pvalues)} tests"


def test_the_test_sees_a_share_that_leaks():
    """The same test on the measurement itself (what a leaky share would be) fails."""
    p = 2 ** 64
    a = bins_of(np.full(REPORTS, 0, dtype=object), p)
    b = bins_of(np.full(REPORTS, p - 1, dtype=object), p)
    assert stats.chi2_contingency(np.vstack([np.bincount(a, minlength=BINS) + 1,
                                             np.bincount(b, minlength=BINS) + 1]))[1] < 1e-100
