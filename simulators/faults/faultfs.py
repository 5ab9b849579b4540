"""The faultfs shim (faultfs.c) from Python: build it, run processes under
it, cut their power, fail their disk.

    fs = FaultFs(data_dir, work_dir)
    proc = subprocess.Popen(cmd, env={**os.environ, **fs.env()})
    fs.fail_writes("EROFS"); ...; fs.fail_writes(None)    # a read-only spell
    report = fs.power_cut([proc])                         # SIGSTOP, SIGKILL, revert

What a power cut keeps: every byte that was fsynced (or fdatasynced) before
the cut, and the directory entries as they were. What it loses: every write
not yet fsynced; in the torn mode (`torn_seed`) each unsynced 512-byte sector
independently survives or not, which is what a disk with a volatile cache
may do. Not modelled: writes through a shared mmap (SQLite's -shm index; it
is deleted at the cut, and SQLite rebuilds it from the WAL), a directory
entry lost for want of a directory fsync, a sector written twice between
syncs coming back in its middle version, and a disk that lies about fsync.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SOURCE = Path(__file__).with_name("faultfs.c")
ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = ROOT / ".tools" / "faults"
SECTOR = 512
FAULTS = {None: 0, "ENOSPC": 1, "EROFS": 2}


def library() -> Path:
    """libfaultfs.so, compiled from faultfs.c with the machine's C compiler
    when missing or older than its source (`make faults` does the same)."""
    out = Path(os.environ.get("RASE_FAULTFS_LIB", BUILD_DIR / "libfaultfs.so"))
    if out.exists() and out.stat().st_mtime >= SOURCE.stat().st_mtime:
        return out
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise FileNotFoundError("no C compiler (cc or gcc) to build the faultfs shim: `make deps-test` installs gcc")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    proc = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(tmp), str(SOURCE),
                           "-ldl", "-lpthread"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building {SOURCE.name} failed:\n{proc.stderr}")
    os.replace(tmp, out)       # atomic: a concurrent build never leaves half a library
    return out


@dataclass
class CutReport:
    """What a power cut took away, per file (bytes of the live file that
    were not on the durable image)."""
    lost_bytes: dict[str, int] = field(default_factory=dict)
    kept_unsynced_sectors: int = 0     # torn mode: unsynced sectors that happened to survive
    removed: list[str] = field(default_factory=list)

    @property
    def total_lost(self) -> int:
        return sum(self.lost_bytes.values())


class FaultFs:
    """The shim's view of one data directory. `directory` holds the
    service's files (its database); `workdir` holds the durable images and
    the control byte, and must be outside `directory`."""

    def __init__(self, directory: Path, workdir: Path, *, power_cut: bool = True):
        self.directory = Path(directory).resolve()
        self.workdir = Path(workdir).resolve()
        if self.workdir == self.directory or self.directory in self.workdir.parents:
            raise ValueError(f"workdir {self.workdir} must be outside the watched directory {self.directory}")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.shadow = self.workdir / "durable" if power_cut else None
        if self.shadow is not None:
            self.shadow.mkdir(parents=True, exist_ok=True)
        self.control = self.workdir / "control"
        self.control.write_bytes(b"\0" * 4096)
        self.lib = library()

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment variables that put a process under the shim."""
        preload = (base or os.environ).get("LD_PRELOAD", "")
        return {"LD_PRELOAD": f"{self.lib} {preload}".strip(), "RASE_FAULTFS_DIR": str(self.directory),
                "RASE_FAULTFS_SHADOW": str(self.shadow or ""), "RASE_FAULTFS_CONTROL": str(self.control)}

    # -- disk errors -----------------------------------------------------------
    def fail_writes(self, error: str | None) -> None:
        """From now on writes under the directory fail with `error` ("ENOSPC":
        the disk is full; "EROFS": it went read-only, so opening for writing,
        unlink and fsync fail too), or succeed again (None)."""
        if error not in FAULTS:
            raise ValueError(f"error must be one of {sorted(k for k in FAULTS if k)} or None, got {error!r}")
        with open(self.control, "r+b") as f:      # the shim maps this page: no system call per check
            f.write(bytes([FAULTS[error]]))

    # -- power ---------------------------------------------------------------------
    def power_cut(self, procs: list[subprocess.Popen], *, torn_seed: int | None = None) -> CutReport:
        """Cut the power of every process at the same instant (all stopped
        first, then killed), then put the durable images back in place."""
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGSTOP)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait(30)
        return self.revert(torn_seed=torn_seed)

    def revert(self, *, torn_seed: int | None = None) -> CutReport:
        """The directory as the disk would hold it after the power came back.
        Only call this when no process under the shim is running."""
        if self.shadow is None:
            raise RuntimeError("this FaultFs does not model power cuts (power_cut=False)")
        report = CutReport()
        rng = random.Random(torn_seed) if torn_seed is not None else None
        for image in sorted(self.shadow.iterdir()):
            live = self.directory / image.name.replace("%", "/")
            durable = image.read_bytes()
            current = live.read_bytes() if live.exists() else b""
            after = durable if rng is None else self._torn(durable, current, rng, report)
            report.lost_bytes[image.name] = _differing_bytes(current, after)
            live.write_bytes(after)
            image.write_bytes(after)          # the next run starts from what the disk holds
        for shm in self.directory.glob("*-shm"):
            shm.unlink()                      # memory-mapped, never fsynced: SQLite rebuilds it from the WAL
            report.removed.append(shm.name)
        return report

    @staticmethod
    def _torn(durable: bytes, current: bytes, rng: random.Random, report: CutReport) -> bytes:
        """Each sector that differs from the durable image survives with
        probability 1/2; the size is the durable one, extended to the last
        surviving sector beyond it."""
        size = len(durable)
        out = bytearray(durable) + bytearray(max(0, len(current) - len(durable)))
        end = size
        for off in range(0, max(len(durable), len(current)), SECTOR):
            new, old = current[off:off + SECTOR], durable[off:off + SECTOR]
            if new == old or not new or rng.random() < 0.5:
                continue
            out[off:off + len(new)] = new
            report.kept_unsynced_sectors += 1
            end = max(end, off + len(new))
        return bytes(out[:end])


def _differing_bytes(a: bytes, b: bytes) -> int:
    """Bytes that differ between two versions of a file (a size change counts
    the bytes beyond the shorter one)."""
    common = min(len(a), len(b))
    diff = 0
    for i in range(0, common, SECTOR):
        x, y = a[i:i + SECTOR], b[i:i + SECTOR]
        if x != y:
            diff += sum(p != q for p, q in zip(x, y))
    return diff + abs(len(a) - len(b))
