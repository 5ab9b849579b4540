"""Dead letters: inputs that failed validation, kept where a service keeps its
state, so that one bad message is counted, looked at later, acknowledged,
and never stops the service.

Each rejection is counted by reason (a Prometheus counter with a `reason`
label), logged once per reason with a bounded excerpt (later ones at debug
level), and stored in a capped `quarantine` table of the service's SQLite
database. Storing is best effort: a full disk must not turn a bad message
into a crash."""

from __future__ import annotations

import logging
import sqlite3
import time

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
        db.executescript(SCHEMA)

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
            self.db.execute("DELETE FROM quarantine WHERE id <= (SELECT MAX(id) FROM quarantine) - ?", (self.keep,))
        except sqlite3.Error as err:
            self.log.debug("quarantine row not stored: %s", err)

    def rows(self, limit: int = 100) -> list[tuple]:
        return self.db.execute("SELECT received, source, reason, detail, excerpt FROM quarantine "
                               "ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
