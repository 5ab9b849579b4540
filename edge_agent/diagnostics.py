"""What a CPython agent (or a local fleet) says when it cannot do its job.

An agent whose reports go nowhere must not be silent: one clear log line
when a device's state turns to a problem (its eps is not on the menu, its
budget is spent, its ledger cannot be read, a control message was refused),
one when it is reporting again, and one when the fog says on the device's
own feedback topic why it rejects its reports (unknown_device, ...). The
device's retained status says the same to whoever watches it
(rase_device.wire.encode_status: state and counts).
"""

from __future__ import annotations

import json
import logging
import threading
import time

from rase_device.core import AgentCore
from rase_device.ledger import utc_text
from rase_device.randomizer import EPS_UNITS

# States this watch explains; a refused control message and an unwritable
# ledger have their own lines where they happen (paho_transport, service).
PROBLEMS = ("no_eps_level", "budget_exhausted", "ledger_unreadable")

# What to do about each reason the fog gives (fog_shuffler.ingest.REASONS).
FEEDBACK_HINTS = {
    "unknown_device": "the fog does not know this device: register it in the fog's config ([regions.<region>] "
                      "devices, or refit_houses) and restart the fog; with an ACL, run `rase acl` again",
    "eps_not_on_menu": "its eps is not on the menu the fog follows (the control message's eps_levels)",
    "t_out_of_range": "its clock or schedule disagrees with the fog's (check NTP, period_s and epoch0)",
    "implausible_y": "its range or mechanism disagrees with the control message's (x_min, x_max, mechanism)",
    "impossible_y": "its mechanism or grid disagrees with the control message's (mechanism, gamma, x_min, x_max)",
}


def _names(devices: list[str], limit: int = 6) -> str:
    shown = ", ".join(devices[:limit])
    return shown + (f" and {len(devices) - limit} more" if len(devices) > limit else "")


def problem_line(status: str, cores: list[AgentCore]) -> str:
    """One line saying what is wrong with these devices (all in `status`) and what to do."""
    one = len(cores) == 1
    who = f"agent={cores[0].device}" if one else f"agents {_names([c.device for c in cores])}"
    sends, its = ("sends", "its") if one else ("send", "their")
    core = cores[0]
    if status == "no_eps_level":
        return (f"{who} {sends} nothing: {its} eps {core.eps_max:g} is below every level of the menu "
                f"{list(core.eps_levels)} (the fusion center's [precision] eps_levels); set eps >= "
                f"{min(core.eps_levels):g} in the agent's config, or add a level <= {core.eps_max:g} to the menu")
    if status == "budget_exhausted":
        led = core.ledger
        renews = f" (it renews at {utc_text(core.renews_at)})" if core.renews_at is not None else ""
        unit = core.privacy
        if unit.get("eps_day") is not None:
            whose = (f"{its} share {unit['share']:g} of household {unit['household']}'s eps {unit['eps_day']:g} "
                     "per day" if unit["unit"] == "household" else f"{its} eps {unit['eps_day']:g} per day")
            return f"{who} {sends} nothing more today: {whose} is spent{renews} ([privacy] eps_day)"
        return (f"{who} {sends} nothing until the next budget period: {its} budget of "
                f"{led.budget_units / EPS_UNITS:g} eps per {led.period_s:g} s is spent{renews} "
                "(budget_eps, budget_period_s)")
    if status in ("ledger_unreadable", "ledger_unwritable"):
        verb = "read" if status == "ledger_unreadable" else "written"
        return f"{who} {sends} nothing: {its} budget ledger {core.ledger.path} cannot be {verb} (it fails closed)"
    if status == "control_rejected":
        return (f"{who} refused the control message and {'keeps' if one else 'keep'} {its} calibration: "
                f"{core.last_rejection} ({its} [policy] bounds what {'it accepts' if one else 'they accept'})")
    return f"{who}: {status}"


class StatusWatch:
    """Logs each device's change into or out of a problem state, devices in
    the same state and for the same cause in one line."""

    def __init__(self, log: logging.Logger):
        self.log = log
        self.shown: dict[str, str] = {}

    def check(self, cores: list[AgentCore]) -> None:
        changed: dict[str, list[AgentCore]] = {}
        for core in cores:
            before = self.shown.get(core.device, "online")
            if before != core.status and (core.status in PROBLEMS or before in PROBLEMS):
                changed.setdefault(core.status, []).append(core)
            self.shown[core.device] = core.status
        for status, group in sorted(changed.items()):
            if status in PROBLEMS:
                self.log.warning(problem_line(status, group))
            else:
                self.log.info("%s reporting again", f"agent={group[0].device}" if len(group) == 1
                              else f"agents {_names([c.device for c in group])}")


class FeedbackWatch:
    """The fog's feedback to devices: counted per device (rejected_by_fog in
    the status), and one warning per device and reason every `repeat_s`."""

    def __init__(self, log: logging.Logger, repeat_s: float = 600.0):
        self.log = log
        self.repeat_s = repeat_s
        self.rejected: dict[str, int] = {}
        self._said: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()      # paho's thread calls on_feedback

    def on_feedback(self, device: str, payload: bytes) -> None:
        try:
            msg = json.loads(payload)
            reason, count = str(msg["reason"]), int(msg.get("rejected", 1))
            detail = str(msg.get("detail", ""))
        except (ValueError, KeyError, TypeError):
            self.log.warning("agent=%s ignored a malformed feedback message from the fog", device)
            return
        now = time.monotonic()
        with self._lock:
            self.rejected[device] = self.rejected.get(device, 0) + max(1, count)
            last = self._said.get((device, reason))
            if last is not None and now - last < self.repeat_s:
                return
            self._said[(device, reason)] = now
        hint = FEEDBACK_HINTS.get(reason, "see the fog's log")
        self.log.warning("agent=%s: the fog rejects this device's reports: %s%s: %s", device, reason,
                         f" ({detail})" if detail else "", hint)

    def count(self, device: str) -> int:
        with self._lock:
            return self.rejected.get(device, 0)
