"""The device's side of secure aggregation (rase_device.secagg, the prio3 path
of AgentCore, the pinned helper key in LocalPolicy, wire.parse_prio3), on
CPython and under the real MicroPython (unix and WebAssembly ports)."""

import base64
import json
import os

import pytest

from rase_device import wire
from rase_device.core import AgentCore
from rase_device.ledger import BudgetLedger
from rase_device.policy import LocalPolicy
from rase_device.randomizer import Calibration
from rase_device.secagg import Prio3Client, b64encode, params_id, params_text, product_period_s, report_ctx
from rase_common.protocol.control import ControlMessage
from rase_common.protocol.prio3 import Prio3BinaryReport, Prio3Params, Prio3Report
from rase_common.vdaf import Prio3Aggregator, generate_keypair, open_helper_shares
from simulators.wasm_board import WASM_URANDOM
from tests.seeded_bytes import XorShiftBytes

SK, PK = generate_keypair()
OTHER_SK, OTHER_PK = generate_keypair()
BANDS = [10.0, 100.0, 1000.0]


def control(kind="sum", key_id="fc-1", product="per-t", dp_eps=0.5, **kw) -> ControlMessage:
    params = Prio3Params.for_deployment(kind, key_id=key_id, dp_eps=dp_eps, grid_steps=4000, bands=BANDS,
                                        product=product)
    return ControlMessage(mechanism="prio3", eps_levels=[dp_eps], bands=BANDS, prio3=params, **kw)


def core(tmp_path, key_id="fc-1", pk=PK, eps=1.0, period_s=8.0, **kw) -> AgentCore:
    policy = LocalPolicy.from_dict({"prio3_key_id": key_id, "prio3_public_key": pk.hex()} if key_id else {},
                                   period_s)
    tmp_path.mkdir(parents=True, exist_ok=True)
    return AgentCore(device="dev1", region="r1", eps=eps, ledger=BudgetLedger(str(tmp_path / "l.json"), 100, 86400),
                     calibration=Calibration(), period_s=period_s, policy=policy, mechanism="prio3", **kw)


def report_of(payload: str | bytes) -> Prio3Report:
    """A device's report in either encoding (binary since issue 30), as the JSON model."""
    if isinstance(payload, bytes) and payload[:2] == b"R3":
        return Prio3Report.model_validate_json(Prio3BinaryReport.from_bytes(payload).as_json(1.0))
    return Prio3Report.model_validate_json(payload)


def verify(payload: str | bytes, params: Prio3Params, region="r1", sk=SK) -> int | list[int]:
    """Open and verify one report as the two aggregators do; its measurement."""
    rep = report_of(payload)
    assert rep.p == params.params_id, "the report names the params its context was made with"
    nonce, pub, leader_share, sealed = rep.shares(params.report_sizes())
    ctx = params.ctx(region, rep.t)
    vdaf = params.vdaf()
    helper_share = open_helper_shares(sk, ctx, [nonce], [pub], [sealed])[0]
    assert helper_share is not None, "the helper share must open with the helper's key"
    leader, helper = (Prio3Aggregator(vdaf, bytes(32), ctx, a) for a in (0, 1))
    a = leader.start([nonce], [pub], [leader_share])
    b = helper.start([nonce], [pub], [helper_share])
    both = leader.finish(b) & helper.finish(a)
    assert both.all()
    return vdaf.unshard([leader.aggregate(both), helper.aggregate(both)], 1)


def test_b64encode_is_standard_base64():
    for n in range(0, 70):
        data = os.urandom(n)
        assert b64encode(data) == base64.b64encode(data).decode()


def test_product_periods_and_the_context_binding():
    assert [product_period_s(p, 8) for p in ("per-t", "hourly", "daily")] == [8, 3600, 86400]
    with pytest.raises(ValueError, match="product"):
        product_period_s("weekly", 8)
    pid = "0123456789abcdef0123456789abcdef"
    assert report_ctx("r1", 7, pid) == b"rase/v1/prio3/r1/7/" + pid.encode()


