"""FogConfig: `rase fog --config configs/fog.example.toml` (RASE_FOG_... overrides)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from rase_device import wire
from rase_device.mechanisms import DEFAULT_MECHANISM, check_mechanism
from rase_device.report_kind import DEFAULT_BANDS, DEFAULT_ON_ABOVE, check_bands
from rase_device.randomizer import check_finite
from fog_shuffler.shuffle.relationship import RelationshipGraph
from fog_shuffler.shuffle.robust_shuffler import PROTECTIVE_ALPHA, PROTECTIVE_DELTA_MAX_FACTOR, ShuffleParams
from rase_common.kafka import KafkaConfig
from rase_common.mqtt import BrokerConfig
from rase_common.privacy import UnitPrivacy, as_unit, eps_from_day, stated_or
from rase_common.protocol.control import ControlPolicy
from rase_common.role import role_classes
from rase_common.settings import TomlSettings, with_role_tables

REFIT_APPLIANCES = 9


def _raw(table: object) -> dict:
    return table.model_dump(exclude_unset=True) if isinstance(table, BaseModel) else dict(table)  # type: ignore[call-overload]


class RegionConfig(BaseModel):
    """Devices registered for a region and their public relationship graph.
    Devices are the union of `devices`, group members, edge ends and, for
    each REFIT house listed, h{house}a1..h{house}a9 (one group per house)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    devices: list[str] = []
    groups: list[list[str]] = []
    edges: list[tuple[str, str]] = []
    refit_houses: list[int] = []
    refit_clones: int = Field(1, ge=1)   # simulator fleets: copies h{h}c{c}a{K}
    # Each REFIT house (clone) as its whole-house meter h{h}agg (h{h}c{c}agg) instead of its nine appliances.
    refit_meters: bool = False
    # The privacy unit "household" (issue 28): named groups of devices. A REFIT house's appliances (or
    # its meter) are household h{h} (h{h}c{c}); a device in no household is its own.
    households: dict[str, list[str]] = {}

    def _refit_houses(self) -> list[tuple[str, list[str]]]:
        """(household name, its devices) of each REFIT house and clone listed."""
        out = []
        for h in self.refit_houses:
            for c in range(self.refit_clones):
                prefix = f"h{h}" if self.refit_clones == 1 else f"h{h}c{c}"
                devices = [f"{prefix}agg"] if self.refit_meters else [f"{prefix}a{k}" for k in
                                                                          range(1, REFIT_APPLIANCES + 1)]
                out.append((prefix, devices))
        return out

    def all_groups(self) -> list[list[str]]:
        out = [list(g) for g in self.groups]
        if not self.refit_meters:
            out += [devices for _, devices in self._refit_houses()]
        return out

    def household_of(self) -> dict[str, str]:
        """device -> its household's name, for every device in one."""
        out = {d: name for name, devices in self._refit_houses() for d in devices}
        for name, devices in self.households.items():
            out.update({d: name for d in devices})
        return out

    def all_devices(self) -> set[str]:
        devs = set(self.devices)
        for g in self.all_groups():
            devs.update(g)
        for a, b in self.edges:
            devs.update((a, b))
        for _, devices in self._refit_houses():
            devs.update(devices)
        for devices in self.households.values():
            devs.update(devices)
        return devs

    def graph(self) -> RelationshipGraph:
        return RelationshipGraph(groups=self.all_groups(), edges=self.edges)

    @model_validator(mode="after")
    def _names(self) -> "RegionConfig":
        devices = self.all_devices()
        for d in devices:
            wire.check_name("device", d)
        seen: dict[str, str] = {}
        for name, members in [*self._refit_houses(), *self.households.items()]:
            wire.check_name("household", name)
            if name in devices and name not in members:
                raise ValueError(f"household {name} has the name of another device (a device in no household "
                                 "is its own household)")
            for d in members:
                if seen.get(d, name) != name:
                    raise ValueError(f"device {d} is in households {seen[d]} and {name}")
                seen[d] = name
        return self


