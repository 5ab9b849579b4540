"""Imports go one way (every package pair is checked).

Layers, bottom to top, one top-level folder each:
  0  rase_device: the device core, MicroPython builtins only
  1  rase_common: what the services share (errors, service skeleton, roles,
     protocol, mechanisms, transports, storage)
  2  the services: edge_agent (the CPython agent), fog_shuffler, fusion_center;
     none imports another
  3  simulators (replays, evaluation)
  4  rase, the CLI, on top of everything
  benchmarks may import any of these, never the tests.

A module may import its own package and any package of a lower layer, never
one of its own layer or above. Imports inside functions count too: a lazy
import is still an arrow. With strict layers there can be no package cycle;
module cycles inside a package are checked separately.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

from edge_agent.flash import DEVICE_CORE

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "rase_device"              # the device core
LAYER = {DEVICE: 0, "rase_common": 1, "edge_agent": 2, "fog_shuffler": 2, "fusion_center": 2, "simulators": 3,
         "rase": 4, "benchmarks": 5, "tests": 6}
PACKAGES = ("rase_device", "edge_agent", "rase_common", "fog_shuffler", "fusion_center", "simulators", "rase",
            "benchmarks")
MICROPYTHON_MODULES = {"math", "os", "struct", "json", "time", "gc", "sys", "micropython", "umqtt", "network",
                       "ntptime", "machine", "ssl", "socket", "hashlib", "select"}
CORE_NAMES = {name.removesuffix(".py") for name in DEVICE_CORE}
# hashlib.sha256 (HPKE's HKDF) is built into the ESP32, RP2, unix and WebAssembly ports; only HPKE uses it.
HASHLIB_USERS = {"hpke.py"}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str | None:
    """The layering unit a dotted module belongs to (None: not the project's)."""
    top = module.split(".")[0]
    return top if top in LAYER else None


def imports_of(path: Path, module: str | None = None) -> list[tuple[str, int]]:
    """(dotted module imported, line) for every import in the file, at any depth."""
    tree = ast.parse(path.read_text())
    module = module or module_name(path)
    pkg = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # "from rase_device import wire" imports the module rase_device.wire
            out += [(f"{mod}.{a.name}" if is_module(f"{mod}.{a.name}") else mod, node.lineno) for a in node.names]
    return out


def is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def project_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def arrows() -> list[tuple[str, str, str, int]]:
    """(from unit, to unit, file, line) for every import of another unit."""
    out = []
    for package in PACKAGES:
        for path in project_files(package):
            src = unit_of(module_name(path))
            for mod, line in imports_of(path):
                dst = unit_of(mod)
                if dst is not None and dst != src:
                    out.append((src, dst, str(path.relative_to(ROOT)), line))
    return out


@pytest.mark.parametrize("pair", list(itertools.permutations(sorted(LAYER), 2)), ids="->".join)
def test_no_arrow_runs_upward_or_sideways(pair):
    src, dst = pair
    bad = [f"{f}:{line}" for a, b, f, line in arrows() if (a, b) == pair]
    if LAYER[dst] < LAYER[src]:
        return                                   # downward: allowed
    assert not bad, f"{src} (layer {LAYER[src]}) must not import {dst} (layer {LAYER[dst]}): {bad}"


def test_device_core_imports_only_micropython_modules():
    for name in DEVICE_CORE:
        path = ROOT / "rase_device" / name
        for mod, line in imports_of(path):
            top = mod.split(".")[0]
            if top == "__future__":
                continue
            if top == "rase_device":
                assert mod.split(".")[1] in CORE_NAMES, f"rase_device/{name}:{line} imports {mod}, outside the bundle"
            else:
                assert top in MICROPYTHON_MODULES, f"rase_device/{name}:{line} imports {mod}"
                assert top != "hashlib" or name in HASHLIB_USERS, f"rase_device/{name}:{line} imports hashlib"


def test_every_device_core_module_is_micropython_only():
    """Not only the bundle: every module of rase_device (the naive baseline too) runs on a board."""
    for path in project_files("rase_device"):
        if path.name == "manifest.py":
            continue                       # MicroPython's build reads it; it is not imported
        for mod, line in imports_of(path):
            top = mod.split(".")[0]
            assert top in MICROPYTHON_MODULES | {"rase_device", "__future__"}, f"{path.name}:{line} imports {mod}"


def module_graph(package: str) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in project_files(package):
        me = module_name(path)
        graph[me] = {m for m, _ in imports_of(path) if m.split(".")[0] == package and m != me}
    known = set(graph)
    return {m: {d for d in deps if d in known} for m, deps in graph.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (c := visit(d)):
                return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_cycle_inside_a_package(package):
    cycle = find_cycle(module_graph(package))
    assert cycle is None, " -> ".join(cycle or [])


def test_the_checker_sees_an_upward_arrow(tmp_path):
    """The graph builder finds lazy imports and relative ones (so the checks above can fail)."""
    f = tmp_path / "x.py"
    f.write_text("def g():\n    from fog_shuffler import service\n    import rase.cli\n    from .merge import x\n")
    found = [m for m, _ in imports_of(f, "fusion_center.x")]
    assert found == ["fog_shuffler.service", "rase.cli", "fusion_center.merge"]
    assert [unit_of(m) for m in found] == ["fog_shuffler", "rase", "fusion_center"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]



def test_the_distribution_ships_every_package():
    """A non-editable install (the Docker image) has every package and
    subpackage of the checkout: setuptools finds them all."""
    import tomllib

    from setuptools import find_packages

    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    found = set(find_packages(str(ROOT), include=spec["include"]))
    on_disk = {module_name(p.parent) for pkg in ("rase_device", "edge_agent", "fog_shuffler", "fusion_center", "simulators",
                                                 "rase_common", "rase")
               for p in (ROOT / pkg).rglob("__init__.py")}
    assert on_disk <= found, on_disk - found


def test_every_top_level_folder_is_a_layer():
    """Layers equal folders: each top-level package of the checkout has a layer, and only those."""
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert on_disk == set(PACKAGES) - {"benchmarks"}, on_disk ^ (set(PACKAGES) - {"benchmarks"})
