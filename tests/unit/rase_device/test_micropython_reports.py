"""The on/off and categorical randomizers under the real MicroPython: the same
bytes give the same reports as CPython, and the distribution is the exact one."""

import json

import pytest
from scipy import stats

from rase_device.binary_rr import BinaryRR, flip_fraction
from rase_device.categorical import KaryRR, OptimizedUnaryEncoding, krr_keep_fraction, oue_flip_fraction
from rase_device.entropy import RandomBits
from tests.seeded_bytes import SOURCE as XORSHIFT, XorShiftBytes
from tests.stats import P_MIN

pytestmark = pytest.mark.micropython


def test_same_bytes_same_reports_on_both(micropython):
    code = XORSHIFT + """
import json
from rase_device.entropy import RandomBits
from rase_device.binary_rr import BinaryRR, flip_fraction
from rase_device.categorical import KaryRR, OptimizedUnaryEncoding, krr_keep_fraction, oue_flip_fraction
bits = RandomBits(read=XorShiftBytes(4242))
rr = BinaryRR(flip_fraction(1.0), 1 << 20, bits)
krr = KaryRR(5, krr_keep_fraction(1.0, 5), 1 << 20, bits)
oue = OptimizedUnaryEncoding(12, oue_flip_fraction(1.0), 1 << 20, bits)
out = [flip_fraction(1.0), krr_keep_fraction(1.0, 5), oue_flip_fraction(1.0)]
for i in range(600):
    out.append([rr.randomize(i % 2), krr.randomize(i % 5), oue.randomize(i % 12)])
print(json.dumps(out))
"""
    mp = json.loads(micropython([code])[0])
    bits = RandomBits(read=XorShiftBytes(4242))
    rr = BinaryRR(flip_fraction(1.0), 1 << 20, bits)
    krr = KaryRR(5, krr_keep_fraction(1.0, 5), 1 << 20, bits)
    oue = OptimizedUnaryEncoding(12, oue_flip_fraction(1.0), 1 << 20, bits)
    cp = [flip_fraction(1.0), krr_keep_fraction(1.0, 5), oue_flip_fraction(1.0)]
    cp += [[rr.randomize(i % 2), krr.randomize(i % 5), oue.randomize(i % 12)] for i in range(600)]
    assert mp == cp


def test_distributions_under_micropython(micropython):
    """20,000 draws each on the board's own CSPRNG: RR keeps the bit with
    probability 1 - p/2; kRR's 4 outputs match the exact pmf (chi-square,
    p-value > P_MIN)."""
    code = """
import json
from rase_device.entropy import RandomBits
from rase_device.binary_rr import BinaryRR
from rase_device.categorical import KaryRR
bits = RandomBits(read=(lambda n: bytes(__import__('jsentropy').urandom(n))))
rr = BinaryRR(3, 10, bits)
krr = KaryRR(4, 5, 9, bits)
same = 0
h = [0, 0, 0, 0]
for _ in range(20000):
    same += rr.randomize(1) == 1
    h[krr.randomize(2)] += 1
print(json.dumps([same, h]))
"""
    same, h = json.loads(micropython([code])[0])
    n = 20000
    assert stats.chisquare([same, n - same], [n * 0.85, n * 0.15]).pvalue > P_MIN
    exp = [n * (5 / 9 if j == 2 else 4 / 27) for j in range(4)]
    assert stats.chisquare(h, exp).pvalue > P_MIN
