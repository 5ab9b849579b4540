"""Aggregates: rase/v1/aggregates/t/{t} and, retained, rase/v1/aggregates/latest,
published by the fusion center for subscribers."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from edge_agent.mechanisms import DEFAULT_MECHANISM
from rase_common.protocol.prio3 import Prio3Summary


class EstimateOut(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    value: float
    ci: tuple[float, float]
    n: int
    # How the interval was made (docs/mechanisms.md, "Intervals"): e.g. "exact-noise",
    # "clopper-pearson", "exact-count". None only in aggregates stored before methods were named.
    method: str | None = None


class WindowedOut(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    w: int
    present: int
    value: float | None
    ci: tuple[float, float] | None


EstimatorName = Literal["mean", "bs", "se", "mle", "count"]


class Aggregate(BaseModel):
    """One timestamp's estimates over all regions: rase/v1/aggregates/t/{t},
    and the newest one retained on rase/v1/aggregates/latest."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    v: Literal[1] = 1
    scope: str = "all"
    t: int
    n: int
    regions: list[str]
    complete: bool                       # every known region contributed
    level: float                         # confidence level of the intervals
    estimates: dict[EstimatorName, EstimateOut]
    what: dict[str, str] = {}                 # what each estimate estimates (the mechanism's own words)
    mechanism: str = DEFAULT_MECHANISM        # the kind of report estimated (the devices' mechanism)
    other_kind_reports: int = Field(0, ge=0)  # reports of another kind at this t (a mechanism change): not used
    # categorical: per band, the share of devices in it (see what["frequencies"]).
    frequencies: list[EstimateOut] = []
    clamped: bool                        # some reports came from the clamp branch: SE is biased, mean is not
    share_at_bound: float                # share of reports exactly at x_min or x_max
    windowed: dict[str, dict[EstimatorName, WindowedOut]] = {}
    # Per region and eps level: what the fog's shuffle adds (central eps after a
    # uniform shuffle, or d_sigma for a Mallows order), as the fog stated it.
    privacy: list[dict] = []
    # Secure aggregation (mechanism "prio3"): accepted and rejected reports, the noise, wall-clock time, privacy unit.
    prio3: Prio3Summary | None = None
