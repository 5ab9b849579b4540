# Randomized response for on/off readings (shuffle-DP lecture notes, seed 002).
# MicroPython-compatible: math only, noise from RandomBits (os.urandom).
#
# Parameterisation of the notes: with probability p the report is a fresh
# uniform bit Ber(1/2), otherwise the true bit. So P(report = x) = 1 - p/2 and
# P(report != x) = p/2: the report is eps0-LDP with eps0 = ln((2 - p) / p),
# i.e. p = 2 / (e^eps0 + 1) locally. After a uniform shuffle of n reports a
# much smaller p meets a central (eps, delta): rase_common.mechanisms.binary picks it.
#
# p is the exact rational flip_num / flip_den, drawn with RandomBits.bernoulli,
# so the distribution is exactly the stated one (no floating-point sampling).

import math

from rase_device.entropy import RandomBits
from rase_device.ldp_rational import exp_bound
from rase_device.report_kind import ReportKindRandomizer
from rase_device.randomizer import check_finite

DEFAULT_DEN = 1 << 20


def flip_fraction(eps0, den=DEFAULT_DEN):
    """Smallest num with p = num/den >= 2/(r + 1), r = A/S <= e^eps0 the exact
    rational bound of ldp_rational.exp_bound: the report is never weaker than
    eps0-LDP on any float width (rounding only adds noise)."""
    if den < 2:
        raise ValueError("den must be >= 2, got %r" % (den,))
    a, s = exp_bound(eps0)
    # (2 den - num) / num <= A / S  <=>  num >= 2 den S / (A + S)
    num = (2 * den * s + a + s - 1) // (a + s)
    return max(1, min(num, den))


def local_eps(flip_num, flip_den):
    """eps0 of one report: ln((2 - p) / p) with p = flip_num / flip_den."""
    return math.log((2 * flip_den - flip_num) / flip_num)


class BinaryRR:
    """Randomized response with flip probability flip_num / flip_den."""

    def __init__(self, flip_num, flip_den, bits=None):
        if not (isinstance(flip_num, int) and isinstance(flip_den, int)):
            raise ValueError("flip_num and flip_den must be integers")
        if not 0 < flip_num <= flip_den:
            raise ValueError("flip probability must be in (0, 1], got %d/%d" % (flip_num, flip_den))
        self.flip_num = flip_num
        self.flip_den = flip_den
        self.bits = bits if bits is not None else RandomBits()

    @property
    def eps0(self):
        return local_eps(self.flip_num, self.flip_den)

    def randomize(self, on):
        """0 or 1: the true bit, or with probability p a uniform bit."""
        x = 1 if on else 0
        if self.bits.bernoulli(self.flip_num, self.flip_den):
            return self.bits.bit()
        return x


def on_off(power_w, threshold_w):
    """An appliance is on when its power is above its threshold."""
    return 1 if power_w > threshold_w else 0


class OnOffRandomizer(ReportKindRandomizer):
    """The device side of the `binary` mechanism: the reading (power) is on
    when above `on_above`; the bit is reported by BinaryRR with p from the
    eps level (flip_fraction), so the fusion center knows p from eps alone."""

    mechanism = "binary"

    def __init__(self, on_above, bits=None):
        ReportKindRandomizer.__init__(self, bits)
        self.on_above = check_finite("on_above", on_above)

    def _oracle(self, eps):
        return BinaryRR(flip_fraction(eps), DEFAULT_DEN, self.bits)

    def quantize(self, x):
        return on_off(check_finite("reading", x), self.on_above)
