"""Ingest validation: every incoming report is accepted or rejected with a
reason (SPEC 4). Pure: no I/O, no clock of its own."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from pydantic import ValidationError

from rase_common.errors import ProtocolError
from rase_device.mechanisms import DEFAULT_MECHANISM
from rase_common.mechanisms import Setting, mechanism
from rase_common.protocol.report import MAX_REPORT_BYTES, Report, decode_report
from rase_common.protocol.topics import parse_report_topic

# impossible_y: not a report the deployment's mechanism can output at that eps
# (rase_common.mechanisms: Duchi's two values, PM's grid, BR's grid and clamp
# range, a bit, a category or mask); implausible_y: an output of BR without
# clamping, but beyond the stated tail (rase_common.mechanisms.br.REPORT_TAIL).
# Roles add their own reasons (rase_common.role.Role.reasons: quarantined_device
# from attacker detection, the secure mode's from its leader); REASONS is the lot.
BASE_REASONS = ("oversized", "bad_topic", "malformed_json", "wrong_type", "non_finite", "unknown_device",
                "t_out_of_range", "implausible_y", "eps_not_on_menu", "impossible_y")
REASONS: tuple[str, ...] = BASE_REASONS


def add_reasons(reasons: tuple[str, ...]) -> None:
    """A role's rejection reasons join REASONS (metric labels, Rejected's check)."""
    global REASONS
    REASONS = tuple(dict.fromkeys(REASONS + tuple(reasons)))


class Rejected(ProtocolError):
    """A report the fog refuses; `reason` is one of REASONS (a metric label)."""

    def __init__(self, reason: str, detail: str = ""):
        assert reason in REASONS, reason   # a role's own reasons are added by add_reasons
        super().__init__(reason, detail)


@dataclass(frozen=True)
class Accepted:
    region: str
    device: str
    t: int
    y: float
    eps: float
    mechanism: str = DEFAULT_MECHANISM   # the device mechanism the report was checked against


@dataclass(frozen=True)
class IngestRules:
    devices: dict[str, str]        # device -> region it is registered in
    eps_levels: tuple[float, ...]  # the published menu
    x_min: float
    x_max: float
    lateness_periods: int | None   # how far behind the fog's clock a report's t may be (None: the
                                   # windows judge it: late data, fog_shuffler.windows)
    max_bytes: int = MAX_REPORT_BYTES
    mechanism: str = DEFAULT_MECHANISM   # what the devices report (rase_device.mechanisms)
    categories: int = 4            # categorical: len(bands) + 1
    gamma: float = 1.0             # the grid (the control message's), for the exact output sets
    beta: float = 0.5              # BR's precision: it clamps below eps_star(beta, rho, x_min, x_max)
    rho: float = 0.9


def _rejection(err: ValidationError) -> Rejected:
    """The reason a report failed Report's validation: not JSON (which
    means UTF-8 without a byte order mark, RFC 8259 section 8.1), not an
    object, a non-finite number (NaN, Infinity, 1e999) in any field, or any
    other departure from the schema."""
    errors = err.errors(include_url=False)
    types = {e["type"] for e in errors}
    if "json_invalid" in types:
        return Rejected("malformed_json", str(errors[0]["msg"])[:80])
    if "model_type" in types and len(errors) == 1 and not errors[0]["loc"]:
        return Rejected("malformed_json", "not an object")
    # NaN or +-Infinity anywhere (y, eps, or a field that should be an int or absent)
    if "finite_number" in types or any(isinstance(e.get("input"), float) and not math.isfinite(e["input"])
                                       for e in errors):
        return Rejected("non_finite")
    return Rejected("wrong_type", str(errors[0]["loc"])[:80])


def validate(topic: str, payload: bytes, now_t: int, rules: IngestRules) -> Accepted:
    """Accept one report or raise Rejected(reason)."""
    region, device, rep = parse_report(topic, payload, now_t, rules, Report, rules.max_bytes)
    if rep.eps not in rules.eps_levels:
        raise Rejected("eps_not_on_menu", f"eps={rep.eps}")
    why = y_rejection(rep.y, rep.eps, rules)
    if why:
        raise Rejected(why, f"y={rep.y}")
    return Accepted(region, device, rep.t, float(rep.y), float(rep.eps), rules.mechanism)


def sized_report_topic(topic: str, payload: bytes, max_bytes: int) -> tuple[str, str]:
    """(region, device) of a report of at most max_bytes on a report topic, or
    Rejected (oversized, bad_topic): the first checks of every kind of report."""
    if len(payload) > max_bytes:
        raise Rejected("oversized", f"{len(payload)} bytes")
    where = parse_report_topic(topic)
    if where is None:
        raise Rejected("bad_topic", topic[:80])
    return where


def parse_report(topic: str, payload: bytes, now_t: int, rules: IngestRules, model, max_bytes: int):  # noqa: ANN001
    """(region, device, the report as `model`) once its size, topic, schema,
    device and t pass, or Rejected: what every kind of report is checked for."""
    region, device = sized_report_topic(topic, payload, max_bytes)
    try:
        # Parsed and validated in one pass: a local-DP report by msgspec when it
        # takes it, else by the model (pydantic), whose error types give the reasons.
        rep = decode_report(payload) if model is Report else model.model_validate_json(payload)
    except ValidationError as err:
        raise _rejection(err) from None
    if rules.devices.get(device) != region:
        raise Rejected("unknown_device", f"{region}/{device}"[:80])
    if rep.t > now_t + 1 or (rules.lateness_periods is not None and rep.t < now_t - rules.lateness_periods):
        raise Rejected("t_out_of_range", f"t={rep.t} now={now_t}")
    return region, device, rep


def possible_y(y: float, eps: float, rules: IngestRules) -> bool:
    """Whether the devices' mechanism can output y at eps (y_rejection is None)."""
    return y_rejection(y, eps, rules) is None


def y_rejection(y: float, eps: float, rules: IngestRules) -> str | None:
    """None when y is an output of the deployment's mechanism at eps, else the
    reason (impossible_y, implausible_y): the registry entry's exact support."""
    return _support(rules.mechanism, eps, rules.x_min, rules.x_max, rules.gamma, rules.beta, rules.rho,
                    rules.categories).reason(y)


@functools.lru_cache(maxsize=1024)
def _support(name: str, eps: float, x_min: float, x_max: float, gamma: float, beta: float, rho: float,
             categories: int):
    # A categorical support depends on the number of bands only, not on their edges.
    setting = Setting(x_min=x_min, x_max=x_max, gamma=gamma, beta=beta, rho=rho,
                      bands=tuple(float(j) for j in range(categories - 1)))
    return mechanism(name).support(setting, eps)
