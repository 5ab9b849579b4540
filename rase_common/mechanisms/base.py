"""What every mechanism of the registry provides, and the small types they share.

A mechanism (one module of this package, one line of `registry.MECHANISMS`)
has, reachable from its registry entry:
- `randomizer(setting, bits=None)`: its device randomizer (the MicroPython
  class in the device core, named in rase_device.mechanisms.RANDOMIZERS);
- `support(setting, eps)`: the exact set of reports it can output at eps, as a
  `Support` whose `reason(y)` is None for an output and an ingest reason
  otherwise (the fog's check);
- `sample(setting, eps, readings, rng)`: a vectorised exact sampler of its
  reports (numpy; for simulations and coverage runs, tested against the device
  randomizer);
- `report_variance(setting, eps, x)` and, for mean mechanisms, the exact pmf
  of one report (`report_pmf`, `report_values`);
- `estimate(by_level, setting, level)`: its unbiased estimator(s) with
  intervals, from the mechanism's public parameters (never from a device
  randomizer), as `Estimates`.

`Setting` carries the public parameters a mechanism reads (the control
message's range, grid, precision, on_above and bands).
"""

from __future__ import annotations

from typing import Any

import functools
import math
from dataclasses import dataclass, field

from rase_device.randomizer import Calibration
from rase_device.report_kind import DEFAULT_BANDS, DEFAULT_ON_ABOVE

# Ingest reasons a Support gives (fog_shuffler.ingest.REASONS holds them).
IMPOSSIBLE = "impossible_y"    # not a report the mechanism can output at this eps
IMPLAUSIBLE = "implausible_y"  # an output, but beyond the stated tail (BR without clamping)

# How a device's float report may differ from the exact rational it stands for.
# The device computes a report from exact integers and the control message's
# numbers with at most 8 float operations (conversions, a product, a quotient,
# a sum), each rounding by at most 2^-24 relative on a board with 32-bit floats
# (2^-53 on CPython), and MicroPython prints a 32-bit float with 7 significant
# digits (within 2^-24 again). So |y - exact| <= 9 * 2^-24 * S for the
# magnitudes S involved; the check allows 2^-18 * S (7x that), and never more
# than a quarter of the spacing between two outputs, so a near miss between
# two outputs is never taken for either.
FLOAT_TOLERANCE = 2.0 ** -18


def float_tolerance(scale: float, spacing: float = math.inf) -> float:
    return min(FLOAT_TOLERANCE * scale, spacing / 4)


@functools.lru_cache(maxsize=64)
def z_quantile(level: float) -> float:
    """The standard normal quantile at 1/2 + level/2 (1.96 for 0.95)."""
    from scipy import stats

    if not 0 < level < 1:
        raise ValueError(f"confidence level must be in (0, 1), got {level!r}")
    return float(stats.norm.ppf(0.5 + level / 2))


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its interval at the aggregate's level.

    method: how the interval was made (see docs/mechanisms.md, "Intervals");
    var: the variance of `value` (exact, or an upper bound where the readings
    leave it unknown), unclipped, so that windowed averages can combine it."""
    value: float
    lo: float
    hi: float
    n: int
    method: str = ""
    var: float | None = None

    def as_dict(self) -> dict:
        return {"value": self.value, "ci": [self.lo, self.hi], "n": self.n, "method": self.method}


@dataclass(frozen=True)
class Setting:
    """The public parameters a mechanism reads: the control message's range
    and grid (x_min, x_max, gamma), BR's precision (beta, rho), the binary
    threshold and the categorical band edges."""
    x_min: float = 0.0
    x_max: float = 4000.0
    gamma: float = 1.0
    beta: float = 0.5
    rho: float = 0.9
    on_above: float = DEFAULT_ON_ABOVE
    bands: tuple[float, ...] = tuple(DEFAULT_BANDS)

    @classmethod
    def of(cls, obj) -> "Setting":
        """From anything with these attributes (a ControlMessage, the fog's
        protocol parameters); missing ones take the defaults."""
        kw = {f: getattr(obj, f) for f in ("x_min", "x_max", "gamma", "beta", "rho", "on_above") if hasattr(obj, f)}
        if hasattr(obj, "bands"):
            kw["bands"] = tuple(float(b) for b in obj.bands)
        return cls(**kw)

    @functools.cached_property
    def calibration(self) -> Calibration:
        return Calibration(beta=self.beta, rho=self.rho, x_min=self.x_min, x_max=self.x_max, gamma=self.gamma)

    @property
    def categories(self) -> int:
        return len(self.bands) + 1


@dataclass(frozen=True)
class Estimates:
    """What a mechanism's estimator publishes for one timestamp."""
    named: dict[str, Estimate]                      # e.g. {"mean": ...} or {"count": ..., "mean": ...}
    meaning: dict[str, str]                         # what each published estimate estimates
    frequencies: list[Estimate] = field(default_factory=list)   # categorical: one per band
    clamped: bool = False                           # BR: some reports came from the clamp branch
    share_at_bound: float = 0.0                     # BR: share of reports exactly at x_min or x_max


