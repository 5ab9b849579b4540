"""REFIT loader: real REFIT CSVs (gzip or plain) to per-device reading series.

Mapping (fixed, documented in docs/refit.md): one device per ApplianceK column
of each house, id ``h{house}a{K}`` (the Aggregate column, id ``h{house}agg``,
only when asked). Malformed rows (wrong column count, non-numeric values, time
going backwards) are skipped, counted, and logged with file and line.
"""

from __future__ import annotations

import functools
import gzip
import io
import logging
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

APPLIANCES = 9
BASE_COLUMNS = ["Time", "Unix", "Aggregate"] + [f"Appliance{k}" for k in range(1, APPLIANCES + 1)]
DEFAULT_MAX_HOLD_S = 120.0


class RefitFormatError(ValueError):
    """The file is not REFIT-shaped, or a requested house has no file."""


def bundled_dir() -> Path:
    """The REFIT excerpt shipped inside the package (houses 1, 2, 3, 5, 12)."""
    return Path(str(resources.files("simulators") / "data" / "refit"))


def house_file(data_dir: str | Path, house: int) -> Path:
    d = Path(data_dir)
    for name in (f"house_{house}.csv.gz", f"house_{house}.csv", f"House_{house}.csv", f"CLEAN_House{house}.csv"):
        if (d / name).is_file():
            return d / name
    raise RefitFormatError(f"no REFIT file for house {house} in {d} (looked for house_{house}.csv[.gz])")


@dataclass
class House:
    house: int
    path: Path
    unix: np.ndarray                   # int64 seconds, strictly increasing
    columns: dict[str, np.ndarray]     # "Aggregate", "Appliance1".. -> float64 watts
    skipped: dict[str, int] = field(default_factory=dict)

    def device_ids(self, include_aggregate: bool = False) -> list[str]:
        ids = [f"h{self.house}a{k}" for k in range(1, APPLIANCES + 1)]
        return ([f"h{self.house}agg"] if include_aggregate else []) + ids

    def column_of(self, device: str) -> np.ndarray:
        suffix = device.removeprefix(f"h{self.house}")
        return self.columns["Aggregate" if suffix == "agg" else f"Appliance{int(suffix[1:])}"]


def _open_text(path: Path) -> io.TextIOBase:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return io.StringIO(raw.decode("utf-8", errors="replace"))


