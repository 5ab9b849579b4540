"""Sensor sources of the CPython agent."""

import gzip

import pytest

from edge_agent.config import AgentConfig, SourceConfig
from edge_agent.sources import CallableSource, CsvTraceSource, make_source
from rase_common.errors import ConfigError

READINGS = iter([12.5, 13.0])


def read_sensor():
    return next(READINGS)


def test_callable_source_imports_and_calls():
    src = make_source(SourceConfig(kind="callable", callable=f"{__name__}:read_sensor"), 0.0)
    assert isinstance(src, CallableSource)
    assert src.read(0.0) == 12.5 and src.read(8.0) == 13.0


@pytest.mark.parametrize("spec,match", [("nosuchmodule_xyz:f", "cannot be imported"),
                                        (f"{__name__}:nope", "cannot be imported"),
                                        (f"{__name__}:READINGS", "not callable")])
def test_bad_callable_is_a_clear_error(spec, match):
    with pytest.raises(ValueError, match=match):
        CallableSource(spec)


@pytest.mark.parametrize("fields,match", [({"kind": "callable"}, "module:function"),
                                          ({"kind": "csv", "path": "x.csv"}, "source.path and source.column")])
def test_incomplete_source_is_a_clear_error(fields, match):
    with pytest.raises(ValueError, match=match):
        SourceConfig(**fields)


def test_an_agent_without_a_source_refuses_to_start():
    cfg = AgentConfig(device="d1")
    assert cfg.source is None
    with pytest.raises(ConfigError, match=r"no \[source\] in the agent's config"):
        make_source(cfg.source, 0.0)


def test_refit_is_never_loaded_by_the_agent_itself():
    with pytest.raises(ConfigError, match="simulator replay"):
        make_source(SourceConfig(kind="refit", house=2, appliance=8), 0.0)


def test_csv_trace_replays_from_the_agent_start_and_skips_bad_rows(tmp_path):
    path = tmp_path / "trace.csv.gz"
    rows = ["Time,Unix,Watts", "a,100,5.0", "b,108,nan", "c,110,7.5", "d,105,1.0", "e,x,2", "f,400,9.0"]
    path.write_bytes(gzip.compress("\n".join(rows).encode()))
    src = make_source(SourceConfig(kind="csv", path=path, column="Watts"), start_unix=1_000.0)
    assert isinstance(src, CsvTraceSource)
    # agent time 1000 shows trace time 100; a gap of more than 120 s gives no reading
    assert [src.read(1_000.0 + d) for d in (0, 9, 10, 200, 300)] == [5.0, 5.0, 7.5, None, 9.0]


def test_csv_trace_names_a_missing_column(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("Unix,A\n1,2\n")
    with pytest.raises(ConfigError, match="no column 'B'"):
        CsvTraceSource(path, "B")
