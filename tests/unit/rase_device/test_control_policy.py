"""A device never accepts a control message that is malformed or outside its
local policy: it keeps its calibration, says control_rejected, and counts."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rase_device.core import AgentCore
from rase_device.ledger import BudgetLedger
from rase_device.policy import LocalPolicy
from rase_device.randomizer import Calibration

GOOD = {"v": 1, "beta": 0.5, "rho": 0.9, "x_min": 0.0, "x_max": 3000.0, "gamma": 2.0, "period_s": 8.0,
        "epoch0": 0.0, "eps_levels": [0.5, 1.0]}


def make_core(tmp_path, eps=1.0, x_max_ceiling=100_000.0):
    policy = LocalPolicy(period_min_s=8.0, x_min_floor=0.0, x_max_ceiling=x_max_ceiling, gamma_min=0.01,
                         gamma_max=1000.0)
    ledger = BudgetLedger(str(tmp_path / "ledger.json"), 1000.0, 86400.0)
    return AgentCore(device="d1", region="r1", eps=eps, ledger=ledger, calibration=Calibration(), period_s=8.0,
                     policy=policy)


def calibration_of(core):
    return core.randomizer.cal.as_dict(), core.period_s, core.epoch0, list(core.eps_levels)


def msg(**changes):
    m = dict(GOOD)
    m.update(changes)
    return json.dumps(m)


@pytest.mark.parametrize("payload,why", [
    ('{"v":1,"beta":0.5,"rho":0.9,"x_min":0,"x_max":4000,"gamma":1,"period_s":8,"eps_levels":[1],"epoch0":"0"}',
     "epoch0"),
    (msg(epoch0=float("nan")), "epoch0"),
    (msg(x_max=float("inf")), "x_max"),
    (msg(period_s=0.001), "period_s"),                       # 8000x faster reports: budget burnt
    (msg(x_max=1e6, gamma=0.1, eps_levels=[0.01]), "range"),
    (msg(x_max=1e5, gamma=0.01, eps_levels=[0.01], mechanism="br"), "noise scale too large"),   # BR's sampler refuses
    (msg(x_min=-5.0), "range"),
    (msg(gamma=1e-4), "gamma"),
    (msg(mechanism="laplace-float"), "mechanism"),
    (msg(eps_levels=[1.0] * 17), "eps_levels"),
    (msg(eps_levels=[]), "eps_levels"),
    (msg(eps_levels=[True]), "eps level"),
    (msg(beta=2.0), "beta"),
    ("[1, 2]", "version"),
    ("not json", "JSON"),
    (b"\xff\xfe\x00", "JSON"),
    (msg(pad="x" * 5000), "larger"),
])
def test_rejected_whole_calibration_kept_status_says_so(tmp_path, payload, why):
    core = make_core(tmp_path)
    core.apply_control(msg())
    before = calibration_of(core)
    with pytest.raises(ValueError, match=why):
        core.apply_control(payload)
    assert calibration_of(core) == before
    assert core.status == "control_rejected" and core.control_rejected == 1
    # It goes on reporting with its last good calibration, still saying so.
    assert core.step(100.0, 1_700_000_000.0) is not None
    assert core.status == "control_rejected"
    core.apply_control(msg(gamma=4.0))
    assert core.status == "online" and core.randomizer.cal.gamma == 4.0


def test_eps_never_above_the_devices_own_maximum(tmp_path):
    core = make_core(tmp_path, eps=0.5)
    core.apply_control(msg(eps_levels=[0.25, 5.0, 9.0]))
    assert core.eps() == 0.25
    rep = json.loads(core.step(10.0, 1_700_000_000.0))
    assert rep["eps"] == 0.25
    core.apply_control(msg(eps_levels=[5.0]))
    assert core.eps() is None and core.step(10.0, 1_700_000_008.0) is None and core.status == "no_eps_level"


def test_a_calibration_the_sampler_refuses_is_rejected_and_charges_nothing(tmp_path):
    core = make_core(tmp_path, eps=0.01, x_max_ceiling=1e7)   # a policy that lets the range through
    left = core.ledger.remaining(1_700_000_000.0)
    with pytest.raises(ValueError, match="noise scale too large"):
        core.apply_control(msg(x_max=1e6, gamma=0.1, eps_levels=[0.01], mechanism="br"))
    assert core.status == "control_rejected"
    for k in range(5):
        core.step(10.0, 1_700_000_000.0 + 8 * k)
    # Five reports with the kept calibration, charged 0.01 each; nothing for the refused one.
    assert core.sent == 5
    assert core.ledger.remaining(1_700_000_000.0) == pytest.approx(left - 5 * 0.01, abs=1e-4)


FIELDS = ["beta", "rho", "x_min", "x_max", "gamma", "period_s", "epoch0", "eps_levels", "v", "mechanism"]
hostile_values = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20), st.text(max_size=8),
    st.floats(allow_nan=True, allow_infinity=True), st.floats(min_value=1e-320, max_value=1e-300),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=20), st.dictionaries(st.text(max_size=3),
                                                                                           st.integers(), max_size=2))


@settings(deadline=None, database=None)
@given(changes=st.dictionaries(st.sampled_from(FIELDS), hostile_values, min_size=1, max_size=4),
       drop=st.sets(st.sampled_from(FIELDS), max_size=2))
def test_fuzzed_control_messages_never_escape_policy(tmp_path_factory, changes, drop):
    core = make_core(tmp_path_factory.getbasetemp())
    core.ledger = BudgetLedger(str(tmp_path_factory.getbasetemp() / "fuzz-ledger.json"), 1000.0, 86400.0)
    before = calibration_of(core)
    m = {k: v for k, v in {**GOOD, **changes}.items() if k not in drop}
    try:
        payload = json.dumps(m)
    except (ValueError, TypeError):
        return
    try:
        core.apply_control(payload)
    except ValueError:
        assert calibration_of(core) == before and core.status == "control_rejected"
        return
    # Accepted: everything the device now uses is inside its policy.
    cal = core.randomizer.cal
    assert core.period_s >= 8.0 and cal.x_min >= 0.0 and cal.x_max <= 100_000.0
    assert 0.01 <= cal.gamma <= 1000.0 and all(math.isfinite(v) for v in cal.as_dict().values())
    assert math.isfinite(core.epoch0) and (core.eps() is None or core.eps() <= 1.0)
    assert core.step(10.0, 1_700_000_000.0) is not None or core.eps() is None


def test_policy_refuses_more_grid_steps_than_the_device_handles():
    p = LocalPolicy(period_min_s=1.0, gamma_min=1e-9)
    with pytest.raises(ValueError, match="grid steps"):
        p.check({**GOOD, "x_max": 1e6, "gamma": 0.01})
    p.check({**GOOD, "x_max": 1e5, "gamma": 0.01})


@pytest.mark.micropython
def test_same_decisions_under_micropython(micropython, tmp_path):
    """~200 hostile control messages: the core under the real MicroPython
    accepts and rejects exactly what CPython's does, with the same result."""
    import random

    rnd = random.Random(7)   # test data only
    bad = [None, True, "8", -1.0, 0.0, 1e-9, 1e9, 1e300, [], {}, [0.5], 2.0, 0.001]
    payloads = []
    for _ in range(200):
        m = dict(GOOD)
        for key in rnd.sample(FIELDS, rnd.randint(0, 3)):
            m[key] = rnd.choice(bad)
        payloads.append(json.dumps(m))
    payloads += ['{"v":1,"epoch0":NaN}', "not json", msg(period_s=0.001), msg(mechanism="x")]

    def decide_cpython(p):
        core = make_core(tmp_path)
        try:
            core.apply_control(p)
        except ValueError:
            return ["rejected", core.status]
        return ["accepted", core.period_s, core.randomizer.cal.x_max, core.randomizer.cal.gamma, core.eps()]

    code = f"""
import json
from rase_device.core import AgentCore
from rase_device.ledger import BudgetLedger
from rase_device.policy import LocalPolicy
from rase_device.randomizer import Calibration
from rase_device.entropy import RandomBits
out = []
for p in json.loads({json.dumps(json.dumps(payloads))}):
    policy = LocalPolicy(period_min_s=8.0, x_min_floor=0.0, x_max_ceiling=100000.0, gamma_min=0.01, gamma_max=1000.0)
    core = AgentCore(device="d1", region="r1", eps=1.0, ledger=BudgetLedger("/l.json", 1000.0, 86400.0),
                     calibration=Calibration(), period_s=8.0, policy=policy, bits=RandomBits(read=lambda n: bytes(n)))
    try:
        core.apply_control(p)
        out.append(["accepted", core.period_s, core.randomizer.cal.x_max, core.randomizer.cal.gamma, core.eps()])
    except ValueError:
        out.append(["rejected", core.status])
print(json.dumps(out))
"""
    got = json.loads(micropython([code])[0].strip().splitlines()[-1])
    want = [decide_cpython(p) for p in payloads]
    assert got == want
    assert sum(d[0] == "accepted" for d in want) >= 10 and sum(d[0] == "rejected" for d in want) >= 100


def test_status_says_what_the_device_spends(tmp_path):
    from rase_common.protocol.report import Status

    core = make_core(tmp_path)
    core.apply_control(msg(eps_levels=[1.0]))
    for k in range(3):
        core.step(10.0, 1_700_000_000.0 + 8 * k)
    st = Status.model_validate_json(core.status_payload())
    assert st.state == "online"
    assert st.privacy.eps_per_report == 1.0 and st.privacy.eps_per_hour == pytest.approx(450.0)
    assert st.privacy.spent_this_period == pytest.approx(3.0) and st.privacy.budget_per_period == 1000.0
