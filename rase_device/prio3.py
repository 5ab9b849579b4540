# Prio3 of draft-irtf-cfrg-vdaf (verifiable distributed aggregation), the
# client's side: sharding a measurement into a public share and one input
# share per aggregator, with the proof of validity. MicroPython-compatible.
# Verification runs on the aggregators, vectorized: rase_common.vdaf.
#
# Encodings follow the draft's message serialization: field elements little
# endian, seeds 32 bytes. Names follow the draft (shard, helper_meas_share...).

from rase_device import flp
from rase_device.turboshake import XofTurboShake128, derive_seed, expand_into_vec
from rase_device.vdaf_field import FIELD64, FIELD128

VERSION = 18  # the draft's VERSION constant (unchanged since draft 18's wire format)
SEED_SIZE = XofTurboShake128.SEED_SIZE
NONCE_SIZE = 16
VERIFY_KEY_SIZE = SEED_SIZE

USAGE_MEAS_SHARE = 1
USAGE_PROOF_SHARE = 2
USAGE_JOINT_RANDOMNESS = 3
USAGE_PROVE_RANDOMNESS = 4
USAGE_QUERY_RANDOMNESS = 5
USAGE_JOINT_RAND_SEED = 6
USAGE_JOINT_RAND_PART = 7

ID_COUNT = 1
ID_SUM = 2
ID_HISTOGRAM = 4


def format_dst(algo_class, algo, usage):
    return bytes((VERSION, algo_class)) + algo.to_bytes(4, "big") + usage.to_bytes(2, "big")


