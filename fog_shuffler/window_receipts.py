"""Forwarded windows the fusion center has not yet confirmed. `Unconfirmed`
is pure: the forwarder records each window's PUBACK, `WindowReceiptsRole`
each WindowReceipt (rase_common.protocol.window), and sends again what
`due` returns.

The broker's PUBACK only says the broker has the window: a Mosquitto SIGKILL
loses what it acknowledged since its last snapshot, and a clean connection
with the fusion center's client id wipes its session, so the broker routes
the window to nobody. The fusion center stores a window before it tells the
fog (rase/v1/windows-kept/{region}); until then the fog's journal keeps the
window as sent but unconfirmed, and after `confirm_s` (doubling each time,
at most `max_s`) it goes out again, the same bytes, which the fusion center
counts as a duplicate. After a restart every unconfirmed window starts its
wait anew.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from rase_common.errors import ProtocolError, StorageError
from rase_common.protocol import topics
from rase_common.protocol.window import WindowReceipt
from rase_common.role import Role

log = logging.getLogger("fog_shuffler.service")
Key = tuple[str, int, int]      # region, t, revision


class Unconfirmed:
    def __init__(self, confirm_s: float, max_s: float = 300.0):
        if not 0 < confirm_s <= max_s:
            raise ValueError(f"need 0 < confirm_s <= max_s, got {confirm_s}, {max_s}")
        self.confirm_s = confirm_s
        self.max_s = max_s
        self._since: dict[Key, tuple[float, float]] = {}    # key -> (sent at, wait)
        self._waits: dict[Key, float] = {}                   # the next wait of a window sent again
        self.confirmed = 0
        self.resent = 0

    def __len__(self) -> int:
        return len(self._since)

    def sent(self, key: Key, now: float) -> None:
        """Its PUBACK came (or, after a restart, it was sent before)."""
        self._since[key] = (now, self._waits.get(key, self.confirm_s))

    def confirm(self, keys: list[Key]) -> int:
        """The fusion center stored these; how many were awaited."""
        n = 0
        for key in keys:
            n += self._since.pop(key, None) is not None
            self._waits.pop(key, None)
        self.confirmed += n
        return n

    def due(self, now: float) -> list[Key]:
        """Windows to send again now (forgotten here until their next PUBACK), oldest first."""
        out = sorted(k for k, (at, wait) in self._since.items() if now - at >= wait)
        for key in out:
            _, wait = self._since.pop(key)
            self._waits[key] = min(wait * 2, self.max_s)
        self.resent += len(out)
        return out

    def next_due_s(self, now: float) -> float | None:
        if not self._since:
            return None
        return max(0.0, min(at + wait for at, wait in self._since.values()) - now)

    def forget(self, keys: list[Key]) -> None:
        """Windows the journal no longer has to send (confirmed or pruned meanwhile)."""
        for key in keys:
            self._since.pop(key, None)
            self._waits.pop(key, None)


class WindowReceiptsRole(Role):
    """The fog's side (a role of its host, fog_shuffler.roles): claims the fusion center's receipts for its
    regions, marks those windows confirmed in the batch's one transaction, and sends again what waited
    `window_confirm_s` without one. The forwarder records each window's PUBACK in `ctx.unconfirmed`."""

    name = "window_receipts"
    reasons = ("receipt_invalid",)

    def __init__(self, ctx: Any):
        self.ctx = ctx
        self.unconfirmed = ctx.unconfirmed = Unconfirmed(ctx.cfg.window_confirm_s)
        self._staged: list[Key] = []

    def subscriptions(self) -> list[tuple[str, int]]:
        return [(topics.window_receipts_topic(r), 1) for r in sorted(self.ctx.cfg.regions)]

    def claims(self, topic: str, payload: bytes) -> bool:
        return topic.startswith(topics.WINDOW_RECEIPTS_PREFIX)

    def take(self, msg: Any, now_t: int) -> None:
        region = msg.topic[len(topics.WINDOW_RECEIPTS_PREFIX):]
        try:
            receipt = WindowReceipt.model_validate_json(msg.payload)
        except ValueError as err:
            raise ProtocolError("receipt_invalid", str(err).replace("\n", " ")[:200]) from None
        if region in self.ctx.cfg.regions:
            self._staged += [(region, t, rev) for t, rev in receipt.kept]
        return None

    def write(self, db: Any) -> None:
        db.executemany("UPDATE outbox SET sent=2 WHERE region=? AND t=? AND rev=? AND sent IN (0, 1)", self._staged)

    def committed(self) -> None:
        self.unconfirmed.confirm(self._staged)
        self._staged = []

    def rolled_back(self) -> None:
        self._staged = []

    def attach(self, db: Any) -> None:
        for key in self.ctx.journal.unconfirmed():      # sent before a restart: each waits anew
            self.unconfirmed.sent(tuple(key), time.monotonic())

    def tasks(self) -> list:
        return [self._resend()]

    async def _resend(self) -> None:
        """Windows the fusion center did not confirm in time go back to the outbox, the same bytes."""
        ctx, u = self.ctx, self.unconfirmed
        while True:
            wait = u.next_due_s(time.monotonic())
            await asyncio.sleep(min(1.0, wait) if wait is not None else 1.0)
            due = u.due(time.monotonic())
            if not due:
                continue
            if ctx.storage.down:
                for key in due:
                    u.sent(key, time.monotonic())        # the journal is down: try again later
                continue
            try:
                again = ctx.journal.mark_unsent(due)
            except StorageError as err:
                ctx.storage.failed(err)
                continue
            kept = set(again)
            u.forget([k for k in due if k not in kept])
            if again:
                log.info("fog sends %d windows again: the fusion center did not confirm them (oldest t=%d)",
                         len(again), again[0][1])
                for _ in again:
                    ctx.outbox.added()
