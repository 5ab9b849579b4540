"""Every MQTT topic of the protocol (SPEC 3), defined once. The device core
builds its own two topics with rase_device.wire (MicroPython has no access to
this package); they are imported from there, not written twice."""

from __future__ import annotations

from rase_device.wire import CONTROL_TOPIC, feedback_topic, report_topic, status_topic

REPORTS_PREFIX = "rase/v1/reports/"
WINDOWS_PREFIX = "rase/v1/windows/"
WINDOWS_FILTER = WINDOWS_PREFIX + "+"
AGGREGATES_PREFIX = "rase/v1/aggregates/"
AGGREGATES_FILTER = AGGREGATES_PREFIX + "#"
AGGREGATE_LATEST_TOPIC = AGGREGATES_PREFIX + "latest"
STATUS_FILTER = "rase/v1/status/+"
# Secure aggregation (rase_common.protocol.prio3): the leader's batches and shares travel with the
# windows (rase/v1/windows/{region}, Kafka rase.windows); the helper answers on these.
PRIO3_VERIFY_PREFIX = "rase/v1/prio3/verify/"
PRIO3_VERIFY_FILTER = PRIO3_VERIFY_PREFIX + "+"
KAFKA_PRIO3_VERIFY_TOPIC = "rase.prio3.verify"
# The leader's own account of each window (Prio3Statement): only the fog of the region may write it.
PRIO3_STATEMENTS_PREFIX = "rase/v1/prio3/statements/"
PRIO3_STATEMENTS_FILTER = PRIO3_STATEMENTS_PREFIX + "+"
# Per-t aggregates (the fog, as Prio3's leader, compares them with its own statements).
AGGREGATES_T_FILTER = AGGREGATES_PREFIX + "t/+"
FEEDBACK_PREFIX = "rase/v1/feedback/"
# The fusion center to a region's fog: the windows it stored (rase_common.protocol.window.WindowReceipt).
WINDOW_RECEIPTS_PREFIX = "rase/v1/windows-kept/"


def fusion_status_topic(name: str) -> str:
    """The fusion center's availability, retained: "online" once connected,
    "offline" when it stops and as its last will (Home Assistant reads it)."""
    return f"rase/v1/fusion/{name}/status"


def reports_filter(region: str) -> str:
    """What a fog subscribes to for one region's reports."""
    return f"{REPORTS_PREFIX}{region}/+"


def windows_topic(region: str) -> str:
    return f"{WINDOWS_PREFIX}{region}"


def window_receipts_topic(region: str) -> str:
    """Where the fusion center tells region's fog which of its windows it stored."""
    return f"{WINDOW_RECEIPTS_PREFIX}{region}"


def prio3_verify_topic(region: str) -> str:
    """Where the helper (fusion center) answers the leader (the fog of region)."""
    return f"{PRIO3_VERIFY_PREFIX}{region}"


def prio3_statement_topic(region: str) -> str:
    """Where the fog (Prio3's leader for region) publishes its own account of each window."""
    return f"{PRIO3_STATEMENTS_PREFIX}{region}"


def aggregate_topic(t: int) -> str:
    return f"{AGGREGATES_PREFIX}t/{t}"


def parse_report_topic(topic: str) -> tuple[str, str] | None:
    """(region, device) of rase/v1/reports/{region}/{device}, or None."""
    if not topic.startswith(REPORTS_PREFIX):
        return None
    parts = topic.split("/")
    if len(parts) != 5 or not parts[3] or not parts[4]:
        return None
    return parts[3], parts[4]


__all__ = ["CONTROL_TOPIC", "report_topic", "status_topic", "feedback_topic", "reports_filter", "windows_topic",
           "aggregate_topic", "parse_report_topic", "fusion_status_topic", "REPORTS_PREFIX", "WINDOWS_PREFIX",
           "WINDOWS_FILTER", "AGGREGATES_PREFIX", "AGGREGATES_FILTER", "AGGREGATE_LATEST_TOPIC", "STATUS_FILTER",
           "FEEDBACK_PREFIX", "PRIO3_VERIFY_PREFIX", "PRIO3_VERIFY_FILTER", "KAFKA_PRIO3_VERIFY_TOPIC",
           "prio3_verify_topic", "WINDOW_RECEIPTS_PREFIX", "window_receipts_topic", "PRIO3_STATEMENTS_PREFIX",
           "PRIO3_STATEMENTS_FILTER", "prio3_statement_topic", "AGGREGATES_T_FILTER"]
