"""Imports go one way: rase_common below the services, the `rase` CLI on top;
the device core imports only what MicroPython has."""

import ast
from pathlib import Path

import pytest

from edge_agent.flash import DEVICE_CORE

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("edge_agent", "fog_shuffler", "fusion_center", "simulators")
# ssl and socket: the boards' transport (edge_agent/board_net.py: verified TLS, bounded sockets).
MICROPYTHON_MODULES = {"math", "os", "struct", "json", "time", "edge_agent", "umqtt", "network", "ntptime",
                       "machine", "ssl", "socket"}


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


def test_rase_common_imports_no_service():
    for path in (ROOT / "rase_common").rglob("*.py"):
        assert not imported_packages(path) & set(SERVICES), path.relative_to(ROOT)


@pytest.mark.parametrize("name", DEVICE_CORE)
def test_device_core_imports_only_micropython_modules(name):
    used = imported_packages(ROOT / "edge_agent" / name) - {"__future__"}
    assert used <= MICROPYTHON_MODULES, (name, used - MICROPYTHON_MODULES)
