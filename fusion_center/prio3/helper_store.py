"""The helper's durable state (secure aggregation, issue 20), in the fusion
center's store database (SQLite, WAL, synchronous=FULL), beside
fusion_center.store.

- `prio3_batches`: the leader's batch parts (nonce, public share, sealed
  helper share, the leader's verifier share), stored before they are
  acknowledged. No device id ever reaches them.
- `prio3_shares`: the leader's last message per window (its accepted reports
  and noisy aggregate share, or why it dropped the window).
- `prio3_windows`: `answered` once the helper's verifier shares are queued.
- `prio3_outbox`: the helper's answers, stored before the first send; a
  repeated batch part (the leader asking again) queues them again.
- `prio3_ready`: a window both sides finished: the region's unsharded total
  (the exact sum plus the leader's noise), its counts and reasons. Written in
  the transaction that forgets the window's shares; aggregated per t with the
  helper's own noise, and deleted once the aggregate is stored. The helper's
  noise is drawn when the aggregate is made: nothing carries it before the
  aggregate's own commit, so a crash before that loses nothing but a draw.
- `prio3_done`: windows finished (aggregated or dropped): a late repeat of
  their messages is ignored.
"""

from __future__ import annotations

import json

from rase_common.sqlite import storage_errors

SCHEMA = """
CREATE TABLE IF NOT EXISTS prio3_batches (region TEXT, t INTEGER, first INTEGER, payload TEXT, received REAL,
                                          PRIMARY KEY (region, t, first));
CREATE TABLE IF NOT EXISTS prio3_shares (region TEXT, t INTEGER, payload TEXT, PRIMARY KEY (region, t));
CREATE TABLE IF NOT EXISTS prio3_windows (region TEXT, t INTEGER, state TEXT, updated REAL, PRIMARY KEY (region, t));
CREATE TABLE IF NOT EXISTS prio3_outbox (region TEXT, t INTEGER, seq INTEGER, payload TEXT, sent INTEGER DEFAULT 0,
                                         PRIMARY KEY (region, t, seq));
CREATE TABLE IF NOT EXISTS prio3_ready (region TEXT, t INTEGER, record TEXT, ready REAL, PRIMARY KEY (region, t));
CREATE TABLE IF NOT EXISTS prio3_done (region TEXT, t INTEGER, reason TEXT, PRIMARY KEY (region, t));
"""


class HelperStore:
    def __init__(self, db):  # noqa: ANN001 - the fusion store's sqlite3 connection
        self.db = db
        with storage_errors("fusion store"):
            db.executescript(SCHEMA)

    def add(self, parts: list[tuple[str, int, int, str]], shares: list[tuple[str, int, str]], now: float
            ) -> list[tuple[str, int]]:
        """One transaction: batch parts and leader shares of windows not finished
        yet. Returns the windows whose batch came again although answered (the
        leader asked again: their answers are queued again)."""
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            return self.write(parts, shares, now)

    def write(self, parts: list[tuple[str, int, int, str]], shares: list[tuple[str, int, str]], now: float
              ) -> list[tuple[str, int]]:
        """add() inside a transaction the caller opened (the fusion center's one per intake batch)."""
        again = []
        for region, t, first, payload in parts:
            if self._finished(region, t):
                continue
            new = self.db.execute("INSERT OR IGNORE INTO prio3_batches VALUES (?,?,?,?,?)",
                                  (region, t, first, payload, now)).rowcount
            if not new and self.state(region, t) == "answered":
                self.db.execute("UPDATE prio3_outbox SET sent=0 WHERE region=? AND t=?", (region, t))
                again.append((region, t))
        for region, t, payload in shares:
            if not self._finished(region, t):
                self.db.execute("INSERT OR IGNORE INTO prio3_shares VALUES (?,?,?)", (region, t, payload))
        return again

    def _finished(self, region: str, t: int) -> bool:
        return self.db.execute("SELECT 1 FROM prio3_done WHERE region=? AND t=?", (region, t)).fetchone() is not None

    def state(self, region: str, t: int) -> str | None:
        with storage_errors("fusion store"):
            row = self.db.execute("SELECT state FROM prio3_windows WHERE region=? AND t=?", (region, t)).fetchone()
        return row[0] if row else None

    def windows(self) -> list[tuple[str, int, str | None, float]]:
        """Windows with a stored batch: (region, t, state, first part received)."""
        with storage_errors("fusion store"):
            return self.db.execute(
                "SELECT b.region, b.t, w.state, MIN(b.received) FROM prio3_batches b LEFT JOIN prio3_windows w "
                "ON w.region=b.region AND w.t=b.t GROUP BY b.region, b.t ORDER BY b.t, b.region").fetchall()

    def parts(self, region: str, t: int) -> list[str]:
        with storage_errors("fusion store"):
            return [p for (p,) in self.db.execute("SELECT payload FROM prio3_batches WHERE region=? AND t=? "
                                                  "ORDER BY first", (region, t))]

    def share(self, region: str, t: int) -> str | None:
        with storage_errors("fusion store"):
            row = self.db.execute("SELECT payload FROM prio3_shares WHERE region=? AND t=?", (region, t)).fetchone()
        return row[0] if row else None

    def answered(self, region: str, t: int, messages: list[str], now: float) -> None:
        """Atomically: the answer's parts are queued and the window is `answered`."""
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR IGNORE INTO prio3_outbox (region, t, seq, payload) VALUES (?,?,?,?)",
                                [(region, t, i, m) for i, m in enumerate(messages)])
            self.db.execute("INSERT OR REPLACE INTO prio3_windows VALUES (?,?,?,?)", (region, t, "answered", now))

    def finish(self, region: str, t: int, record: dict | None, now: float, reason: str | None = None) -> None:
        """Atomically: the window's shares are forgotten, and its record is
        ready to aggregate (record None: dropped, for `reason`)."""
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            for table in ("prio3_batches", "prio3_shares", "prio3_windows", "prio3_outbox"):
                self.db.execute(f"DELETE FROM {table} WHERE region=? AND t=?", (region, t))
            self.db.execute("INSERT OR REPLACE INTO prio3_done VALUES (?,?,?)", (region, t, reason))
            if record is not None:
                self.db.execute("INSERT OR IGNORE INTO prio3_ready VALUES (?,?,?,?)",
                                (region, t, json.dumps(record), now))

    def ready(self) -> list[tuple[str, int, dict, float]]:
        with storage_errors("fusion store"):
            return [(r, t, json.loads(rec), at) for r, t, rec, at in self.db.execute(
                "SELECT region, t, record, ready FROM prio3_ready ORDER BY t, region")]

    def aggregated(self, t: int) -> None:
        """The aggregate of t is stored: its ready records are done."""
        with storage_errors("fusion store"):
            self.db.execute("DELETE FROM prio3_ready WHERE t=?", (t,))

    def unsent(self) -> list[tuple[str, int, int, str]]:
        with storage_errors("fusion store"):
            return self.db.execute("SELECT region, t, seq, payload FROM prio3_outbox WHERE sent=0 "
                                   "ORDER BY t, region, seq").fetchall()

    def mark_sent(self, region: str, t: int, seq: int) -> None:
        with storage_errors("fusion store"):
            self.db.execute("UPDATE prio3_outbox SET sent=1 WHERE region=? AND t=? AND seq=?", (region, t, seq))

    def prune(self, t_min: int) -> None:
        """Forget finished windows' markers and answers older than t_min."""
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            self.db.execute("DELETE FROM prio3_done WHERE t < ?", (t_min,))
            self.db.execute("DELETE FROM prio3_outbox WHERE sent=1 AND t < ?", (t_min,))
