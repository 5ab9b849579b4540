"""Dead letters: outgoing items a broker refused for good.

An item an outbox could not send because of the item itself (the broker's
ACL refuses its topic, it is too large for the broker) fails the same way on
every retry: retrying it forever would block everything queued behind it and
log an error a second. Such a non-retriable failure moves the item, in one
transaction, out of its outbox (its row's sent flag becomes DEAD, so it is
neither sent nor made again) and into `dead_letters` with the reason; the
outbox goes on with the next item. Retriable failures (a broker down, no
PUBACK in time) still back off and retry the same item, so order holds.

An operator lists them and, once the cause is fixed (the ACL), sends them
again: `rase deadletters list --store PATH`, `rase deadletters resend --store
PATH --id N` (or `--all`), on the fog's journal or the fusion center's store,
while the service runs or not; the service sends a resent item at its next
turn. The metric rase_{fog,fusion}_dead_letters counts them (alert rule
RaseDeadLetters).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from rase_common.sqlite import storage_errors

DEAD = -1      # the outbox row's flag while its item is a dead letter
SCHEMA = """
CREATE TABLE IF NOT EXISTS dead_letters (id INTEGER PRIMARY KEY, tbl TEXT, flag TEXT, row_id INTEGER, reason TEXT,
                                         at REAL);
"""
# The outboxes that may hold dead letters: (table, its sent flag); each store registers its own
# (register_outbox) before it dead-letters anything. A resend touches only these.
OUTBOXES: set[tuple[str, str]] = {("outbox", "sent"), ("aggregates", "published")}


def register_outbox(table: str, flag: str) -> None:
    """A role's own outbox table (its `flag` column: 0 unsent, 1 sent, DEAD) may hold dead letters."""
    OUTBOXES.add((table, flag))


@dataclass(frozen=True)
class DeadLetter:
    id: int
    outbox: str
    reason: str
    at: float
    key: str          # what the item is (its outbox row's key columns)


def create(db: sqlite3.Connection) -> None:
    with storage_errors("dead letters"):
        db.executescript(SCHEMA)


def put(db: sqlite3.Connection, table: str, flag: str, where: str, params: tuple, reason: str,
        now: float | None = None) -> bool:
    """Move the outbox row `where` (e.g. "region=? AND t=?") of `table` to the
    dead letters, in one transaction; False when no such unsent row exists."""
    if (table, flag) not in OUTBOXES:
        raise ValueError(f"{table}.{flag} is not an outbox")
    with storage_errors("dead letters"), db:
        db.execute("BEGIN")
        row = db.execute(f"SELECT rowid FROM {table} WHERE {where} AND {flag}=0", params).fetchone()
        if row is None:
            return False
        db.execute(f"UPDATE {table} SET {flag}=? WHERE rowid=?", (DEAD, row[0]))
        db.execute("INSERT INTO dead_letters (tbl, flag, row_id, reason, at) VALUES (?,?,?,?,?)",
                   (table, flag, row[0], reason[:500], time.time() if now is None else now))
    return True


def listing(db: sqlite3.Connection) -> list[DeadLetter]:
    """Every dead letter, oldest first, with its item's key columns."""
    out = []
    with storage_errors("dead letters"):
        if db.execute("SELECT 1 FROM sqlite_master WHERE name='dead_letters'").fetchone() is None:
            return []
        for id_, tbl, flag, row_id, reason, at in db.execute(
                "SELECT id, tbl, flag, row_id, reason, at FROM dead_letters ORDER BY id").fetchall():
            if (tbl, flag) not in OUTBOXES:
                continue
            cols = [c[1] for c in db.execute(f"PRAGMA table_info({tbl})") if c[1] not in ("payload", flag)]
            keyrow = db.execute(f"SELECT {', '.join(cols)} FROM {tbl} WHERE rowid=?", (row_id,)).fetchone()
            key = ", ".join(f"{c}={v}" for c, v in zip(cols, keyrow)) if keyrow else "(gone)"
            out.append(DeadLetter(id_, tbl, reason, at, key))
    return out


def resend(db: sqlite3.Connection, ids: list[int] | None = None) -> int:
    """Put dead letters back in their outboxes (None: all); how many."""
    n = 0
    with storage_errors("dead letters"), db:
        db.execute("BEGIN IMMEDIATE")
        rows = db.execute("SELECT id, tbl, flag, row_id FROM dead_letters").fetchall()
        for id_, tbl, flag, row_id in rows:
            if (ids is not None and id_ not in ids) or (tbl, flag) not in OUTBOXES:
                continue
            db.execute(f"UPDATE {tbl} SET {flag}=0 WHERE rowid=? AND {flag}=?", (row_id, DEAD))
            db.execute("DELETE FROM dead_letters WHERE id=?", (id_,))
            n += 1
    return n


__all__ = ["DEAD", "DeadLetter", "create", "listing", "put", "resend"]
