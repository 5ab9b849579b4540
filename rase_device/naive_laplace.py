# PAPER BASELINE ONLY: the floating-point inverse-CDF Laplace of RASE Alg. 1.
# Never used by the agent. Its low-order bits leak the input (Mironov, CCS
# 2012) and boards with 32-bit floats make that worse. Kept so benchmarks and
# evaluations can compare against what the paper describes. It draws from the
# same CSPRNG bits as the secure sampler so the comparison is about the method.

import math


def naive_float_laplace(lam, bits):
    """Laplace(0, lam) by inverse CDF on a 53-bit uniform float."""
    u = (bits.below(1 << 53, 53) + 0.5) / (1 << 53) - 0.5
    if u < 0:
        return lam * math.log(1.0 + 2.0 * u)
    return -lam * math.log(1.0 - 2.0 * u)


def naive_float_br(x, eps, cal, bits):
    """BR with float noise, as printed in the paper: returns (y, clamped)."""
    if x < cal.x_min:
        x = cal.x_min
    elif x > cal.x_max:
        x = cal.x_max
    y = x + naive_float_laplace(cal.delta / eps, bits)
    clamped = eps < cal.eps_star
    if clamped:
        y = min(max(y, cal.x_min), cal.x_max)
    return y, clamped
