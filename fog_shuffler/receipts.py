"""End-to-end acknowledgement: the fog tells each device which of its
reports it has taken for good. Pure: the service notes what each committed
batch took and publishes what `take` returns.

The broker's PUBACK says the broker has a report, not that it survives:
Mosquitto acknowledges before its snapshot (a SIGKILL loses the last
autosave interval), and a client that wipes the fog's session (a clean
connection with the fog's client id) sends what the broker routes meanwhile
to nobody. So a device keeps every report until the fog's receipt
(rase_device.outbox) and sends it again after a reconnect or a timeout; the
fog drops the repeat by (device, t) and receipts it again.

A receipt goes out only after the commit that journals the batch (or
decides it: a duplicate, a report too late for its window, a rejected
one), on the device's own feedback topic, which under `rase acl` only that
device reads and only its region's fog writes:

    {"v": 1, "kept": [t, ...], "late": n}

`kept` lists the timestamps of the device's reports taken since the last
receipt (at most MAX_KEPT per message), `late` how many of them were
dropped as later than the allowed lateness (issue 29, item 7: the device
counts them in its status). Nothing about any other device, window or
aggregate. Batched: at most one message per device every `every_s`, so a
device reporting once a period gets one receipt per report at worst. Sent
at QoS 0: a receipt lost is a report the device sends again, which the fog
drops as a repeat and receipts again (no PUBACK each way for each receipt).
"""

from __future__ import annotations

import json

from rase_common.protocol.topics import feedback_topic, parse_report_topic

MAX_KEPT = 256      # timestamps per receipt: a backlog's receipts stay small messages


def encode_receipt(kept: list[int], late: int) -> str:
    """Receipt(kept=kept, late=late).model_dump_json(), byte for byte (tests/unit/fog_shuffler/test_receipts.py
    holds them equal), without building the model: one receipt goes out per report at worst."""
    return '{"v":1,"kept":[%s],"late":%d}' % (",".join(str(int(t)) for t in kept), late)


class Receipts:
    def __init__(self, devices: dict[str, str], *, every_s: float = 0.25):
        self.devices = devices          # device -> its region: receipts only ever go to registered devices
        self.every_s = every_s
        self._kept: dict[tuple[str, str], list[tuple[int, bool]]] = {}   # (region, device) -> (t, late)
        self._staged: list[tuple[tuple[str, str], int, bool]] = []        # the batch being taken
        self.sent = 0                   # receipt messages handed to the broker
        self.late_told = 0              # late reports the devices were told of

    def __len__(self) -> int:
        return len(self._kept)

    def note(self, topic: str, t: int | None, *, late: bool = False) -> None:
        """A committed batch took this report (t None: the report named no t, nothing to receipt)."""
        where = parse_report_topic(topic)
        if t is None or where is None or self.devices.get(where[1]) != where[0]:
            return
        self._kept.setdefault(where, []).append((t, late))

    def stage(self, region: str, device: str, t: int, late: bool) -> None:
        """A report a role took from a batch not yet committed (commit_staged / drop_staged decide):
        its region, device and t are already known, so nothing is parsed again."""
        self._staged.append(((region, device), t, late))

    def commit_staged(self) -> None:
        for key, t, late in self._staged:
            self._kept.setdefault(key, []).append((t, late))
        self._staged = []

    def drop_staged(self) -> None:
        self._staged = []

    def note_payload(self, topic: str, payload: bytes, *, late: bool = False) -> None:
        """A report the committed batch decided (taken, a repeat, too late, or rejected: the feedback says
        why), by its t, when it has one; a registered device's only."""
        where = parse_report_topic(topic)
        if where is None or self.devices.get(where[1]) != where[0]:
            return
        try:
            t = json.loads(payload).get("t")
        except (ValueError, AttributeError, UnicodeDecodeError):
            return
        if isinstance(t, int) and not isinstance(t, bool) and t >= 0:
            self.note(topic, t, late=late)

    def note_rejected(self, topic: str, payload: bytes) -> None:
        self.note_payload(topic, payload)

    def take(self) -> list[tuple[str, str]]:
        """(topic, payload) for every device with something to receipt; forgets them."""
        out = []
        for (region, device), taken in self._kept.items():
            for i in range(0, len(taken), MAX_KEPT):
                part = taken[i:i + MAX_KEPT]
                late = sum(1 for _, was_late in part if was_late)
                out.append((feedback_topic(region, device), encode_receipt([t for t, _ in part], late)))
                self.late_told += late
        self._kept.clear()
        self.sent += len(out)
        return out
