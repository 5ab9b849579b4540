"""The messages the edge agent produces (SPEC 3): reports and its retained
status. The device writes them with edge_agent.wire (MicroPython has no
pydantic); consumers (the fog, tools) validate with these models."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, Strict, StrictInt

from edge_agent.wire import STATES, VERSION

MAX_REPORT_BYTES = 256


# A finite JSON number: NaN and +-Infinity (which JSON parsers accept, and
# 1e999 becomes) fail with the error type "finite_number".
FiniteNumber = Annotated[float, Strict(), AllowInfNan(False)] | StrictInt


class Report(BaseModel):
    """One randomized reading: rase/v1/reports/{region}/{device}."""
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    v: Literal[1]
    t: StrictInt = Field(ge=0)
    y: FiniteNumber
    eps: FiniteNumber = Field(gt=0)
    seq: StrictInt = Field(ge=0)


class PrivacySpent(BaseModel):
    """What a device spends (basic composition): eps per report, per hour at
    its reporting period, and so far in the current budget period."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    eps_per_report: float | None = Field(None, ge=0)
    eps_per_hour: float | None = Field(None, ge=0)
    spent_this_period: float = Field(ge=0)
    budget_per_period: float = Field(gt=0)
    budget_period_s: float = Field(gt=0)


class Status(BaseModel):
    """Retained device status: rase/v1/status/{device}."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    v: Literal[1]
    state: Literal[STATES]  # type: ignore[valid-type]
    privacy: PrivacySpent | None = None


assert VERSION == 1
