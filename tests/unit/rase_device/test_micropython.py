"""The device core under the real MicroPython (WebAssembly port run by node)
and through mpy-cross: the same code, the same distribution, the same ledger."""

import json

import pytest

from rase_device.entropy import RandomBits
from edge_agent.flash import DEVICE_CORE, PACKAGE_DIR, compile_mpy
from rase_device.randomizer import BudgetRandomizer, Calibration
from rase_common.protocol.report import Report
from tests.seeded_bytes import SOURCE as XORSHIFT, XorShiftBytes
from tests.stats import P_MIN, chisquare_integers, dlaplace_pmf

pytestmark = pytest.mark.micropython


@pytest.mark.parametrize("name", DEVICE_CORE)
def test_device_core_compiles_with_mpy_cross(name, tmp_path):
    out = tmp_path / name.replace(".py", ".mpy")
    compile_mpy(PACKAGE_DIR / name, out)
    assert out.stat().st_size > 0


def test_manifest_lists_the_device_core():
    """The firmware manifest is the one list of the bundle's modules (edge_agent.flash reads it): it
    holds every mechanism's randomizer module and every device-core module the listed ones import,
    so a board never lacks one; a new mechanism's module is added there."""
    import ast

    from rase_device.mechanisms import RANDOMIZERS

    listed = set(DEVICE_CORE)
    assert {row[1] + ".py" for row in RANDOMIZERS} <= listed, "add the randomizer module to rase_device/manifest.py"
    for name in DEVICE_CORE:
        for node in ast.walk(ast.parse((PACKAGE_DIR / name).read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] + [node.module or ""] \
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rase_device") else []
            for mod in mods:
                parts = mod.split(".")
                if parts[0] == "rase_device" and len(parts) > 1 and (PACKAGE_DIR / f"{parts[1]}.py").is_file():
                    assert f"{parts[1]}.py" in listed, f"{name} imports {mod}: add {parts[1]}.py to the manifest"


def test_sampler_distribution_under_micropython(micropython):
    n = 100_000
    code = XORSHIFT + f"""
import json
from rase_device.entropy import RandomBits
from rase_device.dlaplace import DiscreteLaplace
d = DiscreteLaplace(10, 3)
bits = RandomBits(read=XorShiftBytes(12345))
h = {{}}
for _ in range({n}):
    z = d.draw(bits)
    h[z] = h.get(z, 0) + 1
print(json.dumps([d.t, d.s, h]))
"""
    t, s, hist = json.loads(micropython([code])[0])
    samples = [int(z) for z, c in hist.items() for _ in range(c)]
    assert len(samples) == n
    p, bins = chisquare_integers(samples, dlaplace_pmf(t / s), -20, 20)
    assert p > P_MIN, f"p={p:.2e} over {bins} bins"


def test_same_bytes_give_the_same_reports_on_both(micropython):
    """One code base: fed the same byte stream, CPython and MicroPython give
    bit-identical randomized outputs (branching, rounding, clamping)."""
    code = XORSHIFT + """
import json
from rase_device.entropy import RandomBits
from rase_device.randomizer import BudgetRandomizer, Calibration
r = BudgetRandomizer(Calibration(0.5, 0.9, 0.0, 4000.0, 0.5), RandomBits(read=XorShiftBytes(777)))
out = []
for i in range(1500):
    out.append(r.randomize((i * 37) % 4500 - 100.0, (0.1, 1.0, 5.0)[i % 3]))
print(json.dumps(out))
"""
    mp_out = json.loads(micropython([code])[0])
    r = BudgetRandomizer(Calibration(0.5, 0.9, 0.0, 4000.0, 0.5), RandomBits(read=XorShiftBytes(777)))
    cp_out = [list(r.randomize((i * 37) % 4500 - 100.0, (0.1, 1.0, 5.0)[i % 3])) for i in range(1500)]
    assert mp_out == cp_out


def test_ledger_under_micropython_refuses_overspend_and_survives_restart(micropython):
    first = """
from rase_device.ledger import BudgetLedger
led = BudgetLedger('/ledger.json', 2.0, 86400)
print([led.try_spend(0.75, 100.0) for _ in range(3)])
"""
    # A second BudgetLedger object over the same file, as after a reboot.
    second = """
from rase_device.ledger import BudgetLedger
led2 = BudgetLedger('/ledger.json', 2.0, 86400)
print(led2.remaining(200.0), led2.try_spend(0.5, 200.0), led2.try_spend(0.5, 86400.0 * 3))
"""
    out = micropython([first, second])
    assert out[0] == "[True, True, False]"
    assert out[1] == "0.5 True True"


def test_agent_core_under_micropython_refuses_a_schedule_change_without_since_t(micropython):
    """Issue 29, item 4, on the board's interpreter: refused, status control_rejected, t goes on."""
    code = """
import json
from rase_device.core import AgentCore
from rase_device.ledger import BudgetLedger
from rase_device.entropy import RandomBits
from rase_device.randomizer import Calibration
core = AgentCore('h1a1', 'r1', 1.0, BudgetLedger('/l.json', 100.0, 86400), Calibration(), period_s=8, epoch0=0,
                 bits=RandomBits(read=%s))
core.step(10.0, 80.0)
try:
    core.apply_control(json.dumps({'v': 1, 'beta': 0.5, 'rho': 0.9, 'x_min': 0, 'x_max': 4000, 'gamma': 1,
                                   'period_s': 16, 'eps_levels': [1.0], 'mechanism': 'duchi'}))
    print('applied')
except ValueError as err:
    print('refused', 'since_t' in str(err))
print(core.status, core.period_s, core.step(10.0, 88.0) is not None, core.last_t)
""" % "(lambda n: bytes(__import__('jsentropy').urandom(n)))"
    lines = micropython([code])[0].splitlines()
    assert lines == ["refused True", "control_rejected 8 True 11"]


def test_agent_core_under_micropython_emits_valid_reports(micropython):
    code = """
import json
from rase_device.core import AgentCore
from rase_device.entropy import RandomBits
from rase_device.ledger import BudgetLedger
from rase_device.randomizer import Calibration
core = AgentCore('h1a1', 'r1', 1.0, BudgetLedger('/l.json', 100.0, 86400), Calibration(),
                 period_s=8, epoch0=0, bits=RandomBits(read=%s))
core.apply_control(json.dumps({'v': 1, 'beta': 0.5, 'rho': 0.9, 'x_min': 0, 'x_max': 2000,
                               'gamma': 2, 'period_s': 8, 'eps_levels': [0.5], 'mechanism': 'br'}))
for i in range(5):
    core.step(1500.0, 8.0 * i)
while len(core.outbox):
    print(core.outbox.pop()[1])
""" % "(lambda n: bytes(__import__('jsentropy').urandom(n)))"
    lines = micropython([code])[0].splitlines()
    reps = [Report.model_validate_json(line) for line in lines]
    assert [r.t for r in reps] == [0, 1, 2, 3, 4]
    assert all(r.eps == 0.5 and 0 <= r.y <= 2000 and r.y % 2 == 0 for r in reps)
