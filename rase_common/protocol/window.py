"""The window message: owned by the fog, validated by the fusion center.

It carries the shuffled values of one window and public metadata only. No
device id, no arrival time, no per-device or per-position field.

Why batches per eps level (version 2): with a menu of several eps levels, a
per-position list of eps in the emitted order lets an analyst who knows the
public reference order sigma_0 attribute each device's level (a Mallows
order stays close to sigma_0). So the fog splits a window's reports by eps
level and shuffles each level on its own (its own sigma_0 over that level's
reporters, its own groups and Mallows/uniform choice). A batch says only
that its values share one published level and how many there are; levels
with fewer than k_min reports never leave the fog. The default menu has one
level, so a window is one batch. A batch also says what kind of report it
holds (`kind`, the device mechanism the fog checked them against), so that
around a control message that changes the mechanism the fusion center never
estimates one kind of report as another.

The fusion center validates every field before it acts (it treats windows as
hostile input): bounded t, n, eps and values, so that no window can crash
the estimators or the store.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, field_validator, model_validator

from rase_device.mechanisms import DEFAULT_MECHANISM, check_mechanism
from rase_common.protocol.topics import windows_topic

WINDOW_VERSION: Literal[2] = 2
MAX_T = 1 << 40                 # logical timestamps: 2^40 periods of 1 ms is 35 years
MAX_WINDOW_REPORTS = 10_000_000
MIN_EPS, MAX_EPS = 1e-4, 1e3    # published eps levels; no denormal or absurd level reaches an estimator
MAX_ABS_VALUE = 1e12            # reports are readings plus noise, in reading units


class WindowCounts(BaseModel):
    """Aggregate counts, never per device."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    duplicates: int = Field(0, ge=0)           # (device, t) repeats dropped from this window
    eps_level_dropped: int = Field(0, ge=0)    # reports of eps levels under k_min in this window
    late: int = Field(0, ge=0)                 # late reports for this region since its previous window
    rejected: int = Field(0, ge=0)             # invalid reports on this region since its previous window
    suppressed_windows: int = Field(0, ge=0)   # windows of this region under k_min since its previous window


class LevelBatch(BaseModel):
    """The reports of one eps level, shuffled on their own: a Mallows order
    (RS, d_sigma), a uniform one, or BUDS batches (`groups` = the batches,
    each shuffled uniformly)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    eps: StrictFloat | StrictInt = Field(ge=MIN_EPS, le=MAX_EPS)
    # The device mechanism the fog checked these reports against (rase_device.mechanisms): what they are.
    kind: str = DEFAULT_MECHANISM
    values: list[StrictFloat | StrictInt] = Field(min_length=1, max_length=MAX_WINDOW_REPORTS)
    mechanism: Literal["mallows", "uniform", "buds"]
    theta: float | None = None
    delta_k: StrictInt = Field(ge=0)
    omega: StrictInt = Field(ge=0)
    k: StrictInt = Field(ge=0)
    groups: list[tuple[StrictInt, StrictInt]]  # group layout of this batch's sigma_0, as position ranges
    # What the shuffle adds for this batch (rase_common.amplification.window_guarantee): the
    # central (eps, delta) after a uniform shuffle, or the d_sigma statement for a Mallows order.
    guarantee: dict[str, StrictFloat | StrictInt | str | bool | None] | None = None

    @field_validator("guarantee")
    @classmethod
    def _small(cls, v):
        if v is not None and (len(v) > 12 or any(len(k) > 40 or (isinstance(x, str) and len(x) > 200)
                                                 for k, x in v.items())):
            raise ValueError("guarantee must be a small flat record")
        return v

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        return check_mechanism(v)

    @field_validator("values")
    @classmethod
    def _finite(cls, v: list[float]) -> list[float]:
        if not all(math.isfinite(x) and abs(x) <= MAX_ABS_VALUE for x in v):
            raise ValueError(f"values must be finite numbers within +-{MAX_ABS_VALUE:g}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "LevelBatch":
        if (self.mechanism == "mallows") != (self.theta is not None):
            raise ValueError("theta is set exactly when the mechanism is mallows")
        if self.theta is not None and not (math.isfinite(self.theta) and self.theta > 0):
            raise ValueError("theta must be a finite number > 0")
        n = len(self.values)
        if any(not (0 <= lo <= hi < n) for lo, hi in self.groups):
            raise ValueError("group ranges must lie within the batch")
        return self


class WindowMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    v: Literal[2] = WINDOW_VERSION
    region: str = Field(min_length=1, max_length=64, pattern=r"^[^/+#\s]+$")
    t: StrictInt = Field(ge=0, lt=MAX_T)
    n: StrictInt = Field(ge=1, le=MAX_WINDOW_REPORTS)
    alpha: float = Field(gt=0, le=1e6)
    batches: list[LevelBatch] = Field(min_length=1, max_length=64)
    counts: WindowCounts = WindowCounts()
    # 0: the window of t; 1, 2, ...: a late batch of the same t (reports that
    # came after the window closed, within the fog's allowed lateness), shuffled
    # and held to k_min like any window. The fusion center revises t's aggregate.
    revision: StrictInt = Field(0, ge=0, le=10_000)

    @model_validator(mode="after")
    def _consistent(self) -> "WindowMessage":
        if sum(len(b.values) for b in self.batches) != self.n:
            raise ValueError(f"n = {self.n} but the batches hold {sum(len(b.values) for b in self.batches)} values")
        levels = [(b.eps, b.kind) for b in self.batches]
        if levels != sorted(set(levels)):
            raise ValueError("batches must have distinct (eps level, kind) pairs in increasing order")
        return self

    @classmethod
    def uniform(cls, region: str, t: int, values: list[float], eps: float = 1.0, alpha: float = 30.0,
                kind: str = DEFAULT_MECHANISM, **extra) -> "WindowMessage":
        """A one-level window shuffled uniformly (one group): for tests and tools."""
        n = len(values)
        return cls(region=region, t=t, n=n, alpha=alpha, batches=[LevelBatch(
            eps=eps, kind=kind, values=values, mechanism="uniform", delta_k=0, omega=0, k=1, groups=[(0, n - 1)])],
            **extra)

    @property
    def values(self) -> list[float]:
        return [v for b in self.batches for v in b.values]

    def eps_per_value(self) -> list[float]:
        """Each value's level: known per batch, never per device."""
        return [b.eps for b in self.batches for _ in b.values]

    def topic(self) -> str:
        return windows_topic(self.region)


class WindowReceipt(BaseModel):
    """The fusion center to one region's fog, on rase/v1/windows-kept/{region},
    after the commit that stored (or decided: a duplicate, a quarantined or a
    too-late window) these windows: [t, revision] of each. The fog keeps a
    forwarded window unconfirmed until it is listed here and sends it again
    otherwise (fog_shuffler.window_receipts): the broker's PUBACK is not the
    fusion center's (a broker crash, or a clean connection that wipes the
    fusion center's session, loses what it routed). Nothing about devices."""
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    v: Literal[1] = 1
    kept: list[tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]]] = Field(min_length=1,
                                                                                         max_length=1000)
