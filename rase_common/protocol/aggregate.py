"""Aggregates: rase/v1/aggregates/t/{t} and, retained, rase/v1/aggregates/latest,
published by the fusion center for subscribers."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from edge_agent.mechanisms import DEFAULT_MECHANISM


class EstimateOut(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    value: float
    ci: tuple[float, float]
    n: int


class WindowedOut(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    w: int
    present: int
    value: float | None
    ci: tuple[float, float] | None


ESTIMATE_MEANING = {
    "mean": "unbiased for the mean reading (clipped to [x_min, x_max]) whatever eps, clamped or not; "
            "normal interval from its own variance. Use this one.",
    "bs": "bootstrap of the same unbiased mean; percentile interval",
    "se": "the paper's sample mean of the reports: the mean of the CLAMPED reports, biased when clamped",
    "mle": "the paper's weighted median (eq. 14) of the noisy reports: near the readings' median, not their mean",
}
BINARY_MEANING = {
    "count": "unbiased count of devices that are on (reading > on_above), (S - n p/2) / (1 - p) summed over eps "
             "levels; normal interval from its exact variance, clipped to [0, n]",
    "mean": "share of devices that are on: count / n, with the count's interval / n",
}
CATEGORICAL_MEANING = {
    "frequencies": "per band (category j: bands[j-1] < reading <= bands[j]): unbiased share of devices in it, "
                   "kRR or OUE debiased; normal intervals clipped to [0, 1]",
}
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
    what: dict[str, str] = ESTIMATE_MEANING   # what each estimate estimates
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
