"""The device's Prio3 client under the real MicroPython, both ports: the
draft's shard vectors, the XofTurboShake128 vector, RFC 9180's HPKE vectors,
and a report made on the board that the aggregators (CPython) accept, its
helper share opened with `cryptography`.

Both ports shard every report of every non-bad Prio3Count/Sum/Histogram
vector (29 reports in 9 files, 2 and 3 shares; the bad_* vectors test the
aggregators, which do not run on a device). RFC 9180: key derivation, the
first 4 encryptions and the 3 exports on both ports."""

import json
from pathlib import Path

import pytest

from rase_device.prio3 import prio3_histogram, prio3_sum
from rase_device.prio3_report import helper_share_info
from rase_common.vdaf import Prio3Aggregator, generate_keypair, open_helper_shares
from rase_common.vdaf import hpke as server_hpke
from simulators.wasm_board import WASM_URANDOM

pytestmark = pytest.mark.micropython

ROOT = Path(__file__).resolve().parents[2] / "fixtures"
GOOD = sorted(p.name for p in (ROOT / "vdaf").glob("Prio3*.json") if "_bad_" not in p.name)


def shard_cases(names):
    cases, expected = [], []
    for name in names:
        vec = json.loads((ROOT / "vdaf" / name).read_text())
        kind = name.split("_")[0]
        if kind == "Prio3Count":
            params = [vec["shares"]]
        elif kind == "Prio3Sum":
            params = [vec["max_measurement"], vec["shares"]]
        else:
            params = [vec["length"], vec["chunk_length"], vec["shares"]]
        for r in vec["reports"]:
            cases.append([kind, params, vec["ctx"], r["measurement"], r["nonce"], r["rand"]])
            expected.append([r["public_share"], r["input_shares"]])
    return cases, expected


SHARD_SNIPPET = """
import json
from rase_device.prio3 import prio3_count, prio3_sum, prio3_histogram
from rase_device.turboshake import derive_seed, expand_into_vec
from rase_device.vdaf_field import FIELD128
make = {'Prio3Count': prio3_count, 'Prio3Sum': prio3_sum, 'Prio3Histogram': prio3_histogram}
h = bytes.fromhex
for kind, params, ctx, m, nonce, rand in json.loads(%(cases)r):
    pub, shares = make[kind](*params).shard(h(ctx), m, h(nonce), h(rand))
    print(json.dumps([pub.hex(), [s.hex() for s in shares]]))
x = json.loads(%(xof)r)
seed, dst, binder = h(x['seed']), h(x['dst']), h(x['binder'])
print(json.dumps([derive_seed(seed, dst, binder).hex(),
                  FIELD128.encode_vec(expand_into_vec(FIELD128, seed, dst, binder, x['length'])).hex()]))
"""

HPKE_SNIPPET = """
import json
from rase_device import hpke, x25519
h = bytes.fromhex
v = json.loads(%(vec)r)
sk, pk = hpke.derive_key_pair(h(v['ikmR']))
enc, ctx = hpke.setup_base_s(pk, h(v['info']), h(v['ikmE']))
rctx = hpke.setup_base_r(enc, sk, h(v['info']))
out = [sk.hex(), pk.hex(), enc.hex()]
for e in v['encryptions']:
    out.append(ctx.seal(h(e['aad']), h(e['pt'])).hex())
    out.append(rctx.open(h(e['aad']), h(e['ct'])).hex())
for e in v['exports']:
    out.append(ctx.export(h(e['exporter_context']), e['L']).hex())
print(json.dumps(out))
"""

REPORT_SNIPPET = """
import json
from rase_device.prio3 import prio3_sum, prio3_histogram
from rase_device.prio3_report import make_report
read = %(read)s
out = []
for v, m in ((prio3_sum(4095), 4000), (prio3_sum(4095), 17), (prio3_histogram(10, 3), 9)):
    out.append([x.hex() for x in make_report(v, b'rase upy', m, bytes.fromhex(%(pk)r), read)])
print(json.dumps(out))
"""


ENCODE_SNIPPET = """
import json
from rase_device.prio3_binary import encode, decode
from rase_device.secagg import encode_report
h = bytes.fromhex
for nonce, pub, leader, sealed in json.loads(%(cases)r):
    report = (h(nonce), h(pub), h(leader), h(sealed))
    data = encode(7, 3, '0123456789abcdef0123456789abcdef', report)
    back = decode(data)
    assert back[1:4] == (7, 3, '0123456789abcdef0123456789abcdef') and back[4:] == report
    print(json.dumps([data.hex(), encode_report(7, 1.0, 3, report, '0123456789abcdef0123456789abcdef')]))
"""


def encode_cases(names):
    """(nonce, public, leader share, a stand-in sealed helper share: enc || share || tag) of every
    two-aggregator report of the vectors, hex."""
    out = []
    for name in names:
        vec = json.loads((ROOT / "vdaf" / name).read_text())
        if vec["shares"] != 2:
            continue
        for r in vec["reports"]:
            out.append([r["nonce"], r["public_share"], r["input_shares"][0],
                        "ee" * 32 + r["input_shares"][1] + "77" * 16])
    return out


