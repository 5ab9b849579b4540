"""The device core type-checked (mypy) against the boards' own stubs:
micropython-esp32-stubs and micropython-rp2-stubs with micropython-stdlib-stubs
as the standard library, installed by `make stubs`. The stdlib stubs hold only
what MicroPython has, so a CPython-only module (logging, dataclasses, pathlib)
or call (time.monotonic) in the device core is an error here. The stubs copy
some of CPython's typeshed (os.replace, int.bit_length are in them though
MicroPython lacks them), so the real MicroPython run and mpy-cross stay the
main checks."""

from pathlib import Path

import pytest
from mypy import api as mypy_api

from edge_agent.flash import DEVICE_CORE, PACKAGE_DIR

pytestmark = pytest.mark.downloads     # `make stubs` installs the boards' stubs
STUBS = PACKAGE_DIR.parent / ".tools" / "stubs"
PORTS = ("esp32", "rp2")


def _mypy(tmp_path: Path, port: str, package: Path, umqtt: Path) -> tuple[str, int]:
    stubs = STUBS / port
    if not (stubs / ".installed").exists():
        pytest.fail(f"MicroPython stubs for {port} are not installed at {stubs}; run `make stubs`")
    # Not every firmware freezes umqtt (the rp2 stubs have none): the bundle's copy stands in.
    bundled = tmp_path / "bundled"
    (bundled / "umqtt").mkdir(parents=True)
    (bundled / "umqtt" / "__init__.py").write_text("")
    (bundled / "umqtt" / "simple.py").write_text(umqtt.read_text())
    ini = tmp_path / "mypy.ini"
    # Errors inside the stubs themselves are not ours; only rase_device is judged.
    ini.write_text(f"[mypy]\npython_version = 3.11\ncustom_typeshed_dir = {stubs}\nmypy_path = {stubs}:{bundled}\n"
                   f"no_site_packages = True\ncheck_untyped_defs = True\nignore_errors = True\n"
                   f"cache_dir = {tmp_path / 'cache'}\n\n[mypy-rase_device.*]\nignore_errors = False\n")
    files = [str(package / name) for name in DEVICE_CORE]
    out, err, status = mypy_api.run(["--config-file", str(ini), *files])
    return out + err, status


def _copy_core(dst: Path, extra: str = "") -> Path:
    pkg = dst / "rase_device"
    pkg.mkdir(parents=True)
    for name in DEVICE_CORE:
        (pkg / name).write_text((PACKAGE_DIR / name).read_text() + (extra if name == "outbox.py" else ""))
    return pkg


@pytest.mark.parametrize("port", PORTS)
def test_device_core_type_checks_against_the_board_stubs(tmp_path, port, umqtt_simple_py):
    out, status = _mypy(tmp_path, port, _copy_core(tmp_path / "src"), umqtt_simple_py)
    assert status == 0, out


@pytest.mark.parametrize("port", PORTS)
def test_the_check_catches_cpython_only_modules_and_calls(tmp_path, port, umqtt_simple_py):
    extra = "\n\ndef _cpython_only():\n    import logging\n    import time\n    return time.monotonic()\n"
    out, status = _mypy(tmp_path, port, _copy_core(tmp_path / "src", extra), umqtt_simple_py)
    assert status == 1
    assert 'module named "logging"' in out
    assert 'has no attribute "monotonic"' in out
