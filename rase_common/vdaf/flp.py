"""The FLP's verifier side (query and decide of draft-irtf-cfrg-vdaf) over a
batch: every value below is an array with one entry per report, and the
validity circuit is rase_device.flp's own, run over a vector field.

Linear maps that depend only on the circuit (extending a gadget polynomial's
values to a power of two, doubling them) are computed once with the scalar
field and cached; evaluating a polynomial in the Lagrange basis at the
per-report test point t uses L_i(t) = (w_i / n) * prod_{j != i} (t - w_j),
which needs no inversion, with the products built level by level over the
roots of unity (lagrange_weights).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from rase_device.flp import gadget_poly_len, wire_poly_len
from rase_device.vdaf_field import Field, log2_exact, next_power_of_2


@lru_cache(maxsize=None)
def _extension(field: Field, known: int, n: int) -> tuple[tuple[int, ...], ...]:
    """Coefficients giving the values at nodes known..n-1 of the n-th roots of
    unity from the values at nodes 0..known-1 (degree < known)."""
    nodes = field.nth_root_powers(n)
    out = []
    for k in range(known, n):
        row = []
        for i in range(known):
            num = den = 1
            for j in range(known):
                if j != i:
                    num = field.mul(num, field.sub(nodes[k], nodes[j]))
                    den = field.mul(den, field.sub(nodes[i], nodes[j]))
            row.append(field.mul(num, field.inv(den)))
        out.append(tuple(row))
    return tuple(out)


@lru_cache(maxsize=None)
def _doubling(field: Field, n: int) -> tuple[tuple[int, ...], ...]:
    """Matrix M with (values at the odd 2n-th roots) = M @ (values at the n-th roots)."""
    cols = []
    for j in range(n):
        unit = [0] * n
        unit[j] = 1
        cols.append(field.double_evaluations(unit)[1::2])
    return tuple(tuple(cols[j][i] for j in range(n)) for i in range(n))


def _linear(F, coeffs, values):
    pairs = [(F.const(c), v) for c, v in zip(coeffs, values) if c]
    return F.dot([c for c, _ in pairs], [v for _, v in pairs])


def _squarings(F, t, count):
    """[t, t**2, t**4, ..., t**(2**count)]."""
    out = [t]
    for _ in range(count):
        out.append(F.mul(out[-1], out[-1]))
    return out


def lagrange_weights(F, n, powers):
    """L_i(t) for the n-th roots of unity w_i (n a power of two), given
    powers[k] = t**(2**k). L_i(t) = (w_i / n) * W_n(t, i) with
    W_n(t, i) = prod_{j != i} (t - w_j) = (t + w_i) * W_{n/2}(t**2, i mod n/2),
    as w_{i + n/2} = -w_i: 2.5 n products instead of 4 n for prefix and suffix
    products, and no inversion."""
    field = F.scalar
    k = log2_exact(n)
    if k == 0:
        return [F.const(1)]
    lower = [F.const(1)]  # W_1
    for level in range(1, k):  # W_m at t**(n/m) for m = 2, 4, ..., n/2
        m = 1 << level
        s = powers[k - level]
        roots = field.nth_root_powers(m)
        factors = [F.add(s, F.const(w)) for w in roots]
        lower = factors if m == 2 else [F.mul(f, lower[i % (m // 2)]) for i, f in enumerate(factors)]
    # Top level with the constants folded in: c_i (t + w_i) = c_i t + c_i w_i, c_{i+n/2} = -c_i.
    n_inv = field.inv(n)
    half = n // 2
    weights = [None] * n
    for i, w in enumerate(field.nth_root_powers(n)[:half]):
        c = field.mul(w, n_inv)
        scaled_t = F.mul(F.const(c), powers[0])
        cw = F.const(field.mul(c, w))
        low = lower[i] if half > 1 else None
        for j, factor in ((i, F.add(scaled_t, cw)), (i + half, F.sub(cw, scaled_t))):
            weights[j] = factor if low is None else F.mul(factor, low)
    return weights


def lagrange_eval(F, polys, powers):
    """Each polynomial (n values at the n-th roots of unity; None = 0) at t,
    given powers[k] = t**(2**k) for k <= log2(n) - 1."""
    weights = lagrange_weights(F, len(polys[0]), powers)
    out = []
    for poly in polys:
        used = [i for i, v in enumerate(poly) if v is not None]
        out.append(F.dot([weights[i] for i in used], [poly[i] for i in used]))
    return out


class _QueryGadget:
    """Records the wire values of each call and answers with the gadget
    polynomial's value at that call's node, as the draft's QueryGadget."""

    def __init__(self, F, g, wire_seeds, gadget_poly, calls):
        self.inner = g
        self.ARITY = g.ARITY
        self.DEGREE = g.DEGREE
        p = wire_poly_len(calls)
        self.wires = [[s] + [None] * (p - 1) for s in wire_seeds]
        self.k = 0
        poly = list(gadget_poly)
        n = next_power_of_2(len(poly))
        poly += [_linear(F, row, poly) for row in _extension(F.scalar, len(poly), n)]
        size = next_power_of_2(gadget_poly_len(g.DEGREE, p))
        while len(poly) < size:
            odd = [_linear(F, row, poly) for row in _doubling(F.scalar, len(poly))]
            poly = [x for pair in zip(poly, odd) for x in pair]
        self.poly = poly
        self.step = 1 << (log2_exact(size) - log2_exact(p))

    def eval(self, F, inp):
        self.k += 1
        for j in range(len(inp)):
            self.wires[j][self.k] = inp[j]
        return self.poly[self.k * self.step]


def query(valid, F, meas, proof, query_rand, joint_rand, num_shares):
    """(verifier rows, bad): the verifier share of every report, and the reports
    whose test point is a root of unity (the draft's query raises there)."""
    gadgets = []
    offset = 0
    for g, calls in zip(valid.GADGETS, valid.GADGET_CALLS):
        plen = gadget_poly_len(g.DEGREE, wire_poly_len(calls))
        seeds = [proof[offset + j] for j in range(g.ARITY)]
        poly = [proof[offset + g.ARITY + j] for j in range(plen)]
        gadgets.append(_QueryGadget(F, g, seeds, poly, calls))
        offset += g.ARITY + plen
    out = valid.eval(F, meas, joint_rand, num_shares, gadgets)
    rands = list(query_rand)
    if valid.EVAL_OUTPUT_LEN > 1:
        v = _linear_rows(F, rands[:valid.EVAL_OUTPUT_LEN], out)
        rands = rands[valid.EVAL_OUTPUT_LEN:]
    else:
        v = out[0]
    verifier = [v]
    bad = np.zeros(np.shape(query_rand[0])[-1], dtype=bool)
    for g, t in zip(gadgets, rands):
        p, n = len(g.wires[0]), len(g.poly)
        powers = _squarings(F, t, max(log2_exact(p), log2_exact(n) - 1))
        bad |= F.equal(powers[log2_exact(p)], F.const(1))
        verifier += lagrange_eval(F, g.wires, powers)
        verifier += lagrange_eval(F, [g.poly], powers)
    return verifier, bad


def _linear_rows(F, coeff_rows, value_rows):
    return F.dot(list(coeff_rows), list(value_rows))


def decide(valid, F, verifier):
    """Per report: the circuit output is zero and every gadget test holds."""
    ok = F.equal(verifier[0], F.const(0))
    pos = 1
    for g in valid.GADGETS:
        wire_checks = verifier[pos:pos + g.ARITY]
        ok = ok & F.equal(g.eval(F, list(wire_checks)), verifier[pos + g.ARITY])
        pos += g.ARITY + 1
    return ok
