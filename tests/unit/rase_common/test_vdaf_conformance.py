"""Every Prio3Count, Prio3Sum and Prio3Histogram vector of draft-irtf-cfrg-vdaf
(tests/fixtures/vdaf, README there), each operation in the order the vector
lists it: shard on the device core, verify_init / verifier_shares_to_message /
verify_next / aggregate on the batch aggregators, unshard. A bad_* vector
must fail at exactly the operation it names, and at no earlier one."""

import json
from pathlib import Path

import pytest

from rase_device.prio3 import prio3_count, prio3_histogram, prio3_sum
from rase_common.vdaf import batch, generate_keypair

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


# -- the same vectors through both report encodings and the array path (issue 30) ------------------------------

TWO_PARTY = [n for n in VECTORS if load(n)[1]["shares"] == 2]


def _through_the_wire(vdaf, ctx: bytes, r: dict, encoding: str) -> tuple[bytes, bytes, bytes, bytes]:
    """A vector's report as a device sends it (its helper share sealed), encoded
    as JSON or binary, and what the fog and the fusion center read back: (nonce,
    public share, leader share, the helper share opened)."""
    from rase_device import prio3_binary
    from rase_device.prio3_report import helper_share_info
    from rase_device.secagg import encode_report
    from rase_common.protocol.prio3 import SEAL_OVERHEAD, Prio3Report, read_binary_report
    from rase_common.vdaf.hpke import open_sealed, seal

    nonce, public = bytes.fromhex(r["nonce"]), bytes.fromhex(r["public_share"])
    leader, helper = (bytes.fromhex(s) for s in r["input_shares"])
    sealed = seal(_KEYS[1], helper_share_info(ctx, nonce, public), helper)
    pid = "0123456789abcdef" * 2
    sizes = (16, len(public), len(leader), len(helper) + SEAL_OVERHEAD)
    if encoding == "json":
        got = Prio3Report.model_validate_json(encode_report(7, 1.0, 3, (nonce, public, leader, sealed), pid))
        n, p, ldr, s = got.shares(sizes)
    else:
        t, seq, got_pid, n, p, ldr, s = read_binary_report(prio3_binary.encode(7, 3, pid, (nonce, public, leader,
                                                                                             sealed)), sizes)
        assert (t, seq, got_pid) == (7, 3, pid)
    opened = open_sealed(_KEYS[0], helper_share_info(ctx, n, p), s)
    assert (n, p, ldr, opened) == (nonce, public, leader, helper)
    return n, p, ldr, opened


_KEYS = generate_keypair()       # the helper's HPKE key pair the vectors' helper shares are sealed to


@pytest.mark.parametrize("encoding", ["binary", "json"])
@pytest.mark.parametrize("name", TWO_PARTY)
def test_vector_contents_through_both_encodings_and_the_array_path(name, encoding):
    """Every two-aggregator vector's reports sealed, encoded as a device sends
    them (binary and JSON), read back, and verified on the array path
    (batch.verify_init_columns, verifier_messages_columns, verify_next_columns)
    that the services run: the same verifier shares, messages, output and
    aggregate shares as the draft's, and the bad vectors fail where they say."""
    import numpy as np

    vdaf, vec = load(name)
    ctx, verify_key = bytes.fromhex(vec["ctx"]), bytes.fromhex(vec["verify_key"])
    wire = [_through_the_wire(vdaf, ctx, r, encoding) for r in vec["reports"]]

    def row(x: bytes) -> np.ndarray:
        return np.frombuffer(x, dtype=np.uint8).reshape(1, len(x))

    states, mats, valid = {}, {}, {}
    agg_shares = {}
    for op in vec["operations"]:
        kind, ok = op["operation"], op["success"]
        i, j = op.get("report_index"), op.get("aggregator_id")
        if kind == "shard":
            continue              # the device's side: tests/unit/rase_device/test_prio3*.py
        if kind == "verify_init":
            n, p, ldr, hlp = wire[i]
            state, vs, live = batch.verify_init_columns(vdaf, verify_key, ctx, j, row(n), row(p),
                                                        row(ldr if j == 0 else hlp), [None])
            assert ok and live.all() and vs[0].tobytes().hex() == vec["reports"][i]["verifier_shares"][0][j]
            states[i, j], mats[i, j] = state, vs
        elif kind == "verifier_shares_to_message":
            v, seeds, reasons = batch.verifier_messages_columns(
                vdaf, ctx, [mats[i, a] for a in range(2)], [np.ones(1, dtype=bool)] * 2)
            if ok:
                assert v.all() and reasons == [None]
                msg = seeds[0] if seeds is not None else b""
                assert msg.hex() == vec["reports"][i]["verifier_messages"][0]
                valid[i] = (v, seeds)
            else:
                assert not v.any() and reasons == [batch.Rejection.PROOF_INVALID]
        elif kind == "verify_next":
            v, seeds = valid.get(i) or (np.ones(1, dtype=bool), [bytes.fromhex(vec["reports"][i]["verifier_messages"]
                                                                              [0])] if vdaf.uses_joint_rand else None)
            reasons = batch.verify_next_columns(states[i, j], v, seeds)
            if ok:
                assert reasons == [None]
                assert vdaf.field.encode_vec(states[i, j].out_share(0)).hex() == vec["reports"][i]["out_shares"][j]
            else:
                assert reasons == [batch.Rejection.JOINT_RAND_MISMATCH]
        elif kind == "aggregate":
            agg_shares[j] = batch.merge(vdaf, [batch.aggregate(states[k, j]) for k in range(len(vec["reports"]))])
            assert ok and agg_shares[j].hex() == vec["agg_shares"][j]
        elif kind == "unshard":
            assert ok and vdaf.unshard([agg_shares[0], agg_shares[1]], len(vec["reports"])) == vec["agg_result"]
