# eps-LDP randomizers for one categorical reading in {0, .., k-1} (for
# example the appliance class that dominates a house's load): k-ary randomized
# response (kRR) and optimized unary encoding (OUE, a one-hot vector with each
# bit randomized; Wang et al., USENIX Security 2017). BUDS (seed 003) one-hot
# encodes categorical reports; OUE is the standard eps-LDP randomizer of a
# one-hot vector.
# MicroPython-compatible: math only; noise from RandomBits (os.urandom) with
# exact rational probabilities, rounded only in the direction that adds noise.
#
# Variance per report of the debiased frequency of a rare category:
#   kRR: (e^eps + k - 2) / (e^eps - 1)^2,  OUE: 4 e^eps / (e^eps - 1)^2,
# so kRR is better exactly when k < 3 e^eps + 2 (choose_oracle).

import math

from rase_device.entropy import RandomBits, bit_length
from rase_device.ldp_rational import exp_bound
from rase_device.report_kind import ReportKindRandomizer, check_bands
from rase_device.randomizer import check_finite

DEFAULT_DEN = 1 << 20


def choose_oracle(k, eps):
    """'krr' when k < 3 e^eps + 2 (lower variance), else 'oue'. Decided with
    the exact rational bound of e^eps, so a board with 32-bit floats picks the
    same oracle as the fusion center."""
    if k < 2:
        raise ValueError("k must be >= 2, got %r" % (k,))
    a, s = exp_bound(eps)
    return "krr" if k * s < 3 * a + 2 * s else "oue"


def krr_keep_fraction(eps, k, den=DEFAULT_DEN):
    """Largest num with p = num/den <= r / (r + k - 1), r = A/S <= e^eps the
    exact rational bound (ldp_rational.exp_bound): the ratio p (k - 1) / (1 - p)
    never exceeds e^eps on any float width."""
    if not eps >= 0 or k < 2 or den < 2:
        raise ValueError("need eps >= 0, k >= 2, den >= 2; got %r, %r, %r" % (eps, k, den))
    a, s = exp_bound(eps)
    # num (k - 1) / (den - num) <= A / S  <=>  num <= A den / ((k - 1) S + A)
    return max(a * den // ((k - 1) * s + a), 1)


def oue_flip_fraction(eps, den=DEFAULT_DEN):
    """Smallest num with q = num/den >= 1 / (r + 1), r = A/S <= e^eps exactly:
    P(0-bit reported 1)."""
    if not eps >= 0 or den < 2:
        raise ValueError("need eps >= 0, den >= 2; got %r, %r" % (eps, den))
    a, s = exp_bound(eps)
    # (den - num) / num <= A / S  <=>  num >= den S / (A + S)
    return min((den * s + a + s - 1) // (a + s), den // 2)


def krr_eps(keep_num, keep_den, k):
    return math.log(keep_num * (k - 1) / (keep_den - keep_num))


def oue_eps(flip_num, flip_den):
    return math.log((flip_den - flip_num) / flip_num)


def _check_value(x, k):
    if not (isinstance(x, int) and 0 <= x < k):
        raise ValueError("category must be an integer in [0, %d), got %r" % (k, x))


class KaryRR:
    """Report x with probability keep_num/keep_den, else one of the other k-1
    categories uniformly."""

    def __init__(self, k, keep_num, keep_den, bits=None):
        if k < 2:
            raise ValueError("k must be >= 2, got %r" % (k,))
        if not 0 < keep_num < keep_den:
            raise ValueError("keep probability must be in (0, 1), got %d/%d" % (keep_num, keep_den))
        self.k = k
        self.keep_num = keep_num
        self.keep_den = keep_den
        self._nbits = bit_length(k - 2)
        self.bits = bits if bits is not None else RandomBits()

    def randomize(self, x):
        _check_value(x, self.k)
        if self.bits.bernoulli(self.keep_num, self.keep_den):
            return x
        r = self.bits.below(self.k - 1, self._nbits) if self.k > 2 else 0
        return r if r < x else r + 1


class OptimizedUnaryEncoding:
    """One-hot x; its 1-bit reported as 1 with probability 1/2, every 0-bit as 1
    with probability flip_num/flip_den. The report is an int bit mask (bit j =
    category j)."""

    def __init__(self, k, flip_num, flip_den, bits=None):
        if k < 2:
            raise ValueError("k must be >= 2, got %r" % (k,))
        if not (0 < flip_num and 2 * flip_num <= flip_den):
            raise ValueError("0-bit flip probability must be in (0, 1/2], got %d/%d" % (flip_num, flip_den))
        self.k = k
        self.flip_num = flip_num
        self.flip_den = flip_den
        self.bits = bits if bits is not None else RandomBits()

    def randomize(self, x):
        _check_value(x, self.k)
        mask = 0
        for j in range(self.k):
            if j == x:
                b = self.bits.bit()
            else:
                b = self.bits.bernoulli(self.flip_num, self.flip_den)
            if b:
                mask |= 1 << j
        return mask


def band_of(x, bands):
    """Category of reading x: how many band edges it is above (0 .. len(bands)).
    Upper edges are inclusive, as for on/off: at 10 W with edges (10, ..) it is off."""
    c = 0
    for b in bands:
        if x > b:
            c += 1
        else:
            break
    return c


class BandRandomizer(ReportKindRandomizer):
    """The device side of the `categorical` mechanism: the reading's band
    among the edges is reported by kRR (a category) or OUE (a k-bit mask),
    whichever choose_oracle picks for k and eps, so the fusion center knows
    the oracle and its probabilities from eps alone."""

    mechanism = "categorical"

    def __init__(self, bands, bits=None):
        ReportKindRandomizer.__init__(self, bits)
        self.bands = check_bands(list(bands))
        self.k = len(self.bands) + 1

    def _oracle(self, eps):
        if choose_oracle(self.k, eps) == "krr":
            return KaryRR(self.k, krr_keep_fraction(eps, self.k), DEFAULT_DEN, self.bits)
        return OptimizedUnaryEncoding(self.k, oue_flip_fraction(eps), DEFAULT_DEN, self.bits)

    def quantize(self, x):
        return band_of(check_finite("reading", x), self.bands)
