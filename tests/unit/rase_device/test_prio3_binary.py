"""A Prio3 report's binary encoding (issue 30; rase_device.prio3_binary, read
by rase_common.protocol.prio3 and the fog's ingest): the layout and its size,
the same report as its JSON encoding (Prio3Report), the fast reader and the
device's own decoder agreeing, and, fuzzed, every payload either read back
exactly or refused with a reason, by the decoder and by the fog."""

import json
import os
import struct

import pytest
from hypothesis import given, settings, strategies as st

from fog_shuffler import ingest
from fog_shuffler.ingest import IngestRules, Rejected
from fog_shuffler.prio3.leader_rules import Prio3Accepted, validate_report
from rase_device import prio3_binary
from rase_device.secagg import Prio3Client, encode_report
from rase_device.randomizer import Calibration
from rase_common.protocol.prio3 import Prio3BinaryReport, Prio3Params, Prio3Report, read_binary_report
from rase_common.vdaf import generate_keypair
from rase_common.vdaf.fast_client import FastPrio3, fast_make_report

SK, PK = generate_keypair()
PARAMS = {kind: Prio3Params.for_deployment(kind, key_id="fc-test", dp_eps=1.0, grid_steps=4000,
                                           bands=[10.0, 100.0, 1000.0]) for kind in ("sum", "count", "histogram")}
DEVICES = {f"dev{i}": "r1" for i in range(4)}
TOPIC = "rase/v1/reports/r1/dev1"


def made(kind: str = "sum", m: int = 1234, t: int = 9, seq: int = 5) -> tuple[tuple, bytes]:
    p = PARAMS[kind]
    report = fast_make_report(FastPrio3(p.vdaf()), p.ctx("r1", t), m, PK)
    return report, prio3_binary.encode(t, seq, p.params_id, report)


def rules() -> IngestRules:
    return IngestRules(devices=DEVICES, eps_levels=(1.0,), x_min=0.0, x_max=4000.0, lateness_periods=3,
                       mechanism="prio3")


def test_a_sum_4000_report_is_487_bytes_laid_out_as_documented():
    report, data = made()
    nonce, public, leader, sealed = report
    assert len(data) == 487 <= 500 and len(json.dumps(encode_report(9, 1.0, 5, report, PARAMS["sum"].params_id))) > 700
    assert data[:3] == b"R3\x01" and struct.unpack(">QI", data[3:15]) == (9, 5)
    assert data[15:31].hex() == PARAMS["sum"].params_id and data[31:47] == nonce
    at = 47
    for field in (public, leader, sealed[:32], sealed[32:]):
        assert struct.unpack(">H", data[at:at + 2])[0] == len(field) and data[at + 2:at + 2 + len(field)] == field
        at += 2 + len(field)
    assert at == len(data) == prio3_binary.size(len(public), len(leader), len(sealed))


@pytest.mark.parametrize("kind", ["sum", "count", "histogram"])
def test_the_binary_and_the_json_report_say_the_same(kind):
    report, data = made(kind, 1)
    p = PARAMS[kind]
    as_json = Prio3Report.model_validate_json(encode_report(9, 1.0, 5, report, p.params_id))
    binary = Prio3BinaryReport.from_bytes(data, p.report_sizes())
    assert (binary.t, binary.seq, binary.p) == (as_json.t, as_json.seq, as_json.p)
    assert (binary.nonce, binary.pub, binary.leader, binary.sealed) == as_json.shares(p.report_sizes())
    assert binary.to_bytes() == data
    assert Prio3Report.model_validate_json(binary.as_json(1.0)) == as_json        # the readable view
    # The fast reader (fixed offsets) and the device's decoder agree.
    assert read_binary_report(data, p.report_sizes()) == read_binary_report(data) == prio3_binary.decode(data)[1:]


def test_the_device_client_writes_binary_unless_told_as_json():
    p = PARAMS["sum"]
    client = Prio3Client(p.wire(), Calibration(x_max=4000.0), PK, "r1")
    client.make_report = fast_make_report
    data = client.report(12, 321, 1.0, 7)
    assert isinstance(data, bytes) and prio3_binary.is_binary(data) and prio3_binary.report_t(data) == 12
    t, seq, pid, *_ = read_binary_report(data, p.report_sizes())
    assert (t, seq, pid) == (12, 7, p.params_id)
    client.as_json = True
    assert json.loads(client.report(12, 321, 1.0, 8))["seq"] == 8


