"""Board bundles: built by `rase flash --bundle-only`, loaded by MicroPython."""

import json
from pathlib import Path

import pytest

from edge_agent.flash import DEVICE_CORE
from rase.cli import main as rase_main

pytestmark = pytest.mark.micropython
CONFIG = Path(__file__).resolve().parents[3] / "configs" / "agent.example.toml"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, umqtt_simple_py):
    out = tmp_path_factory.mktemp("bundle")
    assert rase_main(["flash", "--config", str(CONFIG), "--bundle-only", str(out)]) == 0
    return out


def test_bundle_has_everything_a_board_needs(bundle):
    names = {str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file()}
    assert {f"lib/edge_agent/{n[:-3]}.mpy" for n in DEVICE_CORE} <= names
    assert {"lib/umqtt/simple.mpy", "rase_config.json", "main.py", "sensor.py"} <= names
    cfg = json.loads((bundle / "rase_config.json").read_text())
    assert cfg["device"] == "h1a1" and cfg["calibration"]["x_max"] == 4000.0
    assert not any(n.endswith(".py") and n.startswith("lib/edge_agent") for n in names)


def test_compiled_bundle_runs_under_micropython(bundle, micropython):
    binfiles = {"/" + str(p.relative_to(bundle)): p.read_bytes() for p in bundle.rglob("*.mpy")}
    files = {"/rase_config.json": (bundle / "rase_config.json").read_text()}
    code = """
import json
from edge_agent.board import build_core, load_config
from edge_agent.entropy import RandomBits
cfg = load_config('/rase_config.json')
core = build_core(cfg, bits=RandomBits(read=lambda n: bytes(__import__('jsentropy').urandom(n))))
core.step(512.0, 1.7e9)
print(core.outbox.pop()[1])
"""
    out = micropython([code], with_agent=False, binfiles=binfiles, files=files)[0]
    rep = json.loads(out)
    assert rep["v"] == 1 and rep["seq"] == 1 and rep["eps"] == 1.0


def test_bad_config_is_one_clear_error(tmp_path, capsys):
    bad = tmp_path / "agent.toml"
    bad.write_text(CONFIG.read_text().replace("rho = 0.9", "rho = 1.0"))
    assert rase_main(["flash", "--config", str(bad), "--bundle-only", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "rho must be in (0, 1)" in err and str(bad) in err


def test_flash_to_a_missing_serial_port_fails_clearly(tmp_path, capsys):
    # No board on this machine: the real mpremote must say so, not hang.
    assert rase_main(["flash", "--config", str(CONFIG), "--port", "/dev/ttyRASE-missing"]) == 1
    assert "/dev/ttyRASE-missing" in capsys.readouterr().err
