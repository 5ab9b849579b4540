"""Dead letters: inputs that failed validation, kept where a service keeps its
state, so that one bad message is counted, looked at later, acknowledged,
and never stops the service.

Each rejection is counted by reason (a Prometheus counter with a `reason`
label), logged once per reason with a bounded excerpt (later ones at debug
level), and stored in a capped `quarantine` table of the service's SQLite
database. Storing is best effort: a full disk must not turn a bad message
into a crash. A flood of rejected input is stored in one transaction per
batch (`with quarantine.batch():`), not one fsynced commit per message."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Iterator

SCHEMA = """
CREATE TABLE IF NOT EXISTS quarantine (id INTEGER PRIMARY KEY AUTOINCREMENT, received REAL, source TEXT,
                                       reason TEXT, detail TEXT, excerpt BLOB);
"""
EXCERPT_BYTES = 256


def excerpt(payload: bytes | str, limit: int = EXCERPT_BYTES) -> bytes:
    data = payload.encode("utf-8", "replace") if isinstance(payload, str) else bytes(payload)
    return data[:limit]


class Quarantine:
    def __init__(self, db: sqlite3.Connection, counter, log: logging.Logger, keep: int = 1000):
        self.db = db
        self.counter = counter      # prometheus Counter with a "reason" label
        self.log = log
        self.keep = keep
        self.logged: set[str] = set()
        self._batching = False
        db.executescript(SCHEMA)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Rows put inside are stored in one transaction and pruned once: one
        fsync for a batch of rejected reports instead of two per report
        (which held the fog to ~300 rejected reports/s)."""
        if self._batching or self.db.in_transaction:
            yield
            return
        self._batching = True
        try:
            self.db.execute("BEGIN")
        except sqlite3.Error as err:
            self.log.debug("quarantine batch not started: %s", err)
        try:
            yield
        finally:
            self._batching = False
            try:
                if self.db.in_transaction:
                    self._prune()
                    self.db.execute("COMMIT")
            except sqlite3.Error as err:
                self.log.debug("quarantine rows not stored: %s", err)
                with contextlib.suppress(sqlite3.Error):
                    self.db.execute("ROLLBACK")

    def put(self, source: str, reason: str, detail: str, payload: bytes | str, now: float | None = None) -> None:
        self.counter.labels(reason).inc()
        head = excerpt(payload, 120)
        if reason not in self.logged:
            self.logged.add(reason)
            self.log.warning("quarantined input from %s (%s): %s; excerpt %r (further ones of this reason at debug)",
                             source, reason, detail[:300], head)
        else:
            self.log.debug("quarantined input from %s (%s): %s", source, reason, detail[:300])
        try:
            self.db.execute("INSERT INTO quarantine (received, source, reason, detail, excerpt) VALUES (?,?,?,?,?)",
                            (time.time() if now is None else now, source[:200], reason, detail[:1000],
                             excerpt(payload)))
            if not self._batching:
                self._prune()
        except sqlite3.Error as err:
            self.log.debug("quarantine row not stored: %s", err)

    def _prune(self) -> None:
        self.db.execute("DELETE FROM quarantine WHERE id <= (SELECT MAX(id) FROM quarantine) - ?", (self.keep,))

    def rows(self, limit: int = 100) -> list[tuple]:
        return self.db.execute("SELECT received, source, reason, detail, excerpt FROM quarantine "
                               "ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