def test_the_fog_reads_a_binary_report_as_it_reads_the_json_one():
    report, data = made()
    p = PARAMS["sum"]
    got = validate_report(TOPIC, data, 9, rules(), p)
    want = validate_report(TOPIC, encode_report(9, 1.0, 5, report, p.params_id).encode(), 9, rules(), p)
    assert isinstance(got, Prio3Accepted) and got == want


@pytest.mark.parametrize("change,reason", [
    (lambda d: d[:2] + b"\x02" + d[3:], "unknown_version"),
    (lambda d: d[:-1], "malformed_report"),                  # a field runs past the end
    (lambda d: d + b"\x00", "malformed_report"),             # a byte after the report
    (lambda d: d[:40], "malformed_report"),                  # truncated in the header
    (lambda d: d[:15] + bytes(16) + d[31:], "params_mismatch"),
    (lambda d: d[:3] + struct.pack(">Q", 2) + d[11:], "t_out_of_range"),
    (lambda d: d[:49] + struct.pack(">H", 351) + d[51:402] + d[403:], "malformed_share"),   # a leader share one byte short
    (lambda d: d + bytes(30_000), "oversized"),
])
def test_a_bad_binary_report_is_refused_with_its_reason(change, reason):
    _, data = made()
    with pytest.raises(Rejected) as err:
        validate_report(TOPIC, change(data), 9, rules(), PARAMS["sum"])
    assert err.value.reason == reason


def test_a_binary_report_where_the_deployment_is_not_prio3_is_impossible():
    _, data = made()
    with pytest.raises(Rejected, match="impossible_y"):
        validate_report(TOPIC, data, 9, rules(), None)
    with pytest.raises(Rejected, match="unknown_device"):
        validate_report("rase/v1/reports/r1/stranger", data, 9, rules(), PARAMS["sum"])


# -- fuzzed: read back exactly, or refused with a reason --------------------------------------------------------

REPORT, DATA = made()


def _check_decoder(payload: bytes) -> None:
    try:
        fields = prio3_binary.decode(payload)
    except ValueError as err:
        assert str(err).split(":")[0] in ("malformed_report", "unknown_version")
        return
    _, t, seq, pid, nonce, pub, leader, sealed = fields
    assert prio3_binary.encode(t, seq, pid, (nonce, pub, leader, sealed)) == payload   # nothing lost, nothing added
    assert read_binary_report(payload, PARAMS["sum"].report_sizes()) == fields[1:]


def _check_fog(payload: bytes) -> None:
    try:
        got = validate_report(TOPIC, payload, 9, rules(), PARAMS["sum"])
    except Rejected as err:
        assert err.reason in ingest.REASONS
        return
    assert got.region == "r1" and got.device == "dev1" and tuple(got.shares) == tuple(
        read_binary_report(payload)[3:]) and len(payload) == len(DATA)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=600))
def test_any_payload_is_read_back_exactly_or_refused(payload):
    _check_decoder(b"R3\x01" + payload)
    _check_decoder(payload)
    if payload[:1] != b"{":
        _check_fog(b"R3\x01" + payload)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_a_mutated_report_is_read_back_exactly_or_refused(data):
    payload = bytearray(DATA)
    for _ in range(data.draw(st.integers(1, 4))):
        how = data.draw(st.sampled_from(["flip", "cut", "grow", "splice"]))
        at = data.draw(st.integers(0, len(payload)))
        if how == "flip" and at < len(payload):
            payload[at] ^= data.draw(st.integers(1, 255))
        elif how == "cut":
            del payload[at:at + data.draw(st.integers(1, 40))]
        elif how == "grow":
            payload[at:at] = data.draw(st.binary(min_size=1, max_size=40))
        elif how == "splice":
            payload[at:at + 2] = struct.pack(">H", data.draw(st.integers(0, 0xFFFF)))
    _check_decoder(bytes(payload))
    _check_fog(bytes(payload))


def test_the_encoder_refuses_what_does_not_fit():
    nonce, public, leader, sealed = REPORT
    with pytest.raises(ValueError):
        prio3_binary.encode(1 << 64, 0, PARAMS["sum"].params_id, REPORT)
    with pytest.raises(ValueError):
        prio3_binary.encode(1, 0, "abc", REPORT)
    with pytest.raises(ValueError):
        prio3_binary.encode(1, 0, PARAMS["sum"].params_id, (nonce, public, bytes(70_000), sealed))
    assert prio3_binary.report_t(b"{}") is None and prio3_binary.report_t(os.urandom(3)) is None
