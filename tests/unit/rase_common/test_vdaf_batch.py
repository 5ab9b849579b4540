"""Prio3 over whole batches with two aggregators: honest reports are all
accepted and sum exactly; every kind of bad report is rejected with its
reason and left out of both aggregate shares; and the soundness checks
against a cheating device, counted over many tries per variant."""

import random

import numpy as np
import pytest

from rase_device import flp
from rase_device.prio3 import prio3_count, prio3_histogram, prio3_sum
from rase_device.prio3_report import make_report
from rase_common.vdaf import Prio3Aggregator, Rejection, batch, generate_keypair, open_helper_shares

CTX = b"rase test"
VERIFY_KEY = bytes(range(32))
VARIANTS = {
    "count": (prio3_count(), lambda rng: rng.randrange(2)),
    "sum": (prio3_sum(4095), lambda rng: rng.randrange(4096)),
    "histogram": (prio3_histogram(10, 3), lambda rng: rng.randrange(10)),
}


def run_two_party(vdaf, reports, sealed_key, seen=frozenset()):
    nonces = [r[0] for r in reports]
    publics = [r[1] for r in reports]
    leader, helper = Prio3Aggregator(vdaf, VERIFY_KEY, CTX, 0), Prio3Aggregator(vdaf, VERIFY_KEY, CTX, 1)
    helper_inputs = open_helper_shares(sealed_key, CTX, nonces, publics, [r[3] for r in reports])
    to_helper = leader.start(nonces, publics, [r[2] for r in reports], seen)
    to_leader = helper.start(nonces, publics, helper_inputs, seen)
    both = leader.finish(to_leader) & helper.finish(to_helper)
    result = vdaf.unshard([leader.aggregate(both), helper.aggregate(both)], int(both.sum()))
    return leader, helper, both, result


def truth(name, measurements):
    if name == "histogram":
        return [measurements.count(b) for b in range(10)]
    return sum(measurements)


@pytest.fixture(scope="module")
def keys():
    return generate_keypair()


@pytest.mark.parametrize("name", VARIANTS)
def test_honest_batch_is_accepted_and_sums_exactly(name, keys):
    vdaf, draw = VARIANTS[name]
    rng = random.Random(name)
    meas = [draw(rng) for _ in range(40)]
    reports = [make_report(vdaf, CTX, m, keys[1], rng.randbytes) for m in meas]
    leader, helper, both, result = run_two_party(vdaf, reports, keys[0])
    assert both.all() and leader.reasons == helper.reasons == [None] * 40
    assert result == truth(name, meas)


@pytest.mark.parametrize("name", VARIANTS)
def test_bad_reports_are_rejected_with_their_reason_and_never_aggregated(name, keys):
    vdaf, draw = VARIANTS[name]
    rng = random.Random("bad" + name)
    meas = [draw(rng) for _ in range(12)]
    reports = [list(make_report(vdaf, CTX, m, keys[1], rng.randbytes)) for m in meas]
    reports[1][2] = reports[1][2][:-1]                             # leader share one byte short
    es = vdaf.field.ENCODED_SIZE
    reports[2][2] = b"\xff" * es + reports[2][2][es:]             # an element >= p
    reports[3][3] = reports[3][3][:-1] + bytes([reports[3][3][-1] ^ 1])  # sealed share altered
    reports[4][0] = reports[0][0]                                  # nonce of an earlier report
    reports[6][2] = reports[7][2]                                  # leader share of another report
    seen = {reports[5][0]}                                         # nonce seen in an earlier window
    leader, helper, both, result = run_two_party(vdaf, [tuple(r) for r in reports], keys[0], seen)
    want = {1: Rejection.MALFORMED, 2: Rejection.MALFORMED, 3: Rejection.DECRYPT_FAILED,
            4: Rejection.NONCE_REPEATED, 5: Rejection.NONCE_REPLAYED, 6: Rejection.PROOF_INVALID}
    assert list(np.flatnonzero(~both)) == sorted(want)
    assert {i: r for i, r in enumerate(leader.reasons) if r} == {
        **want, 3: Rejection.PEER_REJECTED}  # the leader sees only that the helper had nothing
    assert helper.reasons[3] == Rejection.DECRYPT_FAILED and helper.reasons[1] == Rejection.PEER_REJECTED
    kept = [m for i, m in enumerate(meas) if i not in want]
    assert result == truth(name, kept)
    assert leader.rejected_counts()["malformed"] == 2


def test_api_misuse_is_a_clear_error(keys):
    vdaf = prio3_sum(15)
    agg = Prio3Aggregator(vdaf, VERIFY_KEY, CTX, 0)
    with pytest.raises(ValueError, match="start"):
        agg.finish([])
    with pytest.raises(ValueError, match="agg_id"):
        Prio3Aggregator(vdaf, VERIFY_KEY, CTX, 2)
    with pytest.raises(ValueError, match="verify_key"):
        batch.verify_init(vdaf, b"short", CTX, 0, [], [], [])
    state, _ = batch.verify_init(vdaf, VERIFY_KEY, CTX, 0, [], [], [])
    with pytest.raises(ValueError, match="before verify_next"):
        batch.aggregate(state)
    agg.start([bytes(16)], [b""], [b"x"])
    with pytest.raises(ValueError, match="1 reports"):
        agg.finish([None, None])


# -- soundness: a device that cheats -------------------------------------

