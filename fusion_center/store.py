"""Durable state of the fusion center (SQLite, WAL, synchronous=FULL: a
stored aggregate and a stored window survive a power cut).

- `windows`: every valid window received (and each late batch, rev >= 1),
  stored before it is acknowledged; kept once aggregated (done = 1) while a
  late batch may still revise its t, then pruned.
- `aggregates`: one row per (scope, t), with its `revision` (0, then one more
  per late batch folded in) and a `published` flag, so a restart republishes
  what a crash left unpublished. Idempotent: a window stored twice changes
  nothing, and a revision is stored once.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

from rase_common import deadletter
from rase_common.sqlite import open_wal, storage_errors

SCHEMA = """
CREATE TABLE IF NOT EXISTS windows (region TEXT, t INTEGER, rev INTEGER DEFAULT 0, payload TEXT, received REAL,
                                    done INTEGER DEFAULT 0, PRIMARY KEY (region, t, rev));
CREATE TABLE IF NOT EXISTS aggregates (scope TEXT, t INTEGER, payload TEXT, published INTEGER DEFAULT 0,
                                       created REAL, revision INTEGER DEFAULT 0, PRIMARY KEY (scope, t));
-- The publisher looks for unpublished rows on every turn of the loop: without
-- this index that is a scan of every aggregate ever stored.
CREATE INDEX IF NOT EXISTS aggregates_unpublished ON aggregates (published, t);
-- The control message last broadcast: its schedule (epoch0 rebased by a change of period) outlives a restart.
CREATE TABLE IF NOT EXISTS control (name TEXT PRIMARY KEY, payload TEXT);
"""


def _upgrade(db) -> None:  # noqa: ANN001
    """Stores written by earlier versions keep working."""
    cols = {row[1] for row in db.execute("PRAGMA table_info(aggregates)")}
    if "revision" not in cols:
        db.execute("ALTER TABLE aggregates ADD COLUMN revision INTEGER DEFAULT 0")
    if "rev" not in {row[1] for row in db.execute("PRAGMA table_info(windows)")}:
        with db:
            db.execute("BEGIN")
            db.execute("ALTER TABLE windows RENAME TO windows_v1")
            db.execute("CREATE TABLE windows (region TEXT, t INTEGER, rev INTEGER DEFAULT 0, payload TEXT, "
                       "received REAL, done INTEGER DEFAULT 0, PRIMARY KEY (region, t, rev))")
            db.execute("INSERT INTO windows (region, t, payload, received) SELECT region, t, payload, received "
                       "FROM windows_v1")
            db.execute("DROP TABLE windows_v1")


class AggregateStore:
    def __init__(self, path: str | Path, readonly: bool = False):
        if readonly:
            if not Path(path).exists():
                raise FileNotFoundError(f"no aggregate store at {path}")
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
            return
        self.db = open_wal(path, SCHEMA)
        with storage_errors("fusion store"):
            _upgrade(self.db)
        deadletter.create(self.db)

    def close(self) -> None:
        self.db.close()

    def add_windows(self, rows: list[tuple[str, int, int, str, float]]) -> list[bool]:
        """(region, t, rev, payload, received) in one transaction (one fsync);
        per row, whether it was new."""
        with self.transaction():
            return self.write_windows(rows)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction (one fsync at its commit): what the fusion center's roles write for one batch."""
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            yield self.db

    def write_windows(self, rows: list[tuple[str, int, int, str, float]]) -> list[bool]:
        """add_windows inside an open transaction."""
        return [self.db.execute("INSERT OR IGNORE INTO windows (region, t, rev, payload, received) "
                                "VALUES (?,?,?,?,?)", row).rowcount == 1 for row in rows]

    def window_payload(self, region: str, t: int, rev: int) -> str | None:
        with storage_errors("fusion store"):
            row = self.db.execute("SELECT payload FROM windows WHERE region=? AND t=? AND rev=?",
                                  (region, t, rev)).fetchone()
        return None if row is None else row[0]

    def pending_windows(self) -> list[tuple[str, int, str, float]]:
        """Windows stored and not yet in an aggregate: (region, t, payload, received)."""
        with storage_errors("fusion store"):
            return self.db.execute("SELECT region, t, payload, received FROM windows WHERE done=0 "
                                   "ORDER BY t, region, rev").fetchall()

    def aggregated_windows(self, t: int) -> list[str]:
        """The windows already in t's aggregate (a late batch revises it with them)."""
        with storage_errors("fusion store"):
            return [p for (p,) in self.db.execute("SELECT payload FROM windows WHERE t=? AND done=1 "
                                                  "ORDER BY region, rev", (t,))]

    def drop_windows(self, t: int) -> None:
        """Forget the pending windows of t (quarantined: they cannot be estimated)."""
        with storage_errors("fusion store"):
            self.db.execute("DELETE FROM windows WHERE t=? AND done=0", (t,))

    def prune_windows(self, t_min: int) -> None:
        """Forget aggregated windows no late batch can revise any more."""
        with storage_errors("fusion store"):
            self.db.execute("DELETE FROM windows WHERE done=1 AND t < ?", (t_min,))

    def revision(self, scope: str, t: int) -> int | None:
        """The stored aggregate's revision for t, or None."""
        with storage_errors("fusion store"):
            row = self.db.execute("SELECT revision FROM aggregates WHERE scope=? AND t=?", (scope, t)).fetchone()
        return None if row is None else row[0]

    def has_aggregate(self, scope: str, t: int) -> bool:
        return self.revision(scope, t) is not None

    def store_aggregates(self, scope: str, rows: list[tuple[int, str, int, list[tuple[str, int]]]],
                         created: float) -> list[bool]:
        """Store (t, payload, revision, included) rows in one transaction (one
        fsync): a new t, or a newer revision of one (published again); mark
        aggregated exactly the windows `included` ((region, rev) of t) were
        estimated from. Not every pending window of t: one that arrived while
        this revision was being estimated is not in it, and stays pending for
        the next revision (marked done here, it was counted twice by that next
        revision, or lost by a crash before it). Per row, whether it was stored
        (not a repeat)."""
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            out = []
            for t, payload, revision, included in rows:
                cur = self.db.execute(
                    "INSERT INTO aggregates (scope, t, payload, created, revision) VALUES (?,?,?,?,?) "
                    "ON CONFLICT(scope, t) DO UPDATE SET payload=excluded.payload, revision=excluded.revision, "
                    "published=0, created=excluded.created WHERE excluded.revision > aggregates.revision",
                    (scope, t, payload, created, revision))
                self.db.executemany("UPDATE windows SET done=1 WHERE region=? AND t=? AND rev=? AND done=0",
                                    [(region, t, rev) for region, rev in included])
                out.append(cur.rowcount == 1)
            return out

    def store_aggregate(self, scope: str, t: int, payload: str, created: float,
                        included: Sequence[tuple[str, int]] = ()) -> bool:
        """One aggregate (secure aggregation's have no windows here: `included` is empty)."""
        return self.store_aggregates(scope, [(t, payload, 0, list(included))], created)[0]

    def newest_t(self, scope: str = "all") -> int | None:
        with storage_errors("fusion store"):
            return self.db.execute("SELECT MAX(t) FROM aggregates WHERE scope=?", (scope,)).fetchone()[0]

    def unpublished(self) -> list[tuple[str, int, str, int]]:
        """(scope, t, payload, revision) not yet published, oldest first."""
        with storage_errors("fusion store"):
            return self.db.execute("SELECT scope, t, payload, revision FROM aggregates WHERE published=0 "
                                   "ORDER BY t").fetchall()

    def mark_published(self, scope: str, t: int, revision: int = 0) -> None:
        """Only that revision: a newer one stored meanwhile is still to publish."""
        with storage_errors("fusion store"):
            self.db.execute("UPDATE aggregates SET published=1 WHERE scope=? AND t=? AND revision=?",
                            (scope, t, revision))

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
