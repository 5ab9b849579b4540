"""`rase replay` stopped from outside: SIGTERM (what `timeout`, systemd and
CI send) stops the replay's Mosquitto and its two child processes (the
device fleet and the fusion center); after a SIGKILL, which the replay cannot
handle, the child processes notice their parent is gone and exit."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def children(pid: int) -> dict[int, str]:
    """pid -> command line of the processes whose parent is pid."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                out[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def start_replay(tmp_path) -> tuple[subprocess.Popen, dict[int, str]]:
    proc = subprocess.Popen([sys.executable, "-m", "rase.cli", "replay", "--houses", "1,2", "--hours", "6",
                             "--out", str(tmp_path / "r.jsonl")], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        kids = children(proc.pid)
        if sum("multiprocessing.spawn" in c for c in kids.values()) >= 2 and any("mosquitto" in c for c in kids.values()):
            time.sleep(1.0)                      # well into the run
            return proc, children(proc.pid)
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the replay did not start its broker and children: {children(proc.pid)}")


def gone_within(pids, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def test_sigterm_stops_the_replay_its_broker_and_its_children(tmp_path):
    proc, kids = start_replay(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 130
    assert "interrupted" in proc.stderr.read().decode()
    assert gone_within(kids, 10) == [], {p: kids[p] for p in kids if alive(p)}
    assert not (tmp_path / "r.jsonl").exists()


def test_after_sigkill_the_python_children_exit_on_their_own(tmp_path):
    proc, kids = start_replay(tmp_path)
    proc.kill()
    proc.wait(10)
    python_kids = [p for p, c in kids.items() if "multiprocessing.spawn" in c]
    try:
        assert len(python_kids) >= 2
        assert gone_within(python_kids, 10) == []
    finally:
        # Mosquitto cannot watch its parent: after a SIGKILL of the replay it is left running.
        for p, c in kids.items():
            if alive(p):
                os.kill(p, signal.SIGKILL)
