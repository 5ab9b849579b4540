"""A faster Prio3Sum client for simulated fleets (household replays of 10,000
meters, issue 28): byte for byte the shares the device core makes
(rase_device.prio3 shard, its FLP proof), from the same nonce and sharding
randomness, as rase_common.vdaf.fast_client's are, with the proof computed
from tables instead of two NTTs per report.

Why it can be: Prio3Sum's one gadget (PolyEval x^2 - x) is called on the
measurement's bits, so its wire polynomial is w = [seed, b_0 .. b_(bits-1),
0 ...] and the gadget polynomial's values at the 2n-th roots of unity are
p(L w), L = ntt_2n o inv_ntt_n, a fixed linear map. L w = seed L e_0 +
sum of L e_(k+1) over the set bits: the columns of L are computed once (by
the device core's own NTTs), the bits' part once per measurement, and a
report costs a few dozen multiplications in Field64 and three XOF calls on
xoflib. HPKE sealing as in fast_client (cryptography). Devices never use it;
tests/unit/simulators/test_fast_sum.py holds its shares equal to the device's.
"""

from __future__ import annotations

import functools
import os

from xoflib import turbo_shake128

from rase_common.vdaf.fast_client import FastPrio3
from rase_common.vdaf.hpke import seal
from rase_device import flp
from rase_device import prio3 as p3
from rase_device.prio3_report import helper_share_info
from rase_device.turboshake import xof_message


def expand_vec(modulus: int, size: int, seed: bytes, dst: bytes, binder: bytes, length: int) -> list[int]:
    """The draft's expand_into_vec (as fast_client's _expand) reading `length` elements at once: an element
    >= the modulus (probability 2**-32 each in Field64) is rejected and the stream read on, as the draft says."""
    h = turbo_shake128(1, xof_message(seed, dst, binder))
    raw = h.read(size * length)
    out = [int.from_bytes(raw[i:i + size], "little") for i in range(0, len(raw), size)]
    if all(x < modulus for x in out):
        return out
    kept = [x for x in out if x < modulus]
    while len(kept) < length:
        x = int.from_bytes(h.read(size), "little")
        if x < modulus:
            kept.append(x)
    return kept


class SumProver:
    """Prio3Sum sharding for one max_measurement (a Prio3 instance of rase_device.prio3.prio3_sum)."""

    def __init__(self, vdaf: p3.Prio3):
        valid = vdaf.valid
        if not isinstance(valid, flp.Sum) or vdaf.SHARES != 2 or vdaf.PROOFS != 1:
            raise ValueError("SumProver is for two-party Prio3Sum with one proof")
        self.vdaf = vdaf if isinstance(vdaf, FastPrio3) else FastPrio3(vdaf)
        self.field = field = valid.field
        self.p = field.MODULUS
        self.bits = valid.bits
        gadget = valid.GADGETS[0]
        self.wire_len = flp.wire_poly_len(valid.GADGET_CALLS[0])
        self.proof_poly_len = flp.gadget_poly_len(gadget.DEGREE, self.wire_len)
        # Columns of L: the gadget's evaluation points' values of each unit wire polynomial.
        self.columns = []
        for i in range(self.wire_len):
            e = [0] * self.wire_len
            e[i] = 1
            self.columns.append(field.ntt(field.inv_ntt(e, self.wire_len), gadget.n))
        if list(gadget.coeffs) != [0, -1, 1]:
            raise ValueError("Prio3Sum's range gadget is x^2 - x")
        self.n_points = gadget.n
        self._parts: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}

    def _bits_part(self, measurement: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(encoded bits, sum of L's columns of the set bits) of one measurement (kept: at most
        max_measurement + 1 of them)."""
        got = self._parts.get(measurement)
        if got is not None:
            return got
        bits = self.vdaf.valid.encode(measurement)
        acc = [0] * self.n_points
        for k, b in enumerate(bits):
            if b:
                col = self.columns[k + 1]
                acc = [(a + c) % self.p for a, c in zip(acc, col)]
        got = self._parts[measurement] = (tuple(bits), tuple(acc))
        return got

    def _poly(self, x: int) -> int:
        return (x * x - x) % self.p          # the coefficients [0, -1, 1] (checked in __init__)

    def shard(self, ctx: bytes, measurement: int, nonce: bytes, rand: bytes) -> tuple[bytes, list[bytes]]:
        """rase_device.prio3.Prio3.shard for Prio3Sum: (public share, [leader share, helper share])."""
        p, v = self.p, self.vdaf
        helper_seed, prove_seed = rand[:p3.SEED_SIZE], rand[p3.SEED_SIZE:2 * p3.SEED_SIZE]
        bits, part = self._bits_part(measurement)
        size = self.field.ENCODED_SIZE
        helper_meas = expand_vec(p, size, helper_seed, v.dst(p3.USAGE_MEAS_SHARE, ctx), b"\x01", v.MEAS_LEN)
        leader_meas = [(b - h) % p for b, h in zip(bits, helper_meas)]
        (seed,) = expand_vec(p, size, prove_seed, v.dst(p3.USAGE_PROVE_RANDOMNESS, ctx), b"\x01", 1)
        col0 = self.columns[0]
        gadget = [self._poly((seed * c + q) % p) for c, q in zip(col0, part)]
        proof = [seed] + gadget[:self.proof_poly_len]
        helper_proof = expand_vec(p, size, helper_seed, v.dst(p3.USAGE_PROOF_SHARE, ctx), b"\x01\x01",
                                  v.PROOF_LEN)
        leader_proof = [(a - b) % p for a, b in zip(proof, helper_proof)]
        leader = b"".join(x.to_bytes(size, "little") for x in leader_meas + leader_proof)
        return b"", [leader, bytes(helper_seed)]


@functools.lru_cache(maxsize=8)
def _prover(vdaf_key: tuple) -> SumProver:
    return SumProver(p3.prio3_sum(vdaf_key[0]))


def fast_sum_make_report(vdaf: p3.Prio3, ctx: bytes, measurement: int, helper_public_key: bytes, read=None):  # noqa: ANN001
    """rase_device.prio3_report.make_report's report for Prio3Sum: nonce, then the sharding randomness, from
    `read` (os.urandom), the shares by SumProver, the helper's sealed by cryptography's HPKE."""
    read = read or os.urandom
    prover = _prover((vdaf.valid.max_measurement,))
    nonce = bytes(read(p3.NONCE_SIZE))
    public, shares = prover.shard(ctx, measurement, nonce, bytes(read(vdaf.RAND_SIZE)))
    return nonce, public, shares[0], seal(helper_public_key, helper_share_info(ctx, nonce, public), shares[1])
