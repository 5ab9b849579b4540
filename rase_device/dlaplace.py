# Exact discrete Laplace sampler on the integers, integer arithmetic only.
#
# Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy"
# (NeurIPS 2020), Algorithms 1 and 2. Output Z has P(Z = z) proportional to
# exp(-|z| * s / t) for positive integers s, t (scale t / s). Every branch is
# an exact Bernoulli draw from RandomBits; no floating point touches the noise.

from rase_device.entropy import bit_length


def bernoulli_exp_01(num, den, bits):
    """True with probability exp(-num/den), for 0 <= num <= den."""
    k = 1
    while bits.bernoulli(num, den * k):
        k += 1
    return k & 1 == 1


def bernoulli_exp(num, den, bits):
    """True with probability exp(-num/den), for num >= 0."""
    while num > den:
        if not bernoulli_exp_01(1, 1, bits):
            return False
        num -= den
    return bernoulli_exp_01(num, den, bits)


def sample(t, s, t_bits, bits):
    """One draw of the discrete Laplace with scale t/s.

    t_bits = bit_length(t - 1), precomputed once per scale (see DiscreteLaplace).
    """
    while True:
        u = bits.below(t, t_bits)
        if not bernoulli_exp_01(u, t, bits):
            continue
        v = 0
        while bernoulli_exp_01(1, 1, bits):
            v += 1
        y = (u + t * v) // s
        if bits.bit():
            if y == 0:
                continue
            return -y
        return y


# Largest numerator/denominator kept. MicroPython's small ints hold 30 bits
# plus sign; staying below 2**29 keeps the hot loop free of bignum allocation.
MAX_SCALE_TERM = 1 << 29


def _gcd(a, b):
    while b:
        a, b = b, a % b
    return a


class DiscreteLaplace:
    """Discrete Laplace with scale t/s, reduced so both fit in MAX_SCALE_TERM.

    The reduction only ever rounds the scale up (t up, s down), so the noise is
    never smaller than asked for.
    """

    def __init__(self, t, s):
        if t < 1 or s < 1:
            raise ValueError("discrete Laplace needs integers t, s >= 1, got t=%r s=%r" % (t, s))
        g = _gcd(t, s)
        t //= g
        s //= g
        while t >= MAX_SCALE_TERM or s >= MAX_SCALE_TERM:
            t = ((t - 1) >> 1) + 1
            s >>= 1
            if s < 1:
                raise ValueError("noise scale too large for the integer sampler")
        self.t = t
        self.s = s
        self.t_bits = bit_length(t - 1)

    def scale(self):
        return self.t / self.s

    def draw(self, bits):
        return sample(self.t, self.s, self.t_bits, bits)
