"""Times on the command line: ISO 8601 in, logical timestamps t out, through
the schedule of the control message (rase_device.schedule)."""

from __future__ import annotations

from datetime import datetime, timezone


def parse_iso(text: str) -> float:
    """Unix seconds of an ISO 8601 time; one without a zone is UTC. A
    trailing Z is accepted (Python 3.10's fromisoformat does not)."""
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(f"not a timestamp t or an ISO 8601 time (e.g. 2025-06-01T12:00:00Z): {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def t_of(value: int | str, schedule) -> int:  # noqa: ANN001 - rase_device.schedule.Schedule
    """A --from/--to value as a logical t: an int is t already; an ISO time
    is the t whose period contains it."""
    if isinstance(value, int):
        return value
    return schedule.t_of(parse_iso(value))


def iso_of(unix: float) -> str:
    return datetime.fromtimestamp(unix, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
