"""Imports go one way: rase_common below the services, the `rase` CLI on top;
the device core imports only what MicroPython has."""

import ast
from pathlib import Path

import pytest

from edge_agent.flash import DEVICE_CORE

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("edge_agent", "fog_shuffler", "fusion_center", "simulators")
MICROPYTHON_MODULES = {"math", "os", "struct", "json", "time", "edge_agent", "umqtt", "network", "ntptime",
                       "machine", "hashlib"}
# hashlib.sha256 (HPKE's HKDF) is built into the ESP32, RP2, unix and WebAssembly ports.
HASHLIB_USERS = {"hpke.py"}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", SERVICES + ("rase_common",))
def test_no_package_imports_the_cli(package):
    for path in (ROOT / package).rglob("*.py"):
        assert "rase" not in imported_packages(path), f"{path.relative_to(ROOT)} imports the CLI package"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_rase_common_imports_no_service():
    # The one exception: rase_common.vdaf builds on the device core's Prio3
    # (encodings, parameters, the validity circuits), which imports nothing above it.
    core = {"edge_agent." + name[:-3] for name in DEVICE_CORE if name != "__init__.py"}
    for path in (ROOT / "rase_common").rglob("*.py"):
        used = imported_packages(path) & set(SERVICES)
        if used == {"edge_agent"}:
            modules = {m for m in imported_modules(path) if m.split(".")[0] == "edge_agent"}
            outside = {m for m in modules if m != "edge_agent" and m not in core
                       and m.rsplit(".", 1)[0] not in core}
            assert not outside, (path.relative_to(ROOT), outside)
        else:
            assert not used, path.relative_to(ROOT)


@pytest.mark.parametrize("name", DEVICE_CORE)
def test_device_core_imports_only_micropython_modules(name):
    used = imported_packages(ROOT / "edge_agent" / name) - {"__future__"}
    assert used <= MICROPYTHON_MODULES, (name, used - MICROPYTHON_MODULES)
    assert "hashlib" not in used or name in HASHLIB_USERS, (name, "hashlib")
