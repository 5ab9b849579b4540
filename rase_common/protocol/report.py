"""The messages the edge agent produces (SPEC 3): reports and its retained
status. The device writes them with rase_device.wire (MicroPython has no
pydantic); consumers (the fog, tools) validate with these models."""

from __future__ import annotations

from typing import Annotated, Literal, Union

import msgspec
from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, Strict, StrictInt, model_validator

from rase_device.wire import STATES, VERSION

MAX_REPORT_BYTES = 256


# A finite JSON number: NaN and +-Infinity (which JSON parsers accept, and
# 1e999 becomes) fail with the error type "finite_number".
FiniteNumber = Annotated[float, Strict(), AllowInfNan(False)] | StrictInt


class Report(BaseModel):
    """One randomized reading: rase/v1/reports/{region}/{device}."""
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    v: Literal[1]
    t: StrictInt = Field(ge=0)
    y: FiniteNumber
    eps: FiniteNumber = Field(gt=0)
    seq: StrictInt = Field(ge=0)


class ReportFields(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Report's fields for msgspec's JSON decoder, which takes a report in a
    tenth of pydantic's time. It accepts a subset of what Report accepts, with
    the same values and types (ints stay ints): stricter where msgspec is
    (a `true` or `1.0` for v, which Report takes as 1; JSON's NaN and
    Infinity, which are not JSON), never looser. decode_report falls back to
    Report for whatever this refuses, so Report alone defines what is
    accepted and why not. tests/unit/rase_common/test_report_decoder.py
    checks the two against each other."""
    v: Literal[1]
    t: Annotated[int, msgspec.Meta(ge=0)]
    y: Union[int, float]          # finite: msgspec's JSON has no NaN or Infinity, and refuses 1e999
    eps: Union[Annotated[int, msgspec.Meta(gt=0)], Annotated[float, msgspec.Meta(gt=0)]]
    seq: Annotated[int, msgspec.Meta(ge=0)]


assert ReportFields.__struct_fields__ == tuple(Report.model_fields), "Report and ReportFields disagree"
_decode_report_fields = msgspec.json.Decoder(ReportFields).decode


def decode_report(payload: bytes | str) -> ReportFields | Report:
    """One report from JSON, as Report.model_validate_json(payload) takes it
    (raising its ValidationError when Report refuses it); fast for every
    report msgspec takes, which is every report a device writes."""
    try:
        return _decode_report_fields(payload)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return Report.model_validate_json(payload)


class PrivacySpent(BaseModel):
    """What a device spends (basic composition): eps per report, per hour at
    its reporting cadence, and so far in the current budget period; the
    privacy unit it is charged to (itself or a household, whose eps_day it
    has `share` of; eps_day None: event-level, no daily guarantee), and, when
    the budget is spent, when it renews (midnight UTC for a daily budget)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    eps_per_report: float | None = Field(None, ge=0)
    eps_per_hour: float | None = Field(None, ge=0)
    spent_this_period: float = Field(ge=0)
    budget_per_period: float = Field(gt=0)
    budget_period_s: float = Field(gt=0)
    unit: Literal["device", "household"] = "device"
    household: str | None = None
    eps_day: float | None = Field(None, gt=0)
    share: float = Field(1.0, gt=0, le=1)
    guarantee: Literal["event-level", "per unit per day"] = "event-level"
    renews_at: float | None = None         # unix seconds
    renews_at_utc: str | None = None       # the same, "YYYY-MM-DDTHH:MM:SSZ"


class StatusCounts(BaseModel):
    """What became of a device's reports since it started: made (randomized
    and queued), delivered (acknowledged by the broker), rejected_by_fog (the
    fog said so on the device's own feedback topic), late_by_fog (the fog's
    receipt said they came after its allowed lateness)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    made: int = Field(ge=0)
    delivered: int = Field(ge=0)
    rejected_by_fog: int = Field(0, ge=0)
    late_by_fog: int = Field(0, ge=0)      # dropped by the fog as later than its allowed lateness (its receipt)


class Status(BaseModel):
    """Retained device status: rase/v1/status/{device}."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    v: Literal[1]
    state: Literal[STATES]  # type: ignore[valid-type]
    privacy: PrivacySpent | None = None
    counts: StatusCounts | None = None


class Feedback(BaseModel):
    """The fog to one device, on rase/v1/feedback/{region}/{device} (only that
    device may read it): why its reports are rejected. Sent at most once a
    minute per device and reason; never about any other device or a window."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    v: Literal[1] = 1
    reason: str
    detail: str = ""
    rejected: int = Field(1, ge=1)     # reports of this device rejected for this reason since the last feedback


class Receipt(BaseModel):
    """The fog to one device, on rase/v1/feedback/{region}/{device}, after the
    commit that journaled (or decided) its reports (fog_shuffler.receipts):
    the timestamps of its reports the fog now has, and how many of them came
    later than the allowed lateness and were dropped. The device keeps each
    report until it is listed here (rase_device.outbox)."""
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    v: Literal[1] = 1
    kept: list[Annotated[int, Field(ge=0)]] = Field(min_length=1, max_length=256)
    late: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _late_among_kept(self) -> Receipt:
        if self.late > len(self.kept):
            raise ValueError("late counts reports among kept")
        return self


assert VERSION == 1