class Support:
    """The reports a mechanism can output at one eps level."""

    def reason(self, y: float) -> str | None:
        """None when y is an output, else the ingest reason."""
        raise NotImplementedError


class Mechanism:
    """The server half of one mechanism (module docstring: what it provides)."""
    name: str = ""
    output: str = ""               # what aggregates publish: "mean", "count" or "frequencies"
    # The paper's estimators published beside the mechanism's own ("bs", "se", "mle"; fusion_center.ldp.merge).
    extras: tuple[str, ...] = ()
    # The roles that serve the mechanism in each service (rase_common.role): named, not imported,
    # so the registry stays below the services. Every local-DP mechanism shares one pair.
    fog_role: str = "fog_shuffler.ldp.role:LdpReports"
    fusion_role: str = "fusion_center.ldp.role:LdpEstimation"
    # The protocol fields a party serving this mechanism keeps as its own config says, refusing a
    # control message that states others (the secure mode: either party may lie, docs/privacy.md 7).
    own_fields: tuple[str, ...] = ()

    def central_eps0(self, eps: float, delta: float, devices: int) -> float:
        """The eps per report whose `devices` uniformly shuffled reports are central (eps, delta)-DP
        (the fusion center's [central_target]); ValueError where the mechanism has no such bound."""
        raise ValueError(f"central_target needs a mechanism whose shuffled reports amplify to a central "
                         f"(eps, delta) by a bound RASE implements (binary), not {self.name}")

    def params_of(self, msg: dict) -> Any:
        """The mechanism's own table of a parsed control message (the secure mode's prio3 params), or None."""
        return None

    def randomizer(self, setting: Setting, bits=None):
        from rase_device.mechanisms import make_randomizer

        return make_randomizer(self.name, setting.calibration, bits, setting.on_above, list(setting.bands))

    def support(self, setting: Setting, eps: float) -> Support:
        raise NotImplementedError

    def sample(self, setting: Setting, eps: float, readings, rng):
        raise NotImplementedError

    def report_variance(self, setting: Setting, eps: float, x: float) -> float:
        """Variance of one report's unbiased value for reading x (a count's or
        a band's indicator for binary and categorical)."""
        return float(self.report_variances(setting, eps, [x])[0])

    def report_variances(self, setting: Setting, eps: float, x):
        """report_variance for an array of readings."""
        raise NotImplementedError

    def plausibility(self, setting: Setting, eps: float) -> tuple:
        """What an honest device's reports can look like at eps, for the fog's
        attacker detection: a tuple of rase_common.mechanisms.plausibility.PlausibilityTest."""
        raise NotImplementedError

    def unbiased_values(self, reports, eps: float, setting: Setting):
        """Each report mapped to a value whose expectation is the reading (for
        a bootstrap of the mean): the report itself unless the mechanism says otherwise."""
        return reports

    def estimate(self, by_level: dict, setting: Setting, level: float = 0.95) -> Estimates:
        raise NotImplementedError
