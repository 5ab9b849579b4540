"""Ingest validation: every bad payload rejected with a reason, nothing crashes."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fog_shuffler.ingest import REASONS, Accepted, IngestRules, Rejected, validate

RULES = IngestRules(devices={"d1": "r1", "d2": "r1", "x9": "r2"}, eps_levels=(0.5, 1.0), x_min=0.0,
                    x_max=4000.0, lateness_periods=1)
TOPIC = "rase/v1/reports/r1/d1"


def good(**kw) -> bytes:
    return json.dumps({"v": 1, "t": 100, "y": 12.0, "eps": 1.0, "seq": 3} | kw).encode()


def reason(topic, payload, now_t=100):
    with pytest.raises(Rejected) as e:
        validate(topic, payload, now_t, RULES)
    return e.value.reason


def test_accepts_a_good_report():
    assert validate(TOPIC, good(), 100, RULES) == Accepted("r1", "d1", 100, 12.0, 1.0)


@pytest.mark.parametrize("topic,payload,expected", [
    (TOPIC, b"x" * 300, "oversized"),
    ("rase/v1/reports/r1", good(), "bad_topic"),
    ("rase/v1/other/r1/d1", good(), "bad_topic"),
    (TOPIC, b"{not json", "malformed_json"),
    (TOPIC, b"[1, 2]", "malformed_json"),
    (TOPIC, b"\xff\xfe", "malformed_json"),
    (TOPIC, good(t="100"), "wrong_type"),
    (TOPIC, good(y=True), "wrong_type"),
    (TOPIC, good(v=2), "wrong_type"),
    (TOPIC, good(extra=1), "wrong_type"),
    (TOPIC, b'{"v":1,"t":100,"y":NaN,"eps":1.0,"seq":1}', "non_finite"),
    (TOPIC, b'{"v":1,"t":100,"y":Infinity,"eps":1.0,"seq":1}', "non_finite"),
    (TOPIC, b'{"v":1,"t":100,"y":1e999,"eps":1.0,"seq":1}', "non_finite"),
    (TOPIC, b'{"v":1,"t":100,"y":1.0,"eps":-Infinity,"seq":1}', "non_finite"),
    (TOPIC, b'{"v":1,"t":NaN,"y":1.0,"eps":1.0,"seq":1}', "non_finite"),      # in a field that is an int
    (TOPIC, b'{"v":1,"t":100,"y":1.0,"eps":1.0,"seq":1,"x":-Infinity}', "non_finite"),   # in an extra field
    (TOPIC, b'"a string"', "malformed_json"),
    (TOPIC, b"null", "malformed_json"),
    # JSON between systems is UTF-8 without a byte order mark (RFC 8259 8.1); devices send exactly that.
    (TOPIC, b"\xef\xbb\xbf" + good(), "malformed_json"),
    (TOPIC, good().decode().encode("utf-16"), "malformed_json"),
    ("rase/v1/reports/r1/zz", good(), "unknown_device"),
    ("rase/v1/reports/r2/d1", good(), "unknown_device"),   # registered elsewhere
    (TOPIC, good(t=98), "t_out_of_range"),
    (TOPIC, good(t=102), "t_out_of_range"),
    (TOPIC, good(eps=2.0), "eps_not_on_menu"),
    # BR at eps 1 clamps: a report is a grid point of [x_min, x_max] (rase_common.mechanisms.br).
    (TOPIC, good(y=4001.0), "impossible_y"),
    (TOPIC, good(y=-1.0), "impossible_y"),
    (TOPIC, good(y=12.5), "impossible_y"),
])
def test_rejects_with_the_right_reason(topic, payload, expected):
    assert reason(topic, payload) == expected


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=5),
    max_leaves=12)


@settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({}, optional={"v": json_values, "t": json_values, "y": json_values,
                                        "eps": json_values, "seq": json_values}).map(lambda d: json.dumps(d).encode()),
), st.sampled_from([TOPIC, "rase/v1/reports/r1/d2", "rase/v1/reports/r2/x9", "rase/v1/reports/r1/zz", "junk"]))
def test_arbitrary_payloads_are_accepted_or_rejected_with_a_reason(payload, topic):
    try:
        rep = validate(topic, payload, 100, RULES)
    except Rejected as err:
        assert err.reason in REASONS
    else:
        # Whatever got through is a well-formed, plausible report.
        assert isinstance(rep, Accepted) and rep.eps in RULES.eps_levels and 99 <= rep.t <= 101


@pytest.mark.parametrize("mechanism,categories,eps,y,ok", [
    ("binary", 4, 1.0, 0, True), ("binary", 4, 1.0, 1, True), ("binary", 4, 1.0, 0.5, False),
    ("binary", 4, 1.0, 2, False), ("binary", 4, 1.0, -1, False),
    ("categorical", 4, 1.0, 3, True), ("categorical", 4, 1.0, 4, False),       # kRR at k 4, eps 1
    ("categorical", 4, 1.0, 1.5, False), ("categorical", 4, 1.0, -1, False),
    ("categorical", 16, 0.5, (1 << 16) - 1, True), ("categorical", 16, 0.5, 1 << 16, False),  # OUE masks
    ("br", 4, 1.0, 4000.0, True), ("br", 4, 1.0, -10.0, False),                  # clamped below eps_star
    ("br", 4, 9.0, -10.0, True), ("br", 4, 9.0, 4000.0 * 52, False),             # not clamped: within the tail
    ("duchi", 4, 1.0, 12.0, False), ("piecewise", 4, 1.0, 4000.0 * 9, False),
])
def test_y_must_be_an_output_of_the_devices_mechanism(mechanism, categories, eps, y, ok):
    from fog_shuffler.ingest import possible_y
    rules = IngestRules(devices={}, eps_levels=(eps,), x_min=0.0, x_max=4000.0, lateness_periods=1,
                        mechanism=mechanism, categories=categories)
    assert possible_y(y, eps, rules) is ok


def test_a_binary_deployment_rejects_a_mean_report():
    rules = IngestRules(devices={"d1": "r1"}, eps_levels=(1.0,), x_min=0.0, x_max=4000.0, lateness_periods=1,
                        mechanism="binary")
    assert validate(TOPIC, good(y=1), 100, rules).y == 1.0
    with pytest.raises(Rejected) as e:
        validate(TOPIC, good(y=12.0), 100, rules)
    assert e.value.reason == "impossible_y"
