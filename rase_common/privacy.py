"""What a device's privacy amounts to over time (docs/privacy.md). Pure.

Every report spends its eps (basic sequential composition): a device that
reports every period_s seconds for `hours` hours spends
    eps_total = eps_per_report * reports,  reports = floor(hours * 3600 / period_s).
The advanced composition theorem (Dwork, Rothblum, Vadhan 2010) gives, for a
slack delta',
    eps' = sqrt(2 k ln(1/delta')) eps + k eps (e^eps - 1),
which is smaller only when eps per report is small; we print the smaller one
beside the basic sum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class PrivacyOverTime:
    eps_per_report: float
    period_s: float
    hours: float
    reports: int
    eps_per_hour: float
    eps_total: float              # basic composition
    eps_advanced: float           # advanced composition at delta_slack (may exceed eps_total)
    delta_slack: float

    @property
    def eps_best(self) -> float:
        return min(self.eps_total, self.eps_advanced)

    def lines(self) -> list[str]:
        out = [f"privacy over {self.hours:g} h: {self.reports} reports at eps {self.eps_per_report:g} each "
               f"(one every {self.period_s:g} s)",
               f"  spent: eps {self.eps_per_hour:,.6g} per hour, eps {self.eps_total:,.6g} in total "
               f"(basic composition: the sum)"]
        if self.eps_advanced < self.eps_total:
            out.append(f"  advanced composition: ({self.eps_advanced:,.6g}, {self.delta_slack:g})-DP for the whole run")
        if self.eps_best > 10:
            out.append("  over this run the formal guarantee is void in practice (eps > 10): see docs/privacy.md")
        return out


def advanced_composition(eps: float, k: int, delta_slack: float) -> float:
    if k == 0:
        return 0.0
    return math.sqrt(2 * k * math.log(1 / delta_slack)) * eps + k * eps * math.expm1(eps)


def privacy_over_time(eps_per_report: float, period_s: float, hours: float,
                      delta_slack: float = 1e-6) -> PrivacyOverTime:
    if not (eps_per_report > 0 and math.isfinite(eps_per_report)):
        raise ValueError(f"eps_per_report must be a finite number > 0, got {eps_per_report!r}")
    if not (period_s > 0 and math.isfinite(period_s)):
        raise ValueError(f"period_s must be a finite number > 0, got {period_s!r}")
    if not (hours >= 0 and math.isfinite(hours)):
        raise ValueError(f"hours must be a finite number >= 0, got {hours!r}")
    if not 0 < delta_slack < 1:
        raise ValueError(f"delta_slack must be in (0, 1), got {delta_slack!r}")
    reports = int(math.floor(hours * 3600 / period_s + 1e-9))
    return PrivacyOverTime(eps_per_report, period_s, hours, reports, eps_per_report * 3600 / period_s,
                           eps_per_report * reports, advanced_composition(eps_per_report, reports, delta_slack),
                           delta_slack)


# -- the privacy unit and its day (issue 28; docs/privacy.md) ----------------------------------------

from typing import Literal  # noqa: E402 - the unit's config lives beside the arithmetic above

from typing import Any  # noqa: E402

from pydantic import BaseModel, ConfigDict, Field, model_validator  # noqa: E402

from rase_device.interval import eps_per_release  # noqa: E402


class UnitPrivacy(BaseModel):
    """The privacy unit a fog or a fusion center states and enforces (its
    own `[privacy]` table): `device`, or `household`, a named group of
    devices (a REFIT house's appliances, or one whole-house meter), whose
    devices together may spend `eps_day` per UTC day. `devices_per_unit` is
    how many of a unit's devices report in one release (9 for a REFIT
    house's appliances, 1 for a meter): a release costs the unit their eps
    together.

    `event_level = true` (or no eps_day) is the per-report stream instead:
    one report per period at the configured eps, each eps-DP on its own, no
    daily budget enforced and none claimed; every aggregate says
    "event-level" and what a unit's day then adds up to (`rase fog`, `rase
    fusion` and `rase agent` take --event-level for it)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    unit: Literal["device", "household"] = "device"
    eps_day: float | None = Field(None, gt=0, le=1000)
    devices_per_unit: int = Field(1, ge=1, le=1000)
    event_level: bool = False

    @model_validator(mode="after")
    def _one_device(self) -> "UnitPrivacy":
        if self.unit == "device" and self.devices_per_unit != 1:
            raise ValueError("privacy.devices_per_unit is for unit = \"household\" (a device is its own unit)")
        return self

    @property
    def enforced(self) -> bool:
        """A daily budget is enforced (and claimed): eps_day set, not event-level."""
        return self.eps_day is not None and not self.event_level

    def eps_per_report(self, releases_per_day: float) -> float:
        """Each device's eps per report so that the unit's releases of a day
        stay within eps_day (rase_device.interval.eps_per_release)."""
        assert self.eps_day is not None
        return eps_per_release(self.eps_day, int(round(releases_per_day)), self.devices_per_unit)


@dataclass(frozen=True)
class UnitGuarantee:
    """What one release and one day cost a privacy unit."""
    unit: str
    devices_per_unit: int
    eps_per_release: float         # the unit's: its devices' eps per report added up
    releases_per_day: float
    eps_per_unit_day: float        # basic composition over the day's releases
    eps_day_budget: float | None   # the configured daily budget (None: event-level)

    @property
    def event_level(self) -> bool:
        return self.eps_day_budget is None

    def statement(self) -> str:
        who = "household" if self.unit == "household" else "device"
        per = (f" ({self.devices_per_unit} devices, each eps {self.eps_per_release / self.devices_per_unit:.6g} "
               "per report)" if self.devices_per_unit > 1 else "")
        day = (f"eps {self.eps_per_release:.6g} per {who} per release{per}, {self.releases_per_day:,.6g} releases "
               f"a day: eps {self.eps_per_unit_day:,.6g} per {who} per UTC day")
        if self.event_level:
            void = " (void in practice: eps > 10)" if self.eps_per_unit_day > 10 else ""
            return f"event-level: {day}{void}; no daily budget is enforced"
        return f"{day}, within the enforced budget of eps {self.eps_day_budget:g} per {who}-day"


def unit_guarantee(privacy: UnitPrivacy, eps_per_report: float, releases_per_day: float) -> UnitGuarantee:
    """The unit's guarantee when each of its devices spends eps_per_report per release."""
    per_release = eps_per_report * privacy.devices_per_unit
    return UnitGuarantee(privacy.unit, privacy.devices_per_unit, per_release, releases_per_day,
                         per_release * releases_per_day, privacy.eps_day if privacy.enforced else None)



def eps_from_day(privacy: Any, window_s: float) -> float | None:
    """A party's eps per report from its own [privacy] table (raw or parsed)
    and what one release covers: eps_day / (releases a day x devices per
    unit), rounded down to the ledger's unit, so that each party computes the
    same number from its own config (issue 28). None: event-level."""
    unit = as_unit(privacy)
    return None if unit is None or not unit.enforced else unit.eps_per_report(86400.0 / window_s)


def as_unit(privacy: Any) -> UnitPrivacy | None:
    if privacy is None:
        return None
    return privacy if isinstance(privacy, UnitPrivacy) else UnitPrivacy.model_validate(privacy)


def stated_or(name: str, stated: Any, eps: float) -> float:
    """eps, refusing a config that states another value for `name` too (one budget, one place)."""
    if stated is not None and stated != eps and stated != [eps]:
        raise ValueError(f"privacy.eps_day sets {name} to {eps:.10g} (eps_day / releases a day / devices per unit): "
                         f"leave {name} out, got {stated}")
    return eps