# The canonical params text of docs/api.md ("The report context"), one per kind, and its digest.
PARAMS_TEXTS = [
    (dict(kind="sum", product="per-t", max_measurement=4000, dp_eps=1.0, key_id="fc-655f94ec39e4"),
     "vdaf=2;max_measurement=4000|product=per-t|helper_key_id=fc-655f94ec39e4|noise=discrete_laplace;dp_eps=1"),
    (dict(kind="count", product="per-t", dp_eps=0.5, key_id="k"),
     "vdaf=1|product=per-t|helper_key_id=k|noise=discrete_laplace;dp_eps=0.5"),
    (dict(kind="histogram", product="per-t", buckets=4, chunk_length=2, dp_eps=10 / 24, key_id="k"),
     "vdaf=4;length=4;chunk_length=2|product=per-t|helper_key_id=k|noise=discrete_laplace;dp_eps=0.416667"),
    (dict(kind="sum", product="hourly", max_measurement=4095, dp_eps=2.5e-5, key_id="k"),
     "vdaf=2;max_measurement=4095|product=hourly|helper_key_id=k|noise=discrete_laplace;dp_eps=2.5e-05"),
]


@pytest.mark.parametrize("params,text", PARAMS_TEXTS)
def test_the_params_text_and_id_are_the_same_on_the_device_and_the_server(params, text):
    model = Prio3Params(**params)
    parsed = wire.parse_prio3(json.loads(json.dumps(model.wire())))     # what a device takes from the wire
    assert params_text(parsed) == model.text == text
    assert params_id(parsed) == model.params_id and len(model.params_id) == 32
    assert model.ctx("r1", 9) == report_ctx("r1", 9, model.params_id)


def test_the_documented_example_of_docs_api():
    """docs/api.md, "The report context": the example's params id and context."""
    model = Prio3Params(**PARAMS_TEXTS[0][0])
    assert model.params_id == "9fe0d8c2014a9ee236e3dffc07958726"
    assert model.ctx("r1", 9) == b"rase/v1/prio3/r1/9/9fe0d8c2014a9ee236e3dffc07958726"


def test_every_params_field_changes_the_id():
    base = Prio3Params(**PARAMS_TEXTS[0][0])
    changed = [base.model_copy(update=u) for u in ({"max_measurement": 4095}, {"product": "hourly"},
                                                     {"key_id": "fc-other"}, {"dp_eps": 100.0})]
    changed += [Prio3Params(kind="count", product="per-t", dp_eps=1.0, key_id=base.key_id)]
    assert len({p.params_id for p in [base, *changed]}) == len(changed) + 1


@pytest.mark.micropython
def test_the_params_id_under_micropython(micropython):
    code = "import json\nfrom rase_device.secagg import params_id, params_text\n" + "".join(
        f"print(json.dumps([params_text({params!r}), params_id({params!r})]))\n" for params, _ in PARAMS_TEXTS)
    lines = micropython([code])[0].strip().splitlines()
    assert [json.loads(x) for x in lines] == [[t, Prio3Params(**p).params_id] for p, t in PARAMS_TEXTS]


# -- the control message's prio3 object: the device's parser and the server's model agree ----------

BAD_PRIO3 = [
    ({"kind": "mean"}, "kind"),
    ({"product": "weekly"}, "product"),
    ({"kind": "count", "product": "hourly"}, "needs kind sum"),
    ({"key_id": "a/b"}, "key_id"),
    ({"dp_eps": 0}, "dp_eps"),
    ({"max_measurement": 0}, "max_measurement"),
    ({"kind": "histogram", "buckets": 40, "chunk_length": 2}, "buckets"),
]


@pytest.mark.parametrize("change,why", BAD_PRIO3)
def test_a_bad_prio3_object_is_refused_by_the_device_and_by_the_server_model(change, why):
    msg = json.loads(control().model_dump_json())
    msg["prio3"].update(change)
    with pytest.raises(ValueError, match=why):
        wire.parse_control(json.dumps(msg))
    with pytest.raises(ValueError):
        ControlMessage.model_validate(msg)