class ShufflerConfig(BaseModel):
    """Defaults are protective, chosen from evidence (docs/evaluation.md, alpha x
    group size sweep): alpha 2 and Mallows for Delta_K in [alpha, 20 alpha], so a
    REFIT house (Delta_K 36) is shuffled with theta = 0.056 and the sender is
    within 1.2x of chance. The papers' setting is alpha = 30, delta_max_factor = 10."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    alpha: float = Field(PROTECTIVE_ALPHA, gt=0)
    delta_min_factor: float = Field(1.0, gt=0)    # Mallows when min*alpha <= Delta_K <= max*alpha
    delta_max_factor: float = Field(PROTECTIVE_DELTA_MAX_FACTOR, gt=0)
    k: int | None = Field(None, ge=1)
    group_size: int | None = Field(9, ge=1)
    # "rs" (RASE's RS), "dsigma" (Meehan Alg. 1 alone), "buds" (BUDS's
    # iterative shuffling: batches of about buds_batch_size over sigma_0, each
    # shuffled uniformly; the window states the amplification of its smallest batch),
    # "uniform" (every window uniformly: amplification by shuffling, no group-level order).
    shuffle_mode: Literal["rs", "dsigma", "buds", "uniform"] = "rs"
    buds_batch_size: int = Field(32, ge=2)

    @model_validator(mode="after")
    def _valid(self) -> "ShufflerConfig":
        self.params()
        return self

    def params(self) -> ShuffleParams:
        return ShuffleParams(alpha=self.alpha, delta_min_factor=self.delta_min_factor,
                             delta_max_factor=self.delta_max_factor, k=self.k,
                             group_size=None if self.k is not None else self.group_size,
                             mode=self.shuffle_mode, buds_batch_size=self.buds_batch_size)


class DetectionConfig(BaseModel):
    """Attacker detection (fog_shuffler.screen.detection): each device's reports are
    tested against what an honest device could send for any reading in the
    range; a device that fails is quarantined until `rase fog release`."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool = True
    # The chance an honest device is quarantined on a given day (sets the test's threshold).
    false_alarm_per_device_day: float = Field(1e-6, gt=0, le=0.01)
    # The statistics are journaled this often (alarms always with their batch); a crash loses
    # at most this long's evidence. 0: with every batch (3-5 us more per report).
    checkpoint_s: float = Field(5.0, ge=0, le=3600)


