"""Sensor sources of the CPython agent."""

import pytest

from edge_agent.config import SourceConfig
from edge_agent.sources import CallableSource, make_source

READINGS = iter([12.5, 13.0])


def read_sensor():
    return next(READINGS)


def test_callable_source_imports_and_calls():
    src = make_source(SourceConfig(kind="callable", callable=f"{__name__}:read_sensor"), "d1", 0.0)
    assert isinstance(src, CallableSource)
    assert src.read(0.0) == 12.5 and src.read(8.0) == 13.0


@pytest.mark.parametrize("spec,match", [("nosuchmodule_xyz:f", "cannot be imported"),
                                        (f"{__name__}:nope", "cannot be imported"),
                                        (f"{__name__}:READINGS", "not callable")])
def test_bad_callable_is_a_clear_error(spec, match):
    with pytest.raises(ValueError, match=match):
        CallableSource(spec)


def test_callable_kind_needs_a_spec():
    with pytest.raises(ValueError, match="module:function"):
        SourceConfig(kind="callable")


def test_refit_source_replays_from_the_agent_start():
    src = make_source(SourceConfig(kind="refit", house=2, appliance=8), "h2a8", start_unix=1_800_000_000.0)
    values = [src.read(1_800_000_000.0 + 8 * k) for k in range(1, 200)]
    assert all(v is not None and v >= 0 for v in values)
