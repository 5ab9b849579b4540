"""The faultfs shim (simulators/faults/faultfs.c), built from source with
the machine's C compiler, under real child processes: a power cut keeps
what was fsynced and nothing else, SQLite in WAL mode keeps every commit
with synchronous=FULL and loses them with NORMAL (the model tells the two
apart), torn sectors never break a FULL database, and disk errors appear and
go on demand."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from simulators.faults.faultfs import FaultFs, library

WRITER = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"synced " * 1000)
os.fsync(fd)
os.write(fd, b"lost")
print("ready", flush=True)
sys.stdin.read()
"""

SQLITE = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=" + sys.argv[2])
db.execute("CREATE TABLE IF NOT EXISTS r (i INTEGER PRIMARY KEY, pad TEXT)")
for i in range(int(sys.argv[3])):
    db.execute("BEGIN")
    db.executemany("INSERT INTO r VALUES (?, ?)", [(i * 20 + k, "x" * 300) for k in range(20)])
    db.execute("COMMIT")
    print(i + 1, flush=True)            # committed: what a service would acknowledge now
print("ready", flush=True)
sys.stdin.read()
"""


def child(fs: FaultFs, code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **fs.env()})


def wait_line(proc: subprocess.Popen, want: str) -> list[str]:
    lines = []
    for line in proc.stdout:
        lines.append(line.strip())
        if lines[-1] == want:
            return lines
    raise AssertionError(f"child ended without {want!r}: {proc.stderr.read()}")


@pytest.fixture
def fs(tmp_path):
    return FaultFs(tmp_path / "data", tmp_path / "faults")


def test_the_library_is_built_from_source():
    lib = library()
    assert lib.exists() and lib.stat().st_mtime >= (lib.parent.parent.parent / "simulators/faults/faultfs.c").stat().st_mtime


def test_a_power_cut_keeps_what_was_fsynced_and_nothing_else(fs):
    path = fs.directory / "file"
    proc = child(fs, WRITER, str(path))
    wait_line(proc, "ready")
    assert path.read_bytes().endswith(b"lost")          # in the page cache before the cut
    report = fs.power_cut([proc])
    assert path.read_bytes() == b"synced " * 1000
    assert report.lost_bytes == {"file": 4}


def test_a_file_outside_the_directory_is_left_alone(fs, tmp_path):
    path = tmp_path / "elsewhere"
    proc = child(fs, WRITER, str(path))
    wait_line(proc, "ready")
    fs.power_cut([proc])
    assert path.read_bytes().endswith(b"lost")


@pytest.mark.parametrize("synchronous, keeps", [("FULL", True), ("NORMAL", False)])
def test_sqlite_wal_commits_survive_a_cut_only_when_fsynced(fs, synchronous, keeps):
    db_path = fs.directory / "db.sqlite"
    proc = child(fs, SQLITE, str(db_path), synchronous, "40")
    committed = int(wait_line(proc, "ready")[-2])
    fs.power_cut([proc])
    db = sqlite3.connect(db_path)
    try:
        rows = db.execute("SELECT COUNT(*) FROM r").fetchone()[0]
    except sqlite3.OperationalError:
        rows = 0                       # NORMAL never fsynced even the table's creation
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert (rows == committed * 20) is keeps, f"{rows} rows of {committed * 20} committed"


@pytest.mark.parametrize("seed", range(5))
def test_torn_sectors_never_break_a_full_database_or_lose_a_commit(fs, seed):
    """Cut while the child is committing, keeping a random half of every
    unsynced sector: SQLite's WAL checksums must discard the torn tail."""
    db_path = fs.directory / "db.sqlite"
    proc = child(fs, SQLITE, str(db_path), "FULL", "100000")
    committed = 0
    for line in proc.stdout:
        committed = int(line)
        if committed >= 30 + 17 * seed:
            break
    fs.power_cut([proc], torn_seed=seed)
    db = sqlite3.connect(db_path)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    rows = db.execute("SELECT COUNT(*) FROM r").fetchone()[0]
    assert rows >= committed * 20 and rows % 20 == 0     # every acknowledged commit, and whole commits only


@pytest.mark.parametrize("error, errno_name", [("ENOSPC", "ENOSPC"), ("EROFS", "EROFS")])
def test_disk_errors_come_and_go_on_demand(fs, error, errno_name):
    code = r"""
import errno, os, sys
path = sys.argv[1]
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
for line in sys.stdin:
    try:
        if line.strip() == "write":
            os.write(fd, b"x"); os.fsync(fd)
        else:
            os.close(os.open(path + ".new", os.O_WRONLY | os.O_CREAT, 0o644))
        print("ok", flush=True)
    except OSError as err:
        print(errno.errorcode[err.errno], flush=True)
"""
    proc = child(fs, code, str(fs.directory / "f"))

    def ask(what: str) -> str:
        proc.stdin.write(what + "\n")
        proc.stdin.flush()
        return proc.stdout.readline().strip()

    assert ask("write") == "ok"
    fs.fail_writes(error)
    assert ask("write") == errno_name
    assert ask("create") == ("EROFS" if error == "EROFS" else "ok")    # a full disk still opens files
    fs.fail_writes(None)
    assert ask("write") == "ok"
    proc.stdin.close()
    proc.wait(10)


def test_the_workdir_must_be_outside_the_watched_directory(tmp_path):
    with pytest.raises(ValueError, match="outside"):
        FaultFs(tmp_path, tmp_path / "faults")
