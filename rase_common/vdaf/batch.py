"""Prio3 verification and aggregation over a batch of reports, as the draft's
verify_init, verifier_shares_to_message, verify_next and aggregation, with
every report of the batch processed at once.

Inputs and outputs are plain bytes, lists aligned with the batch (None where
a report was rejected) and numpy masks. A rejected report carries a
Rejection reason and is never aggregated.

Shares stay encoded (one uint8 row per report) until the circuit runs on a
block of up to BLOCK reports: decoding, the circuit and encoding the verifier
shares touch one block's arrays at a time, so a report costs the same in a
batch of 100,000 as in one of 10,000 (docs/performance.md).
"""

from __future__ import annotations

import enum
from collections.abc import Container, Sequence
from dataclasses import dataclass

import numpy as np

from rase_device import prio3 as p3
from rase_common.vdaf import flp, xof
from rase_common.vdaf.field import vector_field

SEED = p3.SEED_SIZE
# Reports whose circuit runs at once: a block's arrays stay in cache (without
# blocks a report's circuit took 1.6x as long in a batch of 100,000 as in one
# of 10,000), and blocks much smaller pay numpy's per-call cost more often.
BLOCK = 8192


class Rejection(str, enum.Enum):
    """Why a report was not aggregated."""
    MALFORMED = "malformed"                      # wrong length, or a field element not below the modulus
    NONCE_REPEATED = "nonce_repeated"            # an earlier report of this batch has the same nonce
    NONCE_REPLAYED = "nonce_replayed"            # the nonce is among those seen before (seen_nonces)
    DECRYPT_FAILED = "decrypt_failed"            # the sealed helper share did not open (HPKE)
    QUERY_FAILED = "query_failed"                # the test point hit a root of unity (probability ~2**-58)
    PEER_REJECTED = "peer_rejected"              # another aggregator sent no verifier share for it
    PEER_MALFORMED = "peer_malformed"            # another aggregator's verifier share is malformed
    PROOF_INVALID = "proof_invalid"              # the combined verifier fails decide()
    JOINT_RAND_MISMATCH = "joint_rand_mismatch"  # the client's joint randomness parts were not honest
    NO_MESSAGE = "no_message"                    # verify_next got no verifier message for it


@dataclass
class VerifyState:
    """One aggregator's verification state for a batch (the draft's verify
    state, for every report): its output shares and corrected joint
    randomness seeds. verify_init is deterministic: after a crash, recompute."""
    vdaf: p3.Prio3
    agg_id: int
    out_shares: np.ndarray               # rows of the vector field: (OUTPUT_LEN, N), or (OUTPUT_LEN, 4, N) in Field128
    corrected_seeds: list[bytes | None]  # joint randomness seed per report (None: not used)
    reasons: list[Rejection | None]
    finished: bool = False

    @property
    def accepted(self) -> np.ndarray:
        return np.array([r is None for r in self.reasons], dtype=bool)

    def out_share(self, report: int) -> list[int]:
        """Report `report`'s output share, as field elements."""
        F = vector_field(self.vdaf.field)
        return F.to_ints(np.moveaxis(self.out_shares[..., report], 0, -1))


def _screen(vdaf, agg_id, nonces, public_shares, input_shares, seen) -> list[Rejection | None]:
    reasons: list[Rejection | None] = []
    first: set[bytes] = set()
    want_in = vdaf.input_share_size(agg_id)
    for nonce, pub, share in zip(nonces, public_shares, input_shares):
        nonce = bytes(nonce)
        if share is None:
            reasons.append(Rejection.DECRYPT_FAILED)
        elif len(nonce) != p3.NONCE_SIZE or len(pub) != vdaf.public_share_size() or len(share) != want_in:
            reasons.append(Rejection.MALFORMED)
        elif nonce in seen:
            reasons.append(Rejection.NONCE_REPLAYED)
        elif nonce in first:
            reasons.append(Rejection.NONCE_REPEATED)
        else:
            reasons.append(None)
        first.add(nonce)
    return reasons


