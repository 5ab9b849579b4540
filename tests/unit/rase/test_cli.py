"""The command line a person learns from --help: every subcommand has a
description and every option a help text; `rase query` takes ISO times;
`rase calibrate --write` to a missing file stops before spending anything."""

from __future__ import annotations

import argparse
import json

import pytest

from fusion_center.store import AggregateStore
from rase.cli import build_parser, main
from rase.times import parse_iso
from rase_common.protocol.control import ControlMessage


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _all_parsers(parser: argparse.ArgumentParser, name: str = "rase") -> list[tuple[str, argparse.ArgumentParser]]:
    """The parser and every subcommand's, nested ones included (`rase fog release`)."""
    out = [(name, parser)]
    for sub_name, sub in sorted(_subparsers(parser).items()):
        out += _all_parsers(sub, f"{name} {sub_name}")
    return out


def test_every_subcommand_has_a_description_and_every_option_a_help_text():
    parser = build_parser()
    subs = _subparsers(parser)
    assert len(subs) >= 13
    every = _all_parsers(parser)
    assert {"rase fog release", "rase fog quarantined"} <= {name for name, _ in every}
    missing = []
    for name, sub in every:
        if name != "rase" and not (sub.description and len(sub.description) > 40):
            missing.append(f"{name}: no description")
        for action in sub._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if not action.help:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}: no help")
    assert missing == []


def test_every_subcommand_help_renders(capsys):
    for name, _ in _all_parsers(build_parser())[1:]:
        words = name.split()[1:]
        with pytest.raises(SystemExit) as stop:
            main([*words, "--help"])
        assert stop.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: " + name)
        # argparse %-formats help strings but not descriptions: a "%%" there is printed as it stands.
        assert "%%" not in out, f"{name} --help prints '%%'"


def _store(tmp_path, period_s=8.0, epoch0=0.0):
    path = tmp_path / "fusion.sqlite"
    store = AggregateStore(path)
    control = ControlMessage(period_s=period_s, epoch0=epoch0)
    store.save_control(control.model_dump_json(exclude_none=True))
    t0 = control.schedule().t_of(parse_iso("2025-06-01T12:00:00Z"))
    for t in range(t0 - 5, t0 + 20):
        agg = {"v": 1, "t": t, "n": 12, "regions": ["r1"], "complete": True, "level": 0.95, "clamped": False,
               "share_at_bound": 0.0, "estimates": {"mean": {"value": 10.0 + t - t0, "ci": [0.0, 20.0], "n": 12}}}
        store.store_aggregate("all", t, json.dumps(agg), 0.0)
    store.close()
    return path, t0


def test_query_takes_iso_times_mapped_by_the_stored_schedule(tmp_path, capsys):
    path, t0 = _store(tmp_path)
    # 12:00:00 is the start of t0; 12:01:00 lies in t0 + 7 (60 s / 8 s = 7.5).
    assert main(["query", "--db", str(path), "--from", "2025-06-01T12:00:00Z", "--to", "2025-06-01T12:01:00",
                 "--json"]) == 0
    ts = [json.loads(line)["t"] for line in capsys.readouterr().out.splitlines()]
    assert ts == list(range(t0, t0 + 8))
    # A time with a zone: 14:00+02:00 is 12:00 UTC; t and times mix.
    assert main(["query", "--db", str(path), "--from", "2025-06-01T14:00:00+02:00", "--to", str(t0 + 2),
                 "--json"]) == 0
    assert [json.loads(line)["t"] for line in capsys.readouterr().out.splitlines()] == [t0, t0 + 1, t0 + 2]


def test_query_json_on_an_empty_range_is_an_empty_result_that_says_why(tmp_path, capsys):
    path, t0 = _store(tmp_path)
    assert main(["query", "--db", str(path), "--from", str(t0 + 100), "--to", str(t0 + 200), "--json"]) == 0
    out, err = capsys.readouterr()
    assert out == ""                                  # JSON lines: no aggregate, no line
    assert f"0 timestamps (t {t0 + 100} .. {t0 + 200})" in err
    assert f"the store holds 25 aggregate(s) of scope 'all', the newest at t={t0 + 19}" in err
    # A range with aggregates says how many on stderr too, and stdout stays pure JSON lines.
    assert main(["query", "--db", str(path), "--from", str(t0), "--to", str(t0 + 1), "--json"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["t"] for line in out.splitlines()] == [t0, t0 + 1]
    assert err.strip() == f"2 timestamps (t {t0} .. {t0 + 1})"


def test_query_on_a_store_without_aggregates_says_so(tmp_path, capsys):
    path = tmp_path / "fusion.sqlite"
    AggregateStore(path).close()
    assert main(["query", "--db", str(path), "--from", "1", "--to", "5", "--json"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "holds no aggregate of scope 'all' yet" in err


def test_query_table_shows_each_timestamps_start_time(tmp_path, capsys):
    path, t0 = _store(tmp_path)
    assert main(["query", "--db", str(path), "--from", str(t0), "--to", str(t0 + 1)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "start (UTC)" in out[0]
    assert "2025-06-01T12:00:00Z" in out[1] and "2025-06-01T12:00:08Z" in out[2]


def test_query_refuses_a_bad_time_in_one_line(tmp_path, capsys):
    path, _ = _store(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["query", "--db", str(path), "--from", "yesterday", "--to", "1"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "not a timestamp t or an ISO 8601 time" in err and "Traceback" not in err


def test_query_from_after_to_is_one_clear_line(tmp_path, capsys):
    path, t0 = _store(tmp_path)
    assert main(["query", "--db", str(path), "--from", "2025-06-01T13:00", "--to", "2025-06-01T12:00"]) == 2
    assert "is after --to" in capsys.readouterr().err


def test_calibrate_write_to_a_missing_file_is_one_line_before_any_budget(tmp_path, capsys):
    missing = tmp_path / "configs" / "fusion.toml"
    assert main(["calibrate", "--eps", "1", "--write", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""                       # no histogram was made, so no budget was spent
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "no such file" in lines[0] and "Nothing was spent" in lines[0]


def test_calibrate_write_to_a_broken_config_is_one_line(tmp_path, capsys):
    bad = tmp_path / "fusion.toml"
    bad.write_text("level = 7\n")
    assert main(["calibrate", "--eps", "1", "--write", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "level" in captured.err and len(captured.err.strip().splitlines()) == 1


def test_a_tools_result_comes_back_without_being_formatted():
    """asyncio.run (3.11) formats repr(main task) on its way out; a replay's
    result (every aggregate, its devices' readings) must not be in that task."""
    from rase.cli import _run_tool

    formatted = []

    class Result:
        def __repr__(self) -> str:
            formatted.append(1)
            return "Result()"

    async def tool() -> Result:
        return Result()

    assert isinstance(_run_tool(tool()), Result)
    assert formatted == []
