"""The binary and categorical report kinds on the device: the reading's
public mapping (on_above, bands), the randomizer each eps level picks, its
exact output distribution, the control fields, and bit-identical reports
under the real MicroPython."""

import json
import math

import pytest
from scipy import stats

from rase_device import wire
from rase_device.binary_rr import DEFAULT_DEN, OnOffRandomizer, flip_fraction
from rase_device.categorical import (BandRandomizer, KaryRR, OptimizedUnaryEncoding, band_of, choose_oracle,
                                    krr_keep_fraction, oue_flip_fraction)
from rase_device.core import AgentCore
from rase_device.entropy import RandomBits
from rase_device.ledger import BudgetLedger
from rase_device.report_kind import check_bands
from rase_device.randomizer import Calibration
from tests.seeded_bytes import SOURCE as XORSHIFT, XorShiftBytes
from tests.stats import P_MIN

BANDS = [10.0, 100.0, 1000.0]


@pytest.mark.parametrize("x,expected", [(-5.0, 0), (0.0, 0), (10.0, 0), (10.01, 1), (100.0, 1), (100.5, 2),
                                        (1000.0, 2), (1000.1, 3), (1e9, 3)])
def test_band_of_counts_the_edges_below_the_reading(x, expected):
    assert band_of(x, BANDS) == expected


@pytest.mark.parametrize("x,on", [(0.0, 0), (10.0, 0), (10.5, 1), (3000.0, 1)])
def test_on_off_is_strictly_above_the_threshold(x, on):
    assert OnOffRandomizer(10.0, RandomBits(read=XorShiftBytes(1))).quantize(x) == on


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("x", [0.0, 500.0])
def test_binary_reports_match_the_exact_distribution(eps, x):
    """P(report = true bit) = 1 - p/2 with p = flip_fraction(eps) / 2^20
    (chi-square on 2 cells, 30,000 draws, p-value > P_MIN)."""
    r = OnOffRandomizer(10.0, RandomBits(read=XorShiftBytes(int(eps * 100) + int(x))))
    bit = r.quantize(x)
    n = 30_000
    same = sum(r.randomize(x, eps)[0] == bit for _ in range(n))
    p_same = 1 - flip_fraction(eps) / DEFAULT_DEN / 2
    assert stats.chisquare([same, n - same], [n * p_same, n * (1 - p_same)]).pvalue > P_MIN


@pytest.mark.parametrize("eps,k", [(1.0, 4), (0.2, 16), (3.0, 16)])
def test_band_randomizer_picks_the_lower_variance_oracle(eps, k):
    r = BandRandomizer([float(i) for i in range(1, k)], RandomBits(read=XorShiftBytes(5)))
    o = r.params(eps)
    if choose_oracle(k, eps) == "krr":
        assert isinstance(o, KaryRR) and o.keep_num == krr_keep_fraction(eps, k)
    else:
        assert isinstance(o, OptimizedUnaryEncoding) and o.flip_num == oue_flip_fraction(eps)


def test_categorical_krr_reports_match_the_exact_distribution():
    """k = 4 at eps 1 (kRR): the true band with p, each other with (1 - p)/3
    (chi-square on 4 cells, 40,000 draws)."""
    r = BandRandomizer(BANDS, RandomBits(read=XorShiftBytes(77)))
    n, x = 40_000, 250.0                                 # band 2
    hist = [0] * 4
    for _ in range(n):
        hist[r.randomize(x, 1.0)[0]] += 1
    p = krr_keep_fraction(1.0, 4) / DEFAULT_DEN
    expected = [n * (1 - p) / 3] * 4
    expected[2] = n * p
    assert stats.chisquare(hist, expected).pvalue > P_MIN