def _input_encoded(vdaf, F, ctx, agg_id, shares):
    """(measurement shares, proof shares, blinds) of the live input shares, the
    shares encoded as uint8 matrices (one row per report): the leader's as
    sent, the helper's expanded from its seeds."""
    n = len(shares)
    blinds = [bytes(s[-SEED:]) for s in shares] if vdaf.uses_joint_rand else []
    if agg_id == 0:
        body = b"".join(bytes(s[:len(s) - (SEED if vdaf.uses_joint_rand else 0)]) for s in shares)
        raw = np.frombuffer(body, dtype=np.uint8).reshape(n, -1)
        cut = vdaf.MEAS_LEN * F.ENCODED_SIZE
        return raw[:, :cut], raw[:, cut:], blinds
    seeds = [bytes(s[:SEED]) for s in shares]
    meas = xof.expand_encoded(F, seeds, vdaf.dst(p3.USAGE_MEAS_SHARE, ctx), [bytes((agg_id,))] * n, vdaf.MEAS_LEN)
    proofs = xof.expand_encoded(F, seeds, vdaf.dst(p3.USAGE_PROOF_SHARE, ctx), [bytes((vdaf.PROOFS, agg_id))] * n,
                                vdaf.PROOF_LEN * vdaf.PROOFS)
    return meas, proofs, blinds


def _joint_randomness(vdaf, F, ctx, agg_id, nonces, public_shares, meas, blinds):
    """(own joint randomness parts, corrected seeds, joint randomness, encoded),
    or ([], [None] * n, None) for a circuit without joint randomness."""
    n = len(nonces)
    if not vdaf.uses_joint_rand:
        return [], [None] * n, None
    own_parts = xof.derive_seeds(blinds, vdaf.dst(p3.USAGE_JOINT_RAND_PART, ctx),
                                 [bytes((agg_id,)) + x + meas[k].tobytes() for k, x in enumerate(nonces)])
    parts = [pub[:agg_id * SEED] + own + pub[(agg_id + 1) * SEED:] for pub, own in zip(public_shares, own_parts)]
    corrected = xof.derive_seeds([bytes(SEED)] * n, vdaf.dst(p3.USAGE_JOINT_RAND_SEED, ctx), parts)
    joint_rands = xof.expand_encoded(F, corrected, vdaf.dst(p3.USAGE_JOINT_RANDOMNESS, ctx),
                                     [bytes((vdaf.PROOFS,))] * n, vdaf.JOINT_RAND_LEN * vdaf.PROOFS)
    return own_parts, list(corrected), joint_rands


def _blocks(n: int) -> list[slice]:
    """Slices of nearly equal size, at most BLOCK reports each, covering range(n)."""
    if n <= 0:
        return []
    size = -(-n // -(-n // BLOCK))
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]


def _query_block(vdaf, F, meas, proofs, query_rands, joint_rands):
    """(verifier rows of all PROOFS proofs, reports whose query failed) for one block."""
    n = meas.shape[-1]
    verifier = F.rows_zeros(vdaf.VERIFIER_LEN * vdaf.PROOFS, n)
    bad = np.zeros(n, dtype=bool)
    pl, ql, jl, vl = vdaf.PROOF_LEN, vdaf.QUERY_RAND_LEN, vdaf.JOINT_RAND_LEN, vdaf.VERIFIER_LEN
    for k in range(vdaf.PROOFS):
        jr = joint_rands[k * jl:(k + 1) * jl] if joint_rands is not None else []
        v, b = flp.query(vdaf.valid, F, meas, proofs[k * pl:(k + 1) * pl], query_rands[k * ql:(k + 1) * ql],
                         jr, vdaf.SHARES)
        verifier[k * vl:(k + 1) * vl] = F.as_rows(v, n)
        bad |= b
    return verifier, bad


