"""The control message: rase/v1/control/precision (retained), published by
the fusion center. It is the one source of truth for the protocol parameters
(period, epoch0, range, grid, eps menu, mechanism): devices calibrate against
it (they parse it on the device with rase_device.wire.parse_control, tested
against this model) and the fog follows it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rase_device.interval import check_interval
from rase_device.mechanisms import ALL_MECHANISMS, DEFAULT_MECHANISM, MEAN_MECHANISMS, check_mechanism
from rase_common.privacy import stated_or
from rase_common.protocol.prio3 import Prio3Params
from rase_device.report_kind import DEFAULT_BANDS, DEFAULT_ON_ABOVE, check_bands
from rase_device.policy import LocalPolicy
from rase_device.randomizer import Calibration, check_finite
from rase_device.schedule import Schedule
from rase_device.secagg import product_period_s


class ControlMessage(BaseModel):
    """rase/v1/control/precision (retained): what agents calibrate against."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    v: Literal[1] = 1
    beta: float = 0.5
    rho: float = 0.9
    x_min: float = 0.0
    x_max: float = 4000.0
    gamma: float = 1.0
    period_s: float = Field(8.0, gt=0)
    epoch0: float = 0.0
    # A change of schedule (rase_device.schedule): this one applies from t =
    # since_t on, the previous one before; t runs on without a gap.
    since_t: int | None = Field(None, ge=0)
    previous_period_s: float | None = Field(None, gt=0)
    previous_epoch0: float | None = None
    eps_levels: list[float] = [1.0]
    # The device mechanism of the whole deployment (rase_device.mechanisms):
    # "duchi" (the default), "br" (the paper's BR), "piecewise", "hybrid" for the
    # mean; "binary" (on when the reading > on_above; randomized response) and
    # "categorical" (the reading's band among the `bands` edges; kRR or OUE).
    mechanism: str = DEFAULT_MECHANISM
    on_above: float = DEFAULT_ON_ABOVE
    bands: list[float] = list(DEFAULT_BANDS)
    # mechanism "prio3" (secure aggregation, docs/privacy.md): the report kind, the
    # product, eps per release and the key id of the helper key devices pinned.
    prio3: Prio3Params | None = None
    # An interval product (issue 28, rase_device.interval): devices sample every period_s and send one
    # report per interval_s, the clipped mean of its samples; windows and aggregates are intervals on
    # epoch0's grid. None: one report per period (the per-report, event-level stream). With prio3 it is
    # prio3.interval_s (product "interval").
    interval_s: float | None = Field(None, gt=0, le=86400)

    @model_validator(mode="after")
    def _valid(self) -> "ControlMessage":
        cal = self.calibration()  # the device's own rules, so both sides agree
        if (self.mechanism == "prio3") != (self.prio3 is not None):
            raise ValueError("prio3 is set exactly when mechanism is \"prio3\"")
        if self.interval_s is not None:
            check_interval(self.interval_s, self.period_s)
        if self.prio3 is not None:
            _check_prio3(self, cal.grid_max)
        elif self.interval_s is not None and self.mechanism not in MEAN_MECHANISMS:
            raise ValueError("interval_s averages readings: it needs a mean mechanism or prio3 sum")
        check_mechanism(self.mechanism)
        check_finite("on_above", self.on_above)
        check_bands(list(self.bands))
        if not self.eps_levels or any(not (e > 0) for e in self.eps_levels):
            raise ValueError("eps_levels must be a non-empty list of numbers > 0")
        self.schedule()     # since_t and the previous schedule come together and continue t
        return self

    def schedule(self) -> Schedule:
        """The reporting schedule this message states (t_of, start_of, end_of)."""
        if self.since_t is None and self.previous_period_s is None and self.previous_epoch0 is None:
            return Schedule(self.period_s, self.epoch0)
        if None in (self.since_t, self.previous_period_s, self.previous_epoch0):
            raise ValueError("since_t, previous_period_s and previous_epoch0 come together")
        return Schedule(self.period_s, self.epoch0, self.since_t,
                        Schedule(self.previous_period_s, self.previous_epoch0))

    @property
    def window_period_s(self) -> float:
        """What one window and one aggregate cover: the interval, a prio3 product's hour or day, or the period."""
        if self.prio3 is not None:
            return self.prio3.window_period_s(self.period_s)
        return self.interval_s or self.period_s

    def window_schedule(self) -> Schedule:
        """The windows' schedule: an interval product's (or prio3 product's)
        intervals on epoch0's grid, else the reporting schedule (piecewise
        across a schedule change)."""
        if self.window_period_s != self.period_s:
            return Schedule(self.window_period_s, self.epoch0)
        return self.schedule()

    @property
    def releases_per_day(self) -> float:
        return 86400.0 / self.window_period_s

    @staticmethod
    def window_seconds_of(raw: dict) -> float:
        """window_period_s of a raw (unvalidated) message: its prio3 product's, its interval_s, or its period."""
        prio3 = raw.get("prio3")
        prio3 = prio3.model_dump() if isinstance(prio3, BaseModel) else prio3
        period = float(raw.get("period_s", 8.0))
        if prio3:
            return float(product_period_s(prio3.get("product", "per-t"), period, prio3.get("interval_s")))
        return float(raw.get("interval_s") or period)

    @staticmethod
    def per_report(raw: dict) -> dict:
        """A raw message as the event-level stream: one report per period (no interval product)."""
        out = {**raw, "interval_s": None}
        prio3 = raw.get("prio3")
        if prio3:
            prio3 = dict(prio3.model_dump() if isinstance(prio3, BaseModel) else prio3)
            if prio3.get("product") == "interval":
                prio3.update(product="per-t", interval_s=None)
            out["prio3"] = prio3
        return out

    @staticmethod
    def with_eps_per_report(raw: dict, eps: float) -> dict:
        """A raw message with its eps menu (and prio3 dp_eps) set to eps (a party's own, from its daily
        budget: rase_common.privacy.eps_from_day); ValueError if it states another."""
        out = dict(raw)
        out["eps_levels"] = [stated_or("eps_levels", raw.get("eps_levels"), eps)]
        prio3 = raw.get("prio3")
        if prio3:
            prio3 = dict(prio3.model_dump() if isinstance(prio3, BaseModel) else prio3)
            prio3["dp_eps"] = stated_or("prio3.dp_eps", prio3.get("dp_eps"), eps)
            out["prio3"] = prio3
        return out

    def same_schedule_as(self, period_s: float, epoch0: float) -> bool:
        """Whether a config's period_s and epoch0 state this message's schedule
        (epoch0 only up to whole periods: rescheduling moves it)."""
        return self.period_s == period_s and ((self.epoch0 - epoch0) / period_s).is_integer()

    def rescheduled(self, period_s: float, epoch0: float, now: float, lead_s: float) -> "ControlMessage":
        """This message with a new schedule of period_s, its boundaries on
        epoch0's grid, taking over at its first boundary at least lead_s from
        now (so devices and the fog hear of it first), t continuing from the
        current schedule: since_t is the current t there, plus one."""
        current = self.schedule()
        earliest = max(now + lead_s, current.switch_unix() or now)
        switch = epoch0 + -((epoch0 - earliest) // period_s) * period_s      # first boundary >= earliest
        since = current.t_before(switch) + 1
        return ControlMessage(**{**self.model_dump(), "period_s": period_s, "epoch0": switch - since * period_s,
                                 "since_t": since, "previous_period_s": current.period_s,
                                 "previous_epoch0": current.epoch0})

    def calibration(self) -> Calibration:
        return Calibration(beta=self.beta, rho=self.rho, x_min=self.x_min, x_max=self.x_max, gamma=self.gamma)


class ControlPolicy(BaseModel):
    """A receiver's local policy over the control message (rase_device.policy,
    the one set of rules): a control message outside these bounds is refused
    whole, and the receiver keeps its parameters. Devices use it as `[policy]`
    (they also never use an eps level above their own `eps`), the fog as
    `[control_policy]`. period_min_s defaults to the receiver's own period."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    period_min_s: float | None = Field(None, gt=0)   # default: the receiver's own period_s
    period_max_s: float = Field(1e9, gt=0)
    x_min_floor: float = -1e9
    x_max_ceiling: float = 1e9
    gamma_min: float = Field(1e-6, gt=0)
    gamma_max: float = Field(1e9, gt=0)
    eps_min: float = Field(0.0, ge=0)
    eps_max: float = Field(1e9, gt=0)
    mechanisms: list[str] = list(ALL_MECHANISMS)
    # Secure aggregation (mechanism "prio3"): the fusion center's HPKE public key
    # (64 hex digits) and its key id, pinned when the device is flashed (`rase
    # secagg-keys` makes them). A control message can name a key id, never a key.
    prio3_key_id: str | None = Field(None, min_length=1, max_length=64)
    prio3_public_key: str | None = None

    def resolved(self, period_s: float) -> dict:
        d = self.model_dump()
        d["period_min_s"] = self.period_min_s or period_s
        return d

    def build(self, period_s: float) -> LocalPolicy:
        # One set of rules: the device core's own constructor.
        return LocalPolicy.from_dict(self.resolved(period_s), period_s)

    @model_validator(mode="after")
    def _valid(self) -> "ControlPolicy":
        self.build(self.period_min_s or 1.0)
        return self


def _check_prio3(msg: ControlMessage, grid_steps: int) -> None:
    """The same rules as the device's parser (rase_device.wire.parse_control) and Prio3Client."""
    p = msg.prio3
    assert p is not None
    if msg.interval_s != p.interval_s:
        raise ValueError(f"interval_s must be prio3.interval_s ({p.interval_s}) when mechanism is prio3")
    if msg.eps_levels != [p.dp_eps]:
        raise ValueError(f"eps_levels must be [prio3.dp_eps] = [{p.dp_eps}] when mechanism is prio3")
    if p.kind == "sum" and p.max_measurement != grid_steps:
        raise ValueError(f"prio3.max_measurement must be the grid's {grid_steps} steps (x_max - x_min) / gamma, "
                         f"got {p.max_measurement}")
    if p.kind == "histogram" and p.buckets != len(msg.bands) + 1:
        raise ValueError(f"prio3.buckets must be len(bands) + 1 = {len(msg.bands) + 1}, got {p.buckets}")