TRIES = 60


def invalid_measurement(name, vdaf, rng):
    """An encoded measurement outside the valid set, of the variant's shape."""
    p = vdaf.field.MODULUS
    if name == "count":
        return [rng.choice([2, 3, p - 1, rng.randrange(2, p)])]
    if name == "sum":  # one digit that is not a bit: the value leaves [0, max_measurement]
        bits = [rng.randrange(2) for _ in range(vdaf.MEAS_LEN)]
        bits[rng.randrange(len(bits))] = rng.choice([2, p - 1, 1 << 20])
        return bits
    out = [0] * vdaf.MEAS_LEN  # sums to one, but not one-hot: 2 in one bucket, -1 in another
    i, j = rng.sample(range(vdaf.MEAS_LEN), 2)
    out[i], out[j] = 2, p - 1
    return out


def gadget_outputs(vdaf, meas, joint_rand):
    """Each gadget call's honest output on `meas`, and what it must read for the circuit to accept."""
    outs = []

    class Record:
        def __init__(self, g):
            self.g, self.ARITY = g, g.ARITY

        def eval(self, F, inp):
            outs.append(self.g.eval(F, inp))
            return outs[-1]
    field = vdaf.field
    vdaf.valid.eval(field, meas, joint_rand, 1, [Record(g) for g in vdaf.valid.GADGETS])
    if isinstance(vdaf.valid, flp.Count):
        return outs, [meas[0]]  # x*x - x = 0 needs the gadget to say x
    return outs, [0] * len(outs)  # Sum: every x*x - x; Histogram: each chunk's range check


def cheat(name, vdaf, rng, how):
    """A report for an invalid measurement: the proof honest over it ("forged"),
    re-aimed so the circuit's output is zero ("altered"), or random ("random")."""
    meas = invalid_measurement(name, vdaf, rng)
    nonce, rand = rng.randbytes(16), rng.randbytes(vdaf.RAND_SIZE)
    public, (leader, helper) = vdaf.shard_encoded(CTX, meas, nonce, rand)
    field, es = vdaf.field, vdaf.field.ENCODED_SIZE
    proof_at = vdaf.MEAS_LEN * es
    proof = field.decode_vec(leader[proof_at:proof_at + vdaf.PROOF_LEN * es])
    if how == "altered":
        joint_rand = []
        if vdaf.uses_joint_rand:
            joint_rand = vdaf.joint_rands(CTX, vdaf.joint_rand_seed(CTX, [public[:32], public[32:]]))
        honest, wanted = gadget_outputs(vdaf, meas, joint_rand)
        g = vdaf.valid.GADGETS[0]
        for k, (have, want) in enumerate(zip(honest, wanted), start=1):
            at = g.ARITY + 2 * k  # the gadget polynomial's value at call k's node
            proof[at] = field.add(proof[at], field.sub(want, have))
    elif how == "random":
        proof = [rng.randrange(field.MODULUS) for _ in proof]
    leader = leader[:proof_at] + field.encode_vec(proof) + leader[proof_at + len(proof) * es:]
    return nonce, public, leader, helper


def verify_pair(vdaf, reports):
    nonces, publics = [r[0] for r in reports], [r[1] for r in reports]
    s0, v0 = batch.verify_init(vdaf, VERIFY_KEY, CTX, 0, nonces, publics, [r[2] for r in reports])
    s1, v1 = batch.verify_init(vdaf, VERIFY_KEY, CTX, 1, nonces, publics, [r[3] for r in reports])
    messages, reasons = batch.verifier_shares_to_message(vdaf, CTX, [v0, v1])
    return v0, v1, reasons


def circuit_output(vdaf, v0, v1):
    """The combined verifier's first element (the reduced circuit output) per report."""
    f, es = vdaf.field, vdaf.field.ENCODED_SIZE
    return [f.add(f.decode_vec(a[:es])[0], f.decode_vec(b[:es])[0]) for a, b in zip(v0, v1)]


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("how", ["forged", "altered", "random"])
def test_out_of_range_measurement_is_rejected(name, how, capsys):
    vdaf = VARIANTS[name][0]
    rng = random.Random(f"{name}-{how}")
    reports = [cheat(name, vdaf, rng, how) for _ in range(TRIES)]
    v0, v1, reasons = verify_pair(vdaf, reports)
    rejected = sum(r == Rejection.PROOF_INVALID for r in reasons)
    with capsys.disabled():
        print(f"\n  soundness {name}/{how}: {rejected}/{TRIES} rejected")
    assert rejected == TRIES
    outputs = circuit_output(vdaf, v0, v1)
    if how == "altered":  # the circuit check passes: only the gadget test can catch it
        assert outputs == [0] * TRIES
    elif how == "forged":
        assert all(outputs)


@pytest.mark.parametrize("name", VARIANTS)
def test_the_cheat_harness_accepts_what_is_honest(name):
    """Control: the same path with a valid measurement and an untouched proof is accepted."""
    vdaf, draw = VARIANTS[name]
    rng = random.Random("control" + name)
    reports = []
    for _ in range(10):
        nonce = rng.randbytes(16)
        public, (leader, helper) = vdaf.shard(CTX, draw(rng), nonce, rng.randbytes(vdaf.RAND_SIZE))
        reports.append((nonce, public, leader, helper))
    _, _, reasons = verify_pair(vdaf, reports)
    assert reasons == [None] * 10
