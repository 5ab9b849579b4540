# The fully linear proof of BBCGGI19 as draft-irtf-cfrg-vdaf specifies it
# (the FLP section and the gadgets appendix), with the validity circuits of
# Prio3Count, Prio3Sum and Prio3Histogram. MicroPython-compatible.
#
# A circuit's eval() takes the field ops object F and the (wrapped) gadgets
# as arguments: the prover here passes the scalar field and recording
# gadgets; the aggregators (rase_common.vdaf.flp) pass a vector field, so the
# same circuit runs over thousands of reports at once.

from rase_device.entropy import bit_length
from rase_device.vdaf_field import next_power_of_2


def wire_poly_len(gadget_calls):
    """Values in each wire polynomial: the seed plus one per call, to a power of two."""
    return next_power_of_2(1 + gadget_calls)


def gadget_poly_len(degree, wire_len):
    return degree * (wire_len - 1) + 1


class Mul:
    ARITY = 2
    DEGREE = 2

    def eval(self, F, inp):
        return F.mul(inp[0], inp[1])

    def eval_poly(self, field, wires):
        return field.poly_mul(wires[0], wires[1])


class PolyEval:
    """p(x) for a fixed polynomial p, given by its coefficients (lowest first)."""
    ARITY = 1

    def __init__(self, coeffs, num_calls):
        coeffs = list(coeffs)
        while len(coeffs) > 1 and coeffs[-1] == 0:
            coeffs.pop()
        if not coeffs:
            raise ValueError("PolyEval needs at least one coefficient")
        self.coeffs = coeffs
        self.DEGREE = len(coeffs) - 1
        self.n = next_power_of_2(gadget_poly_len(self.DEGREE, wire_poly_len(num_calls)))

    def eval(self, F, inp):
        x = inp[0]
        acc = F.const(self.coeffs[-1])
        for c in reversed(self.coeffs[:-1]):
            acc = F.add(F.mul(acc, x), F.const(c))
        return acc

    def eval_poly(self, field, wires):
        w = wires[0]
        values = field.ntt(field.inv_ntt(w, len(w)), self.n)
        return [self.eval(field, [v]) for v in values]


class ParallelSum:
    """The sum of `count` copies of a subcircuit on consecutive slices of the input."""

    def __init__(self, sub, count):
        if count < 1:
            raise ValueError("ParallelSum count must be >= 1, got %r" % (count,))
        self.sub = sub
        self.count = count
        self.ARITY = sub.ARITY * count
        self.DEGREE = sub.DEGREE

    def eval(self, F, inp):
        a = self.sub.ARITY
        out = self.sub.eval(F, inp[0:a])
        for i in range(1, self.count):
            out = F.add(out, self.sub.eval(F, inp[i * a:(i + 1) * a]))
        return out

    def eval_poly(self, field, wires):
        a = self.sub.ARITY
        n = next_power_of_2(gadget_poly_len(self.DEGREE, len(wires[0])))
        out = [0] * n
        for i in range(self.count):
            cur = self.sub.eval_poly(field, wires[i * a:(i + 1) * a])
            for j in range(n):
                out[j] = field.add(out[j], cur[j])
        return out


class Valid:
    """What every validity circuit shares: the FLP's lengths. Subclasses set
    GADGETS and GADGET_CALLS per instance."""
    GADGETS = []  # type: list
    GADGET_CALLS = []  # type: list
    EVAL_OUTPUT_LEN = 1

    def prove_rand_len(self):
        return sum(g.ARITY for g in self.GADGETS)

    def query_rand_len(self):
        return len(self.GADGETS) + (self.EVAL_OUTPUT_LEN if self.EVAL_OUTPUT_LEN > 1 else 0)

    def proof_len(self):
        return sum(g.ARITY + gadget_poly_len(g.DEGREE, wire_poly_len(c))
                   for g, c in zip(self.GADGETS, self.GADGET_CALLS))

    def verifier_len(self):
        return 1 + sum(g.ARITY + 1 for g in self.GADGETS)


class Count(Valid):
    MEAS_LEN = 1
    JOINT_RAND_LEN = 0
    OUTPUT_LEN = 1
    EVAL_OUTPUT_LEN = 1

    def __init__(self, field):
        self.field = field
        self.GADGETS = [Mul()]
        self.GADGET_CALLS = [1]

    def encode(self, measurement):
        if measurement not in (0, 1):
            raise ValueError("a Count measurement is 0 or 1, got %r" % (measurement,))
        return [int(measurement)]

    def eval(self, F, meas, joint_rand, num_shares, gadgets):
        return [F.sub(gadgets[0].eval(F, [meas[0], meas[0]]), meas[0])]

    def truncate(self, F, meas):
        return meas

    def decode(self, output, num_measurements):
        return output[0]


