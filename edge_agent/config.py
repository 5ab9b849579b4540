"""AgentConfig: the CPython agent's and the board bundle's configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from rase_device import wire
from rase_device.mechanisms import DEFAULT_MECHANISM, check_mechanism
from rase_device.randomizer import Calibration
from rase_common.mqtt import BrokerConfig
from rase_common.protocol.control import ControlPolicy
from rase_common.settings import TomlSettings


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
    """Where readings come from (edge_agent.sources): an importable callable,
    a recorded CSV trace, or a REFIT replay (a simulator: `rase agent` builds it)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["callable", "csv", "refit"]
    callable: str | None = None         # callable: "package.module:function", called with no arguments
    path: Path | None = None            # csv: the trace file (plain or .gz)
    column: str | None = None           # csv: the value column
    time_column: str = "Unix"           # csv: Unix seconds
    data_dir: Path | None = None        # refit: default the bundled excerpt
    house: int = 1                      # refit
    appliance: int = Field(1, ge=0, le=9)   # refit: 0 = Aggregate
    replay_start_unix: float | None = None  # csv/refit: trace time shown at agent start; default its first row

    @model_validator(mode="after")
    def _complete(self) -> "SourceConfig":
        if self.kind == "callable" and not (self.callable and ":" in self.callable):
            raise ValueError("source.callable must be 'module:function' when kind = 'callable'")
        if self.kind == "csv" and not (self.path and self.column):
            raise ValueError("source.path and source.column are needed when kind = 'csv'")
        return self