def _query_all(vdaf, F, encoded, out_shares, live):
    """Decode, query and encode a block of reports at a time. encoded: the
    (meas, proofs, query randomness, joint randomness or None) matrices.
    Fills out_shares[..., live[k]] for the good reports; returns (encoded
    verifier shares, canonical mask, query-failed mask)."""
    n = encoded[0].shape[0]
    verifier = np.empty((n, vdaf.VERIFIER_LEN * vdaf.PROOFS * F.ENCODED_SIZE), dtype=np.uint8)
    ok, bad = np.ones(n, dtype=bool), np.zeros(n, dtype=bool)
    for cols in _blocks(n):
        rows = []
        for matrix in encoded:
            if matrix is None:
                rows.append(None)
                continue
            decoded, canon = F.decode(matrix[cols])
            rows.append(decoded)
            ok[cols] &= canon
        block_verifier, bad[cols] = _query_block(vdaf, F, *rows)
        verifier[cols] = F.encode(block_verifier)
        good = ok[cols] & ~bad[cols]
        out = F.as_rows(list(vdaf.valid.truncate(F, rows[0])), cols.stop - cols.start)
        out_shares[..., live[cols][good]] = out[..., good]
    return verifier, ok, bad


def verify_init(vdaf: p3.Prio3, verify_key: bytes, ctx: bytes, agg_id: int, nonces: Sequence[bytes],
                public_shares: Sequence[bytes], input_shares: Sequence[bytes | None], *,
                seen_nonces: Container[bytes] = frozenset()) -> tuple[VerifyState, list[bytes | None]]:
    """Aggregator agg_id's verify_init on every report: (state, encoded verifier shares).
    input_shares[i] is None for a helper share that did not decrypt."""
    if len(verify_key) != p3.VERIFY_KEY_SIZE:
        raise ValueError(f"verify_key must be {p3.VERIFY_KEY_SIZE} bytes, got {len(verify_key)}")
    if not 0 <= agg_id < vdaf.SHARES:
        raise ValueError(f"agg_id must be in [0, {vdaf.SHARES}), got {agg_id}")
    if not len(nonces) == len(public_shares) == len(input_shares):
        raise ValueError("nonces, public_shares and input_shares must have one entry per report")
    F = vector_field(vdaf.field)
    reasons = _screen(vdaf, agg_id, nonces, public_shares, input_shares, seen_nonces)
    live = [i for i, r in enumerate(reasons) if r is None]
    n = len(live)
    out_shares = F.rows_zeros(vdaf.OUTPUT_LEN, len(reasons))
    seeds_all: list[bytes | None] = [None] * len(reasons)
    shares_out: list[bytes | None] = [None] * len(reasons)
    if not n:
        return VerifyState(vdaf, agg_id, out_shares, seeds_all, reasons), shares_out
    nonce_l = [bytes(nonces[i]) for i in live]
    pubs = [bytes(public_shares[i]) for i in live]
    with np.errstate(over="ignore"):
        meas, proofs, blinds = _input_encoded(vdaf, F, ctx, agg_id, [input_shares[i] for i in live])
        query_rands = xof.expand_encoded(F, [verify_key] * n, vdaf.dst(p3.USAGE_QUERY_RANDOMNESS, ctx),
                                         [bytes((vdaf.PROOFS,)) + x for x in nonce_l],
                                         vdaf.QUERY_RAND_LEN * vdaf.PROOFS)
        own_parts, corrected, joint_rands = _joint_randomness(vdaf, F, ctx, agg_id, nonce_l, pubs, meas, blinds)
        vs_bytes, ok, bad = _query_all(vdaf, F, (meas, proofs, query_rands, joint_rands), out_shares,
                                       np.asarray(live))
    for k, i in enumerate(live):
        if not ok[k]:
            reasons[i] = Rejection.MALFORMED
        elif bad[k]:
            reasons[i] = Rejection.QUERY_FAILED
        else:
            seeds_all[i] = corrected[k]
            shares_out[i] = vs_bytes[k].tobytes() + (own_parts[k] if vdaf.uses_joint_rand else b"")
    return VerifyState(vdaf, agg_id, out_shares, seeds_all, reasons), shares_out


