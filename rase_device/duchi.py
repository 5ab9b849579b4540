# Duchi, Jordan, Wainwright's one-bit mechanism for a bounded reading
# (as used in Wang et al., ICDE 2019, section III-A), drawn exactly.
#
# On t in [-1, 1] the report is +-C with C = (r + 1) / (r - 1) and
# P(+C | t) = 1/2 + t / (2 C), r = A/B <= exp(eps) rational. The pmf is linear
# in t, so it is the mixture "t = +1 with probability (1 + t) / 2, else
# t = -1", i.e. two exact Bernoulli draws: k/K, then A/(A+B) or B/(A+B).
# Likelihood ratio of any output: at most A/B. E[report | t] = t exactly;
# the report in reading units is center + half * (+-C).

from rase_device.entropy import RandomBits
from rase_device.ldp_rational import BoundedGrid, exp_eps_ratio


class DuchiParams:
    """Per-eps integers: r = a/b <= exp(eps), report magnitude (a+b)/(a-b)."""

    def __init__(self, eps):
        self.a, self.b = exp_eps_ratio(eps)
        self.ab = self.a + self.b
        self.values = (0.0, 0.0)   # the two reports in reading units, set by the randomizer for its grid

    def draw_sign(self, k, k_max, bits):
        """1 (the +C report) or 0 (the -C report) for grid index k of k_max."""
        if bits.bernoulli(k, k_max):
            return 1 if bits.bernoulli(self.a, self.ab) else 0
        return 1 if bits.bernoulli(self.b, self.ab) else 0


class DuchiRandomizer:
    """Duchi's mechanism. randomize(x, eps) -> (y, False), y in reading units;
    draw_index(k, eps) -> 0 (report -C) or 1 (report +C) for grid index k;
    draw_reading_index(x, eps): the same for a reading (randomly rounded)."""

    mechanism = "duchi"

    def __init__(self, calibration, bits=None):
        self.cal = calibration
        self.grid = BoundedGrid(calibration)
        self.bits = bits if bits is not None else RandomBits()
        self._params = {}

    def params(self, eps):
        p = self._params.get(eps)
        if p is None:
            p = DuchiParams(eps)
            # The two possible reports, in reading units.
            mag = self.grid.half * p.ab / (p.a - p.b)
            p.values = (self.grid.center - mag, self.grid.center + mag)
            self._params[eps] = p
        return p

    def quantize(self, x):
        return self.grid.quantize(x)

    def draw_index(self, k, eps):
        return self.params(eps).draw_sign(k, self.grid.k_max, self.bits)

    def draw_reading_index(self, x, eps):
        """Output index for reading x: its randomly rounded grid index, drawn."""
        return self.draw_index(self.grid.random_index(x, self.bits), eps)

    def randomize(self, x, eps):
        p = self.params(eps)
        k = self.grid.random_index(x, self.bits)
        return p.values[p.draw_sign(k, self.grid.k_max, self.bits)], False
