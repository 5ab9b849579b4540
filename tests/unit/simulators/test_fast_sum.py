"""The simulators' table-driven Prio3Sum prover (simulators.fast_sum) makes the
device core's shares byte for byte from the same nonce and randomness, and
its reports verify and aggregate as the aggregators do."""

import os

import pytest

from rase_common.vdaf import Prio3Aggregator, generate_keypair, open_helper_shares
from rase_device.prio3 import prio3_sum
from simulators.fast_sum import SumProver, fast_sum_make_report
from tests.seeded_bytes import XorShiftBytes


@pytest.mark.parametrize("max_measurement", [1, 4000, 4095, 8000])
def test_its_shares_are_the_device_cores(max_measurement):
    vdaf = prio3_sum(max_measurement)
    prover = SumProver(vdaf)
    read = XorShiftBytes(max_measurement)
    values = sorted({0, 1, max_measurement // 2, max_measurement - 1, max_measurement,
                     (1 << (vdaf.valid.bits - 1)) - 1, min(max_measurement, 1 << (vdaf.valid.bits - 1))})
    for m in values + [int.from_bytes(os.urandom(4), "big") % (max_measurement + 1) for _ in range(20)]:
        ctx = b"rase/v1/prio3/r1/%d/0123" % m
        nonce, rand = bytes(read(16)), bytes(read(vdaf.RAND_SIZE))
        assert prover.shard(ctx, m, nonce, rand) == vdaf.shard(ctx, m, nonce, rand), m


def test_its_reports_verify_and_sum():
    sk, pk = generate_keypair()
    vdaf = prio3_sum(8000)
    ctx = b"rase/v1/prio3/r1/7/abcd"
    ms = [0, 17, 8000, 4096, 4095, 612]
    reports = [fast_sum_make_report(vdaf, ctx, m, pk) for m in ms]
    nonces = [r[0] for r in reports]
    pubs = [r[1] for r in reports]
    helper_shares = open_helper_shares(sk, ctx, nonces, pubs, [r[3] for r in reports])
    leader, helper = (Prio3Aggregator(vdaf, bytes(32), ctx, a) for a in (0, 1))
    a = leader.start(nonces, pubs, [r[2] for r in reports])
    b = helper.start(nonces, pubs, helper_shares)
    both = leader.finish(b) & helper.finish(a)
    assert both.all()
    assert vdaf.unshard([leader.aggregate(both), helper.aggregate(both)], len(ms)) == sum(ms)