class FogCentralTarget(BaseModel):
    """This fog must deliver a central (eps, delta) by amplification (the fusion
    center's [central_target]): only a uniform shuffle amplifies, so the fog
    refuses to start otherwise. Whether a window met it (its n and eps) is
    stated in the window and checked by the fusion center."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    eps: float = Field(gt=0, le=20)
    delta: float = Field(1e-6, gt=0, lt=0.01)


class _FogConfig(TomlSettings):
    model_config = SettingsConfigDict(env_prefix="RASE_FOG_", env_nested_delimiter="__", extra="forbid", frozen=True)

    name: str = "fog1"                  # MQTT client id fog-{name}: a fixed id keeps the broker session
    regions: dict[str, RegionConfig]
    period_s: float = Field(8.0, gt=0)
    epoch0: float = 0.0
    # An interval product (issue 28): one report per device and one window per interval_s, until the
    # control message says otherwise (the secure mode's leader: its [prio3.params] interval_s, its own).
    interval_s: float | None = Field(None, gt=0, le=86400)
    speedup: float = Field(1.0, gt=0)   # simulated clocks only
    # Simulated clocks only: (simulated unix time, the wall-clock unix time it reads it at); every
    # process given the same anchor reads the same simulated time (None: it starts at the wall clock).
    sim_clock_anchor: tuple[float, float] | None = None
    lateness_periods: int = Field(1, ge=0)     # a window closes this many periods after its t ends
    # Late data: a report whose window closed, within this long after its t
    # ended, goes into a late batch for that t (forwarded once it has k_min
    # reports; the fusion center publishes a revised aggregate). Minutes, so a
    # device's outbox can deliver what it queued through a broker outage.
    allowed_lateness_s: float = Field(600.0, ge=0)
    k_min: int = Field(10, ge=1)
    eps_levels: list[float] = [1.0]
    x_min: float = 0.0
    x_max: float = Field(4000.0, gt=0)
    # What the devices report until the control message says otherwise (it owns these):
    # a mean mechanism, or "binary" (on/off above on_above) / "categorical" (band among `bands`).
    device_mechanism: str = DEFAULT_MECHANISM
    on_above: float = DEFAULT_ON_ABOVE
    bands: list[float] = list(DEFAULT_BANDS)
    journal_path: Path = Path("var/fog.sqlite")
    metrics_port: int | None = Field(None, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"       # 0.0.0.0 in a container
    tick_s: float = Field(0.05, gt=0)   # a manual (simulated) clock is looked at this often
    # Windows closed but not yet forwarded (the sink is slow or down). At this
    # many the fog stops taking reports from the broker, which holds them;
    # journaled reports and windows are never dropped.
    outbox_max_windows: int = Field(1000, ge=1)
    # End-to-end receipts (fog_shuffler.receipts): after the commit that journals a report the device
    # hears so on its feedback topic, batched this often; devices keep each report until then. 0: none.
    receipt_every_s: float = Field(0.25, ge=0)
    # A forwarded window stays unconfirmed until the fusion center's receipt (fog_shuffler.window_receipts),
    # and goes out again after this long without one (doubling, at most 300 s). 0: the PUBACK is enough.
    window_confirm_s: float = Field(10.0, ge=0, le=300)
    # What the fog accepts from the control message (as devices do): outside
    # these bounds it is refused whole and the fog keeps its parameters.
    control_policy: ControlPolicy = ControlPolicy()
    broker: BrokerConfig = BrokerConfig()
    shuffler: ShufflerConfig = ShufflerConfig()
    detection: DetectionConfig = DetectionConfig()
    central_target: FogCentralTarget | None = None
    privacy_delta: float = Field(1e-6, gt=0, lt=0.01)   # delta of the per-window amplification statement
    sink: Literal["mqtt", "kafka"] = "mqtt"   # where windows go: rase/v1/windows/{region} or Kafka
    kafka: KafkaConfig = KafkaConfig()
    # The privacy unit and its daily budget (issue 28): with eps_day the fog refuses (and counts) the
    # reports that would take a unit's devices together past it in a UTC day (fog_shuffler.budget), and
    # its own eps_levels (and [prio3.params] dp_eps) are computed from it; without it, event-level.
    privacy: UnitPrivacy = UnitPrivacy()
    # Each role's own table (the secure mode's leader: [prio3]) is a field too, added from the
    # registry's roles below (rase_common.settings.with_role_tables).

    @model_validator(mode="before")
    @classmethod
    def _eps_from_day(cls, data: Any) -> Any:
        """eps_levels (and each role's own eps) from [privacy] eps_day over the day's releases: the
        interval's, or what a role's own table says one release covers (its product)."""
        if not isinstance(data, dict) or data.get("privacy") is None:
            return data
        tables_all = [role for role in role_classes("fog") if role.config_key and data.get(role.config_key)]
        unit = as_unit(data.get("privacy"))
        if unit is not None and unit.event_level:          # the per-report stream: an explicit choice
            out = {**data, "interval_s": None}
            for role in tables_all:
                out[role.config_key] = role.per_report(_raw(data[role.config_key]))
            return out
        period = float(data.get("period_s", 8.0))
        window = float(data.get("interval_s") or period)
        tables = {role.config_key: role for role in role_classes("fog") if role.config_key and
                  data.get(role.config_key) is not None}
        raw = {key: _raw(data[key]) for key in tables}
        for key, role in tables.items():
            window = role.own_window_s(raw[key], period) or window
        eps = eps_from_day(data.get("privacy"), window)
        if eps is None:
            return data
        out = {**data, "eps_levels": [stated_or("eps_levels", data.get("eps_levels"), eps)]}
        for key, role in tables.items():
            out[key] = role.with_eps_per_report(raw[key], eps)
        return out

    @field_validator("regions")
    @classmethod
    def _regions(cls, v: dict[str, RegionConfig]) -> dict[str, RegionConfig]:
        if not v:
            raise ValueError("at least one region is needed")
        seen: dict[str, str] = {}
        for region, rc in v.items():
            wire.check_name("region", region)
            for d in rc.all_devices():
                if d in seen:
                    raise ValueError(f"device {d} is registered in regions {seen[d]} and {region}")
                seen[d] = region
        return v

    @field_validator("eps_levels")
    @classmethod
    def _levels(cls, v: list[float]) -> list[float]:
        if not v or any(not (e > 0) for e in v):
            raise ValueError("eps_levels must be a non-empty list of numbers > 0")
        return sorted(set(v))

    @field_validator("device_mechanism")
    @classmethod
    def _mechanism(cls, v: str) -> str:
        return check_mechanism(v)

    @field_validator("bands")
    @classmethod
    def _bands(cls, v: list[float]) -> list[float]:
        return check_bands(list(v))

    @field_validator("on_above")
    @classmethod
    def _on_above(cls, v: float) -> float:
        return check_finite("on_above", v)

    @model_validator(mode="after")
    def _buds_batches(self) -> "_FogConfig":
        # A report hides among its BUDS batch only; batches of at least b/2 reports (buds_batches)
        # must not be smaller than the k_min that every forwarded window is held to.
        if self.shuffler.shuffle_mode == "buds" and self.shuffler.buds_batch_size < 2 * self.k_min:
            raise ValueError(f"shuffler.buds_batch_size must be >= 2 x k_min = {2 * self.k_min} (a batch can be "
                             f"half the batch size), got {self.shuffler.buds_batch_size}")
        return self

    def late_periods(self) -> int:
        return int(math.ceil(self.allowed_lateness_s / self.period_s))

    @model_validator(mode="after")
    def _central_target(self) -> "_FogConfig":
        if self.central_target is not None and self.shuffler.shuffle_mode != "uniform":
            raise ValueError(f"central_target: this fog cannot deliver a central eps with shuffler.shuffle_mode = "
                             f"\"{self.shuffler.shuffle_mode}\" (Mallows windows carry d_sigma privacy, not "
                             f"amplification by shuffling); set shuffle_mode = \"uniform\"")
        return self

    @model_validator(mode="after")
    def _roles(self) -> "_FogConfig":
        for cls in role_classes("fog"):
            cls.check_config(self)
        return self

    @model_validator(mode="after")
    def _range(self) -> "_FogConfig":
        if not self.x_min < self.x_max:
            raise ValueError(f"x_min must be < x_max, got {self.x_min} and {self.x_max}")
        return self


if TYPE_CHECKING:
    FogConfig = _FogConfig
else:
    FogConfig = with_role_tables(_FogConfig, "fog", __name__)
