"""SQLite as the services use it: WAL mode, autocommit, explicit transactions."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def open_wal(path: str | Path, schema: str) -> sqlite3.Connection:
    """Open (creating) a database in WAL mode with synchronous=NORMAL: a
    commit survives the process being killed; only an OS crash or power loss
    can drop the last commits."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(schema)
    return db
