"""The control message: rase/v1/control/precision (retained), published by
the fusion center. It is the one source of truth for the protocol parameters
(period, epoch0, range, grid, eps menu, mechanism): devices calibrate against
it (they parse it on the device with edge_agent.wire.parse_control, tested
against this model) and the fog follows it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from edge_agent.mechanisms import DEFAULT_MECHANISM, check_mechanism
from rase_common.protocol.prio3 import Prio3Params
from edge_agent.report_kind import DEFAULT_BANDS, DEFAULT_ON_ABOVE, check_bands
from edge_agent.randomizer import Calibration, check_finite


class ControlMessage(BaseModel):
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
    # mechanism "prio3" (secure aggregation, docs/privacy.md): the report kind, the
    # product, eps per release and the key id of the helper key devices pinned.
    prio3: Prio3Params | None = None

    @model_validator(mode="after")
    def _valid(self) -> "ControlMessage":
        cal = self.calibration()  # the device's own rules, so both sides agree
        if (self.mechanism == "prio3") != (self.prio3 is not None):
            raise ValueError("prio3 is set exactly when mechanism is \"prio3\"")
        if self.prio3 is not None:
            _check_prio3(self, cal.grid_max)
        check_mechanism(self.mechanism)
        check_finite("on_above", self.on_above)
        check_bands(list(self.bands))
        if not self.eps_levels or any(not (e > 0) for e in self.eps_levels):
            raise ValueError("eps_levels must be a non-empty list of numbers > 0")
        return self

    def calibration(self) -> Calibration:
        return Calibration(beta=self.beta, rho=self.rho, x_min=self.x_min, x_max=self.x_max, gamma=self.gamma)


def _check_prio3(msg: ControlMessage, grid_steps: int) -> None:
    """The same rules as the device's parser (edge_agent.wire.parse_control) and Prio3Client."""
    p = msg.prio3
    if msg.eps_levels != [p.dp_eps]:
        raise ValueError(f"eps_levels must be [prio3.dp_eps] = [{p.dp_eps}] when mechanism is prio3")
    if p.kind == "sum" and p.max_measurement != grid_steps:
        raise ValueError(f"prio3.max_measurement must be the grid's {grid_steps} steps (x_max - x_min) / gamma, "
                         f"got {p.max_measurement}")
    if p.kind == "histogram" and p.buckets != len(msg.bands) + 1:
        raise ValueError(f"prio3.buckets must be len(bands) + 1 = {len(msg.bands) + 1}, got {p.buckets}")
