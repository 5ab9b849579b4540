"""Exact output sets (the fog's ingest check): every output a device can
send is accepted, exhaustively on small grids and statistically from the real
device randomizer on the paper's grid; near misses and values between or
beyond the outputs are refused with a reason."""

import math

import numpy as np
import pytest

from rase_device.duchi import DuchiParams
from rase_device.entropy import RandomBits
from rase_device.piecewise import PiecewiseParams
from rase_common.mechanisms import Setting, mechanism
from rase_common.mechanisms.base import FLOAT_TOLERANCE, IMPLAUSIBLE, IMPOSSIBLE
from rase_common.mechanisms.br import REPORT_TAIL, noise_q
from tests.seeded_bytes import XorShiftBytes

BOUNDED = ("duchi", "piecewise", "hybrid")
SMALL = [Setting(x_min=0.0, x_max=30.0, gamma=1.0), Setting(x_min=-5.0, x_max=7.3, gamma=0.7)]
EPS = (0.5, 1.0, 2.0, 4.0, 9.0)


@pytest.mark.parametrize("name", BOUNDED)
@pytest.mark.parametrize("eps", EPS)
def test_every_output_is_accepted_and_everything_between_refused(name, eps):
    m = mechanism(name)
    for s in SMALL:
        sup = m.support(s, eps)
        outputs = np.array(sorted(float(v) for v in m.report_values(s.calibration, eps).values()))
        assert all(sup.reason(v) is None for v in outputs)
        assert all(sup.reason(v) is None for v in m.device_values(s.calibration, eps)
                   if name != "hybrid" or _hm_runs_pm(s, eps) or v in outputs)
        mids = (outputs[1:] + outputs[:-1]) / 2
        assert all(sup.reason(v) == IMPOSSIBLE for v in mids)
        gap = np.min(np.diff(outputs))
        for v in (outputs[0], outputs[-1]):
            scale = abs(s.x_min) + abs(s.x_max) + abs(v)
            off = min(8 * FLOAT_TOLERANCE * scale, gap / 3)
            assert sup.reason(v + off) == IMPOSSIBLE and sup.reason(v - off) == IMPOSSIBLE
        assert sup.reason(outputs[0] - gap) == IMPOSSIBLE and sup.reason(outputs[-1] + gap) == IMPOSSIBLE
        assert sup.reason(s.x_max + 1e6) == IMPOSSIBLE


def _hm_runs_pm(s, eps):
    from rase_common.mechanisms.hybrid import alpha
    return alpha(eps, s.calibration.grid_max) > 0


def test_duchi_accepts_exactly_two_values():
    s = Setting()
    sup = mechanism("duchi").support(s, 1.0)
    lo, hi = mechanism("duchi").device_values(s.calibration, 1.0)
    assert sup.reason(lo) is None and sup.reason(hi) is None
    for y in (0.0, 2000.0, 4000.0, lo + 0.5, hi - 0.5, hi * 2):
        assert sup.reason(y) == IMPOSSIBLE


def float32_device_values(name, s, eps):
    """The reports a board with 32-bit floats computes (each float operation
    rounded to float32), as MicroPython prints them (7 significant digits)."""
    f = np.float32
    center = (f(s.x_min) + f(s.x_max)) / f(2.0)
    half = (f(s.x_max) - f(s.x_min)) / f(2.0)
    out = []
    if name in ("duchi", "hybrid"):
        p = DuchiParams(eps)
        mag = half * f(p.a + p.b) / f(p.a - p.b)
        out += [center - mag, center + mag]
    if name in ("piecewise", "hybrid"):
        p = PiecewiseParams(eps, s.calibration.grid_max)
        step = half * f(p.den) / f((p.a - p.b) * p.window * p.k_max)
        out += [center + step * f(2 * j - p.n_out + 1) for j in range(p.n_out)]
    return [float("%.7g" % v) for v in out]


