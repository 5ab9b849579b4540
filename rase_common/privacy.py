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
