"""The mechanism registry (rase_common.mechanisms): its table agrees with the
device's (rase_device.mechanisms), each entry reaches its device randomizer,
and its vectorised sampler draws what that randomizer draws (seeded; p > P_MIN)."""

import numpy as np
import pytest
from scipy import stats

from rase_device import mechanisms as device
from rase_device.entropy import RandomBits
from rase_common.mechanisms import DEFAULT_MECHANISM, MEAN_MECHANISMS, MECHANISMS, REGISTRY, Setting, mechanism
from tests.seeded_bytes import XorShiftBytes
from tests.stats import P_MIN


def test_the_registry_and_the_device_table_name_the_same_mechanisms_in_the_same_order():
    assert MECHANISMS == device.MECHANISMS
    assert MEAN_MECHANISMS == device.MEAN_MECHANISMS
    assert DEFAULT_MECHANISM == device.DEFAULT_MECHANISM and DEFAULT_MECHANISM in MECHANISMS
    for name, entry in REGISTRY.items():
        assert entry.name == name
        assert (entry.output == "mean") == (device.randomizer_row(name)[3] == "calibration")


@pytest.mark.parametrize("name", MECHANISMS)
def test_each_entry_reaches_its_device_randomizer(name):
    cls = device.randomizer_class(name)
    r = mechanism(name).randomizer(Setting(), RandomBits(read=XorShiftBytes(3)))
    assert type(r) is cls and cls.mechanism == name
    y, clamped = r.randomize(120.0, 1.0)
    assert isinstance(y, (int, float)) and clamped == (name == "br")


def test_unknown_names_are_refused_by_both_tables():
    with pytest.raises(ValueError, match="mechanism must be one of"):
        mechanism("laplace")
    with pytest.raises(ValueError, match="mechanism must be one of"):
        device.make_randomizer("laplace", Setting().calibration)


# (readings, eps) per mechanism: both sides of eps_star for BR, HM below and above 0.61.
SAMPLER_CASES = [(m, eps) for m in MECHANISMS for eps in (0.5, 2.0, 9.0)]
SETTING = Setting(x_min=0.0, x_max=60.0, gamma=1.0, beta=0.5, rho=0.9, bands=(5.0, 20.0, 40.0))   # eps_star 6.9


@pytest.mark.parametrize("name,eps", SAMPLER_CASES)
def test_the_vectorised_sampler_draws_what_the_device_randomizer_draws(name, eps):
    """Two-sample chi-square over the outputs, 6,000 reports each, readings
    spread over the range (on and between grid points)."""
    m = mechanism(name)
    x = np.tile(np.array([0.0, 3.3, 17.0, 29.5, 59.9, 60.0, 75.0]), 6000 // 7 + 1)[:6000]
    r = m.randomizer(SETTING, RandomBits(read=XorShiftBytes(17)))
    dev = np.array([r.randomize(float(v), eps)[0] for v in x])
    vec = m.sample(SETTING, eps, x, np.random.default_rng(17))
    p = _two_sample_p(dev, vec)
    assert p > P_MIN, f"{name} eps {eps}: p = {p:.2e}"


def _two_sample_p(a: np.ndarray, b: np.ndarray) -> float:
    """Chi-square of the two samples' counts over their values, rare values pooled."""
    values = np.union1d(a, b)
    if values.size > 40:                       # many outputs: pool into 30 quantile bins
        edges = np.unique(np.quantile(np.concatenate([a, b]), np.linspace(0, 1, 31)))
        edges[-1] = np.inf
        ca, _ = np.histogram(a, np.append(-np.inf, edges[1:]))
        cb, _ = np.histogram(b, np.append(-np.inf, edges[1:]))
    else:
        ca = np.array([np.sum(a == v) for v in values])
        cb = np.array([np.sum(b == v) for v in values])
    keep = (ca + cb) >= 10
    ca = np.append(ca[keep], ca[~keep].sum())
    cb = np.append(cb[keep], cb[~keep].sum())
    ok = (ca + cb) > 0
    if ok.sum() < 2:
        return 1.0
    return float(stats.chi2_contingency(np.vstack([ca[ok], cb[ok]]))[1])


@pytest.mark.parametrize("eps", [0.5, 1.0])
def test_the_vectorised_oue_sampler_draws_what_the_device_draws(eps):
    """13 bands: OUE (k = 13 >= 3 e^eps + 2), masks compared bit by bit and whole."""
    setting = Setting(bands=tuple(float(b) for b in range(10, 130, 10)))
    m = mechanism("categorical")
    x = np.tile(np.array([0.0, 15.0, 64.0, 500.0]), 1500)
    r = m.randomizer(setting, RandomBits(read=XorShiftBytes(5)))
    dev = np.array([r.randomize(float(v), eps)[0] for v in x])
    vec = m.sample(setting, eps, x, np.random.default_rng(5))
    for j in range(13):
        assert _two_sample_p((dev >> j) & 1, (vec >> j) & 1) > P_MIN / 13, j


def test_the_sampler_check_sees_a_wrong_eps():
    """Not vacuous: BR at eps 2 against the sampler at eps 2.5 fails."""
    m = mechanism("br")
    x = np.full(6000, 17.0)
    r = m.randomizer(SETTING, RandomBits(read=XorShiftBytes(17)))
    dev = np.array([r.randomize(float(v), 2.0)[0] for v in x])
    assert _two_sample_p(dev, m.sample(SETTING, 2.5, x, np.random.default_rng(17))) < 1e-6


def test_every_device_randomizer_module_is_in_the_device_core_and_the_manifest():
    """A new mechanism's device module must reach the boards: flash.DEVICE_CORE
    and manifest.py list the device core (a forgotten one fails here)."""
    from pathlib import Path

    from edge_agent.flash import DEVICE_CORE

    manifest = (Path(device.__file__).parent / "manifest.py").read_text()
    for _, module, _, _ in device.RANDOMIZERS:
        assert f"{module}.py" in DEVICE_CORE and f'"{module}.py"' in manifest, module
