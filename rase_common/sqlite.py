"""SQLite as the services use it: WAL mode, synchronous=FULL, autocommit,
explicit transactions, and errors turned into StorageError at this boundary.

Why FULL: in WAL mode with synchronous=NORMAL a commit survives the process
being killed, but not an OS crash or a power cut; with FULL every commit is
fsynced before it returns. The services acknowledge a message to its broker
only after the commit that stored it, so with FULL "acknowledged" means "on
disk". Each service commits once per batch, so the fsync is paid per batch,
not per message (docs/performance.md measures the cost).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from rase_common.errors import ConfigError, StorageError


def open_wal(path: str | Path, schema: str, *, synchronous: str = "FULL") -> sqlite3.Connection:
    """Open (creating) a database in WAL mode. A path that cannot be created
    or opened is one ConfigError naming it (a service cannot start without it)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={synchronous}")
        db.executescript(schema)
    except (OSError, sqlite3.Error) as err:
        raise ConfigError(f"cannot open the database {path}: {err} (is its directory writable?)") from None
    return db


@contextlib.contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Turn SQLite's errors (disk full, read-only, I/O) into StorageError."""
    try:
        yield
    except sqlite3.Error as err:
        raise StorageError(f"{what}: {err}") from err
