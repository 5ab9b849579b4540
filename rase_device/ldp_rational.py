# Shared integer helpers for the bounded-range LDP mechanisms (Duchi, PM, HM):
# a rational lower bound of exp(eps) and the reading -> grid index map.
#
# Why a lower bound: a mechanism whose likelihood ratios are at most A/B is
# ln(A/B)-LDP. Taking A/B <= exp(eps) means the effective eps never exceeds
# the stated one, whatever the float precision of the board.

from rase_device.entropy import bit_length
from rase_device.randomizer import EPS_UNITS, eps_units_floor

# Fixed-point bits of the Taylor sum; the result is then shrunk to small ints.
_EXP_BITS = 40
# Numerators/denominators drawn against stay below this, so the Bernoulli
# loop (which doubles its numerator) stays within MicroPython's small ints.
SMALL = 1 << 29


def exp_lower(num, den, frac_bits=_EXP_BITS):
    """Integer A with A / 2**frac_bits <= exp(num/den), num >= 0, den >= 1.

    Every Taylor term is floored and the series is truncated, so the sum
    only ever errs low. Integer arithmetic only: identical on every port.
    """
    if num < 0 or den < 1:
        raise ValueError("exp_lower needs num >= 0 and den >= 1")
    term = 1 << frac_bits
    total = term
    n = 1
    while term:
        term = term * num // (den * n)
        total += term
        n += 1
    return total


_EXP_UNITS_CAP = 40 * EPS_UNITS   # e^40 exceeds every denominator used here


def exp_bound(eps):
    """(A, S) integers with A / S <= exp(eps), eps rounded down to 1/EPS_UNITS
    and capped at 40 (e^40 dwarfs every denominator drawn against, and a
    lower exponent keeps it a lower bound). For the randomized-response
    probabilities of binary_rr and categorical, so they never exceed the
    stated eps on any float width."""
    if not eps >= 0:
        raise ValueError("eps must be >= 0, got %r" % (eps,))
    units = eps_units_floor(eps)
    if units > _EXP_UNITS_CAP:
        units = _EXP_UNITS_CAP
    return exp_lower(units, EPS_UNITS), 1 << _EXP_BITS


def shrink(a, b, limit):
    """Halve a (floor) and b (b a power of two) until a + b < limit.

    a/b never increases, so a bound a/b <= exp(eps) stays a bound.
    """
    while a + b >= limit and b > 1:
        a >>= 1
        b >>= 1
    return a, b


def exp_eps_ratio(eps, halves=1, limit=SMALL):
    """(A, B) small ints with A/B <= exp(eps_floor / halves), eps_floor being
    eps rounded down to 1/EPS_UNITS (as BR does). Raises ValueError if eps is
    too small to give A > B."""
    units = eps_units_floor(eps)
    if units < 1:
        raise ValueError("eps must be >= 1/%d, got %r" % (EPS_UNITS, eps))
    a = exp_lower(units, EPS_UNITS * halves)
    a, b = shrink(a, 1 << _EXP_BITS, limit)
    if a <= b:
        raise ValueError("eps %r is too small for the rational exp bound" % (eps,))
    return a, b


def bernoulli_float(p, bits):
    """True with probability p exactly, for a float p in [0, 1).

    A float is a dyadic rational, and doubling it or subtracting 1 from it in
    [1, 2) is exact, so this compares a uniform U = 0.b1b2... with p's binary
    digits exactly (expected two random bits), on any float width.
    """
    while True:
        p += p
        if p >= 1.0:
            pbit = 1
            p -= 1.0
        else:
            pbit = 0
        if bits.bit() != pbit:
            return pbit == 1


class BoundedGrid:
    """The K + 1 input points x_min + k * Delta / K, k = 0..K, with K the
    calibration's grid_max (so the step is <= gamma and both ends are exact).

    Readings are clipped to [x_min, x_max] and rounded to a neighbouring point
    at random (random_index): up with probability equal to the fractional
    position, so E[grid value] = the clipped reading, with no rounding bias.
    """

    def __init__(self, calibration):
        self.cal = calibration
        self.k_max = calibration.grid_max
        self.k_bits = bit_length(self.k_max - 1) if self.k_max > 1 else 0
        self.center = (calibration.x_min + calibration.x_max) / 2.0
        self.half = (calibration.x_max - calibration.x_min) / 2.0

    def position(self, x):
        """Clip x into [x_min, x_max]; return (k0, frac): the reading sits at
        grid position k0 + frac, 0 <= frac < 1 (frac = 0 at k0 = K)."""
        cal = self.cal
        if isinstance(x, bool) or not isinstance(x, (int, float)) \
                or not (x == x and x not in (float("inf"), float("-inf"))):
            raise ValueError("reading must be a finite number, got %r" % (x,))
        if x <= cal.x_min:
            return 0, 0.0
        if x >= cal.x_max:
            return self.k_max, 0.0
        f = (x - cal.x_min) * self.k_max / cal.delta
        k0 = int(f)
        if k0 >= self.k_max:
            return self.k_max, 0.0
        return k0, f - k0   # exact: the fractional bits of f

    def quantize(self, x):
        """Validate x and return the nearest grid index in [0, K]."""
        k0, frac = self.position(x)
        return k0 + 1 if frac >= 0.5 else k0

    def random_index(self, x, bits):
        """Grid index k0 or k0 + 1, up with probability frac (exactly)."""
        k0, frac = self.position(x)
        if frac > 0.0 and bernoulli_float(frac, bits):
            return k0 + 1
        return k0

    def value(self, k):
        """The reading the grid index k stands for."""
        return self.center + self.half * (2 * k - self.k_max) / self.k_max
