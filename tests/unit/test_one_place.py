"""One place to change: what adding a mechanism or a role touches, counted
from the code itself, so the counts docs/architecture.md states stay true.

- A local-DP mechanism is named (as a string) only by its device module, the
  device's table, its server module and the registry, and its module file is
  listed in the firmware manifest: five places.
- A role is named by its own module and by one other place: the registry entry
  of the mechanism it serves (a "package.module:Class" string) or, for a role
  of no mechanism, the host's list of roles: two places.
- The services name no mode: no code token of the fog or the fusion center
  outside their prio3/ folders says prio3 (comments may).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from rase_common.mechanisms.registry import REGISTRY, SECURE
from rase_common.role import Role
from rase_device.mechanisms import RANDOMIZERS

ROOT = Path(__file__).resolve().parents[2]
# What a deployment runs (simulators and the CLI name mechanisms to choose among them; tests and benchmarks too).
PRODUCT = ("rase_device", "rase_common", "edge_agent", "fog_shuffler", "fusion_center")
# BR is also the report kind of windows written before kinds existed (the window schema's default, v1
# journals): the window and estimate code names it as that default, so it is not counted here.
LEGACY_DEFAULT = "br"
ADDING_A_MECHANISM = 5
ADDING_A_ROLE = 2


def product_files() -> list[Path]:
    return sorted(p for pkg in PRODUCT for p in (ROOT / pkg).rglob("*.py"))


def constants(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def places_of_mechanism(name: str) -> set[str]:
    named = {rel(p) for p in product_files() if name in constants(p)}
    module = next(row[1] for row in RANDOMIZERS if row[0] == name)
    return named | {f"rase_device/{module}.py", "rase_device/manifest.py"}


@pytest.mark.parametrize("name", [m for m in REGISTRY if m != LEGACY_DEFAULT])
def test_adding_a_mechanism_touches_five_places(name):
    server = "rase_common/mechanisms/" + type(REGISTRY[name]).__module__.rsplit(".", 1)[1] + ".py"
    module = next(row[1] for row in RANDOMIZERS if row[0] == name)
    want = {f"rase_device/{module}.py", "rase_device/mechanisms.py", server, "rase_common/mechanisms/registry.py",
            "rase_device/manifest.py"}
    assert places_of_mechanism(name) == want, "a mechanism is named outside its five places"
    assert len(want) == ADDING_A_MECHANISM
    assert f'"{module}.py"' in (ROOT / "rase_device/manifest.py").read_text()


def role_classes_in_services() -> dict[str, str]:
    """Role subclass name -> the module that defines it."""
    out = {}
    for pkg in ("fog_shuffler", "fusion_center"):
        for p in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(p.read_text())):
                if isinstance(node, ast.ClassDef) and any(getattr(b, "id", "") in ("Role", "ReportRole", "Screen")
                                                         for b in node.bases):
                    out[node.name] = rel(p)
    return out


def test_adding_a_role_touches_two_places():
    roles = role_classes_in_services()
    assert {"LdpReports", "LeaderRole", "ScreenRole", "ControlFollower", "LdpEstimation", "HelperRole",
            "ControlAnnouncer", "AggregatePublisher"} <= set(roles), roles
    for cls, home in roles.items():
        if cls in ("ReportRole",):
            continue                     # the base every report role shares
        naming = {rel(p) for p in product_files() + sorted((ROOT / "rase").rglob("*.py"))
                  if re.search(rf"\b{cls}\b", _code(p))}
        assert home in naming and len(naming) == ADDING_A_ROLE, (cls, sorted(naming))


def test_every_registry_role_is_a_role():
    from rase_common.role import load_role

    for m in list(REGISTRY.values()) + list(SECURE.values()):
        for path in (m.fog_role, m.fusion_role):
            assert issubclass(load_role(path), Role), path


def _code(path: Path) -> str:
    """A file's code tokens: names and strings, without comments and docstrings."""
    out, previous = [], None
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.COMMENT:
            continue
        if tok.type == tokenize.STRING and previous in (None, tokenize.INDENT, tokenize.NEWLINE, tokenize.DEDENT):
            previous = tok.type
            continue                     # a docstring (or a bare string statement)
        if tok.type in (tokenize.NAME, tokenize.STRING):
            out.append(tok.string)
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            previous = tok.type
    return " ".join(out)


def test_the_services_name_no_mode():
    """Outside fog_shuffler/prio3 and fusion_center/prio3, no code of the services says prio3."""
    named = [rel(p) for pkg in ("fog_shuffler", "fusion_center") for p in sorted((ROOT / pkg).rglob("*.py"))
             if "/prio3/" not in rel(p) and re.search("prio3", _code(p), re.I)]
    assert named == []


# Where the secure mode is still named outside its own modules, and why (docs/architecture.md):
# the wire formats (the control message's and the aggregate's `prio3` fields, which flashed devices and
# subscribers read), the one home of every topic, and the device core, which dispatches to its secure
# client in its own table, parser and pinned-key policy (MicroPython: no registry of classes by name).
SECURE_NAMED_ELSEWHERE = {"rase_common/protocol/control.py", "rase_common/protocol/aggregate.py",
                          "rase_common/protocol/topics.py", "rase_device/core.py", "rase_device/policy.py",
                          "rase_device/wire.py", "rase_device/mechanisms.py"}
# Own modules; the registry; the firmware manifest, which lists every device-core file by name.
OWN = re.compile(r"(prio3|secagg|vdaf|hpke|flp|turboshake|x25519|chacha20poly1305)|mechanisms/registry\.py$|manifest\.py$")


def test_where_the_secure_mode_is_named_outside_its_own_modules():
    named = {rel(p) for p in product_files() if not OWN.search(rel(p)) and re.search("prio3", _code(p), re.I)}
    assert named == SECURE_NAMED_ELSEWHERE
