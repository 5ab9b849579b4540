"""The typed error model every service shares, and the one retry policy.

Errors say what failed and whether trying again can help:

- TransportError: a broker could not be reached or did not confirm (retriable);
- StorageError: the service's own database cannot be written (retriable: a
  disk fills and empties, a volume comes back read-write);
- ProtocolError: an input that fails validation (never retriable: it is
  counted, quarantined and acknowledged);
- ConfigError: a configuration that cannot be used (never retriable: the
  service does not start).

Transport and storage errors are turned into these at the boundary (the
MQTT, Kafka and SQLite adapters); every retry loop backs off with `Backoff`,
on the `retriable` flag alone, and reports an outage through `Outage`: one
warning when it starts, one when it ends, a gauge in between.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field


class RaseError(Exception):
    """Base of the project's errors; `retriable` says whether a retry can help."""

    retriable = False

    def __init__(self, message: str, *, retriable: bool | None = None):
        super().__init__(message)
        if retriable is not None:
            self.retriable = retriable


class TransportError(RaseError):
    """A broker could not be reached, refused, or did not confirm in time."""

    retriable = True


class StorageError(RaseError):
    """The service's own store cannot be written or read."""

    retriable = True


class ProtocolError(RaseError):
    """An input that fails validation; `reason` is the counted label."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class ConfigError(RaseError, ValueError):
    """A configuration that cannot be used; the message names the field."""


@dataclass
class Backoff:
    """Exponential backoff, capped, with jitter (so a fleet that lost its
    broker does not come back in lockstep). next_s() gives the delay before
    the next attempt; reset() after a success.

    The default suits a service waiting for its broker or disk: first retry
    after 0.1 s, doubling, at most 2 s apart, each delay drawn from
    [1 - jitter, 1] of its nominal value (never longer than the cap)."""

    initial_s: float = 0.1
    cap_s: float = 2.0
    factor: float = 2.0
    jitter: float = 0.25
    attempts: int = 0
    rng: random.Random = field(default_factory=random.Random, repr=False)   # timing only, never privacy

    def __post_init__(self) -> None:
        if not (0 < self.initial_s <= self.cap_s):
            raise ValueError(f"backoff needs 0 < initial_s <= cap_s, got {self.initial_s} and {self.cap_s}")
        if self.factor < 1 or not (0 <= self.jitter < 1):
            raise ValueError(f"backoff needs factor >= 1 and jitter in [0, 1), got {self.factor}, {self.jitter}")

    def nominal_s(self, attempt: int) -> float:
        return min(self.cap_s, self.initial_s * self.factor ** min(attempt, 64))

    def next_s(self) -> float:
        nominal = self.nominal_s(self.attempts)
        self.attempts += 1
        return nominal * (1 - self.jitter * self.rng.random())

    def reset(self) -> None:
        self.attempts = 0


class Outage:
    """The state of one dependency (a broker, a disk): up, or down since a
    time, with the next retry due. One warning when an outage starts and one
    when it ends; a gauge (1 up, 0 down) and a counter of failed attempts in
    between; the retry delay from `backoff`.

    failed(err) -> seconds to wait before trying again; recovered() after a
    success; retry_in() -> None while up."""

    def __init__(self, what: str, log: logging.Logger, *, gauge=None, failures=None,  # noqa: ANN001 - prometheus
                 backoff: Backoff | None = None, clock=time.monotonic):
        self.what = what
        self.log = log
        self.gauge = gauge
        self.failures = failures
        self.backoff = backoff or Backoff()
        self.clock = clock
        self.since: float | None = None
        self.retry_at: float | None = None
        self.attempts = 0
        if gauge is not None:
            gauge.set(1)

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, err: BaseException) -> float:
        now = self.clock()
        if self.since is None:
            self.since = now
            self.log.warning("%s unavailable (%s); retrying with backoff up to %.3g s", self.what, err,
                             self.backoff.cap_s)
        else:
            self.log.debug("%s still unavailable: %s", self.what, err)
        self.attempts += 1
        if self.gauge is not None:
            self.gauge.set(0)
        if self.failures is not None:
            self.failures.inc()
        delay = self.backoff.next_s()
        self.retry_at = now + delay
        return delay

    def recovered(self) -> None:
        if self.since is None:
            return
        self.log.warning("%s available again after %.1f s and %d failed attempts", self.what,
                         self.clock() - self.since, self.attempts)
        self.since = self.retry_at = None
        self.attempts = 0
        self.backoff.reset()
        if self.gauge is not None:
            self.gauge.set(1)

    def retry_in(self) -> float | None:
        """Seconds until the next attempt is due (0 when due); None while up."""
        if self.retry_at is None:
            return None
        return max(0.0, self.retry_at - self.clock())