class BoardConfig(BaseModel):
    """What only a flashed board needs (rase_device/board.py): network, time,
    safety nets and console output. Written into /rase_config.json."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    wifi_ssid: str | None = None           # unset: wired, or the firmware brings the network up
    wifi_password: str | None = None
    wifi_timeout_s: float = Field(20.0, gt=0, le=300)
    ntp: bool = True                       # no reports until the clock is set by NTP
    ntp_host: str = "pool.ntp.org"
    ntp_retry_s: float = Field(300.0, gt=0)
    ntp_resync_s: float = Field(86400.0, gt=0)
    watchdog_s: float = Field(0.0, ge=0, le=8388)   # machine.WDT timeout; 0 = off (ESP32 caps ~8388 s)
    reset_after_failures: int = Field(0, ge=0)     # machine.reset() after this many link failures; 0 = never
    status_every_reports: int = Field(100, ge=0)   # console status line; 0 = never
    # The bound on one blocking socket step (connect, TLS, CONNACK, PUBACK);
    # the board also keeps it under a third of watchdog_s and half a period.
    link_timeout_s: float = Field(5.0, gt=0, le=60)
    # The DNS server the board asks (bounded by link_timeout_s); default: the one DHCP gave Wi-Fi.
    dns_server: str | None = Field(None, pattern=r"^\d{1,3}(\.\d{1,3}){3}(:\d{1,5})?$")

    @model_validator(mode="after")
    def _watchdog_outlasts_a_blocking_call(self) -> "BoardConfig":
        # The loop feeds the watchdog before every socket step (each bounded
        # by link_timeout_s, at most watchdog_s / 3) and every 0.25 s of a
        # Wi-Fi join; 15 s leaves room for a slow sensor read and a flash write.
        if self.watchdog_s and self.watchdog_s < 15:
            raise ValueError(f"board.watchdog_s must be 0 (off) or >= 15 s, got {self.watchdog_s}")
        return self


class PrivacyConfig(BaseModel):
    """The privacy unit this device belongs to and the unit's budget per UTC
    day (docs/privacy.md, issue 28). `unit = "device"`: the device is the unit;
    `"household"`: the device is one of a household's devices (or its one
    whole-house meter), and `share` is its part of the household's eps_day.
    The ledger then allows eps_day x share per day, renewed at midnight UTC,
    and refuses the report that would overspend it in every mode.

    With `event_level = true` (`rase agent --event-level`), or without
    eps_day, the device is **event-level**: each report is eps-DP on its own
    and the ledger (budget_eps per budget_period_s) is only a cap against
    runaway devices, not a daily guarantee; its status says so."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    unit: Literal["device", "household"] = "device"
    household: str | None = None          # the household's name (default: this device's id)
    eps_day: float | None = Field(None, gt=0, le=1000)
    share: float = Field(1.0, gt=0, le=1)
    event_level: bool = False

    @property
    def enforced(self) -> bool:
        return self.eps_day is not None and not self.event_level

    @field_validator("household")
    @classmethod
    def _topic_safe(cls, v: str | None) -> str | None:
        return None if v is None else wire.check_name("household", v)

    @model_validator(mode="after")
    def _unit(self) -> "PrivacyConfig":
        if self.unit == "device" and (self.household is not None or self.share != 1.0):
            raise ValueError("privacy.household and privacy.share are for unit = \"household\"")
        if self.eps_day is None and self.share != 1.0 and not self.event_level:
            raise ValueError("privacy.share splits an eps_day: set privacy.eps_day")
        return self

    def device_dict(self, device: str) -> dict:
        """What the device core keeps (rase_device.core.AgentCore.privacy)."""
        return {"unit": self.unit, "household": self.household or device,
                "eps_day": self.eps_day if self.enforced else None, "share": self.share}


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
    # Each report is kept until the fog's receipt says it journaled it (rase_device.outbox), and handed
    # to the broker again after a reconnect or this long without one (doubling, at most 300 s). 0: kept
    # only until the broker's PUBACK (a fog with receipt_every_s = 0 sends none).
    confirm_timeout_s: float = Field(30.0, ge=0, le=300)
    max_inflight: int = Field(100, ge=1, le=60000)
    calibration: CalibrationConfig = CalibrationConfig()
    # Randomizer until the fusion center's control message names one:
    # "br" (the paper's BR), "duchi", "piecewise" or "hybrid"; "prio3" (secure
    # aggregation) reports nothing until the control message names its kind.
    mechanism: str = DEFAULT_MECHANISM
    broker: BrokerConfig = BrokerConfig()
    source: SourceConfig | None = None     # required to run (edge_agent.sources); boards read `sensor.py`
    policy: ControlPolicy = ControlPolicy()
    board: BoardConfig = BoardConfig()
    # The unit and its daily budget; without [privacy] eps_day the device is event-level (budget_eps a cap).
    privacy: PrivacyConfig = PrivacyConfig()

    @model_validator(mode="after")
    def _one_budget(self) -> "AgentConfig":
        if self.privacy.enforced and {"budget_eps", "budget_period_s"} & self.model_fields_set:
            raise ValueError("privacy.eps_day sets the ledger's budget (eps_day x share per UTC day): "
                             "leave budget_eps and budget_period_s out")
        return self

    def ledger_budget(self) -> tuple[float, float]:
        """(eps, per seconds) the device's ledger allows: the unit's daily share, or the event-level cap."""
        if self.privacy.enforced:
            assert self.privacy.eps_day is not None
            return self.privacy.eps_day * self.privacy.share, 86400.0
        return self.budget_eps, self.budget_period_s

    @field_validator("mechanism")
    @classmethod
    def _known_mechanism(cls, v: str) -> str:
        return check_mechanism(v)

    @field_validator("device", "region")
    @classmethod
    def _topic_safe(cls, v: str, info) -> str:  # noqa: ANN001
        return wire.check_name(info.field_name, v)

    def device_dict(self) -> dict:
        """The JSON config a board reads from /rase_config.json."""
        return {
            "device": self.device, "region": self.region, "eps": self.eps,
            "budget_eps": self.ledger_budget()[0], "budget_period_s": self.ledger_budget()[1],
            "privacy": self.privacy.device_dict(self.device),
            "period_s": self.period_s, "epoch0": self.epoch0,
            "ledger_path": "rase_ledger.json",   # beside main.py, in the board's root folder
            "outbox_capacity": min(self.outbox_capacity, 64), "confirm_timeout_s": self.confirm_timeout_s,
            "ledger_reserve_reports": self.board_ledger_reserve_reports,
            "calibration": self.calibration.model_dump(), "mechanism": self.mechanism,
            "broker": {"host": self.broker.host, "port": self.broker.port, "user": self.broker.username,
                       "password": self.broker.password, "tls": self.broker.tls,
                       "keepalive_s": self.broker.keepalive_s},
            "sensor": "sensor:read",
            "board": self.board.model_dump(),
            "policy": self.policy.resolved(self.period_s),
        }
