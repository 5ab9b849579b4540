"""The protocol parameters the fog checks reports against, and how it follows
the control message (SPEC 3: the control message is the one source of truth
for period, epoch0, range and the eps menu). Pure: no I/O, no clock.

A change applies from the timestamp at which the fog saw it. Devices apply a
control message when it reaches them, so for a short while reports made under
the previous parameters are still on their way: for `grace` periods after a
change a report that the new parameters refuse is checked against the
previous ones too, so a precision change never drops good reports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from rase_device import wire
from rase_device.mechanisms import DEFAULT_MECHANISM
from rase_device.schedule import Schedule, check_stated, from_control
from fog_shuffler.ingest import Accepted, IngestRules, Rejected, validate
from rase_device.report_kind import DEFAULT_BANDS, DEFAULT_ON_ABOVE
from rase_common.errors import ProtocolError
from rase_common.mechanisms import mechanism
from rase_device.policy import LocalPolicy


@dataclass(frozen=True)
class Protocol:
    period_s: float
    epoch0: float
    eps_levels: tuple[float, ...]
    x_min: float
    x_max: float
    mechanism: str = DEFAULT_MECHANISM     # the devices' mechanism (rase_device.mechanisms)
    gamma: float = 1.0                     # the grid, and BR's precision (beta, rho): what a report
    beta: float = 0.5                      # can be depends on them (rase_common.mechanisms support)
    rho: float = 0.9
    on_above: float = DEFAULT_ON_ABOVE     # binary: on when the reading is above
    bands: tuple[float, ...] = tuple(DEFAULT_BANDS)   # categorical: band edges
    since_t: int | None = None             # a schedule change (rase_device.schedule): this one from since_t on,
    previous_period_s: float | None = None   # the previous one before
    previous_epoch0: float | None = None
    # The mechanism's own table of the control message (the secure mode's Prio3 params: kind, product,
    # dp_eps, key id), parsed by its registry entry (rase_common.mechanisms: params_of).
    mode_params: Any = None
    interval_s: float | None = None        # an interval product: one report (and window) per interval (issue 28)

    @classmethod
    def from_control(cls, msg: dict, current: "Protocol") -> "Protocol":
        """From a parsed control message (rase_device.wire.parse_control)."""
        return cls(period_s=float(msg["period_s"]), epoch0=float(msg.get("epoch0", current.epoch0)),
                   eps_levels=tuple(sorted(set(float(e) for e in msg["eps_levels"]))),
                   x_min=float(msg["x_min"]), x_max=float(msg["x_max"]),
                   mechanism=msg.get("mechanism", DEFAULT_MECHANISM),
                   gamma=float(msg.get("gamma", current.gamma)), beta=float(msg.get("beta", current.beta)),
                   rho=float(msg.get("rho", current.rho)),
                   on_above=float(msg.get("on_above", DEFAULT_ON_ABOVE)),
                   bands=tuple(msg.get("bands", DEFAULT_BANDS)), since_t=msg.get("since_t"),
                   previous_period_s=msg.get("previous_period_s"), previous_epoch0=msg.get("previous_epoch0"),
                   mode_params=mechanism(msg.get("mechanism", DEFAULT_MECHANISM)).params_of(msg),
                   interval_s=msg.get("interval_s"))

    def differences(self, other: "Protocol") -> dict[str, tuple]:
        """field -> (self's value, other's value) where they differ."""
        return {f.name: (getattr(self, f.name), getattr(other, f.name)) for f in fields(self)
                if getattr(self, f.name) != getattr(other, f.name)}

    @property
    def window_period_s(self) -> float:
        """What one window covers: the period, an interval product's interval, or the mechanism's product
        (e.g. a prio3 hour, day or interval)."""
        of = getattr(self.mode_params, "window_period_s", None)
        return of(self.period_s) if of is not None else (self.interval_s or self.period_s)

    @property
    def schedule(self) -> Schedule:
        """The windows' schedule. An interval product's windows (and a prio3
        hourly or daily product's) are its intervals, on epoch0's grid (a
        schedule change applies to the reporting period only)."""
        if self.window_period_s != self.period_s:
            return Schedule(self.window_period_s, self.epoch0)
        return from_control({"period_s": self.period_s, "epoch0": self.epoch0, "since_t": self.since_t,
                             "previous_period_s": self.previous_period_s, "previous_epoch0": self.previous_epoch0})

    def t_of(self, unix_s: float) -> int:
        return self.schedule.t_of(unix_s)


PROTOCOL_FIELDS = tuple(f.name for f in fields(Protocol))


class ProtocolFollower:
    def __init__(self, own: Protocol, grace_periods: int):
        if grace_periods < 0:
            raise ValueError(f"grace_periods must be >= 0, got {grace_periods}")
        self.own = own                       # what the fog's config file says
        self.current = own
        self.previous: Protocol | None = None
        self.changed_at_t: int | None = None
        self.grace = grace_periods

    def apply(self, new: Protocol, now_t: int) -> dict[str, tuple]:
        """Follow `new` from now_t on; returns what changed (empty: nothing)."""
        changed = self.current.differences(new)
        if changed:
            self.previous, self.current, self.changed_at_t = self.current, new, now_t
        return changed

    def drift(self) -> dict[str, tuple]:
        """Where the control message disagrees with the fog's own config."""
        return self.own.differences(self.current)

    def candidates(self, t: int) -> list[Protocol]:
        """Parameters a report of timestamp t may have been made under."""
        out = [self.current]
        if self.previous is not None and self.changed_at_t is not None and t <= self.changed_at_t + self.grace:
            out.append(self.previous)
        return out


def rules_for(rules: IngestRules, p: Protocol) -> IngestRules:
    """The ingest rules under protocol parameters p."""
    return dataclasses.replace(rules, eps_levels=p.eps_levels, x_min=p.x_min, x_max=p.x_max, mechanism=p.mechanism,
                               categories=len(p.bands) + 1, gamma=p.gamma, beta=p.beta, rho=p.rho)


class ProtocolGate:
    """What the fog accepts, and how it follows the retained control message:
    the parameters of the control message (checked against the fog's own
    control policy with the devices' own parser), reports validated under
    them or, just after a change, under the previous ones. Pure."""

    def __init__(self, own: Protocol, rules: IngestRules, *, grace_periods: int, policy: LocalPolicy):
        self.follower = ProtocolFollower(own, grace_periods)
        self.policy = policy
        self.rules = rules_for(rules, own)
        self._memo: dict[int, tuple[Protocol, IngestRules, IngestRules]] = {}

    @property
    def current(self) -> Protocol:
        return self.follower.current

    def candidates(self, t: int) -> list[Protocol]:
        return self.follower.candidates(t)

    def follow(self, payload: bytes, now_t: int) -> dict[str, tuple]:
        """Follow a control message from now_t on; what changed (empty: nothing).
        Raises ProtocolError("control_invalid" / "control_refused"): the fog then
        keeps its parameters."""
        if not payload:          # an empty retained payload only clears the topic
            return {}
        try:
            parsed = wire.parse_control(payload)
        except ValueError as err:
            raise ProtocolError("control_invalid", str(err)) from None
        try:
            self.policy.check(parsed, seals=False)   # the leader seals nothing: no key to pin
        except ValueError as err:
            # Outside the fog's own policy (a 1 ms period, a range it refuses).
            raise ProtocolError("control_refused", f"{err}; keeping the current parameters") from None
        new = Protocol.from_control(parsed, self.current)
        # What the fog's mechanism keeps as its own (the secure mode, issue 26: the fusion center
        # publishes the control message, and in that mode the fog trusts only itself): a control
        # message that says otherwise is refused whole and the fog keeps its own.
        own = self.follower.own
        owned = mechanism(own.mechanism).own_fields
        differ = {k: v for k, v in own.differences(new).items() if k in owned}
        if differ:
            raise ProtocolError("control_params_mismatch", "the control message's " + "; ".join(
                f"{k} {b!r}" for k, (_, b) in differ.items())[:300] + " differ from this fog's own config "
                f"(kept: a {own.mechanism} party's params are its own)")
        try:
            # Then a change of period or epoch0 must state its since_t, as devices require (issue 29).
            check_stated(parsed, self.current)
        except ValueError as err:
            raise ProtocolError("control_refused", f"{err}; keeping the current parameters") from None
        changed = self.follower.apply(new, now_t)
        if changed:
            self.rules = rules_for(self.rules, self.current)
        return changed

    def validate(self, topic: str, payload: bytes, now_t: int) -> Accepted:
        """A report is good if the current parameters accept it, or, just after
        a change, the previous ones."""
        try:
            return validate(topic, payload, now_t, self.rules)
        except Rejected as err:
            if err.reason not in ("eps_not_on_menu", "implausible_y", "impossible_y"):
                raise
            first = err
        for old in self.candidates(now_t)[1:]:
            try:
                return validate(topic, payload, now_t, rules_for(self.rules, old))
            except Rejected:
                pass
        raise first

    def validate_with(self, topic: str, payload: bytes, now_t: int, check: Callable[..., Accepted],
                      retry_on: tuple[str, ...]) -> Accepted:
        """A report by a role's own check(topic, payload, now_t, rules, protocol),
        under the current parameters or, just after a change, the previous ones:
        a rejection for one of `retry_on` under the current ones is tried again."""
        *first, last = self.candidates(now_t)
        for p in first:
            try:
                return check(topic, payload, now_t, self._rules_under(p), p)
            except Rejected as err:
                if err.reason not in retry_on:
                    raise
        return check(topic, payload, now_t, self._rules_under(last), last)

    def _rules_under(self, p: Protocol) -> IngestRules:
        """rules_for(self.rules, p), made once per (rules, parameters): a role's check runs per report."""
        hit = self._memo.get(id(p))
        if hit is None or hit[0] is not p or hit[1] is not self.rules:
            if len(self._memo) > 8:
                self._memo.clear()
            hit = self._memo[id(p)] = (p, self.rules, rules_for(self.rules, p))
        return hit[2]
