"""The fast report decoder (msgspec) against the report's definition
(pydantic's Report): it may refuse more, never accept more, and what it
accepts it decodes to the same values of the same types."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rase_common.protocol.report import Report, ReportFields, decode_report

FIELDS = tuple(Report.model_fields)

# Number spellings JSON allows (and some it does not), as text, so that the
# parsers see exactly these bytes: exponents, -0, huge and tiny, NaN.
number_text = st.one_of(
    st.integers().map(str),
    st.integers(min_value=-(10 ** 30), max_value=10 ** 30).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["-0", "0.0", "-0.0", "1E2", "1e2", "1.0", "1e-400", "1e999", "-1e999", "NaN", "Infinity",
                     "-Infinity", "4e-324", "1.7976931348623157e308", "1.7976931348623159e308", "01", "1.",
                     ".5", "+1", "0x10", "true", "false", "null", '"1"', "[]", "{}", "1" * 400]),
)
value_text = st.one_of(number_text, st.text(max_size=6).map(json.dumps))
natural = st.integers(min_value=0, max_value=2 ** 70).map(str)
# Values each field should take, in several spellings, so most reports are good ones.
good_text = {
    "v": st.sampled_from(["1"] * 6 + ["1.0", "true", "1e0"]),
    "t": natural,
    "y": st.one_of(st.integers(min_value=-(2 ** 70), max_value=2 ** 70).map(str),
                   st.floats(allow_nan=False, allow_infinity=False).map(repr),
                   st.floats(allow_nan=False, allow_infinity=False).map(lambda f: f"{f:.17e}")),
    "eps": st.one_of(st.integers(min_value=0, max_value=2 ** 70).map(str),
                     st.floats(min_value=0, allow_infinity=False).map(repr)),
    "seq": natural,
}


@st.composite
def report_text(draw) -> bytes:
    """A report-shaped object: mostly the five fields with good values in
    some spelling, sometimes one missing, repeated or bad, or an extra key."""
    keys = list(FIELDS)
    if draw(st.integers(0, 3)) == 0:
        keys = draw(st.lists(st.sampled_from(FIELDS + ("x", "V", "")), max_size=7))
    elif draw(st.booleans()):
        keys += draw(st.lists(st.sampled_from(FIELDS + ("x",)), max_size=1))
    keys = draw(st.permutations(keys))
    parts = [f"{json.dumps(k)}:{draw(good_text[k] if k in good_text and draw(st.integers(0, 4)) else value_text)}"
             for k in keys]
    space = draw(st.sampled_from(["", " ", "\n", "\t"]))
    tail = draw(st.sampled_from(["", "", "", " ", "\n", ",", "}", "x"]))
    return ("{" + ("," + space).join(parts) + "}" + tail).encode()


def pydantic_or_error(payload: bytes):
    try:
        return Report.model_validate_json(payload)
    except ValidationError as err:
        return err


def typed(rep) -> tuple:
    return tuple((type(getattr(rep, f)), getattr(rep, f)) for f in FIELDS)


@settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(report_text(), st.binary(max_size=80),
                 st.fixed_dictionaries({f: st.one_of(st.integers(), st.floats(), st.booleans(), st.none(),
                                                     st.text(max_size=3)) for f in FIELDS}).map(
                     lambda d: json.dumps(d).encode())))
@example(b'{"v":1,"t":100,"y":12.0,"eps":1.0,"seq":3}')
@example(b'{"v":true,"t":100,"y":12,"eps":1,"seq":3}')              # Report takes true as 1; msgspec refuses
@example(b'{"v":1,"t":100,"y":1e999,"eps":1,"seq":3}')
@example(b'{"v":1,"t":100,"y":NaN,"eps":1,"seq":3}')
@example(b'{"v":1,"t":100,"t":5,"y":12,"eps":1,"seq":3}')            # a repeated key: the last one, in both
def test_the_fast_decoder_accepts_a_subset_of_report_with_the_same_values(payload):
    reference = pydantic_or_error(payload)
    try:
        fast = msgspec.json.decode(payload, type=ReportFields)
    except (msgspec.ValidationError, msgspec.DecodeError):
        fast = None
    if fast is not None:
        assert not isinstance(reference, ValidationError), f"msgspec took what Report refuses: {payload!r}"
        assert typed(fast) == typed(reference)
    # decode_report is Report's judgement, whichever decoder gave it.
    if isinstance(reference, ValidationError):
        with pytest.raises(ValidationError):
            decode_report(payload)
    else:
        assert typed(decode_report(payload)) == typed(reference)


def test_a_device_report_takes_the_fast_path():
    from rase_device.wire import encode_report

    for y in (0.0, 12.0, -3.5, 4000.0, 1e-7, 123456.789):
        payload = encode_report(1_700_000_000, y, 0.5, 42).encode()
        assert isinstance(decode_report(payload), ReportFields)
        assert typed(decode_report(payload)) == typed(Report.model_validate_json(payload))


def test_the_two_definitions_name_the_same_fields():
    assert ReportFields.__struct_fields__ == FIELDS
