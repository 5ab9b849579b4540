"""Every Prio3Count, Prio3Sum and Prio3Histogram vector of draft-irtf-cfrg-vdaf
(tests/fixtures/vdaf, README there), each operation in the order the vector
lists it: shard on the device core, verify_init / verifier_shares_to_message /
verify_next / aggregate on the batch aggregators, unshard. A bad_* vector
must fail at exactly the operation it names, and at no earlier one."""

import json
from pathlib import Path

import pytest

from rase_device.prio3 import prio3_count, prio3_histogram, prio3_sum
from rase_common.vdaf import batch

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vdaf"
VECTORS = sorted(p.name for p in FIXTURES.glob("Prio3*.json"))


def load(name):
    vec = json.loads((FIXTURES / name).read_text())
    if name.startswith("Prio3Count"):
        vdaf = prio3_count(vec["shares"])
    elif name.startswith("Prio3Sum"):
        vdaf = prio3_sum(vec["max_measurement"], vec["shares"])
    else:
        vdaf = prio3_histogram(vec["length"], vec["chunk_length"], vec["shares"])
    return vdaf, vec


def test_the_fixture_set_is_complete():
    counts = {kind: sum(n.startswith(kind) for n in VECTORS) for kind in ("Prio3Count", "Prio3Sum", "Prio3Histogram")}
    assert counts == {"Prio3Count": 7, "Prio3Sum": 3, "Prio3Histogram": 7}


@pytest.mark.parametrize("name", VECTORS)
def test_vector(name):
    vdaf, vec = load(name)
    ctx, verify_key = bytes.fromhex(vec["ctx"]), bytes.fromhex(vec["verify_key"])
    reports = vec["reports"]
    states, shares, messages = {}, {}, {}
    agg_shares = {}
    for op in vec["operations"]:
        kind, ok = op["operation"], op["success"]
        i, j = op.get("report_index"), op.get("aggregator_id")
        if kind == "shard":
            r = reports[i]
            public, inputs = vdaf.shard(ctx, r["measurement"], bytes.fromhex(r["nonce"]), bytes.fromhex(r["rand"]))
            assert ok and public.hex() == r["public_share"] and [s.hex() for s in inputs] == r["input_shares"]
        elif kind == "verify_init":
            r = reports[i]
            # One batch per report: the vectors give every report the same
            # nonce, which a batch rejects as a repeat (tested elsewhere).
            state, out = batch.verify_init(vdaf, verify_key, ctx, j, [bytes.fromhex(r["nonce"])],
                                           [bytes.fromhex(r["public_share"])], [bytes.fromhex(r["input_shares"][j])])
            assert ok and state.reasons == [None] and out[0].hex() == r["verifier_shares"][0][j]
            states[i, j], shares[i, j] = state, out[0]
        elif kind == "verifier_shares_to_message":
            msg, reasons = batch.verifier_shares_to_message(
                vdaf, ctx, [[shares[i, a]] for a in range(vdaf.SHARES)])
            if ok:
                assert reasons == [None] and msg[0].hex() == reports[i]["verifier_messages"][0]
                messages[i] = msg[0]
            else:
                assert msg == [None] and reasons == [batch.Rejection.PROOF_INVALID]
        elif kind == "verify_next":
            msg = messages[i] if i in messages else bytes.fromhex(reports[i]["verifier_messages"][0])
            reasons = batch.verify_next(states[i, j], [msg])
            if ok:
                assert reasons == [None]
                out_share = states[i, j].out_share(0)
                assert vdaf.field.encode_vec(out_share).hex() == reports[i]["out_shares"][j]
            else:
                assert reasons == [batch.Rejection.JOINT_RAND_MISMATCH]
        elif kind == "aggregate":
            mine = [batch.aggregate(states[k, j]) for k in range(len(reports))]
            agg_shares[j] = batch.merge(vdaf, mine)
            assert ok and agg_shares[j].hex() == vec["agg_shares"][j]
        elif kind == "unshard":
            result = vdaf.unshard([agg_shares[a] for a in range(vdaf.SHARES)], len(reports))
            assert ok and result == vec["agg_result"]
        else:
            pytest.fail(f"unknown operation {kind}")
