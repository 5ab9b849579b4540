"""AgentConfig: the CPython agent's and the board bundle's configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from edge_agent import wire
from edge_agent.randomizer import Calibration
from rase.mqtt import BrokerConfig
from rase.settings import TomlSettings


class CalibrationConfig(BaseModel):
    """Local precision and range; replaced by the retained control message."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    beta: float = 0.5
    rho: float = 0.9
    x_min: float = 0.0
    x_max: float = 4000.0
    gamma: float = 1.0

    @model_validator(mode="after")
    def _valid(self) -> "CalibrationConfig":
        # One set of rules: the device core's own constructor.
        self.build()
        return self

    def build(self) -> Calibration:
        return Calibration(beta=self.beta, rho=self.rho, x_min=self.x_min, x_max=self.x_max, gamma=self.gamma)


class SourceConfig(BaseModel):
    """Where readings come from: a REFIT column replay or an importable callable."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["refit", "callable"] = "refit"
    data_dir: Path | None = None       # default: the bundled excerpt
    house: int = 1
    appliance: int = Field(1, ge=0, le=9)   # 0 = Aggregate
    replay_start_unix: float | None = None  # REFIT time shown at agent start; default first row
    callable: str | None = None         # "package.module:function", called with no arguments

    @model_validator(mode="after")
    def _callable_named(self) -> "SourceConfig":
        if self.kind == "callable" and not (self.callable and ":" in self.callable):
            raise ValueError("source.callable must be 'module:function' when kind = 'callable'")
        return self


class AgentConfig(TomlSettings):
    model_config = SettingsConfigDict(env_prefix="RASE_AGENT_", env_nested_delimiter="__", extra="forbid", frozen=True)

    device: str
    region: str = "r1"
    eps: float = Field(1.0, gt=0, le=10)
    budget_eps: float = Field(20000.0, gt=0)
    budget_period_s: float = Field(86400.0, gt=0)
    period_s: float = Field(8.0, gt=0)
    epoch0: float = 0.0
    speedup: float = Field(1.0, gt=0)
    ledger_path: Path = Path("var/ledger.json")
    # Budget reserved (and written to the ledger file) per this many reports;
    # a reboot loses at most one unused block. Boards default to 16 to spare flash.
    ledger_reserve_reports: int = Field(1, ge=1, le=1000)
    board_ledger_reserve_reports: int = Field(16, ge=1, le=1000)
    outbox_capacity: int = Field(10000, ge=1)
    max_inflight: int = Field(100, ge=1, le=60000)
    calibration: CalibrationConfig = CalibrationConfig()
    broker: BrokerConfig = BrokerConfig()
    source: SourceConfig = SourceConfig()

    @field_validator("device", "region")
    @classmethod
    def _topic_safe(cls, v: str, info) -> str:  # noqa: ANN001
        return wire.check_name(info.field_name, v)

    def device_dict(self) -> dict:
        """The JSON config a board reads from /rase_config.json."""
        return {
            "device": self.device, "region": self.region, "eps": self.eps,
            "budget_eps": self.budget_eps, "budget_period_s": self.budget_period_s,
            "period_s": self.period_s, "epoch0": self.epoch0,
            "ledger_path": "/rase_ledger.json", "outbox_capacity": min(self.outbox_capacity, 64),
            "ledger_reserve_reports": self.board_ledger_reserve_reports,
            "calibration": self.calibration.model_dump(),
            "broker": {"host": self.broker.host, "port": self.broker.port, "user": self.broker.username,
                       "password": self.broker.password, "tls": self.broker.tls,
                       "keepalive_s": self.broker.keepalive_s},
            "sensor": "sensor:read",
        }
