"""Aggregates: rase/v1/aggregates/t/{t} and, retained, rase/v1/aggregates/latest,
published by the fusion center for subscribers."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rase_device.mechanisms import DEFAULT_MECHANISM
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


class CentralTargetCheck(BaseModel):
    """Whether this aggregate's windows delivered the fusion center's
    [central_target]: only windows shuffled uniformly (or BUDS batches) amplify,
    and each states its central eps at its own n (the fog's statement)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    eps: float
    delta: float
    met: bool
    reason: str                        # why not, or what held


class PrivacyUnit(BaseModel):
    """What one device's report in this aggregate cost and what protected it
    (docs/privacy.md): eps per report and its basic composition over an hour
    and a day at the deployment's period, and the shuffle guarantee actually
    applied to this aggregate's windows, as the fog stated it."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    eps_per_report: float              # the largest eps level among this aggregate's reports
    period_s: float
    eps_per_hour: float                # basic composition: eps_per_report x 3600 / period_s
    eps_per_day: float                 # eps_per_report x 86400 / period_s
    # "none": secure aggregation (mechanism prio3): no shuffle guarantee is claimed; central_eps and
    # central_delta are the central noise's, which holds if the fog or the fusion center is honest.
    shuffle: Literal["uniform", "d_sigma", "buds", "mixed", "none"]
    central_eps: float | None = None   # after the shuffle: the weakest window's central eps (uniform/BUDS only)
    central_delta: float | None = None
    d_sigma_alpha: float | None = None  # alpha of the windows shuffled by Mallows (d_sigma privacy of the order)
    statement: str                     # the same in one line of words, the unit's day first
    central_target: CentralTargetCheck | None = None
    # The privacy unit (issue 28, the fusion center's own [privacy]): a device, or a household of
    # devices_per_unit devices; what one release and one UTC day cost it (basic composition), and the
    # daily budget the deployment enforces (None: event-level, no daily guarantee).
    unit: Literal["device", "household"] = "device"
    devices_per_unit: int = Field(1, ge=1)
    eps_per_release: float | None = None     # the unit's: its devices' eps per report added up
    releases_per_day: float | None = None
    eps_per_unit_day: float | None = None
    eps_day_budget: float | None = None
    guarantee: Literal["event-level", "per unit per day"] = "event-level"


class Clipping(BaseModel):
    """Readings above x_max are clipped by the devices: `mean` estimates the
    mean of the clipped readings. With a bound from `rase calibrate` (the
    fusion center's [clipping] table), `mean`'s interval is widened upwards by
    it so that it holds for the true mean too."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    x_max: float
    bias_bound: float | None           # W the clipped mean may be below the true mean; None: unknown
    widened: bool                      # mean's ci already includes it
    note: str


class Aggregate(BaseModel):
    """One timestamp's estimates over all regions: rase/v1/aggregates/t/{t},
    and the newest one retained on rase/v1/aggregates/latest."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    v: Literal[1] = 1
    scope: str = "all"
    t: int
    # 0, then one more each time a late batch (reports that reached the fog
    # after t's window closed) is folded in and the aggregate published again.
    revision: int = Field(0, ge=0)
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
    # Wall-clock time of period t (epoch0 + t period_s .. + period_s), so a subscriber never needs epoch0.
    t_start: float | None = None          # Unix seconds
    t_end: float | None = None
    t_start_iso: str | None = None        # ISO 8601, UTC
    t_end_iso: str | None = None
    period_s: float | None = None
    privacy_unit: PrivacyUnit | None = None
    clipping: Clipping | None = None
    # Secure aggregation (mechanism "prio3"): accepted and rejected reports, the noise, wall-clock time, privacy unit.
    prio3: Prio3Summary | None = None
