"""Run code under the real MicroPython WebAssembly port, as a stand-in board.

The npm package @micropython/micropython-webassembly-pyscript is installed by
`make test` into .tools/micropython (or point RASE_MICROPYTHON_MJS at its
micropython.mjs). The edge agent's device core is copied into the board's
/lib so snippets can `import rase_device.randomizer` as on a real board.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

from edge_agent.flash import DEVICE_CORE, device_core_sources

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MJS = ROOT / ".tools/micropython/node_modules/@micropython/micropython-webassembly-pyscript/micropython.mjs"
RUNNER = Path(__file__).with_name("wasm_board.mjs")

# Python expression giving a CSPRNG read function on the WebAssembly port.
WASM_URANDOM = "(lambda n: bytes(__import__('jsentropy').urandom(n)))"


class MicroPythonError(RuntimeError):
    def __init__(self, message: str, outputs: list[str]):
        super().__init__(message)
        self.outputs = outputs


def micropython_mjs() -> Path:
    path = Path(os.environ.get("RASE_MICROPYTHON_MJS", DEFAULT_MJS))
    if not path.is_file():
        raise FileNotFoundError(
            f"MicroPython WebAssembly port not found at {path}; run `make micropython` "
            "or set RASE_MICROPYTHON_MJS")
    return path


def run_micropython(snippets: list[str], *, with_agent: bool = True,
                    files: dict[str, str] | None = None, binfiles: dict[str, bytes] | None = None,
                    heapsize: int = 1 << 20,
                    timeout_s: float = 300.0) -> list[str]:
    """Run each snippet in one MicroPython instance; return each one's stdout."""
    node = shutil.which("node")
    if node is None:
        raise FileNotFoundError("node is required to run MicroPython WebAssembly")
    vfs = {}
    if with_agent:
        for name, text in device_core_sources().items():
            vfs[f"/lib/rase_device/{name}"] = text
    vfs.update(files or {})
    spec = {"mjs": str(micropython_mjs()), "files": vfs, "snippets": snippets, "heapsize": heapsize,
            "binfiles": {p: base64.b64encode(b).decode() for p, b in (binfiles or {}).items()}}
    proc = subprocess.run([node, str(RUNNER)], input=json.dumps(spec), capture_output=True,
                          text=True, timeout=timeout_s)
    outputs, cur = [], []
    for line in proc.stdout.splitlines():
        if line.startswith("\x01END ") or line.startswith("\x01ERROR "):
            outputs.append("\n".join(cur))
            cur = []
        else:
            cur.append(line)
    if proc.returncode != 0:
        raise MicroPythonError(
            f"MicroPython failed in snippet {len(outputs) - 1}: {proc.stderr.strip()}", outputs)
    return outputs


__all__ = ["run_micropython", "micropython_mjs", "MicroPythonError", "WASM_URANDOM", "DEVICE_CORE"]
