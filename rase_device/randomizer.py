# BR: budget-aware clamped Laplace randomizer (RASE Alg. 1, SPEC 2.1),
# on a fixed-point grid with exact discrete Laplace noise.
#
# The reading is clipped into [x_min, x_max] and quantized to the grid
# x_min + k * gamma, k in [0, K] with K = ceil(Delta / gamma): the grid
# sensitivity is K by construction. Noise Z ~ DLap(t/s) on the grid with
# t/s >= K / eps, so the report is eps-LDP for the stated eps (clamping and the
# map back to floats are post-processing).

import math

from rase_device.dlaplace import DiscreteLaplace
from rase_device.entropy import RandomBits

# eps is rounded down to a multiple of 1/EPS_UNITS before use. Multiplying a
# float by a power of two is exact, so the rounding is exact on 32-bit floats too.
EPS_UNITS = 65536


def _finite(x):
    return x == x and x not in (float("inf"), float("-inf"))


def check_finite(name, value):
    """value if it is a finite int or float (not a bool), else ValueError."""
    _check(name, value, True, "a finite number")
    return value


def _check(name, value, ok, rule):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not _finite(value) or not ok:
        raise ValueError("%s must be %s, got %r" % (name, rule, value))


def eps_units_floor(eps):
    """eps as an integer count of 1/EPS_UNITS, rounded down (never weakens eps)."""
    return int(math.floor(eps * EPS_UNITS))


def eps_units_ceil(eps):
    """eps as an integer count of 1/EPS_UNITS, rounded up (never under-charges)."""
    return int(math.ceil(eps * EPS_UNITS))


def eps_star(beta, rho, x_min, x_max):
    """Smallest eps meeting precision (beta, rho): -Delta ln(1 - rho) / (beta x_max)."""
    return -(x_max - x_min) * math.log(1.0 - rho) / (beta * x_max)


class Calibration:
    """Public randomizer parameters: precision (beta, rho), range, grid gamma."""

    def __init__(self, beta=0.5, rho=0.9, x_min=0.0, x_max=4000.0, gamma=1.0):
        _check("beta", beta, 0 < beta <= 1, "in (0, 1]")
        _check("rho", rho, 0 < rho < 1, "in (0, 1)")
        _check("x_max", x_max, x_max > 0, "> 0")
        _check("x_min", x_min, x_min < x_max, "< x_max (%r)" % (x_max,))
        _check("gamma", gamma, gamma > 0, "> 0")
        if gamma > x_max - x_min:
            raise ValueError("gamma must be <= x_max - x_min (%r), got %r" % (x_max - x_min, gamma))
        self.beta = beta
        self.rho = rho
        self.x_min = x_min
        self.x_max = x_max
        self.gamma = gamma
        self.delta = x_max - x_min
        steps = self.delta / gamma
        if not _finite(steps):
            # A denormal gamma (or a range near the float limit): int() would raise OverflowError.
            raise ValueError("range / gamma must be finite, got %r / %r" % (self.delta, gamma))
        k = int(steps)
        if k * gamma < self.delta:
            k += 1
        self.grid_max = k
        self.eps_star = eps_star(beta, rho, x_min, x_max)

    def as_dict(self):
        return {"beta": self.beta, "rho": self.rho, "x_min": self.x_min,
                "x_max": self.x_max, "gamma": self.gamma}


def laplace_noise(calibration, eps):
    """BR's noise at eps: a discrete Laplace in grid steps with scale
    K / eps_floor >= K / eps (its parameters only; no randomness drawn)."""
    _check("eps", eps, eps > 0, "> 0")
    units = eps_units_floor(eps)
    if units < 1:
        raise ValueError("eps must be >= 1/%d, got %r" % (EPS_UNITS, eps))
    return DiscreteLaplace(calibration.grid_max * EPS_UNITS, units)


class BudgetRandomizer:
    """BR. randomize(x, eps) -> (y, clamped).

    bits: a RandomBits (default: fresh one over os.urandom).
    """

    mechanism = "br"

    def __init__(self, calibration, bits=None):
        self.cal = calibration
        self.bits = bits if bits is not None else RandomBits()
        self._noise = {}

    def noise(self, eps):
        """The discrete Laplace (in grid steps) used for eps; cached per eps."""
        d = self._noise.get(eps)
        if d is None:
            d = self._noise[eps] = laplace_noise(self.cal, eps)
        return d

    def effective_eps(self, eps):
        """The eps the noise actually delivers (<= eps)."""
        d = self.noise(eps)
        return self.cal.grid_max * d.s / d.t

    def lambda_(self, eps):
        """The Laplace scale in reading units, gamma * t / s (>= Delta / eps)."""
        return self.cal.gamma * self.noise(eps).scale()

    def quantize(self, x):
        """Clip x into [x_min, x_max] and return its grid index in [0, K]."""
        cal = self.cal
        if not _finite(x):
            raise ValueError("reading must be a finite number, got %r" % (x,))
        if x < cal.x_min:
            x = cal.x_min
        elif x > cal.x_max:
            x = cal.x_max
        k = int((x - cal.x_min) / cal.gamma + 0.5)
        if k > cal.grid_max:
            k = cal.grid_max
        return k

    def randomize(self, x, eps):
        cal = self.cal
        m = self.quantize(x) + self.noise(eps).draw(self.bits)
        clamped = eps < cal.eps_star
        if clamped:
            if m < 0:
                m = 0
            elif m > cal.grid_max:
                m = cal.grid_max
        y = cal.x_min + m * cal.gamma
        if clamped and y > cal.x_max:
            y = cal.x_max
        return y, clamped
