"""Telling a device why the fog rejects its reports. Pure: the service
publishes what `note` returns.

A device whose reports the fog rejects (it is not registered, its eps is not
on the menu, its clock is off, ...) would otherwise never know: the broker
acknowledged every report. So the fog says so on the device's own topic,
rase/v1/feedback/{region}/{device}, which under the deployment's ACL
(rase acl) only that device may read and only the fog of that region may
write. What it says concerns that device's own reports only: the reason,
the fog's detail for it (e.g. "t=5 now=9") and how many were rejected for
it since the last message; never anything about other devices, windows or
aggregates, so nothing about anyone else leaves the fog.

Bounded, because reports are hostile input (a flood of made-up device names
must not become a flood of messages): at most one message per device and
reason every `per_device_s`, at most `per_minute` in all, and not retained
(the agent is subscribed while it reports; nothing piles up in the broker).
"""

from __future__ import annotations

import json
from collections import OrderedDict

from rase_common.protocol.topics import feedback_topic, parse_report_topic

# A bad topic names no device; an internal error is the fog's own fault.
UNTOLD = ("bad_topic", "internal")


class RejectionFeedback:
    def __init__(self, regions: set[str], *, per_device_s: float = 60.0, per_minute: int = 120,
                 max_tracked: int = 10_000):
        self.regions = set(regions)
        self.per_device_s = per_device_s
        self.per_minute = per_minute
        self.max_tracked = max_tracked
        # (region, device, reason) -> [rejected since last told, when last told or None]
        self._seen: OrderedDict[tuple[str, str, str], list] = OrderedDict()
        self._minute_start: float | None = None
        self._told_this_minute = 0
        self.sent = 0
        self.withheld = 0      # messages not sent for the global cap

    def note(self, topic: str, reason: str, detail: str, now: float) -> tuple[str, str] | None:
        """Count one rejected report; (topic, payload) when its device should be told now."""
        where = parse_report_topic(topic)
        if reason in UNTOLD or where is None or where[0] not in self.regions:
            return None
        key = (where[0], where[1], reason)
        entry = self._seen.get(key)
        if entry is None:
            entry = self._seen[key] = [0, None]
            while len(self._seen) > self.max_tracked:
                self._seen.popitem(last=False)
        else:
            self._seen.move_to_end(key)
        entry[0] += 1
        if entry[1] is not None and now - entry[1] < self.per_device_s:
            return None
        if self._minute_start is None or now - self._minute_start >= 60.0:
            self._minute_start, self._told_this_minute = now, 0
        if self._told_this_minute >= self.per_minute:
            self.withheld += 1
            return None
        self._told_this_minute += 1
        self.sent += 1
        detail = detail.removeprefix(f"{reason}: ")      # the fog's error text starts with its reason
        payload = json.dumps({"v": 1, "reason": reason, "detail": detail[:80], "rejected": entry[0]},
                             separators=(",", ":"))
        entry[0], entry[1] = 0, now
        return feedback_topic(where[0], where[1]), payload
