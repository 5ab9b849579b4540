"""FusionConfig: `rase fusion --config configs/fusion.example.toml` (RASE_FUSION_... overrides)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from rase_device import wire
from rase_common.mechanisms import DEFAULT_MECHANISM, mechanism
from rase_common.privacy import UnitPrivacy, as_unit, eps_from_day
from rase_common.protocol.control import ControlMessage
from rase_common.kafka import KafkaConfig
from rase_common.mqtt import BrokerConfig
from rase_common.role import role_classes
from rase_common.settings import TomlSettings, with_role_tables


class CentralTarget(BaseModel):
    """For the binary mechanism: the central (eps, delta) each shuffled window
    of `devices` reports must meet. The fusion center then broadcasts the
    eps per report (and so the flip probability) that meets it, by the
    numerical FMT bound (the mechanism's central_eps0), as the
    shuffle-DP notes choose p. It holds for windows shuffled uniformly with
    at least `devices` reports."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    eps: float = Field(gt=0, le=20)
    delta: float = Field(1e-6, gt=0, lt=0.01)
    devices: int = Field(ge=2, le=10_000_000)


class ClippingConfig(BaseModel):
    """A bound on how far the mean of the clipped readings can fall below the
    true mean (W), from `rase calibrate` (it writes this table with x_max).
    Every aggregate's mean interval is widened upwards by it."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    bias_bound_w: float = Field(ge=0)


class _FusionConfig(TomlSettings):
    model_config = SettingsConfigDict(env_prefix="RASE_FUSION_", env_nested_delimiter="__", extra="forbid",
                                      frozen=True)

    name: str = "fusion1"                 # MQTT client id fusion-<name> (persistent session)
    # The regions whose windows this fusion center accepts (and waits for per
    # t). A window for any other region is quarantined (unknown_region): one
    # fog credential must not be able to add a region.
    regions: list[str]
    merge_deadline_s: float = Field(16.0, ge=0)   # close t this long after its first window
    # A change of [precision] period_s or epoch0 takes effect at the new
    # schedule's first boundary this many (longer) periods from now, announced
    # in the control message meanwhile (rase_device.schedule).
    schedule_lead_periods: int = Field(4, ge=1)
    # Late batches from the fog (reports that came after their window closed)
    # revise an aggregate for this long after its t; keep it at least the
    # fogs' allowed_lateness_s.
    revise_for_s: float = Field(900.0, ge=0)
    # A window for a t further than this behind the fusion center's clock (a
    # backlog after downtime is fine), or more than two periods ahead of it,
    # is quarantined (t_implausible): a forged window cannot plant a future
    # aggregate or resurrect an ancient one.
    max_window_age_s: float = Field(86400.0, gt=0)
    level: float = Field(0.95, gt=0, lt=1)
    bootstrap_b: int = Field(1000, ge=2)
    windows_w: list[int] = [8, 64]        # windowed averages over the last w timestamps
    store_path: Path = Path("var/fusion.sqlite")
    metrics_port: int | None = Field(None, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"       # 0.0.0.0 in a container
    tick_s: float = Field(0.05, gt=0)
    speedup: float = Field(1.0, gt=0)
    # Simulated clocks only: (simulated unix time, the wall-clock unix time it reads it at), as the fog's.
    sim_clock_anchor: tuple[float, float] | None = None
    precision: ControlMessage = ControlMessage()
    # binary only: sets precision.eps_levels. Claimed per aggregate only where every window was uniformly
    # shuffled and states a central eps within it (fusion_center.ldp.context): a Mallows fog cannot deliver it.
    central_target: CentralTarget | None = None
    clipping: ClippingConfig | None = None
    broker: BrokerConfig = BrokerConfig()
    source: Literal["mqtt", "kafka"] = "mqtt"   # where windows come from
    # Subscribers (docs/subscribers.md): the retained rase/v1/aggregates/latest
    # expires (MQTT 5 message expiry) this many periods after it was published,
    # so a dead fusion center's last number does not live on; Home Assistant's
    # sensors go unavailable after as long.
    latest_expiry_periods: int = Field(4, ge=1)
    home_assistant_discovery: bool = True       # a retained device config on <discovery_prefix>/device/...
    discovery_prefix: str = "homeassistant"
    kafka: KafkaConfig = KafkaConfig()
    # The privacy unit and its daily budget (issue 28): with eps_day, [precision] eps_levels (and
    # prio3.dp_eps) are computed from it over the day's releases; without it, event-level (labelled).
    privacy: UnitPrivacy = UnitPrivacy()
    # Each role's own table (the secure mode's helper: [prio3]) is a field too, added from the
    # registry's roles below (rase_common.settings.with_role_tables).

    @model_validator(mode="before")
    @classmethod
    def _eps_from_day(cls, data: Any) -> Any:
        """[precision] eps_levels (and the mechanism's own eps) from [privacy] eps_day over the day's releases."""
        if not isinstance(data, dict):
            return data
        raw = data.get("precision", {})
        raw = raw.model_dump(exclude_unset=True) if isinstance(raw, BaseModel) else dict(raw)
        unit = as_unit(data.get("privacy"))
        if unit is not None and unit.event_level:          # the per-report stream: an explicit choice
            return {**data, "precision": ControlMessage.per_report(raw)}
        eps = eps_from_day(data.get("privacy"), ControlMessage.window_seconds_of(raw))
        return data if eps is None else {**data, "precision": ControlMessage.with_eps_per_report(raw, eps)}

    @model_validator(mode="after")
    def _roles(self) -> "_FusionConfig":
        for cls in role_classes("fusion"):
            cls.check_config(self)
        return self

    @model_validator(mode="before")
    @classmethod
    def _central_target(cls, data: Any) -> Any:
        target = data.get("central_target") if isinstance(data, dict) else None
        if target is None:
            return data
        t = target if isinstance(target, CentralTarget) else CentralTarget.model_validate(target)
        prec = data.get("precision", {})
        prec = prec.model_dump() if isinstance(prec, ControlMessage) else dict(prec)
        prec["eps_levels"] = [mechanism(prec.get("mechanism", DEFAULT_MECHANISM)).central_eps0(t.eps, t.delta,
                                                                                               t.devices)]
        return {**data, "precision": prec}

    @field_validator("regions")
    @classmethod
    def _regions(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one region: windows of regions not listed are refused")
        for r in v:
            wire.check_name("region", r)
        return v

    @field_validator("windows_w")
    @classmethod
    def _ws(cls, v: list[int]) -> list[int]:
        if any(w < 1 for w in v):
            raise ValueError("windows_w entries must be >= 1")
        return sorted(set(v))


if TYPE_CHECKING:
    FusionConfig = _FusionConfig
else:
    FusionConfig = with_role_tables(_FusionConfig, "fusion", __name__)
