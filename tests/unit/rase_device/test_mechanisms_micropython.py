"""Duchi, discrete PM and HM under the real MicroPython (WebAssembly port):
the same exact distributions and bit-identical reports from the same bytes."""

import json

import pytest

from rase_device.entropy import RandomBits
from rase_device.mechanisms import make_randomizer
from rase_device.randomizer import Calibration
from rase_common.mechanisms import Setting, mechanism
from tests.seeded_bytes import SOURCE as XORSHIFT, XorShiftBytes
from tests.stats import P_MIN
from tests.unit.rase_device.test_mechanisms import goodness_of_fit

pytestmark = pytest.mark.micropython

BOUNDED = ("duchi", "piecewise", "hybrid")


def test_mechanism_distributions_under_micropython(micropython):
    n = 20_000
    cases = [(m, eps, k) for m in BOUNDED for eps in (0.5, 2.0) for k in (0, 23)]
    code = XORSHIFT + f"""
import json
from rase_device.entropy import RandomBits
from rase_device.mechanisms import make_randomizer
from rase_device.randomizer import Calibration
cal = Calibration(0.5, 0.9, 0.0, 60.0, 1.0)
out = []
for i, (m, eps, k) in enumerate({json.dumps(cases)}):
    r = make_randomizer(m, cal, RandomBits(read=XorShiftBytes(1000 + i)))
    h = {{}}
    for _ in range({n}):
        o = r.draw_index(k, eps)
        h[o] = h.get(o, 0) + 1
    out.append(h)
print(json.dumps(out))
"""
    hists = json.loads(micropython([code])[0])
    cal = Calibration(x_min=0.0, x_max=60.0, gamma=1.0)
    for (m, eps, k), hist in zip(cases, hists):
        samples = [int(o) for o, c in hist.items() for _ in range(c)]
        assert len(samples) == n
        p, bins = goodness_of_fit(samples, mechanism(m).report_pmf(cal, eps, k))
        assert p > P_MIN, f"{m} eps={eps} k={k}: p={p:.2e} over {bins} bins"


def test_random_rounding_of_readings_under_micropython(micropython):
    n = 20_000
    cases = [(m, x) for m in BOUNDED for x in (0.3, 5.75)]
    code = XORSHIFT + f"""
import json
from rase_device.entropy import RandomBits
from rase_device.mechanisms import make_randomizer
from rase_device.randomizer import Calibration
cal = Calibration(0.5, 0.9, 0.0, 12.0, 1.0)
out = []
for i, (m, x) in enumerate({json.dumps(cases)}):
    r = make_randomizer(m, cal, RandomBits(read=XorShiftBytes(2000 + i)))
    h = {{}}
    for _ in range({n}):
        o = r.draw_reading_index(x, 1.0)
        h[o] = h.get(o, 0) + 1
    out.append(h)
print(json.dumps(out))
"""
    hists = json.loads(micropython([code])[0])
    cal = Calibration(x_min=0.0, x_max=12.0, gamma=1.0)
    for (m, x), hist in zip(cases, hists):
        samples = [int(o) for o, c in hist.items() for _ in range(c)]
        p, bins = goodness_of_fit(samples, mechanism(m).reading_pmf(cal, 1.0, x))
        assert p > P_MIN, f"{m} x={x}: p={p:.2e} over {bins} bins"


@pytest.mark.parametrize("mechanism_name", BOUNDED)
def test_same_bytes_give_the_same_reports_on_both(micropython, mechanism_name):
    code = XORSHIFT + f"""
import json
from rase_device.entropy import RandomBits
from rase_device.mechanisms import make_randomizer
from rase_device.randomizer import Calibration
r = make_randomizer({mechanism_name!r}, Calibration(0.5, 0.9, 0.0, 4000.0, 0.7), RandomBits(read=XorShiftBytes(4242)))
out = []
for i in range(1500):
    out.append(r.randomize((i * 37) % 4500 - 100.0, (0.1, 1.0, 5.0)[i % 3])[0])
print(json.dumps(out))
"""
    mp_out = json.loads(micropython([code])[0])
    r = make_randomizer(mechanism_name, Calibration(0.5, 0.9, 0.0, 4000.0, 0.7), RandomBits(read=XorShiftBytes(4242)))
    cp_out = [r.randomize((i * 37) % 4500 - 100.0, (0.1, 1.0, 5.0)[i % 3])[0] for i in range(1500)]
    # Duchi has two reports per eps level; PM and HM many.
    assert len(set(cp_out)) >= (6 if mechanism_name == "duchi" else 100), "the comparison covers many reports"
    assert mp_out == cp_out
    # The fog accepts every report the real MicroPython sent (rase_common.mechanisms supports).
    setting = Setting(x_min=0.0, x_max=4000.0, gamma=0.7)
    supports = {eps: mechanism(mechanism_name).support(setting, eps) for eps in (0.1, 1.0, 5.0)}
    assert all(supports[(0.1, 1.0, 5.0)[i % 3]].reason(y) is None for i, y in enumerate(mp_out))
