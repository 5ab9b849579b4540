# Wang et al.'s Piecewise (PM) and Hybrid (HM) mechanisms (ICDE 2019,
# "Collecting and Analyzing Multidimensional Data with Local Differential
# Privacy", Algorithms 2 and 3), discretized and drawn exactly.
#
# Discrete PM. Input grid index k in [0, K] (t = (2k - K) / K). Outputs are the
# N = K + L points j = 0..N-1, report T_j = (2j - N + 1) * w / 2, symmetric
# about 0. The "high" window of input k is j = k..k+L-1, each with probability
# p_hi = a / D; every other output has p_lo = b / D, D = L*a + K*b, where
# a/b <= exp(eps) is rational. So every output's likelihood ratio over any two
# inputs is at most a/b exactly. The window centre moves by one step per grid
# step, so E[T | k] = (p_hi - p_lo) * L * (k - K/2) * w, which equals t for
# w = 2 D / ((a - b) L K): unbiased exactly. L = round(K / exp(eps/2)) mirrors
# the continuous PM (window width C - 1 out of 2C, C = (e^(eps/2)+1)/(e^(eps/2)-1)).
#
# HM: with probability alpha = 1 - sb/sa (sa/sb <= exp(eps/2)) run PM, else
# Duchi, both at eps; alpha = 0 for eps <= 0.61, as in the paper. A fixed
# mixture of eps-LDP mechanisms is eps-LDP; both parts are unbiased.

from rase_device.duchi import DuchiRandomizer
from rase_device.entropy import bit_length
from rase_device.ldp_rational import SMALL, exp_eps_ratio
from rase_device.randomizer import eps_units_floor

# HM mixes in PM only above eps* = 0.61 (Wang et al., eq. 6); in EPS units.
HYBRID_EPS_UNITS_MIN = 39977
# The denominator is shrunk to small ints, but b is never cut below this
# (larger K then costs bignum arithmetic, never privacy).
_B_MIN = 256


class PiecewiseParams:
    """Per-eps integers of discrete PM for a grid of k_max + 1 inputs."""

    def __init__(self, eps, k_max):
        sa, sb = exp_eps_ratio(eps, 2)
        window = (k_max * sb + (sa >> 1)) // sa
        if window < 1:
            window = 1
        a, b = exp_eps_ratio(eps)
        while window * a + k_max * b >= SMALL and b > _B_MIN:
            a >>= 1
            b >>= 1
        if a <= b:
            raise ValueError("eps %r is too small for discrete PM" % (eps,))
        self.a = a
        self.b = b
        self.k_max = k_max
        self.window = window
        self.window_bits = bit_length(window - 1)
        self.k_bits = bit_length(k_max - 1)
        self.high = window * a
        self.den = window * a + k_max * b
        self.n_out = k_max + window
        self.step = 0.0            # output spacing in reading units, set by the randomizer for its grid

    def draw(self, k, bits):
        """Output index j in [0, n_out) for grid index k."""
        if bits.bernoulli(self.high, self.den):
            return k + bits.below(self.window, self.window_bits)
        u = bits.below(self.k_max, self.k_bits)
        return u if u < k else u + self.window


class PiecewiseRandomizer(DuchiRandomizer):
    """Discrete PM. randomize(x, eps) -> (y, False); draw_index(k, eps) -> j."""

    mechanism = "piecewise"

    def params(self, eps):
        p = self._params.get(eps)
        if p is None:
            p = PiecewiseParams(eps, self.grid.k_max)
            # Report for j: center + step * (2j - n_out + 1), in reading units.
            p.step = self.grid.half * p.den / ((p.a - p.b) * p.window * p.k_max)
            self._params[eps] = p
        return p

    def draw_index(self, k, eps):
        return self.params(eps).draw(k, self.bits)

    def randomize(self, x, eps):
        p = self.params(eps)
        j = p.draw(self.grid.random_index(x, self.bits), self.bits)
        return self.grid.center + p.step * (2 * j - p.n_out + 1), False


class HybridParams:
    """Per-eps parts of HM: PM, Duchi, and alpha = alpha_num / alpha_den."""

    def __init__(self, eps, k_max, duchi, piecewise):
        self.duchi = duchi
        self.piecewise = piecewise
        if eps_units_floor(eps) >= HYBRID_EPS_UNITS_MIN:
            sa, sb = exp_eps_ratio(eps, 2)
            self.alpha_num = sa - sb
            self.alpha_den = sa
        else:
            self.alpha_num = 0
            self.alpha_den = 1


class HybridRandomizer(DuchiRandomizer):
    """HM. randomize(x, eps) -> (y, False); draw_index(k, eps) -> j, where
    j < n_out is a PM output and n_out + s (s = 0, 1) is Duchi's -C / +C."""

    mechanism = "hybrid"

    def __init__(self, calibration, bits=None):
        DuchiRandomizer.__init__(self, calibration, bits)
        self._duchi = DuchiRandomizer(calibration, self.bits)
        self._piecewise = PiecewiseRandomizer(calibration, self.bits)

    def params(self, eps):
        p = self._params.get(eps)
        if p is None:
            p = HybridParams(eps, self.grid.k_max, self._duchi.params(eps), self._piecewise.params(eps))
            self._params[eps] = p
        return p

    def draw_index(self, k, eps):
        p = self.params(eps)
        pm = p.piecewise
        if p.alpha_num and self.bits.bernoulli(p.alpha_num, p.alpha_den):
            return pm.draw(k, self.bits)
        return pm.n_out + p.duchi.draw_sign(k, self.grid.k_max, self.bits)

    def randomize(self, x, eps):
        p = self.params(eps)
        pm = p.piecewise
        j = self.draw_index(self.grid.random_index(x, self.bits), eps)
        if j >= pm.n_out:
            return p.duchi.values[j - pm.n_out], False
        return self.grid.center + pm.step * (2 * j - pm.n_out + 1), False