def check_encodings(lines, cases):
    """What the board wrote, read by the fog (binary and JSON): the vectors' shares, byte for byte."""
    from rase_common.protocol.prio3 import Prio3Report, read_binary_report

    got = [json.loads(line) for line in lines.strip().splitlines()]
    assert len(got) == len(cases) == 26      # 29 reports, of which 3 have 3 shares
    for (data, text), case in zip(got, cases):
        want = tuple(bytes.fromhex(x) for x in case)
        sizes = tuple(len(x) for x in want)
        assert read_binary_report(bytes.fromhex(data), sizes) == (7, 3, "0123456789abcdef" * 2) + want
        assert Prio3Report.model_validate_json(text).shares(sizes) == want


def test_both_report_encodings_of_the_vectors_under_the_unix_port(micropython_unix):
    cases = encode_cases(GOOD)
    check_encodings(micropython_unix(ENCODE_SNIPPET % {"cases": json.dumps(cases)}), cases)


def test_both_report_encodings_of_the_vectors_under_the_webassembly_port(micropython):
    cases = encode_cases(GOOD)
    check_encodings(micropython([ENCODE_SNIPPET % {"cases": json.dumps(cases)}])[0], cases)


def hpke_case():
    vec = json.loads((ROOT / "hpke" / "rfc9180_base_x25519_sha256_chacha20poly1305.json").read_text())
    small = dict(vec, encryptions=vec["encryptions"][:4])
    want = [vec["skRm"], vec["pkRm"], vec["enc"]]
    for e in small["encryptions"]:
        want += [e["ct"], e["pt"]]
    want += [e["exported_value"] for e in vec["exports"]]
    return json.dumps(small), want


def check_reports_from_the_board(lines):
    sk, pk = KEYS
    made = json.loads(lines)
    for (vdaf, m), report in zip(((prio3_sum(4095), 4000), (prio3_sum(4095), 17), (prio3_histogram(10, 3), 9)), made):
        nonce, public, leader_share, sealed = (bytes.fromhex(x) for x in report)
        helper_share = open_helper_shares(sk, b"rase upy", [nonce], [public], [sealed])[0]
        assert helper_share is not None, "a share sealed under MicroPython must open on CPython"
        assert server_hpke.open_sealed(sk, helper_share_info(b"rase upy", nonce, public), sealed) == helper_share
        leader, helper = (Prio3Aggregator(vdaf, bytes(32), b"rase upy", a) for a in (0, 1))
        a = leader.start([nonce], [public], [leader_share])
        b = helper.start([nonce], [public], [helper_share])
        both = leader.finish(b) & helper.finish(a)
        assert both.all()
        assert vdaf.unshard([leader.aggregate(both), helper.aggregate(both)], 1) == (
            m if vdaf.ID == 2 else [int(i == m) for i in range(10)])


KEYS = generate_keypair()


def _snippets(names):
    cases, expected = shard_cases(names)
    xof = (ROOT / "vdaf" / "XofTurboShake128.json").read_text()
    xv = json.loads(xof)
    return SHARD_SNIPPET % {"cases": json.dumps(cases), "xof": xof}, expected, [xv["derived_seed"],
                                                                               xv["expanded_vec_field128"]]


def test_shard_xof_and_hpke_vectors_under_the_unix_port(micropython_unix):
    code, expected, xof_want = _snippets(GOOD)
    lines = micropython_unix(code).strip().splitlines()
    assert [json.loads(line) for line in lines[:-1]] == expected and len(expected) == 29
    assert json.loads(lines[-1]) == xof_want
    vec, want = hpke_case()
    assert json.loads(micropython_unix(HPKE_SNIPPET % {"vec": vec}).strip()) == want


def test_shard_xof_and_hpke_vectors_under_the_webassembly_port(micropython):
    code, expected, xof_want = _snippets(GOOD)
    vec, want = hpke_case()
    shard_out, hpke_out = micropython([code, HPKE_SNIPPET % {"vec": vec}])
    lines = shard_out.strip().splitlines()
    assert [json.loads(line) for line in lines[:-1]] == expected
    assert json.loads(lines[-1]) == xof_want
    assert json.loads(hpke_out.strip()) == want


def test_reports_sealed_under_the_unix_port_open_and_verify_on_cpython(micropython_unix):
    out = micropython_unix(REPORT_SNIPPET % {"read": "__import__('os').urandom", "pk": KEYS[1].hex()})
    check_reports_from_the_board(out.strip())


def test_reports_sealed_under_the_webassembly_port_open_and_verify_on_cpython(micropython):
    out = micropython([REPORT_SNIPPET % {"read": WASM_URANDOM, "pk": KEYS[1].hex()}])[0]
    check_reports_from_the_board(out.strip())
