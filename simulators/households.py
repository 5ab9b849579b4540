"""Household meters and fleets of them (issue 28): `rase replay --unit household`.

Each household is one device, its whole-house meter: REFIT's `Aggregate`
column of its source house. `--households N` builds N households from the
given houses: household i replays house houses[i % k] (k houses), and the
c-th copy of a house (c = i // k, of `copies`) is shifted by
((c x 14400 // copies + 7200) mod 14400) - 7200 seconds, cyclic within the
replayed day (stated in [0, 86400)): the copies spread evenly over two hours
either side of the house's own day (copy 0 unshifted), as households'
routines differ by an hour or two, so a fleet keeps the day's shape (its
morning and evening peaks) instead of flattening it into the daily mean.

The definition of what a household reports (and of the truth, which anyone
can recompute from the raw CSVs and the replay's first line):
- the replayed day starts at day_start (the UTC midnight at or before the
  replay's start); a household with shift s reads its house at time tau
  as the house did at day_start + ((tau - day_start + s) mod 86400);
- interval t covers [epoch0 + t interval_s, epoch0 + (t + 1) interval_s)
  (Unix seconds; a household replay's epoch0 is day_start);
  the meter is sampled every period_s from the interval's start, each
  sample the last REFIT row at or before the (shifted) sample time (none
  before the house's first row);
- the household reports the mean of its samples, clipped to [x_min, x_max]
  (no report for an interval without samples); the truth of interval t is
  the mean of the reporting households' clipped means.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from simulators.refit import House

DAY_S = 86400
SPREAD_S = 4 * 3600      # copies of a house are shifted within +-2 h


@dataclass(frozen=True)
class Household:
    id: str               # the household's name, and its meter's device id
    house: int            # the REFIT house it replays
    shift_s: int          # seconds, cyclic within the replayed day

    def as_dict(self, x_min: float, x_max: float) -> dict:
        return {"id": self.id, "house": self.house, "shift_s": self.shift_s, "x_min": x_min, "x_max": x_max}


def make_households(houses: list[int], n: int | None = None) -> list[Household]:
    """n households (default: one per house) from `houses`, time-shifted copies spread over the day."""
    if not houses:
        raise ValueError("no houses to build households from")
    n = len(houses) if n is None else n
    if n < 1:
        raise ValueError(f"--households must be >= 1, got {n}")
    copies = math.ceil(n / len(houses))
    width = max(5, len(str(n - 1)))

    def shift(c: int) -> int:
        return ((c * SPREAD_S // copies + SPREAD_S // 2) % SPREAD_S - SPREAD_S // 2) % DAY_S

    return [Household(f"hh{i:0{width}d}", houses[i % len(houses)], shift(i // len(houses))) for i in range(n)]


def day_start_of(start_unix: float) -> int:
    """The UTC midnight at or before the replay's start: where the replayed day begins."""
    return int(start_unix // DAY_S) * DAY_S


def meter_by_second(house: House, day_start: int) -> np.ndarray:
    """The house's whole-house meter at every second of the replayed day: the
    value of its last row at or before day_start + s (NaN before its first row)."""
    q = day_start + np.arange(DAY_S)
    idx = np.searchsorted(house.unix, q, side="right") - 1
    values = house.columns["Aggregate"]
    return np.where(idx >= 0, values[np.clip(idx, 0, None)], np.nan)


def interval_means(houses: dict[int, House], households: list[Household], *, day_start: int, epoch0: float,
                   t0: int, intervals: int, interval_s: float, period_s: float, x_min: float, x_max: float,
                   chunk: int = 512) -> np.ndarray:
    """households x intervals: each household's clipped mean of its samples in
    intervals t0 .. t0 + intervals - 1 (NaN: no sample), by the module's definition."""
    per = math.ceil(interval_s / period_s - 1e-9)        # samples at start + k period_s, k period_s < interval_s
    if per < 1:
        raise ValueError(f"interval_s {interval_s} is shorter than the period {period_s}")
    # Sample times from day_start, for every sample of every interval (intervals x per, flattened).
    starts = (epoch0 + (t0 + np.arange(intervals)) * interval_s - day_start)[:, None]
    offsets = (starts + np.arange(per)[None, :] * period_s).ravel()
    meters = {h: meter_by_second(house, day_start) for h, house in houses.items()}
    out = np.full((len(households), intervals), np.nan)
    for lo in range(0, len(households), chunk):
        part = households[lo:lo + chunk]
        shifts = np.array([hh.shift_s for hh in part], dtype=np.float64)[:, None]
        seconds = np.floor(np.mod(offsets[None, :] + shifts, DAY_S)).astype(np.int64)
        samples = np.empty(seconds.shape)
        for i, hh in enumerate(part):
            samples[i] = meters[hh.house][seconds[i]]
        blocks = samples.reshape(len(part), intervals, per)
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)          # an interval without samples: NaN
            means = np.nanmean(blocks, axis=2)
        out[lo:lo + len(part)] = np.clip(means, x_min, x_max)
    return out


def truth(means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the true mean of each interval over the households with a report, how many have one)."""
    present = ~np.isnan(means)
    n = present.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, np.nansum(means, axis=0) / np.maximum(n, 1), np.nan)
    return mean, n
