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
    assert {f"lib/rase_device/{n[:-3]}.mpy" for n in DEVICE_CORE} <= names
    assert {"lib/umqtt/simple.mpy", "rase_config.json", "main.py", "sensor.py"} <= names
    cfg = json.loads((bundle / "rase_config.json").read_text())
    assert cfg["device"] == "h1a1" and cfg["calibration"]["x_max"] == 4000.0
    assert not any(n.endswith(".py") and n.startswith("lib/rase_device") for n in names)


def test_compiled_bundle_runs_under_micropython(bundle, micropython):
    """The shipped config's board: before a control message its own eps 1 is past its ninth of household h1's
    eps 8 a day (no report, budget_exhausted); with the shipped fusion center's control message (the
    half-hourly product) it reports each half-hour's mean at eps 8 / 48 / 9 (issue 28)."""
    from fusion_center.config import FusionConfig

    control = FusionConfig.load(CONFIG.parent / "fusion.example.toml").precision
    binfiles = {"/" + str(p.relative_to(bundle)): p.read_bytes() for p in bundle.rglob("*.mpy")}
    files = {"/rase_config.json": (bundle / "rase_config.json").read_text(), "/control.json": control.model_dump_json()}
    code = """
import json
from rase_device.board import build_core, load_config
from rase_device.entropy import RandomBits
cfg = load_config('/rase_config.json')
core = build_core(cfg, bits=RandomBits(read=lambda n: bytes(__import__('jsentropy').urandom(n))))
core.step(512.0, 1.7e9)
print(core.status, len(core.outbox))
core.apply_control(open('/control.json').read())
core.step(512.0, 1.7e9 + 8)
core.step(700.0, 1.7e9 + 1808)
print(core.outbox.pop()[1])
"""
    out = micropython([code], with_agent=False, binfiles=binfiles, files=files)[0].strip().splitlines()
    assert out[0] == "budget_exhausted 0"
    rep = json.loads(out[1])
    assert rep["v"] == 1 and rep["seq"] == 1 and rep["eps"] == control.eps_levels[0] == 1213 / 65536


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


def test_flash_without_config_refuses_in_one_line(tmp_path, capsys):
    assert rase_main(["flash", "--bundle-only", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("rase flash: --config is required")
    assert not (tmp_path / "b").exists()


def _tls_config(tmp_path, ca_file=None):
    cfg = tmp_path / "tls.toml"
    text = CONFIG.read_text().replace("# tls = true", "tls = true").replace("port = 1883", "port = 8883")
    if ca_file is None:
        text = text.replace('# ca_file = "configs/ca.crt"\n', "")
    else:
        text = text.replace('# ca_file = "configs/ca.crt"', f'ca_file = "{ca_file}"')
    cfg.write_text(text)
    return cfg


def test_ca_goes_into_the_bundle_as_der(tmp_path, umqtt_simple_py):
    from cryptography import x509

    from rase_common.certs import make_pki

    pki = make_pki(tmp_path / "pki", ["broker.lan"])
    out = tmp_path / "b"
    assert rase_main(["flash", "--config", str(_tls_config(tmp_path)), "--bundle-only", str(out),
                      "--ca", str(pki.ca_cert)]) == 0
    cfg = json.loads((out / "rase_config.json").read_text())
    assert cfg["broker"]["tls"] is True and cfg["broker"]["ca"] == "rase_ca.der"
    der = (out / "rase_ca.der").read_bytes()
    assert x509.load_der_x509_certificate(der) == x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    # [broker] ca_file serves when --ca is not given.
    out2 = tmp_path / "b2"
    assert rase_main(["flash", "--config", str(_tls_config(tmp_path, pki.ca_cert)), "--bundle-only", str(out2)]) == 0
    assert (out2 / "rase_ca.der").read_bytes() == der


def test_tls_without_a_usable_ca_is_refused(tmp_path, capsys):
    from rase_common.certs import make_pki

    pki = make_pki(tmp_path / "pki", ["broker.lan"])
    cases = [
        ([], "tls is on but no CA was given"),
        (["--ca", str(pki.server_cert)], "is not a CA certificate"),
        (["--ca", str(tmp_path / "missing.crt")], "No such file"),
        (["--ca", str(CONFIG)], "is not a PEM or DER certificate"),
    ]
    for extra, message in cases:
        assert rase_main(["flash", "--config", str(_tls_config(tmp_path)), "--bundle-only",
                          str(tmp_path / "b"), *extra]) == 1
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert rase_main(["flash", "--config", str(CONFIG), "--bundle-only", str(tmp_path / "b"),
                      "--ca", str(pki.ca_cert)]) == 1
    assert "tls is off" in capsys.readouterr().err


def test_sensor_template_reads_an_adc1_pin_on_esp32_and_gp26_elsewhere(bundle, micropython_unix):
    import re

    template = (bundle / "sensor.py").read_text()
    esp32_pin = int(re.search(r'platform == "esp32":\s+_adc = ADC\(Pin\((\d+)\)\)', template).group(1))
    assert 32 <= esp32_pin <= 39      # ADC1: ADC2 pins cannot be read while Wi-Fi is on
    standin = (Path(__file__).resolve().parents[2] / "micropython" / "unix_port" / "machine.py").read_text()
    out = micropython_unix("import sensor, machine\nprint(machine.ADC.opened, sensor.read())\n",
                           files={"sensor.py": template, "machine.py": standin})
    assert out.split() == ["[26]", repr(32768 * 4000.0 / 65535.0)]
