"""When the fog takes reports from its source. Pure: no I/O, no clock.

- IntakeHold: through a storage outage (disk full, read-only) a batch the
  journal could not take is held, unacknowledged, with the timestamp it
  arrived at, and retried first; the reports queued behind it are taken
  before any window closes again, so an outage only makes windows close late.
- OutboxCount: windows journaled but not yet forwarded. When the sink is far
  behind (`limit` windows wait) ingest stops taking reports, which the broker
  then keeps; journaled windows are never dropped.
"""

from __future__ import annotations

from collections.abc import Callable


class IntakeHold:
    def __init__(self, batch_size: int):
        self.batch_size = batch_size
        self.held: list[tuple[object, int]] = []   # (message, logical t at arrival): taken, not journaled
        self.draining = False     # after a failure, until the reports queued meanwhile are taken
        self.stale = False        # the in-memory windows took reports the journal did not

    def next_batch(self, take: Callable[[int], list], now_t: int) -> tuple[list[tuple[object, int]], bool]:
        """The held batch, else up to batch_size new messages stamped with
        now_t; and True when what queued during an outage is all taken (windows
        may close again)."""
        held = bool(self.held)
        batch = self.held or [(m, now_t) for m in take(self.batch_size)]
        self.held = []
        drained = not batch or (self.draining and not held and len(batch) < self.batch_size)
        if drained:
            self.draining = False
        return batch, drained

    def failed(self, batch: list[tuple[object, int]]) -> None:
        """The journal refused `batch`: retried first, and the reports behind it wait too."""
        self.held = batch          # not acknowledged: retried, or redelivered by the broker after a restart
        self.draining = True
        self.stale = True

    @property
    def may_close(self) -> bool:
        """Reports held through an outage, and those queued behind them, go into their windows first."""
        return not self.held and not self.draining


class OutboxCount:
    def __init__(self, limit: int, gauge, wakeup: Callable[[], None]):  # noqa: ANN001
        self.limit = limit
        self.gauge = gauge
        self.wakeup = wakeup      # the forwarder's
        self.size = 0

    def restored(self, size: int) -> None:
        self.size = size
        self.gauge.set(size)

    def added(self) -> None:
        self.size += 1
        self.gauge.set(self.size)
        self.wakeup()

    def sent(self) -> None:
        self.size = max(0, self.size - 1)
        self.gauge.set(self.size)

    @property
    def full(self) -> bool:
        return self.size >= self.limit

    async def room(self, paused_gauge) -> None:  # noqa: ANN001 - a prometheus Gauge
        """Until the outbox has room again (paused_gauge says 1 meanwhile)."""
        import asyncio

        paused_gauge.set(1)
        while self.full:
            await asyncio.sleep(0.05)
        paused_gauge.set(0)
