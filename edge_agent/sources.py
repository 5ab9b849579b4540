"""Sensor sources for the CPython agent (`[source]` in its config):

- kind = "callable": a function () -> float, named as 'package.module:function';
- kind = "csv": a recorded trace replayed as if live: one value column of a
  CSV file (plain or gzip) indexed by a Unix-seconds column;
- kind = "refit": a REFIT house and appliance, a simulator replay. The agent
  itself never imports the simulators: whoever starts it with such a config
  (`rase agent`, a replay) builds that source and passes it in.

There is no default: an agent whose config has no `[source]` refuses to start,
so a forgotten table never publishes a replay as if it were live.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import importlib
import io
import math
from pathlib import Path
from typing import Callable, Protocol

from edge_agent.config import SourceConfig
from rase_common.errors import ConfigError


class Source(Protocol):
    def read(self, now: float) -> float | None: ...


class CallableSource:
    """Wraps a function () -> float named as 'package.module:function'."""

    def __init__(self, spec: str):
        mod_name, _, attr = spec.partition(":")
        try:
            fn = getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError) as err:
            raise ConfigError(f"source.callable {spec!r} cannot be imported: {err}") from None
        if not callable(fn):
            raise ConfigError(f"source.callable {spec!r} is not callable")
        self.fn: Callable[[], float] = fn

    def read(self, now: float) -> float | None:
        return float(self.fn())


class CsvTraceSource:
    """One column of a recorded trace: read(now) is the last row at or before
    now - time_shift_s, or None when that row is older than max_hold_s (a gap
    in the recording: no report rather than a stale one). Rows that do not
    parse, are not finite, or go back in time are skipped."""

    def __init__(self, path: Path, column: str, time_column: str = "Unix", time_shift_s: float = 0.0,
                 max_hold_s: float = 120.0):
        self.times, self.values = _read_column(Path(path), column, time_column)
        self.shift = time_shift_s
        self.max_hold_s = max_hold_s

    @property
    def first_time(self) -> float:
        return self.times[0]

    def read(self, now: float) -> float | None:
        q = now - self.shift
        i = bisect.bisect_right(self.times, q) - 1
        if i < 0 or q - self.times[i] > self.max_hold_s:
            return None
        return self.values[i]


def _read_column(path: Path, column: str, time_column: str) -> tuple[list[float], list[float]]:
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"source.path {path}: {err.strerror or err}") from None
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    rows = csv.reader(io.StringIO(raw.decode("utf-8", errors="replace")))
    header = next(rows, [])
    missing = [c for c in (time_column, column) if c not in header]
    if missing:
        raise ConfigError(f"source.path {path} has no column {missing[0]!r} (columns: {', '.join(header[:14])})")
    ti, vi = header.index(time_column), header.index(column)
    times: list[float] = []
    values: list[float] = []
    for row in rows:
        try:
            t, v = float(row[ti]), float(row[vi])
        except (IndexError, ValueError):
            continue
        if math.isfinite(t) and math.isfinite(v) and (not times or t > times[-1]):
            times.append(t)
            values.append(v)
    if not times:
        raise ConfigError(f"source.path {path}: no usable rows in columns {time_column!r}, {column!r}")
    return times, values


def make_source(cfg: SourceConfig | None, start_unix: float) -> Source:
    """The configured source. A csv trace starts at start_unix (or shows
    replay_start_unix of the trace then)."""
    if cfg is None:
        raise ConfigError("no [source] in the agent's config: set source.kind = \"callable\" (your sensor), "
                          "\"csv\" (a recorded trace) or \"refit\" (a simulator replay)")
    if cfg.kind == "callable":
        assert cfg.callable is not None
        return CallableSource(cfg.callable)
    if cfg.kind == "csv":
        assert cfg.path is not None and cfg.column is not None
        src = CsvTraceSource(cfg.path, cfg.column, cfg.time_column)
        first = src.first_time if cfg.replay_start_unix is None else cfg.replay_start_unix
        src.shift = start_unix - first
        return src
    raise ConfigError("source.kind = \"refit\" is a simulator replay: start the agent with `rase agent` "
                      "(which loads REFIT) or pass the source in")
