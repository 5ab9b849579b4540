"""Crash and power-loss safety for the fog (SPEC 4): SQLite in WAL mode with
synchronous=FULL (rase_common.sqlite), one commit per batch.

- `reports`: accepted reports. A report is acknowledged to the broker only
  after the transaction holding it has committed. Open ones (done = 0) are
  restored into their windows after a restart; those of closed windows
  (done = 1) stay until their t leaves the allowed lateness, so a device is
  counted once per t across a window and its late batches.
- `outbox`: windows (and late batches, rev >= 1) shuffled and ready to
  forward, stored before the first send, so a restart resends the same bytes
  (never a second, different shuffle of the same data) and never reshuffles.
- `closed`: (region, t) closed so far, with the last revision, so a restart
  never reopens a window for late reports or shuffles it again. Forwarding is
  at-least-once: a kill between the broker's acknowledgement and `mark_sent`
  resends the same bytes, which the fusion center drops by (region, t, rev).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rase_common import deadletter
from rase_common.sqlite import open_wal, storage_errors

log = logging.getLogger(__name__)

# For benchmarks/end_to_end.py only, which measures what durable
# acknowledgements cost: NORMAL survives a killed process but not a power cut.
SYNCHRONOUS_ENV = "RASE_BENCH_JOURNAL_SYNCHRONOUS"

SCHEMA = """
CREATE TABLE IF NOT EXISTS reports (region TEXT, t INTEGER, device TEXT, y REAL, eps REAL, seq INTEGER,
                                    mech TEXT DEFAULT 'br', done INTEGER DEFAULT 0,
                                    PRIMARY KEY (region, t, device));
CREATE TABLE IF NOT EXISTS duplicates (region TEXT, t INTEGER, n INTEGER, PRIMARY KEY (region, t));
CREATE TABLE IF NOT EXISTS outbox (region TEXT, t INTEGER, rev INTEGER DEFAULT 0, payload TEXT,
                                   sent INTEGER DEFAULT 0, PRIMARY KEY (region, t, rev));
CREATE TABLE IF NOT EXISTS closed (region TEXT, t INTEGER, rev INTEGER DEFAULT 0, PRIMARY KEY (region, t));
"""

# Attacker detection (fog_shuffler.screen.detection): each device's statistics today
# (as of the last checkpoint, fog_shuffler.screen.screening), the devices quarantined,
# and release requests from `rase fog release` (written by the operator's
# command while the fog runs; the fog applies them).
DETECTION_SCHEMA = """
CREATE TABLE IF NOT EXISTS detector (device TEXT PRIMARY KEY, kind TEXT, day INTEGER, reports INTEGER, total REAL,
                                     cusum BLOB);