@pytest.mark.parametrize("name", BOUNDED)
def test_reports_of_a_board_with_32_bit_floats_are_accepted(name):
    for s in SMALL + [Setting(), Setting(x_min=-3.7, x_max=1234.5, gamma=0.9)]:
        for eps in EPS:
            sup = mechanism(name).support(s, eps)
            values = float32_device_values(name, s, eps)
            if name == "hybrid" and not _hm_runs_pm(s, eps):
                values = values[:2]
            assert all(sup.reason(v) is None for v in values), (name, s, eps)


@pytest.mark.parametrize("name", BOUNDED + ("br",))
@pytest.mark.parametrize("eps", EPS)
def test_every_report_of_the_device_randomizer_on_the_paper_grid_is_accepted(name, eps):
    """K = 4,000: 3,000 reports of the real randomizer (seeded bytes) over readings across the range."""
    s = Setting()
    r = mechanism(name).randomizer(s, RandomBits(read=XorShiftBytes(int(eps * 10) + 7)))
    sup = mechanism(name).support(s, eps)
    for x in np.linspace(-50.0, 4050.0, 3000):
        y = r.randomize(float(x), eps)[0]
        assert sup.reason(y) is None, (name, eps, x, y)


def test_br_clamped_accepts_its_grid_in_the_range_only():
    s = Setting(x_min=0.0, x_max=10.0, gamma=1.0)          # eps_star 4.6: eps 1 clamps
    sup = mechanism("br").support(s, 1.0)
    assert all(sup.reason(float(m)) is None for m in range(11))
    for y in (-1.0, 11.0, 0.5, 3.0001, 1e6):
        assert sup.reason(y) == IMPOSSIBLE


def test_br_clamped_off_grid_top_is_x_max():
    s = Setting(x_min=0.0, x_max=10.0, gamma=3.0)          # K = 4: the top grid point 12 is sent as 10
    sup = mechanism("br").support(s, 1.0)
    assert [sup.reason(y) for y in (0.0, 3.0, 6.0, 9.0, 10.0)] == [None] * 5
    assert sup.reason(12.0) == IMPOSSIBLE and sup.reason(1.0) == IMPOSSIBLE


def test_br_without_clamping_accepts_its_grid_within_the_stated_tail():
    s = Setting()                                          # eps 9 >= eps_star 4.6: not clamped
    sup = mechanism("br").support(s, 9.0)
    q = noise_q(s.calibration, 9.0)
    reach = sup.hi - s.calibration.grid_max
    # The tail beyond reach has probability <= REPORT_TAIL (both sides), and reach is the smallest such.
    assert 2 * q ** (reach + 1) / (1 + q) <= REPORT_TAIL < 2 * q ** reach / (1 + q)
    assert sup.reason(4000.0 + reach) is None and sup.reason(-float(reach)) is None
    assert sup.reason(4000.0 + reach + 1) == IMPLAUSIBLE and sup.reason(-reach - 1.0) == IMPLAUSIBLE
    assert sup.reason(17.5) == IMPOSSIBLE
    assert reach == pytest.approx(math.log(REPORT_TAIL) / math.log(q), abs=2)   # about 20.7 lambda: 9,200 W


def test_binary_and_categorical_outputs():
    assert [mechanism("binary").support(Setting(), 1.0).reason(y) for y in (0, 1, 1.0, 0.5, 2, -1)] == \
        [None, None, None, IMPOSSIBLE, IMPOSSIBLE, IMPOSSIBLE]
    krr = mechanism("categorical").support(Setting(), 1.0)                 # k = 4: kRR
    assert [krr.reason(y) for y in (0, 3, 4, 1.5)] == [None, None, IMPOSSIBLE, IMPOSSIBLE]
    oue = mechanism("categorical").support(Setting(bands=tuple(range(1, 16))), 0.5)   # k = 16: OUE masks
    assert oue.reason((1 << 16) - 1) is None and oue.reason(1 << 16) == IMPOSSIBLE
