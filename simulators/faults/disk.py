"""A small real disk (a tmpfs) that can be filled to the last byte and
emptied again, for a service's data directory. Mounting needs root (as
`make test` runs here); `SmallDisk.available()` says whether it works, and
callers fall back to the faultfs shim's ENOSPC (simulators.faults.faultfs)."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path


class SmallDisk:
    def __init__(self, mountpoint: Path, size: str = "64m"):
        self.mountpoint = Path(mountpoint)
        self.size = size
        self.mounted = False
        self.ballast = self.mountpoint / ".ballast"

    @staticmethod
    def available(probe_dir: Path) -> bool:
        """Whether a tmpfs can be mounted here (tried, then undone)."""
        probe = Path(probe_dir) / ".tmpfs-probe"
        disk = SmallDisk(probe, "1m")
        try:
            disk.mount()
        except OSError:
            return False
        disk.unmount()
        probe.rmdir()
        return True

    def mount(self) -> "SmallDisk":
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", str(self.mountpoint)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise OSError(f"cannot mount a tmpfs at {self.mountpoint}: {proc.stderr.strip()}")
        self.mounted = True
        return self

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.mountpoint)], capture_output=True)
            self.mounted = False

    def fill(self) -> int:
        """Write ballast until the file system says it is full; bytes written."""
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        written = 0
        try:
            for size in (1 << 20, 1 << 16, 1 << 10, 1):
                try:
                    while True:
                        written += os.write(fd, b"\0" * size)
                except OSError as err:
                    if err.errno != errno.ENOSPC:
                        raise
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        self.ballast.unlink(missing_ok=True)

    def __enter__(self) -> "SmallDisk":
        return self.mount()

    def __exit__(self, *exc) -> None:
        self.unmount()
