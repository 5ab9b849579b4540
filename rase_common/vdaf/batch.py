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


def _repeats(nonces: np.ndarray) -> np.ndarray:
    """Per report: an earlier report of the batch has the same nonce (the first one is kept)."""
    n = nonces.shape[0]
    if n < 2:
        return np.zeros(n, dtype=bool)
    keys = np.ascontiguousarray(nonces).view(np.dtype((np.void, nonces.shape[1]))).ravel()
    _, first = np.unique(keys, return_index=True)
    repeated = np.ones(n, dtype=bool)
    repeated[first] = False
    return repeated


def _replayed(nonces: np.ndarray, seen: Container[bytes]) -> np.ndarray:
    """Per report: its nonce is in `seen` (looked up one by one: any container of bytes)."""
    n, size = nonces.shape
    if n == 0 or (isinstance(seen, (set, frozenset, dict)) and not seen):
        return np.zeros(n, dtype=bool)
    raw = nonces.tobytes()
    return np.fromiter((raw[i * size:(i + 1) * size] in seen for i in range(n)), dtype=bool, count=n)


def to_columns(vdaf, agg_id: int, nonces: Sequence[bytes], public_shares: Sequence[bytes],
               input_shares: Sequence[bytes | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
    """(nonces, public shares, input shares) of a batch given as byte strings,
    as uint8 matrices (one row per report), and each report's reason so far
    (decrypt_failed where a share is None, malformed where a size is wrong,
    the nonce checks left to verify_init_columns)."""
    n = len(nonces)
    sizes = (p3.NONCE_SIZE, vdaf.public_share_size(), vdaf.input_share_size(agg_id))
    mats = [np.zeros((n, k), dtype=np.uint8) for k in sizes]
    reasons: list[Rejection | None] = [None] * n
    for i, row in enumerate(zip(nonces, public_shares, input_shares)):
        if row[2] is None:
            reasons[i] = Rejection.DECRYPT_FAILED
        elif any(len(x) != k for x, k in zip(row, sizes)):   # type: ignore[arg-type]
            reasons[i] = Rejection.MALFORMED
        for m, x, k in zip(mats, row, sizes):
            if x is not None and len(x) == k and k:
                m[i] = np.frombuffer(bytes(x), dtype=np.uint8)
    return mats[0], mats[1], mats[2], reasons


def _screen_lists(nonces, reasons, seen) -> None:
    """The nonce checks of the byte-string API, in place: every report's nonce,
    rejected or not and whatever its length, counts for later repeats."""
    first: set[bytes] = set()
    for i, nonce in enumerate(nonces):
        nonce = bytes(nonce)
        if reasons[i] is None:
            if nonce in seen:
                reasons[i] = Rejection.NONCE_REPLAYED
            elif nonce in first:
                reasons[i] = Rejection.NONCE_REPEATED
        first.add(nonce)


def screen_columns(nonces: np.ndarray, present: np.ndarray | None, seen: Container[bytes]) -> list:
    """Each report's reason before verification (None: go on), for a batch
    given as matrices: decrypt_failed where a share is absent, then nonce_replayed
    (in `seen`), then nonce_repeated (an earlier report of the batch has it)."""
    n = nonces.shape[0]
    reasons: list[Rejection | None] = [None] * n
    absent = np.zeros(n, dtype=bool) if present is None else ~np.asarray(present, dtype=bool)
    replayed = _replayed(nonces, seen) & ~absent
    repeated = _repeats(nonces) & ~absent & ~replayed
    for mask, why in ((absent, Rejection.DECRYPT_FAILED), (replayed, Rejection.NONCE_REPLAYED),
                      (repeated, Rejection.NONCE_REPEATED)):
        for i in np.flatnonzero(mask):
            reasons[int(i)] = why
    return reasons


def _rows_bytes(matrix: np.ndarray) -> list[bytes]:
    """Each row of a uint8 matrix as bytes."""
    n, k = matrix.shape
    raw = np.ascontiguousarray(matrix).tobytes()
    return [raw[i * k:(i + 1) * k] for i in range(n)]


def _input_encoded(vdaf, F, ctx, agg_id, shares: np.ndarray):
    """(measurement shares, proof shares, blinds) of the live input shares
    (a uint8 matrix, one row per report), the shares as uint8 matrices: the
    leader's as sent, the helper's expanded from its seeds."""
    n = shares.shape[0]
    jr = SEED if vdaf.uses_joint_rand else 0
    blinds = _rows_bytes(shares[:, shares.shape[1] - jr:]) if jr else []
    if agg_id == 0:
        cut = vdaf.MEAS_LEN * F.ENCODED_SIZE
        return shares[:, :cut], shares[:, cut:shares.shape[1] - jr], blinds
    seeds = _rows_bytes(shares[:, :SEED])
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


def _check_args(vdaf, verify_key: bytes, agg_id: int) -> None:
    if len(verify_key) != p3.VERIFY_KEY_SIZE:
        raise ValueError(f"verify_key must be {p3.VERIFY_KEY_SIZE} bytes, got {len(verify_key)}")
    if not 0 <= agg_id < vdaf.SHARES:
        raise ValueError(f"agg_id must be in [0, {vdaf.SHARES}), got {agg_id}")


def verify_init_columns(vdaf: p3.Prio3, verify_key: bytes, ctx: bytes, agg_id: int, nonces: np.ndarray,
                        public_shares: np.ndarray, input_shares: np.ndarray, reasons: list
                        ) -> tuple[VerifyState, np.ndarray, np.ndarray]:
    """verify_init on a batch given as uint8 matrices (one row per report:
    nonces (N, 16), public shares (N, public_share_size), this aggregator's
    input shares (N, input_share_size(agg_id))); reasons: each report's
    reason so far (screen_columns), updated in place. Returns (state, the
    encoded verifier shares (N, verifier_share_size), live mask: the report
    has a verifier share). The share bytes stay in arrays throughout."""
    _check_args(vdaf, verify_key, agg_id)
    F = vector_field(vdaf.field)
    n_all = len(reasons)
    if not nonces.shape[0] == public_shares.shape[0] == input_shares.shape[0] == n_all:
        raise ValueError("nonces, public_shares and input_shares must have one row per report")
    out_shares = F.rows_zeros(vdaf.OUTPUT_LEN, n_all)
    seeds_all: list[bytes | None] = [None] * n_all
    shares_out = np.zeros((n_all, vdaf.verifier_share_size()), dtype=np.uint8)
    live_mask = np.array([r is None for r in reasons], dtype=bool)
    live = np.flatnonzero(live_mask)
    n = len(live)
    if not n:
        return VerifyState(vdaf, agg_id, out_shares, seeds_all, reasons), shares_out, live_mask
    all_live = n == n_all
    nonce_m = nonces if all_live else nonces[live]
    with np.errstate(over="ignore"):
        meas, proofs, blinds = _input_encoded(vdaf, F, ctx, agg_id, input_shares if all_live else input_shares[live])
        binders = _rows_bytes(np.hstack([np.full((n, 1), vdaf.PROOFS, dtype=np.uint8), nonce_m]))
        query_rands = xof.expand_encoded(F, [verify_key] * n, vdaf.dst(p3.USAGE_QUERY_RANDOMNESS, ctx), binders,
                                         vdaf.QUERY_RAND_LEN * vdaf.PROOFS)
        if vdaf.uses_joint_rand:
            pubs = _rows_bytes(public_shares if all_live else public_shares[live])
            own_parts, corrected, joint_rands = _joint_randomness(vdaf, F, ctx, agg_id, _rows_bytes(nonce_m), pubs,
                                                                  meas, blinds)
        else:
            own_parts, corrected, joint_rands = [], [None] * n, None
        vs, ok, bad = _query_all(vdaf, F, (meas, proofs, query_rands, joint_rands), out_shares, live)
    vlen = vs.shape[1]
    shares_out[live, :vlen] = vs
    if vdaf.uses_joint_rand:
        shares_out[live, vlen:] = np.frombuffer(b"".join(own_parts), dtype=np.uint8).reshape(n, SEED)
    for j in np.flatnonzero(~ok | bad).tolist():
        reasons[int(live[j])] = Rejection.MALFORMED if not ok[j] else Rejection.QUERY_FAILED
    if vdaf.uses_joint_rand:
        for j, row in enumerate(live.tolist()):
            seeds_all[row] = corrected[j]
    live_mask[live] = ok & ~bad
    shares_out[~live_mask] = 0
    return VerifyState(vdaf, agg_id, out_shares, seeds_all, reasons), shares_out, live_mask


def verify_init(vdaf: p3.Prio3, verify_key: bytes, ctx: bytes, agg_id: int, nonces: Sequence[bytes],
                public_shares: Sequence[bytes], input_shares: Sequence[bytes | None], *,
                seen_nonces: Container[bytes] = frozenset()) -> tuple[VerifyState, list[bytes | None]]:
    """Aggregator agg_id's verify_init on every report: (state, encoded verifier shares).
    input_shares[i] is None for a helper share that did not decrypt."""
    _check_args(vdaf, verify_key, agg_id)
    if not len(nonces) == len(public_shares) == len(input_shares):
        raise ValueError("nonces, public_shares and input_shares must have one entry per report")
    nonce_m, pub_m, share_m, reasons = to_columns(vdaf, agg_id, nonces, public_shares, input_shares)
    _screen_lists(nonces, reasons, seen_nonces)
    state, vs, live = verify_init_columns(vdaf, verify_key, ctx, agg_id, nonce_m, pub_m, share_m, reasons)
    return state, [row.tobytes() if ok else None for row, ok in zip(vs, live)]


def verifier_messages_columns(vdaf: p3.Prio3, ctx: bytes, shares: Sequence[np.ndarray], live: Sequence[np.ndarray]
                              ) -> tuple[np.ndarray, list[bytes] | None, list]:
    """verifier_shares_to_message on a batch given as matrices: every
    aggregator's encoded verifier shares (N, verifier_share_size) and live
    masks (it sent one). Returns (valid: the report has a verifier message,
    the messages (joint randomness seeds; None for a circuit without joint
    randomness, whose messages are empty), reasons)."""
    if len(shares) != vdaf.SHARES or len(live) != vdaf.SHARES:
        raise ValueError(f"need the verifier shares of all {vdaf.SHARES} aggregators, got {len(shares)}")
    n_all = shares[0].shape[0]
    if any(s.shape[0] != n_all for s in shares) or any(len(m) != n_all for m in live):
        raise ValueError("every aggregator's verifier shares must cover the same reports")
    F = vector_field(vdaf.field)
    everyone = np.logical_and.reduce([np.asarray(m, dtype=bool) for m in live])
    reasons: list[Rejection | None] = [None if ok else Rejection.PEER_REJECTED for ok in everyone.tolist()]
    idx = np.flatnonzero(everyone)
    n = len(idx)
    valid_out = np.zeros(n_all, dtype=bool)
    seeds_out: list[bytes] | None = [b""] * n_all if vdaf.uses_joint_rand else None
    if not n:
        return valid_out, seeds_out, reasons
    vlen = vdaf.verifier_share_size() - (SEED if vdaf.uses_joint_rand else 0)
    encoded = [s[idx, :vlen] if n != n_all else s[:, :vlen] for s in shares]
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
        binders = _rows_bytes(np.hstack([s[idx, vlen:] for s in shares]))
        seeds = xof.derive_seeds([bytes(SEED)] * n, vdaf.dst(p3.USAGE_JOINT_RAND_SEED, ctx), binders)
    for j in np.flatnonzero(~(ok & valid)).tolist():
        reasons[int(idx[j])] = Rejection.PEER_MALFORMED if not ok[j] else Rejection.PROOF_INVALID
    good = ok & valid
    valid_out[idx[good]] = True
    if seeds_out is not None:
        for j in np.flatnonzero(good).tolist():
            seeds_out[int(idx[j])] = seeds[j]
    return valid_out, seeds_out, reasons


def verifier_shares_to_message(vdaf: p3.Prio3, ctx: bytes, verifier_shares: Sequence[Sequence[bytes | None]]
                               ) -> tuple[list[bytes | None], list[Rejection | None]]:
    """Combine every aggregator's verifier shares (verifier_shares[agg_id][report])
    into the verifier messages; (messages, reasons), None where rejected."""
    if len(verifier_shares) != vdaf.SHARES:
        raise ValueError(f"need the verifier shares of all {vdaf.SHARES} aggregators, got {len(verifier_shares)}")
    n_all = len(verifier_shares[0])
    if any(len(s) != n_all for s in verifier_shares):
        raise ValueError("every aggregator's verifier shares must cover the same reports")
    size = vdaf.verifier_share_size()
    mats, lives = [], []
    malformed = np.zeros(n_all, dtype=bool)
    for column in verifier_shares:
        m = np.zeros((n_all, size), dtype=np.uint8)
        live = np.zeros(n_all, dtype=bool)
        for i, x in enumerate(column):
            if x is None:
                continue
            live[i] = True
            if len(x) != size:
                malformed[i] = True
            else:
                m[i] = np.frombuffer(bytes(x), dtype=np.uint8)
        mats.append(m)
        lives.append(live)
    everyone = np.logical_and.reduce(lives)
    valid, seeds, reasons = verifier_messages_columns(vdaf, ctx, mats, [x & ~malformed for x in lives])
    for row in np.flatnonzero(malformed & everyone).tolist():
        reasons[row] = Rejection.PEER_MALFORMED
    messages: list[bytes | None] = [None] * n_all
    for row in np.flatnonzero(valid).tolist():
        messages[row] = seeds[row] if seeds is not None else b""
    return messages, reasons


def verify_next_columns(state: VerifyState, valid: np.ndarray, seeds: list[bytes] | None) -> list[Rejection | None]:
    """verify_next from verifier_messages_columns's output: no message where
    not valid, else the joint randomness check; updates and returns state.reasons."""
    if len(valid) != len(state.reasons):
        raise ValueError(f"got {len(valid)} verifier messages for {len(state.reasons)} reports")
    jr = state.vdaf.uses_joint_rand
    for i in np.flatnonzero(~np.asarray(valid, dtype=bool)):
        if state.reasons[int(i)] is None:
            state.reasons[int(i)] = Rejection.NO_MESSAGE
    if jr:
        assert seeds is not None
        for i in np.flatnonzero(valid):
            k = int(i)
            if state.reasons[k] is None and seeds[k] != state.corrected_seeds[k]:
                state.reasons[k] = Rejection.JOINT_RAND_MISMATCH
    state.finished = True
    return state.reasons


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
