"""The window message: owned by the fog, validated by the fusion center.

It carries the shuffled values of one window and public metadata only. No
device id, no arrival time, no per-device field (the per-value eps level is a
published menu level that at least k_min reports of the window share).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, field_validator, model_validator

WINDOW_VERSION = 1


class WindowCounts(BaseModel):
    """Aggregate counts, never per device."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    duplicates: int = Field(0, ge=0)           # (device, t) repeats dropped from this window
    eps_level_dropped: int = Field(0, ge=0)    # reports of eps levels under k_min in this window
    late: int = Field(0, ge=0)                 # late reports for this region since its previous window
    rejected: int = Field(0, ge=0)             # invalid reports on this region since its previous window
    suppressed_windows: int = Field(0, ge=0)   # windows of this region under k_min since its previous window


class WindowMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    v: Literal[1] = WINDOW_VERSION
    region: str = Field(min_length=1, max_length=64, pattern=r"^[^/+#\s]+$")
    t: StrictInt = Field(ge=0)
    n: StrictInt = Field(ge=1)
    values: list[StrictFloat | StrictInt]
    eps: list[StrictFloat | StrictInt]
    mechanism: Literal["mallows", "uniform"]
    alpha: float = Field(gt=0)
    theta: float | None = None
    delta_k: StrictInt = Field(ge=0)
    omega: StrictInt = Field(ge=0)
    k: StrictInt = Field(ge=0)
    groups: list[tuple[StrictInt, StrictInt]]
    counts: WindowCounts = WindowCounts()

    @field_validator("values", "eps")
    @classmethod
    def _finite(cls, v: list[float]) -> list[float]:
        if not all(math.isfinite(x) for x in v):
            raise ValueError("values must be finite")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "WindowMessage":
        if len(self.values) != self.n or len(self.eps) != self.n:
            raise ValueError(f"n = {self.n} but {len(self.values)} values and {len(self.eps)} eps levels")
        if any(e <= 0 for e in self.eps):
            raise ValueError("eps levels must be > 0")
        if (self.mechanism == "mallows") != (self.theta is not None):
            raise ValueError("theta is set exactly when the mechanism is mallows")
        if any(not (0 <= lo <= hi < self.n) for lo, hi in self.groups):
            raise ValueError("group ranges must lie within 0..n-1")
        return self

    def topic(self) -> str:
        return f"rase/v1/windows/{self.region}"
