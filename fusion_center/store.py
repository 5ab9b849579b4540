"""Durable state of the fusion center (SQLite, WAL, synchronous=FULL: a
stored aggregate and a stored window survive a power cut).

- `windows`: every valid window received, stored before it is acknowledged.
- `aggregates`: one row per (scope, t), inserted once (idempotent), with a
  `published` flag so a restart republishes what a crash left unpublished.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from rase_common.sqlite import open_wal, storage_errors

SCHEMA = """
CREATE TABLE IF NOT EXISTS windows (region TEXT, t INTEGER, payload TEXT, received REAL,
                                    PRIMARY KEY (region, t));
CREATE TABLE IF NOT EXISTS aggregates (scope TEXT, t INTEGER, payload TEXT, published INTEGER DEFAULT 0,
                                       created REAL, PRIMARY KEY (scope, t));
-- The publisher looks for unpublished rows on every turn of the loop: without
-- this index that is a scan of every aggregate ever stored.
CREATE INDEX IF NOT EXISTS aggregates_unpublished ON aggregates (published, t);
-- The control message last broadcast: its schedule (epoch0 rebased by a change of period) outlives a restart.
CREATE TABLE IF NOT EXISTS control (name TEXT PRIMARY KEY, payload TEXT);
"""


class AggregateStore:
    def __init__(self, path: str | Path, readonly: bool = False):
        if readonly:
            if not Path(path).exists():
                raise FileNotFoundError(f"no aggregate store at {path}")
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
            return
        self.db = open_wal(path, SCHEMA)

    def close(self) -> None:
        self.db.close()

    def add_window(self, region: str, t: int, payload: str, received: float) -> bool:
        with storage_errors("fusion store"):
            cur = self.db.execute("INSERT OR IGNORE INTO windows VALUES (?,?,?,?)", (region, t, payload, received))
            return cur.rowcount == 1

    def add_windows(self, rows: list[tuple[str, int, str, float]]) -> list[bool]:
        """add_window for a batch, in one transaction (one fsync); per row,
        whether it was new."""
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            return [self.db.execute("INSERT OR IGNORE INTO windows VALUES (?,?,?,?)", row).rowcount == 1
                    for row in rows]

    def pending_windows(self) -> list[tuple[str, int, str, float]]:
        with storage_errors("fusion store"):
            return self.db.execute("SELECT region, t, payload, received FROM windows ORDER BY t, region").fetchall()

    def drop_windows(self, t: int) -> None:
        """Forget the stored windows of t (quarantined: they cannot be estimated)."""
        with storage_errors("fusion store"):
            self.db.execute("DELETE FROM windows WHERE t=?", (t,))

    def has_aggregate(self, scope: str, t: int) -> bool:
        with storage_errors("fusion store"):
            return self.db.execute("SELECT 1 FROM aggregates WHERE scope=? AND t=?", (scope, t)).fetchone() is not None

    def store_aggregate(self, scope: str, t: int, payload: str, created: float) -> bool:
        """Insert the aggregate and drop its windows in one transaction;
        False if (scope, t) was already stored."""
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            cur = self.db.execute("INSERT OR IGNORE INTO aggregates (scope, t, payload, created) VALUES (?,?,?,?)",
                                  (scope, t, payload, created))
            self.db.execute("DELETE FROM windows WHERE t=?", (t,))
            return cur.rowcount == 1

    def store_aggregates(self, scope: str, rows: list[tuple[int, str]], created: float) -> list[bool]:
        """store_aggregate for several timestamps in one transaction (one
        fsync); per row, whether it was new."""
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            out = []
            for t, payload in rows:
                cur = self.db.execute("INSERT OR IGNORE INTO aggregates (scope, t, payload, created) "
                                      "VALUES (?,?,?,?)", (scope, t, payload, created))
                self.db.execute("DELETE FROM windows WHERE t=?", (t,))
                out.append(cur.rowcount == 1)
            return out

    def unpublished(self) -> list[tuple[str, int, str]]:
        with storage_errors("fusion store"):
            return self.db.execute("SELECT scope, t, payload FROM aggregates WHERE published=0 ORDER BY t").fetchall()

    def mark_published(self, scope: str, t: int) -> None:
        with storage_errors("fusion store"):
            self.db.execute("UPDATE aggregates SET published=1 WHERE scope=? AND t=?", (scope, t))

    def save_control(self, payload: str) -> None:
        with storage_errors("fusion store"):
            self.db.execute("INSERT OR REPLACE INTO control VALUES ('broadcast', ?)", (payload,))

    def load_control(self) -> str | None:
        with storage_errors("fusion store"):
            row = self.db.execute("SELECT payload FROM control WHERE name='broadcast'").fetchone()
        return row[0] if row else None

    def recent(self, scope: str, t_from: int, t_to: int) -> list[dict]:
        rows = self.db.execute("SELECT payload FROM aggregates WHERE scope=? AND t BETWEEN ? AND ? ORDER BY t",
                               (scope, t_from, t_to)).fetchall()
        return [json.loads(p) for (p,) in rows]

    def latest(self, scope: str, limit: int) -> list[dict]:
        """The newest `limit` aggregates, oldest first."""
        rows = self.db.execute("SELECT payload FROM aggregates WHERE scope=? ORDER BY t DESC LIMIT ?",
                               (scope, limit)).fetchall()
        return [json.loads(p) for (p,) in reversed(rows)]

    def count(self, scope: str = "all") -> int:
        return self.db.execute("SELECT COUNT(*) FROM aggregates WHERE scope=?", (scope,)).fetchone()[0]