def test_categorical_oue_reports_match_the_exact_bit_marginals():
    """k = 16 at eps 0.5 (OUE): the true band's bit is 1 with probability 1/2,
    every other bit with q (binomial test per bit, 20,000 draws, Bonferroni)."""
    edges = [float(i) for i in range(1, 16)]
    r = BandRandomizer(edges, RandomBits(read=XorShiftBytes(78)))
    assert choose_oracle(16, 0.5) == "oue"
    n, x = 20_000, 7.5                                   # band 7
    ones = [0] * 16
    for _ in range(n):
        m = r.randomize(x, 0.5)[0]
        for j in range(16):
            ones[j] += (m >> j) & 1
    q = oue_flip_fraction(0.5) / DEFAULT_DEN
    for j in range(16):
        pj = 0.5 if j == 7 else q
        assert stats.binomtest(ones[j], n, pj).pvalue > P_MIN / 16, (j, ones[j] / n, pj)


@pytest.mark.parametrize("bad", [[], [1.0, 1.0], [5.0, 1.0], [float("nan")], [1.0] * 40, "10,100", [True]])
def test_bad_bands_are_refused(bad):
    with pytest.raises(ValueError):
        check_bands(bad)


def control(**over):
    msg = {"v": 1, "beta": 0.5, "rho": 0.9, "x_min": 0.0, "x_max": 4000.0, "gamma": 1.0, "period_s": 8.0,
           "eps_levels": [1.0]}
    msg.update(over)
    return json.dumps(msg)


def test_control_fields_default_and_are_checked():
    msg = wire.parse_control(control())
    assert msg["on_above"] == 10.0 and msg["bands"] == BANDS
    msg = wire.parse_control(control(mechanism="categorical", bands=[1, 2]))
    assert msg["mechanism"] == "categorical" and msg["bands"] == [1.0, 2.0]
    for bad in ({"bands": [3, 2]}, {"bands": []}, {"on_above": "x"}, {"on_above": None}, {"mechanism": "cat"}):
        with pytest.raises(ValueError):
            wire.parse_control(control(**bad))


def test_agent_follows_a_control_message_to_the_binary_kind(tmp_path):
    core = AgentCore(device="d1", region="r1", eps=2.0, ledger=BudgetLedger(str(tmp_path / "l.json"), 1e6, 3600),
                     calibration=Calibration(), bits=RandomBits(read=XorShiftBytes(9)))
    core.apply_control(control(mechanism="binary", on_above=50.0, eps_levels=[1.0, 2.0]))
    assert core.mechanism == "binary" and core.randomizer.on_above == 50.0
    ys = [json.loads(core.step(700.0, 8.0 * t + 1))["y"] for t in range(200)]
    assert set(ys) <= {0, 1} and sum(ys) > 100         # on, flipped with p = 2/(e^2+1) / 2 per report
    with pytest.raises(ValueError):
        core.step(float("nan"), 8.0 * 500)             # a sensor fault costs no budget


@pytest.mark.micropython
def test_report_kinds_bit_identical_under_micropython(micropython):
    """The same bytes give the same binary and categorical reports on CPython and MicroPython."""
    cases = [("binary", 1.0, 5.0), ("binary", 1.0, 50.0), ("categorical", 1.0, 250.0), ("categorical", 0.3, 7.5)]
    code = XORSHIFT + f"""
import json
from rase_device.entropy import RandomBits
from rase_device.mechanisms import make_randomizer
from rase_device.randomizer import Calibration
out = []
for i, (m, eps, x) in enumerate({json.dumps(cases)}):
    bands = [float(j) for j in range(1, 16)] if eps < 0.5 else [10.0, 100.0, 1000.0]
    r = make_randomizer(m, Calibration(), RandomBits(read=XorShiftBytes(500 + i)), 10.0, bands)
    out.append([r.randomize(x, eps)[0] for _ in range(2000)])
print(json.dumps(out))
"""
    got = json.loads(micropython([code])[0])
    from rase_device.mechanisms import make_randomizer
    for i, (m, eps, x) in enumerate(cases):
        bands = [float(j) for j in range(1, 16)] if eps < 0.5 else BANDS
        r = make_randomizer(m, Calibration(), RandomBits(read=XorShiftBytes(500 + i)), 10.0, bands)
        assert got[i] == [r.randomize(x, eps)[0] for _ in range(2000)], (m, eps, x)
    assert math.isclose(sum(got[1]) / 2000, 1 - flip_fraction(1.0) / DEFAULT_DEN / 2, abs_tol=0.05)