def verifier_shares_to_message(vdaf: p3.Prio3, ctx: bytes, verifier_shares: Sequence[Sequence[bytes | None]]
                               ) -> tuple[list[bytes | None], list[Rejection | None]]:
    """Combine every aggregator's verifier shares (verifier_shares[agg_id][report])
    into the verifier messages; (messages, reasons), None where rejected."""
    if len(verifier_shares) != vdaf.SHARES:
        raise ValueError(f"need the verifier shares of all {vdaf.SHARES} aggregators, got {len(verifier_shares)}")
    n_all = len(verifier_shares[0])
    if any(len(s) != n_all for s in verifier_shares):
        raise ValueError("every aggregator's verifier shares must cover the same reports")
    F = vector_field(vdaf.field)
    size = vdaf.verifier_share_size()
    reasons: list[Rejection | None] = []
    for i in range(n_all):
        column = [s[i] for s in verifier_shares]
        if any(x is None for x in column):
            reasons.append(Rejection.PEER_REJECTED)
        elif any(len(x) != size for x in column):  # type: ignore[arg-type]
            reasons.append(Rejection.PEER_MALFORMED)
        else:
            reasons.append(None)
    live = [i for i, r in enumerate(reasons) if r is None]
    n = len(live)
    messages: list[bytes | None] = [None] * n_all
    if not n:
        return messages, reasons
    vlen = size - (SEED if vdaf.uses_joint_rand else 0)
    # Every share of a live report is there (reasons says None only then).
    encoded = [np.frombuffer(b"".join(bytes(shares[i][:vlen]) for i in live), dtype=np.uint8)  # type: ignore[index]
               .reshape(n, vlen) for shares in verifier_shares]
    ok, valid = np.ones(n, dtype=bool), np.ones(n, dtype=bool)
    vl = vdaf.VERIFIER_LEN
    with np.errstate(over="ignore"):
        for cols in _blocks(n):
            total: np.ndarray | None = None
            for matrix in encoded:
                rows, canon = F.decode(matrix[cols])
                ok[cols] &= canon
                total = rows if total is None else F.add(total, rows)
            assert total is not None
            for k in range(vdaf.PROOFS):
                valid[cols] &= flp.decide(vdaf.valid, F, list(total[k * vl:(k + 1) * vl]))
    seeds: list[bytes] = []
    if vdaf.uses_joint_rand:
        binders = [b"".join(bytes(s[i][vlen:]) for s in verifier_shares) for i in live]  # type: ignore[index]
        seeds = xof.derive_seeds([bytes(SEED)] * n, vdaf.dst(p3.USAGE_JOINT_RAND_SEED, ctx), binders)
    for k, i in enumerate(live):
        if not ok[k]:
            reasons[i] = Rejection.PEER_MALFORMED
        elif not valid[k]:
            reasons[i] = Rejection.PROOF_INVALID
        else:
            messages[i] = seeds[k] if vdaf.uses_joint_rand else b""
    return messages, reasons


def verify_next(state: VerifyState, messages: Sequence[bytes | None]) -> list[Rejection | None]:
    """The joint-randomness check for every report; updates and returns state.reasons."""
    if len(messages) != len(state.reasons):
        raise ValueError(f"got {len(messages)} verifier messages for {len(state.reasons)} reports")
    for i, msg in enumerate(messages):
        if state.reasons[i] is not None:
            continue
        if msg is None:
            state.reasons[i] = Rejection.NO_MESSAGE
        elif state.vdaf.uses_joint_rand and bytes(msg) != state.corrected_seeds[i]:
            state.reasons[i] = Rejection.JOINT_RAND_MISMATCH
        elif not state.vdaf.uses_joint_rand and len(msg):
            state.reasons[i] = Rejection.MALFORMED
    state.finished = True
    return state.reasons


def aggregate(state: VerifyState, include: np.ndarray | None = None) -> bytes:
    """The encoded aggregate share of the accepted reports (and of `include`,
    when given: e.g. the reports every aggregator accepted)."""
    if not state.finished:
        raise ValueError("aggregate() before verify_next(): the reports are not verified yet")
    mask = state.accepted
    if include is not None:
        mask = mask & np.asarray(include, dtype=bool)
    F = vector_field(state.vdaf.field)
    return state.vdaf.field.encode_vec(F.sum_rows(state.out_shares, mask))


def merge(vdaf: p3.Prio3, agg_shares: Sequence[bytes]) -> bytes:
    """One aggregate share from several (e.g. of consecutive batches)."""
    total = [0] * vdaf.OUTPUT_LEN
    for share in agg_shares:
        total = [vdaf.field.add(a, b) for a, b in zip(total, vdaf.field.decode_vec(share))]
    return vdaf.field.encode_vec(total)