CREATE TABLE IF NOT EXISTS quarantined_devices (device TEXT PRIMARY KEY, t INTEGER, since REAL, test TEXT);
CREATE TABLE IF NOT EXISTS release_requests (device TEXT PRIMARY KEY, requested REAL);
"""


@dataclass(frozen=True)
class DetectionWrite:
    """What one batch writes for the detector, with its reports: its alarms,
    and the statistics when a checkpoint is due (fog_shuffler.screen.screening)."""
    states: list[tuple]                                  # DeviceState.as_row
    quarantined: list[tuple[str, int, float, str]] = field(default_factory=list)   # device, t, since, test


def _columns(db, table: str) -> set[str]:  # noqa: ANN001
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _upgrade(db) -> None:  # noqa: ANN001
    """Journals written by earlier versions keep working."""
    if "mech" not in _columns(db, "reports"):              # before report kinds: BR
        db.execute("ALTER TABLE reports ADD COLUMN mech TEXT DEFAULT 'br'")
    if "done" not in _columns(db, "reports"):              # before late batches: every row was open
        db.execute("ALTER TABLE reports ADD COLUMN done INTEGER DEFAULT 0")
    if "rev" not in _columns(db, "closed"):
        db.execute("ALTER TABLE closed ADD COLUMN rev INTEGER DEFAULT 0")
    if "rev" not in _columns(db, "outbox"):                # the key gains rev: rebuild the table
        with db:
            db.execute("BEGIN")
            db.execute("ALTER TABLE outbox RENAME TO outbox_v1")
            db.execute("CREATE TABLE outbox (region TEXT, t INTEGER, rev INTEGER DEFAULT 0, payload TEXT, "
                       "sent INTEGER DEFAULT 0, PRIMARY KEY (region, t, rev))")
            db.execute("INSERT INTO outbox (region, t, rev, payload, sent) "
                       "SELECT region, t, 0, payload, sent FROM outbox_v1")
            db.execute("DROP TABLE outbox_v1")


class Journal:
    def __init__(self, path: str | Path):
        synchronous = os.environ.get(SYNCHRONOUS_ENV, "FULL").upper()
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"{SYNCHRONOUS_ENV} must be FULL or NORMAL, got {synchronous!r}")
        if synchronous != "FULL":
            log.warning("fog journal with synchronous=%s (%s, a benchmark's switch): an acknowledged report "
                        "can be lost in a power cut", synchronous, SYNCHRONOUS_ENV)
        self.db = open_wal(path, SCHEMA + DETECTION_SCHEMA, synchronous=synchronous)
        with storage_errors("fog journal"):
            _upgrade(self.db)
        deadletter.create(self.db)

    def close(self) -> None:
        self.db.close()

    def add_reports(self, rows: list[tuple[str, int, str, float, float, int, str]],
                    duplicates: list[tuple[str, int]], detection: DetectionWrite | None = None) -> None:
        """One transaction (one fsync) for a batch of accepted reports and duplicate counts."""
        with self.transaction():
            self.write_reports(rows, duplicates)
            if detection is not None:
                self.write_detection(detection)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction (one fsync at its commit): what the fog's roles write for one batch.
        StorageError when the disk refuses it; nothing of it is then on disk."""
        with storage_errors("fog journal"), self.db:
            self.db.execute("BEGIN")
            yield self.db

    def write_reports(self, rows: list[tuple[str, int, str, float, float, int, str]],
                      duplicates: list[tuple[str, int]]) -> None:
        """Accepted local-DP reports and duplicate counts, inside an open transaction."""
        self.db.executemany("INSERT OR IGNORE INTO reports (region, t, device, y, eps, seq, mech) "
                            "VALUES (?,?,?,?,?,?,?)", rows)
        self.db.executemany("INSERT INTO duplicates VALUES (?,?,1) ON CONFLICT(region,t) DO UPDATE SET n=n+1",
                            duplicates)

    def open_reports(self) -> list[tuple[str, int, str, float, float, str]]:
        with storage_errors("fog journal"):
            return self.db.execute("SELECT region, t, device, y, eps, mech FROM reports WHERE done=0 "
                                   "ORDER BY rowid").fetchall()

    def seen_devices(self) -> dict[tuple[str, int], set[str]]:
        """Devices of closed windows, per (region, t)."""
        out: dict[tuple[str, int], set[str]] = defaultdict(set)
        with storage_errors("fog journal"):
            for region, t, device in self.db.execute("SELECT region, t, device FROM reports WHERE done=1"):
                out[(region, t)].add(device)
        return dict(out)

    def duplicate_counts(self) -> dict[tuple[str, int], int]:
        with storage_errors("fog journal"):
            return {(r, t): n for r, t, n in self.db.execute("SELECT region, t, n FROM duplicates")}

    def closed_windows(self) -> dict[tuple[str, int], int]:
        with storage_errors("fog journal"):
            return {(r, t): rev for r, t, rev in self.db.execute("SELECT region, t, rev FROM closed")}

    def close_window(self, region: str, t: int, payload: str | None, rev: int = 0) -> None:
        """Atomically: mark (region, t) closed at revision rev, its open
        reports done, and queue its message (None = suppressed)."""
        with storage_errors("fog journal"), self.db:
            self.db.execute("BEGIN")
            self.db.execute("INSERT OR REPLACE INTO closed VALUES (?,?,?)", (region, t, rev))
            self.db.execute("UPDATE reports SET done=1 WHERE region=? AND t=? AND done=0", (region, t))
            self.db.execute("DELETE FROM duplicates WHERE region=? AND t=?", (region, t))
            if payload is not None:
                self.db.execute("INSERT OR IGNORE INTO outbox (region, t, rev, payload) VALUES (?,?,?,?)",
                                (region, t, rev, payload))

    def unsent(self) -> list[tuple[str, int, str, int]]:
        """(region, t, payload, rev), oldest first."""
        with storage_errors("fog journal"):
            return self.db.execute("SELECT region, t, payload, rev FROM outbox WHERE sent=0 "
                                   "ORDER BY t, rev, region").fetchall()

    def dead_letter(self, row: tuple[str, int, str, int], reason: str) -> None:
        """A window the sink refused for good (rase_common.deadletter): out of the outbox, kept for a resend."""
        deadletter.put(self.db, "outbox", "sent", "region=? AND t=? AND rev=?", (row[0], row[1], row[3]), reason)

    def mark_sent(self, region: str, t: int, rev: int = 0) -> None:
        with storage_errors("fog journal"):
            self.db.execute("UPDATE outbox SET sent=1 WHERE region=? AND t=? AND rev=?", (region, t, rev))

    def prune(self, t_min: int) -> None:
        """Forget what no report still accepted can need: closed markers,
        closed windows' reports and sent messages older than t_min."""
        with storage_errors("fog journal"), self.db:
            self.db.execute("BEGIN")
            self.db.execute("DELETE FROM closed WHERE t < ?", (t_min,))
            self.db.execute("DELETE FROM reports WHERE done=1 AND t < ?", (t_min,))
            self.db.execute("DELETE FROM outbox WHERE sent=1 AND t < ?", (t_min,))

    # -- attacker detection -----------------------------------------------------------
    def write_detection(self, d: DetectionWrite) -> None:
        """A batch's detection write, inside an open transaction."""
        self.db.executemany("INSERT OR REPLACE INTO detector VALUES (?,?,?,?,?,?)", d.states)
        self.db.executemany("INSERT OR IGNORE INTO quarantined_devices VALUES (?,?,?,?)", d.quarantined)
        # A quarantined device's reports leave the open windows (and late batches) with it.
        self.db.executemany("DELETE FROM reports WHERE device=? AND done=0", [(q[0],) for q in d.quarantined])

    def save_detector_states(self, states: list[tuple]) -> None:
        """A checkpoint of the statistics between batches, in one transaction."""
        with storage_errors("fog journal"), self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR REPLACE INTO detector VALUES (?,?,?,?,?,?)", states)

    def detector_states(self) -> list[tuple]:
        with storage_errors("fog journal"):
            return self.db.execute("SELECT device, kind, day, reports, total, cusum FROM detector").fetchall()

    def quarantined_devices(self) -> dict[str, int]:
        with storage_errors("fog journal"):
            return dict(self.db.execute("SELECT device, t FROM quarantined_devices").fetchall())

    def release_requests(self) -> list[str]:
        with storage_errors("fog journal"):
            return [d for (d,) in self.db.execute("SELECT device FROM release_requests ORDER BY requested")]

    def release(self, device: str) -> None:
        """Apply a release: the device's quarantine, statistics and request go, in one transaction."""
        with storage_errors("fog journal"), self.db:
            self.db.execute("BEGIN")
            for table in ("quarantined_devices", "detector", "release_requests"):
                self.db.execute(f"DELETE FROM {table} WHERE device=?", (device,))


