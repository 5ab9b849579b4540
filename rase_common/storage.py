"""A service's storage failing (disk full, read-only, I/O error) is a state,
not a crash (docs/reliability.md): the first failure is logged and the
`storage_ok` gauge drops to 0, writes are retried with a backoff doubling
from 1 s to 30 s, and the first success logs, resets and raises the gauge."""

from __future__ import annotations

import logging
import time


class StorageOutage:
    def __init__(self, gauge, log: logging.Logger, what: str, held: str):
        self.gauge = gauge          # prometheus Gauge: 1 while storage can be written
        self.log = log
        self.what = what            # e.g. "fog journal"
        self.held = held            # what waits meanwhile, e.g. "reports"
        self.retry_at: float | None = None
        self.backoff_s = 1.0

    def failed(self, err: Exception) -> None:
        if self.retry_at is None:
            self.log.error("%s cannot be written (%s): holding %s unacknowledged and retrying", self.what, err,
                           self.held)
        self.gauge.set(0)
        self.retry_at = time.monotonic() + self.backoff_s
        self.backoff_s = min(30.0, self.backoff_s * 2)

    def recovered(self) -> None:
        if self.retry_at is not None:
            self.log.warning("%s writable again: resuming", self.what)
            self.retry_at = None
            self.backoff_s = 1.0
            self.gauge.set(1)

    def wait_s(self) -> float | None:
        """Seconds until the next write may be tried; None while storage is fine."""
        return None if self.retry_at is None else max(0.0, self.retry_at - time.monotonic())