def load_house(data_dir: str | Path, house: int) -> House:
    """House `house` from its CSV in data_dir. Parsed once per file version
    (path, size, mtime): a replay checks the files, then runs on them."""
    path = house_file(data_dir, house)
    st = path.stat()
    return _load_house(path.resolve(), house, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _load_house(path: Path, house: int, _size: int, _mtime_ns: int) -> House:
    f = _open_text(path)
    header = f.readline().strip().split(",")
    if header[:len(BASE_COLUMNS)] != BASE_COLUMNS or len(header) not in (12, 13):
        raise RefitFormatError(f"{path}: not a REFIT file (header {header[:4]}..., expected {BASE_COLUMNS[:4]}...)")
    ncol = len(header)
    unix: list[int] = []
    vals: list[list[float]] = []
    skipped = {"columns": 0, "non_numeric": 0, "time_backwards": 0}
    last = None
    for lineno, line in enumerate(f, start=2):
        line = line.rstrip("\r\n")
        if not line:
            continue
        parts = line.split(",")
        if len(parts) != ncol:
            skipped["columns"] += 1
            log.warning("%s:%d: %d columns, expected %d; row skipped", path, lineno, len(parts), ncol)
            continue
        try:
            u = int(parts[1])
            row = [float(p) for p in parts[2:12]]
        except ValueError:
            skipped["non_numeric"] += 1
            log.warning("%s:%d: non-numeric value; row skipped", path, lineno)
            continue
        if not all(map(math.isfinite, row)):
            skipped["non_numeric"] += 1
            log.warning("%s:%d: NaN or infinite value; row skipped", path, lineno)
            continue
        if last is not None and u <= last:
            skipped["time_backwards"] += 1
            log.warning("%s:%d: time %d not after %d; row skipped", path, lineno, u, last)
            continue
        last = u
        unix.append(u)
        vals.append(row)
    if not unix:
        raise RefitFormatError(f"{path}: no usable rows")
    arr = np.asarray(vals, dtype=np.float64)
    cols = {name: arr[:, i] for i, name in enumerate(BASE_COLUMNS[2:])}
    return House(house, path, np.asarray(unix, dtype=np.int64), cols, skipped)


def epoch0_of(houses: list[House], period_s: float) -> float:
    """The earliest row's Unix floored to a multiple of period_s."""
    first = min(int(h.unix[0]) for h in houses)
    return float(first - (first % period_s))


def readings_at(unix: np.ndarray, values: np.ndarray, query_unix: np.ndarray,
                max_hold_s: float = DEFAULT_MAX_HOLD_S) -> np.ndarray:
    """Value of the last row with Unix < q for each q; NaN where that row is
    older than max_hold_s or there is none."""
    q = np.asarray(query_unix, dtype=np.float64)
    idx = np.searchsorted(unix, q, side="left") - 1
    out = np.full(q.shape, np.nan)
    ok = idx >= 0
    age = np.where(ok, q - unix[np.clip(idx, 0, None)], np.inf)
    ok &= age <= max_hold_s
    out[ok] = values[idx[ok]]
    return out


def shifted(house: House, q: np.ndarray, shift_s: float) -> np.ndarray:
    """Query times moved `shift_s` later in the trace, wrapping around its end
    (clones of a device replay the same day with another phase)."""
    if not shift_s:
        return q
    first, span = float(house.unix[0]), float(house.unix[-1] - house.unix[0] + 1)
    return first + np.mod(q + shift_s - first, span)


def grid_readings(house: House, device: str, epoch0: float, period_s: float, n_t: int,
                  max_hold_s: float = DEFAULT_MAX_HOLD_S, shift_s: float = 0.0) -> np.ndarray:
    """Reading of `device` at each logical t in [0, n_t): the last row with
    Unix < epoch0 + (t+1) period_s, NaN (no report) when older than max_hold_s."""
    q = epoch0 + (np.arange(n_t) + 1) * period_s
    return readings_at(house.unix, house.column_of(device), shifted(house, q, shift_s), max_hold_s)


class RefitColumnSource:
    """Replays one REFIT column as a sensor: read(now) -> watts or None.

    `now` is the (simulated) unix time; time_shift_s moves the trace, e.g. to
    replay 2015 data at today's wall clock.
    """

    def __init__(self, house: House, device: str, time_shift_s: float = 0.0,
                 max_hold_s: float = DEFAULT_MAX_HOLD_S, phase_s: float = 0.0):
        self.house = house
        self.unix = house.unix
        self.values = house.column_of(device)
        self.shift = time_shift_s
        self.phase_s = phase_s       # clones: read this much later in the trace, wrapping
        self.max_hold_s = max_hold_s

    def read(self, now: float) -> float | None:
        q = shifted(self.house, np.array([now - self.shift]), self.phase_s)
        v = readings_at(self.unix, self.values, q, self.max_hold_s)[0]
        return None if v != v else float(v)


def refit_source(cfg, device: str, start_unix: float) -> RefitColumnSource:  # noqa: ANN001 - edge_agent SourceConfig
    """The agent source a `[source] kind = "refit"` config names: its house's
    column (ApplianceK, or Aggregate for appliance 0), starting at start_unix."""
    house = load_house(cfg.data_dir or bundled_dir(), cfg.house)
    column = f"h{cfg.house}agg" if cfg.appliance == 0 else f"h{cfg.house}a{cfg.appliance}"
    first = float(house.unix[0]) if cfg.replay_start_unix is None else cfg.replay_start_unix
    return RefitColumnSource(house, column, time_shift_s=start_unix - first)