def request_release(path: str | Path, device: str, now: float) -> bool:
    """The operator's side of `rase fog release`: record a release request in
    the fog's journal (the running fog applies it within a period; a stopped
    one when it starts). False when the device is not quarantined."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no fog journal at {path}")
    db = open_wal(path, SCHEMA + DETECTION_SCHEMA)
    try:
        # The running fog commits every batch: take the write lock first (IMMEDIATE), waiting for its
        # commit, rather than reading and then finding the snapshot stale.
        db.execute("PRAGMA busy_timeout = 30000")
        with storage_errors("fog journal"), db:
            db.execute("BEGIN IMMEDIATE")
            if db.execute("SELECT 1 FROM quarantined_devices WHERE device=?", (device,)).fetchone() is None:
                return False
            db.execute("INSERT OR REPLACE INTO release_requests VALUES (?,?)", (device, now))
            return True
    finally:
        db.close()


def release_pending(path: str | Path, device: str) -> bool:
    """Whether a release request for the device still waits for the fog."""
    db = open_wal(path, SCHEMA + DETECTION_SCHEMA)
    try:
        return db.execute("SELECT 1 FROM release_requests WHERE device=?", (device,)).fetchone() is not None
    finally:
        db.close()


def quarantined_in(path: str | Path) -> list[tuple[str, int, float, str]]:
    """The devices a fog journal holds in quarantine: (device, t, since, test)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no fog journal at {path}")
    db = open_wal(path, SCHEMA + DETECTION_SCHEMA)
    try:
        return db.execute("SELECT device, t, since, test FROM quarantined_devices ORDER BY since").fetchall()
    finally:
        db.close()