def test_prio3_needs_its_menu_to_be_dp_eps_on_both_sides():
    msg = json.loads(control().model_dump_json())
    msg["eps_levels"] = [1.0]
    with pytest.raises(ValueError, match="eps_levels"):
        wire.parse_control(json.dumps(msg))
    with pytest.raises(ValueError, match="eps_levels"):
        ControlMessage.model_validate(msg)
    msg = json.loads(control().model_dump_json())
    msg["prio3"]["max_measurement"] = 4095        # not the grid's 4000 steps
    with pytest.raises(ValueError, match="max_measurement"):
        ControlMessage.model_validate(msg)


# -- the pinned key ---------------------------------------------------------------------------------

def test_the_policy_pins_the_key_and_its_id_together():
    with pytest.raises(ValueError, match="together"):
        LocalPolicy.from_dict({"prio3_key_id": "fc-1"}, 8)
    for bad in ("zz" * 32, PK.hex()[:-2], " " + PK.hex()[1:]):
        with pytest.raises(ValueError, match="64 hex digits"):
            LocalPolicy.from_dict({"prio3_key_id": "fc-1", "prio3_public_key": bad}, 8)


def test_a_device_without_a_pinned_key_refuses_prio3(tmp_path):
    c = core(tmp_path, key_id=None)
    with pytest.raises(ValueError, match="pinned no helper key"):
        c.apply_control(control().model_dump_json())
    assert c.status == "control_rejected" and c.randomizer is None


def test_a_forged_control_message_with_another_key_id_changes_nothing(tmp_path):
    c = core(tmp_path)
    c.apply_control(control(dp_eps=0.5).model_dump_json())
    before = c.randomizer
    forged = json.loads(control(key_id="attacker", dp_eps=2.0, period_s=16.0).model_dump_json())
    forged["prio3"]["helper_public_key"] = OTHER_PK.hex()    # a key field is not even read
    with pytest.raises(ValueError, match="not this device's pinned key"):
        c.apply_control(json.dumps(forged))
    assert c.randomizer is before and c.eps_levels == [0.5] and c.period_s == 8.0
    assert c.status == "control_rejected"
    payload = c.step(1234.0, 8.0 * 100)
    assert verify(payload, control(dp_eps=0.5).prio3) == 1234      # still sealed to the pinned key
    rep = report_of(payload)
    nonce, pub, _, sealed = rep.shares(control().prio3.report_sizes())
    assert open_helper_shares(OTHER_SK, control().prio3.ctx("r1", rep.t), [nonce], [pub], [sealed]) == [None]


# -- reports ---------------------------------------------------------------------------------------------

def test_a_device_waits_for_the_control_message_then_charges_dp_eps_per_report(tmp_path):
    c = core(tmp_path)
    assert c.step(10.0, 100.0) is None and c.status == "awaiting_control"
    c.apply_control(control(dp_eps=0.5).model_dump_json())
    assert c.step(10.0, 200.0) is not None and c.step(12.0, 208.0) is not None
    assert c.ledger.remaining(208.0) == pytest.approx(100 - 2 * 0.5)
    assert json.loads(c.status_payload())["privacy"]["eps_per_hour"] == pytest.approx(0.5 * 3600 / 8)
    with pytest.raises(ValueError, match="finite"):
        c.step(float("nan"), 300.0)
    assert c.ledger.remaining(300.0) == pytest.approx(99.0)     # a bad reading costs nothing


@pytest.mark.parametrize("kind,reading,want", [("sum", 4321.0, 4000), ("sum", 17.4, 17), ("count", 10.0, 0),
                                               ("count", 10.5, 1), ("histogram", 150.0, [0, 0, 1, 0])])
def test_each_kind_reports_its_measurement(tmp_path, kind, reading, want):
    c = core(tmp_path)
    c.apply_control(control(kind).model_dump_json())
    assert verify(c.step(reading, 800.0), control(kind).prio3) == want