class Prio3:
    """One Prio3 instance: an ID, a validity circuit, SHARES aggregators, PROOFS proofs."""

    def __init__(self, vdaf_id, valid, shares=2, proofs=1):
        if not 2 <= shares < 256:
            raise ValueError("shares must be in [2, 256), got %r" % (shares,))
        if not 1 <= proofs < 256:
            raise ValueError("proofs must be in [1, 256), got %r" % (proofs,))
        self.ID = vdaf_id
        self.valid = valid
        self.field = valid.field
        self.SHARES = shares
        self.PROOFS = proofs
        self.MEAS_LEN = valid.MEAS_LEN
        self.OUTPUT_LEN = valid.OUTPUT_LEN
        self.JOINT_RAND_LEN = valid.JOINT_RAND_LEN
        self.PROVE_RAND_LEN = valid.prove_rand_len()
        self.QUERY_RAND_LEN = valid.query_rand_len()
        self.PROOF_LEN = valid.proof_len()
        self.VERIFIER_LEN = valid.verifier_len()
        self.uses_joint_rand = valid.JOINT_RAND_LEN > 0
        self.RAND_SIZE = SEED_SIZE * shares * (2 if self.uses_joint_rand else 1)

    # -- sizes of the encoded messages --
    def public_share_size(self):
        return SEED_SIZE * self.SHARES if self.uses_joint_rand else 0

    def input_share_size(self, agg_id):
        blind = SEED_SIZE if self.uses_joint_rand else 0
        if agg_id == 0:
            return self.field.ENCODED_SIZE * (self.MEAS_LEN + self.PROOF_LEN * self.PROOFS) + blind
        return SEED_SIZE + blind

    def verifier_share_size(self):
        jr = SEED_SIZE if self.uses_joint_rand else 0
        return self.field.ENCODED_SIZE * self.VERIFIER_LEN * self.PROOFS + jr

    def agg_share_size(self):
        return self.field.ENCODED_SIZE * self.OUTPUT_LEN

    # -- the draft's auxiliary functions --
    def dst(self, usage, ctx):
        return format_dst(0, self.ID, usage) + ctx

    def helper_meas_share(self, ctx, agg_id, share):
        return expand_into_vec(self.field, share, self.dst(USAGE_MEAS_SHARE, ctx), bytes((agg_id,)), self.MEAS_LEN)

    def helper_proofs_share(self, ctx, agg_id, share):
        return expand_into_vec(self.field, share, self.dst(USAGE_PROOF_SHARE, ctx), bytes((self.PROOFS, agg_id)),
                               self.PROOF_LEN * self.PROOFS)

    def prove_rands(self, ctx, prove_seed):
        return expand_into_vec(self.field, prove_seed, self.dst(USAGE_PROVE_RANDOMNESS, ctx), bytes((self.PROOFS,)),
                               self.PROVE_RAND_LEN * self.PROOFS)

    def query_rands(self, verify_key, ctx, nonce):
        return expand_into_vec(self.field, verify_key, self.dst(USAGE_QUERY_RANDOMNESS, ctx),
                               bytes((self.PROOFS,)) + nonce, self.QUERY_RAND_LEN * self.PROOFS)

    def joint_rand_part(self, ctx, agg_id, blind, meas_share, nonce):
        return derive_seed(blind, self.dst(USAGE_JOINT_RAND_PART, ctx),
                           bytes((agg_id,)) + nonce + self.field.encode_vec(meas_share))

    def joint_rand_seed(self, ctx, parts):
        return derive_seed(bytes(SEED_SIZE), self.dst(USAGE_JOINT_RAND_SEED, ctx), b"".join(parts))

    def joint_rands(self, ctx, seed):
        return expand_into_vec(self.field, seed, self.dst(USAGE_JOINT_RANDOMNESS, ctx), bytes((self.PROOFS,)),
                               self.JOINT_RAND_LEN * self.PROOFS)

    # -- sharding --
    def shard(self, ctx, measurement, nonce, rand):
        """(public_share, [input_share for each aggregator]), all encoded as bytes.
        nonce: NONCE_SIZE bytes; rand: RAND_SIZE bytes, both from a CSPRNG."""
        return self.shard_encoded(ctx, self.valid.encode(measurement), nonce, rand)

    def shard_encoded(self, ctx, meas, nonce, rand):
        """shard() for an already encoded measurement. The prover does not check
        validity: the soundness tests use this to forge reports."""
        if len(nonce) != NONCE_SIZE:
            raise ValueError("nonce must be %d bytes, got %d" % (NONCE_SIZE, len(nonce)))
        if len(rand) != self.RAND_SIZE:
            raise ValueError("rand must be %d bytes, got %d" % (self.RAND_SIZE, len(rand)))
        if len(meas) != self.MEAS_LEN:
            raise ValueError("encoded measurement must have %d elements, got %d" % (self.MEAS_LEN, len(meas)))
        helper_shares, helper_blinds, leader_blind, prove_seed = self._split_rand(rand)
        leader_meas, parts, joint_rands = self._share_meas(ctx, meas, nonce, helper_shares, helper_blinds,
                                                           leader_blind)
        proofs = self._prove(ctx, meas, prove_seed, joint_rands)
        for j in range(self.SHARES - 1):
            share = self.helper_proofs_share(ctx, j + 1, helper_shares[j])
            proofs = [self.field.sub(a, b) for a, b in zip(proofs, share)]
        leader = self.field.encode_vec(leader_meas) + self.field.encode_vec(proofs)
        input_shares = [leader + (leader_blind if self.uses_joint_rand else b"")]
        for j in range(self.SHARES - 1):
            input_shares.append(helper_shares[j] + (helper_blinds[j] if self.uses_joint_rand else b""))
        return b"".join(parts), input_shares

    def _split_rand(self, rand):
        """(helper seeds, helper blinds, leader blind, prove seed) in the draft's order."""
        seeds = [bytes(rand[i:i + SEED_SIZE]) for i in range(0, self.RAND_SIZE, SEED_SIZE)]
        step = 2 if self.uses_joint_rand else 1
        helper_shares = [seeds[step * j] for j in range(self.SHARES - 1)]
        helper_blinds = [seeds[step * j + 1] for j in range(self.SHARES - 1)] if self.uses_joint_rand else []
        rest = seeds[step * (self.SHARES - 1):]
        return helper_shares, helper_blinds, (rest[0] if self.uses_joint_rand else b""), rest[-1]

    def _share_meas(self, ctx, meas, nonce, helper_shares, helper_blinds, leader_blind):
        """(leader's measurement share, joint randomness parts, joint randomness)."""
        leader_meas = list(meas)
        parts = []
        for j in range(self.SHARES - 1):
            share = self.helper_meas_share(ctx, j + 1, helper_shares[j])
            leader_meas = [self.field.sub(a, b) for a, b in zip(leader_meas, share)]
            if self.uses_joint_rand:
                parts.append(self.joint_rand_part(ctx, j + 1, helper_blinds[j], share, nonce))
        if not self.uses_joint_rand:
            return leader_meas, parts, []
        parts.insert(0, self.joint_rand_part(ctx, 0, leader_blind, leader_meas, nonce))
        return leader_meas, parts, self.joint_rands(ctx, self.joint_rand_seed(ctx, parts))

    def _prove(self, ctx, meas, prove_seed, joint_rands):
        prove_rands = self.prove_rands(ctx, prove_seed)
        proofs = []
        for i in range(self.PROOFS):
            prove_rand = prove_rands[i * self.PROVE_RAND_LEN:(i + 1) * self.PROVE_RAND_LEN]
            joint_rand = joint_rands[i * self.JOINT_RAND_LEN:(i + 1) * self.JOINT_RAND_LEN]
            proofs += flp.prove(self.valid, meas, prove_rand, joint_rand)
        return proofs

    # -- unsharding (the collector: scalar, one vector per batch) --
    def unshard(self, agg_shares, num_measurements):
        """The aggregate result from the encoded aggregate shares of all aggregators."""
        if len(agg_shares) != self.SHARES:
            raise ValueError("unshard needs %d aggregate shares, got %d" % (self.SHARES, len(agg_shares)))
        total = [0] * self.OUTPUT_LEN
        for share in agg_shares:
            vec = self.field.decode_vec(share)
            if len(vec) != self.OUTPUT_LEN:
                raise ValueError("an aggregate share has %d elements, wanted %d" % (len(vec), self.OUTPUT_LEN))
            total = [self.field.add(a, b) for a, b in zip(total, vec)]
        return self.valid.decode(total, num_measurements)


def prio3_count(shares=2):
    return Prio3(ID_COUNT, flp.Count(FIELD64), shares)


def prio3_sum(max_measurement, shares=2):
    return Prio3(ID_SUM, flp.Sum(FIELD64, max_measurement), shares)


def prio3_histogram(length, chunk_length, shares=2):
    return Prio3(ID_HISTOGRAM, flp.Histogram(FIELD128, length, chunk_length), shares)