class Sum(Valid):
    """Integers in [0, max_measurement]: bits - 1 binary digits plus one digit of
    weight max_measurement - (2**(bits-1) - 1), each checked to be 0 or 1."""
    JOINT_RAND_LEN = 0
    OUTPUT_LEN = 1

    def __init__(self, field, max_measurement):
        if not 0 < max_measurement < field.MODULUS:
            raise ValueError("max_measurement must be in [1, %s), got %r" % (field.MODULUS, max_measurement))
        self.field = field
        self.max_measurement = max_measurement
        self.bits = bit_length(max_measurement)
        self.GADGETS = [PolyEval([0, -1, 1], self.bits)]
        self.GADGET_CALLS = [self.bits]
        self.MEAS_LEN = self.bits
        self.EVAL_OUTPUT_LEN = self.bits
        self.last_weight = max_measurement - ((1 << (self.bits - 1)) - 1)

    def encode(self, measurement):
        if not 0 <= measurement <= self.max_measurement:
            raise ValueError("a Sum measurement is in [0, %d], got %r" % (self.max_measurement, measurement))
        last = 1 if measurement >= (1 << (self.bits - 1)) else 0
        rest = measurement - self.last_weight if last else measurement
        return [(rest >> i) & 1 for i in range(self.bits - 1)] + [last]

    def eval(self, F, meas, joint_rand, num_shares, gadgets):
        return [gadgets[0].eval(F, [b]) for b in meas]

    def truncate(self, F, meas):
        out = F.mul(F.const(self.last_weight), meas[self.bits - 1])
        for i in range(self.bits - 1):
            out = F.add(out, F.mul(F.const(1 << i), meas[i]))
        return [out]

    def decode(self, output, num_measurements):
        return output[0]


class Histogram(Valid):
    """One-hot vectors of `length` buckets; range checks batched chunk_length
    at a time through ParallelSum(Mul) with joint randomness."""
    EVAL_OUTPUT_LEN = 2

    def __init__(self, field, length, chunk_length):
        if length < 1 or not 1 <= chunk_length <= length:
            raise ValueError("Histogram needs length >= 1 and 1 <= chunk_length <= length, got %r, %r"
                             % (length, chunk_length))
        self.field = field
        self.length = length
        self.chunk_length = chunk_length
        self.GADGETS = [ParallelSum(Mul(), chunk_length)]
        self.GADGET_CALLS = [(length + chunk_length - 1) // chunk_length]
        self.MEAS_LEN = length
        self.OUTPUT_LEN = length
        self.JOINT_RAND_LEN = self.GADGET_CALLS[0]

    def encode(self, measurement):
        if not 0 <= measurement < self.length:
            raise ValueError("a Histogram measurement is a bucket in [0, %d), got %r" % (self.length, measurement))
        out = [0] * self.length
        out[measurement] = 1
        return out

    def eval(self, F, meas, joint_rand, num_shares, gadgets):
        shares_inv = F.const(self.field.inv(num_shares))
        zero = F.const(0)
        range_check = zero
        for i in range(self.GADGET_CALLS[0]):
            r = joint_rand[i]
            r_power = r
            inputs = []
            for j in range(self.chunk_length):
                index = i * self.chunk_length + j
                m = meas[index] if index < len(meas) else zero
                inputs.append(F.mul(r_power, m))
                inputs.append(F.sub(m, shares_inv))
                r_power = F.mul(r_power, r)
            range_check = F.add(range_check, gadgets[0].eval(F, inputs))
        sum_check = F.sub(meas[0], shares_inv)
        for b in meas[1:]:
            sum_check = F.add(sum_check, b)
        return [range_check, sum_check]

    def truncate(self, F, meas):
        return meas

    def decode(self, output, num_measurements):
        return list(output)


class _ProveGadget:
    """Records each call's inputs as the wire values the proof interpolates."""

    def __init__(self, g, wire_seeds, calls):
        self.inner = g
        self.ARITY = g.ARITY
        self.DEGREE = g.DEGREE
        p = wire_poly_len(calls)
        self.wires = [[s] + [0] * (p - 1) for s in wire_seeds]
        self.k = 0

    def eval(self, F, inp):
        self.k += 1
        for j in range(len(inp)):
            self.wires[j][self.k] = inp[j]
        return self.inner.eval(F, inp)


def prove(valid, meas, prove_rand, joint_rand):
    """The proof: each gadget's wire seeds, then its gadget polynomial (Lagrange basis)."""
    field = valid.field
    gadgets = []
    offset = 0
    for g, calls in zip(valid.GADGETS, valid.GADGET_CALLS):
        gadgets.append(_ProveGadget(g, prove_rand[offset:offset + g.ARITY], calls))
        offset += g.ARITY
    valid.eval(field, meas, joint_rand, 1, gadgets)
    proof = []
    for pg, calls in zip(gadgets, valid.GADGET_CALLS):
        proof += [w[0] for w in pg.wires]
        poly = pg.inner.eval_poly(field, pg.wires)
        proof += poly[:gadget_poly_len(pg.DEGREE, wire_poly_len(calls))]
    return proof
