"""Verification on worker processes (rase_common.vdaf.workers, issue 30): a
batch split into chunks over two real spawned processes gives exactly what
one process gives (the same verifier shares, reasons, accepted set and
aggregate shares), bad reports on either side of a chunk's edge included, and
a pool whose worker died verifies the window in the calling process."""

import os
import signal

import numpy as np
import pytest

from rase_common.protocol.prio3 import Prio3Params
from rase_common.vdaf import Prio3Aggregator, Rejection, batch, generate_keypair
from rase_common.vdaf.fast_client import FastPrio3, fast_make_report
from rase_common.vdaf.workers import VerifyPool

SK, PK = generate_keypair()
VERIFY_KEY = bytes(range(32))


def window(kind: str, n: int):  # noqa: ANN201
    p = Prio3Params.for_deployment(kind, key_id="fc", dp_eps=1.0, grid_steps=4000, bands=[10.0, 100.0, 1000.0])
    ctx = p.ctx("r1", 5)
    fast = FastPrio3(p.vdaf())
    reports = [list(fast_make_report(fast, ctx, i % (2 if kind == "count" else 4), PK)) for i in range(n)]
    reports[3][3] = reports[3][3][:-1] + bytes([reports[3][3][-1] ^ 1])     # does not open
    reports[7][0] = reports[2][0]                                            # an earlier report's nonce
    reports[n // 2][2] = reports[n // 2 + 1][2]                              # another report's leader share
    reports[n // 2 - 1][3] = reports[0][3]                                   # another report's sealed share

    def mat(k: int) -> np.ndarray:
        return np.frombuffer(b"".join(r[k] for r in reports), dtype=np.uint8).reshape(n, -1)
    return p, ctx, mat(0), mat(1) if p.vdaf().public_share_size() else np.zeros((n, 0), np.uint8), mat(2), mat(3)


def both_sides(pool: VerifyPool, p, ctx, nonces, pubs, leaders, sealed, seen=frozenset()):  # noqa: ANN001, ANN201
    lead = pool.leader_init(p, VERIFY_KEY, ctx, nonces, pubs, leaders, seen)
    help_ = pool.helper_verify(p, SK, VERIFY_KEY, ctx, nonces, pubs, sealed, lead.shares, lead.live, seen)
    mine = pool.leader_finish(p, ctx, lead, help_.shares, help_.live)
    both = mine & help_.state.accepted
    return lead, help_, both, [batch.aggregate(lead.state, both), batch.aggregate(help_.state, both)]


@pytest.fixture(scope="module")
def pool():
    p = VerifyPool(2, small=1)
    p.warm()
    yield p
    p.close()


@pytest.mark.parametrize("kind", ["sum", "histogram"])
def test_two_worker_processes_verify_exactly_as_one(pool, kind):
    n = 1100                                   # 2 chunks of 550 (MIN_CHUNK 500): bad reports on both sides
    args = window(kind, n)
    one = both_sides(VerifyPool(1), *args, seen={args[2][9].tobytes()})
    two = both_sides(pool, *args, seen={args[2][9].tobytes()})
    assert len(pool.chunks(n)) == 2
    for a, b in zip(one[:2], two[:2]):
        assert (a.shares == b.shares).all() and (a.live == b.live).all() and a.state.reasons == b.state.reasons
    assert (one[2] == two[2]).all() and one[3] == two[3]
    reasons = two[1].state.reasons
    assert reasons[3] == Rejection.DECRYPT_FAILED and reasons[7] in (Rejection.DECRYPT_FAILED,
                                                                   Rejection.NONCE_REPEATED)
    assert reasons[9] == Rejection.NONCE_REPLAYED and two[0].state.reasons[n // 2] == Rejection.PROOF_INVALID
    assert int(two[2].sum()) == n - 5
    # verify_init on the workers is the byte-string path's (the conformance-tested one), report for report.
    p, ctx, nonces, pubs, leaders, sealed = args
    agg = Prio3Aggregator(p.vdaf(), VERIFY_KEY, ctx, 0)
    want = agg.start(batch._rows_bytes(nonces), batch._rows_bytes(pubs), batch._rows_bytes(leaders),
                     seen_nonces={nonces[9].tobytes()})
    got = pool.leader_init(p, VERIFY_KEY, ctx, nonces, pubs, leaders, {nonces[9].tobytes()})
    assert agg.reasons == got.state.reasons
    assert want == [row.tobytes() if ok else None for row, ok in zip(got.shares, got.live)]


def test_a_pool_whose_worker_died_verifies_in_the_calling_process(caplog):
    pool = VerifyPool(2, small=1)
    pool.warm()
    try:
        for pid in list(pool._executor()._processes):      # noqa: SLF001 - a worker killed from outside
            os.kill(pid, signal.SIGKILL)
        args = window("sum", 1000)
        lead, help_, both, shares = both_sides(pool, *args)
        assert int(both.sum()) == 1000 - 4
        assert "verification workers lost" in caplog.text
        lead2, help2, both2, shares2 = both_sides(pool, *args)     # the next window on new workers
        assert (both == both2).all() and shares == shares2
    finally:
        pool.close()


def test_every_worker_imports_what_its_chunks_need_as_it_starts():
    # A window's first chunk must not pay the imports (0.4 s of CPU a worker, in its latency):
    # warm() starts every worker, and each imports the batch code and the preloaded modules.
    pool = VerifyPool(2, small=1, preload=("rase_common.protocol.prio3",))
    pool.warm()
    try:
        ex = pool._executor()                                   # noqa: SLF001
        assert len(ex._processes) == 2                          # noqa: SLF001 - both started by warm()
        probe = "(__import__('os').getpid(), [m in __import__('sys').modules for m in " \
                "('rase_common.protocol.prio3', 'rase_common.vdaf.hpke', 'numpy')])"
        seen = dict(f.result() for f in [ex.submit(eval, probe) for _ in range(8)])
        assert seen and set(seen) <= set(ex._processes)          # noqa: SLF001
        assert all(all(loaded) for loaded in seen.values()), seen
    finally:
        pool.close()
