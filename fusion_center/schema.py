"""Messages the fusion center owns: the precision control message (agents
parse it on the device with edge_agent.wire.parse_control) and aggregates."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from edge_agent.mechanisms import DEFAULT_BANDS, DEFAULT_MECHANISM, DEFAULT_ON_ABOVE, check_bands, check_mechanism
from edge_agent.randomizer import Calibration, check_finite

CONTROL_TOPIC = "rase/v1/control/precision"
AGGREGATE_LATEST_TOPIC = "rase/v1/aggregates/latest"


def aggregate_topic(t: int) -> str:
    return f"rase/v1/aggregates/t/{t}"


class PrecisionControl(BaseModel):
    """rase/v1/control/precision (retained): what agents calibrate against."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    v: Literal[1] = 1
    beta: float = 0.5
    rho: float = 0.9
    x_min: float = 0.0
    x_max: float = 4000.0
    gamma: float = 1.0
    period_s: float = Field(8.0, gt=0)
    epoch0: float = 0.0
    eps_levels: list[float] = [1.0]
    # The device mechanism of the whole deployment (edge_agent.mechanisms):
    # "br" = the paper's BR (default), "duchi", "piecewise", "hybrid" for the
    # mean; "binary" (on when the reading > on_above; randomized response) and
    # "categorical" (the reading's band among the `bands` edges; kRR or OUE).
    mechanism: str = DEFAULT_MECHANISM
    on_above: float = DEFAULT_ON_ABOVE
    bands: list[float] = list(DEFAULT_BANDS)

    @model_validator(mode="after")
    def _valid(self) -> "PrecisionControl":
        self.calibration()  # the device's own rules, so both sides agree
        check_mechanism(self.mechanism)
        check_finite("on_above", self.on_above)
        check_bands(list(self.bands))
        if not self.eps_levels or any(not (e > 0) for e in self.eps_levels):
            raise ValueError("eps_levels must be a non-empty list of numbers > 0")
        return self

    def calibration(self) -> Calibration:
        return Calibration(beta=self.beta, rho=self.rho, x_min=self.x_min, x_max=self.x_max, gamma=self.gamma)


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
