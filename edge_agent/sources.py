"""Sensor sources for the CPython agent: a REFIT column replay or a callable."""

from __future__ import annotations

import importlib
from typing import Callable, Protocol

from edge_agent.config import SourceConfig


class Source(Protocol):
    def read(self, now: float) -> float | None: ...


class CallableSource:
    """Wraps a function () -> float named as 'package.module:function'."""

    def __init__(self, spec: str):
        mod_name, _, attr = spec.partition(":")
        try:
            fn = getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError) as err:
            raise ValueError(f"source.callable {spec!r} cannot be imported: {err}") from None
        if not callable(fn):
            raise ValueError(f"source.callable {spec!r} is not callable")
        self.fn: Callable[[], float] = fn

    def read(self, now: float) -> float | None:
        return float(self.fn())


def make_source(cfg: SourceConfig, device: str, start_unix: float) -> Source:
    """Build the configured source; a REFIT replay starts its trace at start_unix."""
    if cfg.kind == "callable":
        assert cfg.callable is not None
        return CallableSource(cfg.callable)
    from simulators.refit import RefitColumnSource, bundled_dir, load_house

    house = load_house(cfg.data_dir or bundled_dir(), cfg.house)
    column = f"h{cfg.house}agg" if cfg.appliance == 0 else f"h{cfg.house}a{cfg.appliance}"
    first = float(house.unix[0]) if cfg.replay_start_unix is None else cfg.replay_start_unix
    return RefitColumnSource(house, column, time_shift_s=start_unix - first)
