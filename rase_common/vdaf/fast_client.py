"""A CPython client for simulations and load generators (replays of
thousands of devices, benchmarks): byte for byte the device core's Prio3
reports (rase_device.prio3, rase_device.prio3_report), with TurboSHAKE128 from
xoflib and HPKE sealing from `cryptography` instead of pure Python (about 10x
faster). tests/unit/rase_common/test_fast_client.py checks that its shards
equal the device's for the same randomness. Devices never use it.
"""

from __future__ import annotations

from xoflib import turbo_shake128

from rase_device import prio3 as p3
from rase_device.prio3_report import helper_share_info
from rase_device.turboshake import xof_message
from rase_common.vdaf.hpke import seal


def _expand(field, seed: bytes, dst: bytes, binder: bytes, length: int) -> list[int]:
    """The draft's expand_into_vec: little-endian elements, those >= p rejected."""
    size = field.ENCODED_SIZE
    h = turbo_shake128(1, xof_message(seed, dst, binder))
    out: list[int] = []
    while len(out) < length:
        x = int.from_bytes(h.read(size), "little")
        if x < field.MODULUS:
            out.append(x)
    return out


def _derive_seed(seed: bytes, dst: bytes, binder: bytes) -> bytes:
    return turbo_shake128(1, xof_message(seed, dst, binder)).read(p3.SEED_SIZE)


class FastPrio3(p3.Prio3):
    """The same Prio3 as `base`, its XOF calls on xoflib."""

    def __init__(self, base: p3.Prio3):
        self.__dict__.update(base.__dict__)

    def helper_meas_share(self, ctx, agg_id, share):
        return _expand(self.field, share, self.dst(p3.USAGE_MEAS_SHARE, ctx), bytes((agg_id,)), self.MEAS_LEN)

    def helper_proofs_share(self, ctx, agg_id, share):
        return _expand(self.field, share, self.dst(p3.USAGE_PROOF_SHARE, ctx), bytes((self.PROOFS, agg_id)),
                       self.PROOF_LEN * self.PROOFS)

    def prove_rands(self, ctx, prove_seed):
        return _expand(self.field, prove_seed, self.dst(p3.USAGE_PROVE_RANDOMNESS, ctx), bytes((self.PROOFS,)),
                       self.PROVE_RAND_LEN * self.PROOFS)

    def query_rands(self, verify_key, ctx, nonce):
        return _expand(self.field, verify_key, self.dst(p3.USAGE_QUERY_RANDOMNESS, ctx),
                       bytes((self.PROOFS,)) + nonce, self.QUERY_RAND_LEN * self.PROOFS)

    def joint_rand_part(self, ctx, agg_id, blind, meas_share, nonce):
        return _derive_seed(blind, self.dst(p3.USAGE_JOINT_RAND_PART, ctx),
                            bytes((agg_id,)) + nonce + self.field.encode_vec(meas_share))

    def joint_rand_seed(self, ctx, parts):
        return _derive_seed(bytes(p3.SEED_SIZE), self.dst(p3.USAGE_JOINT_RAND_SEED, ctx), b"".join(parts))

    def joint_rands(self, ctx, seed):
        return _expand(self.field, seed, self.dst(p3.USAGE_JOINT_RANDOMNESS, ctx), bytes((self.PROOFS,)),
                       self.JOINT_RAND_LEN * self.PROOFS)


def fast_make_report(vdaf: p3.Prio3, ctx: bytes, measurement: int, helper_public_key: bytes, read=None):  # noqa: ANN001
    """rase_device.prio3_report.make_report's report, with FastPrio3 and cryptography's HPKE."""
    import os

    read = read or os.urandom
    fast = vdaf if isinstance(vdaf, FastPrio3) else FastPrio3(vdaf)
    nonce = bytes(read(p3.NONCE_SIZE))
    public, shares = fast.shard(ctx, measurement, nonce, bytes(read(fast.RAND_SIZE)))
    return nonce, public, shares[0], seal(helper_public_key, helper_share_info(ctx, nonce, public), shares[1])
