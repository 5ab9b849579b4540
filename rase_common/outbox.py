"""The forwarding task both services use: what a durable store holds unsent
goes out through a sink, in order, in a task of its own.

Why a task of its own: a slow, failing or absent broker must never delay
ingest or acknowledgement. The store (the fog's journal, the fusion center's
aggregate store) is written first; this task reads it when woken (a new item
was stored, the link came back), sends item after item, and marks each sent
once the far side confirmed it. A TransportError pauses it with the shared
backoff (one warning when the outage starts, one when it ends); the item is
retried, never dropped, and later items wait behind it, so order holds.
A non-retriable TransportError (the item itself is refused: its topic by the
broker's ACL, its size) moves that item to the dead letters
(rase_common.deadletter) with one ERROR line, and the queue goes on.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, Sequence

from rase_common.errors import Outage, StorageError, TransportError
from rase_common.loop import Wakeup

log = logging.getLogger(__name__)


class OutboxSender:
    """unsent() -> items in order; send(item) awaits the far side's
    confirmation or raises TransportError; mark_sent(item) records it."""

    def __init__(self, name: str, *, unsent: Callable[[], Sequence[Any]], send: Callable[[Any], Awaitable[None]],
                 mark_sent: Callable[[Any], None], outage: Outage, storage: Outage, wakeup: Wakeup | None = None,
                 idle_s: float | None = None, dead_letter: Callable[[Any, str], None] | None = None,
                 dead_letters=None):  # noqa: ANN001 - a prometheus Counter
        self.name = name
        self.dead_letter = dead_letter  # None: a non-retriable failure is retried like any other
        self.dead_letters = dead_letters
        self.unsent = unsent
        self.send = send
        self.mark_sent = mark_sent
        self.outage = outage           # the far side (a broker)
        self.storage = storage         # the store being read and marked
        self.wakeup = wakeup or Wakeup()
        self.idle_s = idle_s           # look again this often even when not woken (None: only when woken)
        self.sent = 0
        self.pending = 0               # items unsent at the last look

    async def run(self) -> None:
        self.wakeup.bind()
        while True:
            try:
                failing = await self._send_all()
            except StorageError as err:
                failing = self.storage
                failing.failed(err)
            if failing is None:
                await self.wakeup.wait(None, self.idle_s)
                continue
            # In an outage new items do not hurry the next attempt: it waits for the backoff.
            while (left := failing.retry_in()) is not None and left > 0:
                await self.wakeup.wait(None, left)

    async def _send_all(self) -> Outage | None:
        """Send what is unsent, in order; the Outage that stopped it, or None."""
        items = self.unsent()
        self.pending = len(items)
        for item in items:
            try:
                await self.send(item)
            except TransportError as err:
                if not err.retriable and self.dead_letter is not None:
                    self.dead_letter(item, str(err))
                    log.error("%s: %s: not retriable, moved to the dead letters (`rase deadletters list`); "
                              "the rest goes on", self.name, err)
                    if self.dead_letters is not None:
                        self.dead_letters.inc()
                    self.pending -= 1
                    continue
                self.outage.failed(err)
                return self.outage
            self.mark_sent(item)
            self.outage.recovered()
            self.sent += 1
            self.pending -= 1
        return None