def test_the_hourly_product_reports_the_rounded_mean_of_each_hour_once(tmp_path):
    c = core(tmp_path)
    c.apply_control(control(product="hourly", dp_eps=0.5).model_dump_json())
    hour = 3600.0 * 10
    readings = [10.0, 11.0, 13.0, 4321.0]           # quantized 10, 11, 13, 4000: mean 1008.5 -> 1009
    for i, x in enumerate(readings):
        assert c.step(x, hour + 8 * i) is None       # no report until the hour is over
    payload = c.step(0.0, hour + 3600)                # the first reading of the next hour
    rep = report_of(payload)
    assert rep.t == 10 and verify(payload, control(product="hourly").prio3) == 1009
    assert c.step(5.0, hour + 3608) is None
    assert c.ledger.remaining(hour + 3608) == pytest.approx(99.5)   # one report, one charge
    assert json.loads(c.status_payload())["privacy"]["eps_per_hour"] == pytest.approx(0.5)


def test_the_client_is_kept_when_the_control_message_repeats(tmp_path):
    c = core(tmp_path)
    c.apply_control(control(product="hourly").model_dump_json())
    c.step(100.0, 3600.0)
    client = c.randomizer
    c.apply_control(control(product="hourly").model_dump_json())      # the retained message again
    assert c.randomizer is client and client._acc is not None
    assert isinstance(client, Prio3Client)


DEVICE_SNIPPET = """
import json
from rase_device.core import AgentCore
from rase_device.ledger import BudgetLedger
from rase_device.policy import LocalPolicy
from rase_device.randomizer import Calibration
pol = LocalPolicy.from_dict({'prio3_key_id': 'fc-1', 'prio3_public_key': %(pk)r}, 8)
c = AgentCore(device='dev1', region='r1', eps=1.0, ledger=BudgetLedger('l.json', 100, 86400),
              calibration=Calibration(), policy=pol, mechanism='prio3', read=%(read)s)
out = []
for msg, x in ((%(sum)r, 1234.4), (%(count)r, 55.0), (%(hist)r, 2000.0)):
    c.apply_control(msg)
    c.last_t = None
    out.append(c.step(x, 8000.0).hex())      # a binary report (issue 30)
try:
    c.apply_control(%(forged)r)
except ValueError as e:
    out.append(str(e))
print(json.dumps(out))
"""


def _device_code(read: str) -> str:
    forged = json.loads(control().model_dump_json())
    forged["prio3"]["key_id"] = "attacker"
    return DEVICE_SNIPPET % {"pk": PK.hex(), "read": read, "sum": control("sum").model_dump_json(),
                             "count": control("count").model_dump_json(),
                             "hist": control("histogram").model_dump_json(), "forged": json.dumps(forged)}


def _check_board_output(out: str) -> None:
    s, c, h, refusal = json.loads(out.strip().splitlines()[-1])
    s, c, h = (bytes.fromhex(x) for x in (s, c, h))
    assert verify(s, control("sum").prio3) == 1234
    assert verify(c, control("count").prio3) == 1
    assert verify(h, control("histogram").prio3) == [0, 0, 0, 1]
    assert "not this device's pinned key" in refusal


@pytest.mark.micropython
def test_the_prio3_path_of_the_device_core_under_the_unix_port(micropython_unix, tmp_path):
    _check_board_output(micropython_unix(_device_code("__import__('os').urandom"), cwd=tmp_path))


@pytest.mark.micropython
def test_the_prio3_path_of_the_device_core_under_the_webassembly_port(micropython):
    _check_board_output(micropython([_device_code(WASM_URANDOM)])[0])


def test_seeded_reads_make_repeatable_reports(tmp_path):
    a, b = (core(tmp_path / str(i), read=XorShiftBytes(5)) for i in range(2))
    for c in (a, b):
        c.apply_control(control().model_dump_json())
    assert a.step(50.0, 800.0) == b.step(50.0, 800.0)
