"""Prio3 verification on every core (issue 30): a window's reports split into
contiguous chunks, a few per worker process, each chunk verified there with
the share bytes in arrays (rase_common.vdaf.batch's *_columns functions) and
the results put back together in batch order.

- the helper's chunk: open the sealed shares (HPKE, `cryptography`: one
  X25519 exchange and the key schedule per report, the dearest step), run
  verify_init on them, combine its verifier shares with the leader's (which
  the batch carries) and check each proof: open, verify and decide in one trip;
- the leader's chunks: verify_init at close, and combining both sides'
  verifier shares once the helper answered.

Worker processes come from the spawn context: the services have threads
(paho's, asyncio's), which a fork would copy half-way. They hold no state
between calls (every call carries its keys and its reports), so a worker that
dies loses nothing but its call, which raises in the caller; the party's
journal and its deterministic verify_init make a retry safe. Windows smaller
than `small` reports, and pools of one worker, verify in the calling process.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from rase_common.vdaf import batch
from rase_common.vdaf.batch import Rejection, VerifyState
from rase_common.vdaf.field import vector_field

log = logging.getLogger(__name__)


@dataclass
class Verified:
    """One side's verify_init over a batch (its chunks put back together)."""
    state: VerifyState
    shares: np.ndarray           # this side's verifier shares, (N, verifier_share_size)
    live: np.ndarray             # it sent a verifier share for the report


def _vdaf(params: Any):  # noqa: ANN202 - a Prio3Params (pydantic), or a Prio3 itself
    return params.vdaf() if hasattr(params, "vdaf") else params


def open_columns(private_key: bytes, ctx: bytes, nonces: np.ndarray, public_shares: np.ndarray,
                 sealed: np.ndarray, share_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The helper's input shares of a chunk (N, share_size) and the mask of those that opened."""
    from rase_common.vdaf.hpke import open_helper_shares

    n = nonces.shape[0]
    opened = open_helper_shares(private_key, ctx, batch._rows_bytes(nonces), batch._rows_bytes(public_shares),
                                batch._rows_bytes(sealed))
    present = np.fromiter((x is not None and len(x) == share_size for x in opened), dtype=bool, count=n)
    shares = np.zeros((n, share_size), dtype=np.uint8)
    if present.any():
        shares[present] = np.frombuffer(b"".join(x for x, ok in zip(opened, present) if ok),  # type: ignore[misc]
                                        dtype=np.uint8).reshape(-1, share_size)
    return shares, present


def _codes(reasons: list) -> list[str | None]:
    return [None if r is None else r.value for r in reasons]


def _reasons(codes: list[str | None]) -> list[Rejection | None]:
    return [None if c is None else Rejection(c) for c in codes]


def helper_chunk(params: Any, private_key: bytes, verify_key: bytes, ctx: bytes, nonces: np.ndarray,
                 public_shares: np.ndarray, sealed: np.ndarray, leader_shares: np.ndarray, leader_live: np.ndarray,
                 codes: list[str | None]) -> dict:
    """Open, verify_init and decide one chunk of a batch as the helper (agg_id 1).
    codes: each report's reason so far (the nonce checks, made over the whole batch)."""
    vdaf = _vdaf(params)
    shares, present = open_columns(private_key, ctx, nonces, public_shares, sealed, vdaf.input_share_size(1))
    reasons = _reasons(codes)
    for row in np.flatnonzero(~present).tolist():
        reasons[row] = Rejection.DECRYPT_FAILED        # the first check, as in batch.verify_init
    state, vs, live = batch.verify_init_columns(vdaf, verify_key, ctx, 1, nonces, public_shares, shares, reasons)
    valid, seeds, msg_reasons = batch.verifier_messages_columns(vdaf, ctx, [leader_shares, vs],
                                                                [np.asarray(leader_live, dtype=bool), live])
    for i, why in enumerate(msg_reasons):
        if why is not None and state.reasons[i] is None:
            state.reasons[i] = why
    batch.verify_next_columns(state, valid, seeds)
    return {"shares": vs, "live": live, "codes": _codes(state.reasons), "out": state.out_shares}


def init_chunk(params: Any, verify_key: bytes, ctx: bytes, agg_id: int, nonces: np.ndarray,
               public_shares: np.ndarray, input_shares: np.ndarray, codes: list[str | None]) -> dict:
    """verify_init on one chunk (the leader's, at close)."""
    vdaf = _vdaf(params)
    state, vs, live = batch.verify_init_columns(vdaf, verify_key, ctx, agg_id, nonces, public_shares, input_shares,
                                                _reasons(codes))
    return {"shares": vs, "live": live, "codes": _codes(state.reasons), "out": state.out_shares,
            "seeds": state.corrected_seeds}


def messages_chunk(params: Any, ctx: bytes, shares: list[np.ndarray], live: list[np.ndarray]) -> dict:
    """Both sides' verifier shares of one chunk combined and checked (verifier_shares_to_message)."""
    valid, seeds, reasons = batch.verifier_messages_columns(_vdaf(params), ctx, shares, live)
    return {"valid": valid, "seeds": seeds, "codes": _codes(reasons)}


def _cat(vdaf, outs: list[np.ndarray]) -> np.ndarray:
    F = vector_field(vdaf.field)
    if not outs:
        return F.rows_zeros(vdaf.OUTPUT_LEN, 0)
    return np.concatenate(outs, axis=-1)


class VerifyPool:
    """`workers` spawned processes verifying chunks of a window (see the module)."""

    SMALL = 2000

    def __init__(self, workers: int = 2, small: int | None = None, preload: tuple[str, ...] = ()):
        """preload: modules each worker imports as it starts, beside this one's
        (the module of the params the calls carry, which unpickling them would
        otherwise import inside a window's first chunk)."""
        self.workers = max(1, int(workers))
        self.small = self.SMALL if small is None else small
        self.preload = tuple(preload)
        self._pool: Executor | None = None
        self._lock = threading.Lock()

    def warm(self) -> None:
        """Start every worker now, not with the first window: each imports
        numpy, `cryptography` and the batch code as it starts (_start_worker,
        about 0.4 s of CPU), which would otherwise delay that window and count
        in its cost."""
        if self.workers > 1:
            futures = [self._executor().submit(_started) for _ in range(self.workers)]
            for f in futures:
                f.result()

    def _executor(self) -> Executor:
        with self._lock:
            if self._pool is None:
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                # spawn: the service has threads (paho's, asyncio's), which a fork would copy half-way
                self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_start_worker, initargs=(self.preload,))
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(cancel_futures=True)

    CHUNKS_PER_WORKER = 4      # a worker that is slowed (a busy core) holds up a quarter of its share, not all
    MIN_CHUNK = 500            # reports: smaller chunks pay numpy's and the pipe's per-call costs too often

    def chunks(self, n: int) -> list[slice]:
        """Contiguous slices of the batch, a few per worker, taken by whichever
        worker is free (one slice: verified here)."""
        if self.workers <= 1 or n < self.small:
            return [slice(0, n)]
        count = max(self.workers, min(self.workers * self.CHUNKS_PER_WORKER, n // self.MIN_CHUNK))
        step = -(-n // count)
        return [slice(i, min(i + step, n)) for i in range(0, n, step)]

    def _map(self, fn, calls: list[tuple]) -> list[dict]:  # noqa: ANN001
        if len(calls) == 1:
            return [fn(*calls[0])]
        from concurrent.futures.process import BrokenProcessPool

        try:
            pool = self._executor()
            futures = [pool.submit(fn, *args) for args in calls]
            return [f.result() for f in futures]
        except BrokenProcessPool as err:
            # A worker died (killed, out of memory): this window verifies here, the next one on new workers.
            log.warning("verification workers lost (%s): verifying %d chunks in this process", err, len(calls))
            self.close()
            return [fn(*args) for args in calls]

    # -- the helper ---------------------------------------------------------------------------------------------
    def helper_verify(self, params: Any, private_key: bytes, verify_key: bytes, ctx: bytes, nonces: np.ndarray,
                      public_shares: np.ndarray, sealed: np.ndarray, leader_shares: np.ndarray,
                      leader_live: np.ndarray, seen_nonces=frozenset()) -> Verified:  # noqa: ANN001
        """The helper's answer to a batch: open, verify_init, combine with the
        leader's verifier shares and decide, chunk by chunk on the workers.
        The returned state is finished (its reasons final, its output shares set)."""
        vdaf = _vdaf(params)
        codes = _codes(batch.screen_columns(nonces, None, seen_nonces))
        parts = self._map(helper_chunk, [(params, private_key, verify_key, ctx, nonces[c], public_shares[c],
                                          sealed[c], leader_shares[c], leader_live[c], codes[c])
                                         for c in self.chunks(nonces.shape[0])])
        state = VerifyState(vdaf, 1, _cat(vdaf, [p["out"] for p in parts]), [None] * nonces.shape[0],
                            _reasons([c for p in parts for c in p["codes"]]), finished=True)
        return Verified(state, _stack([p["shares"] for p in parts], vdaf.verifier_share_size()),
                        np.concatenate([p["live"] for p in parts]) if parts else np.zeros(0, dtype=bool))

    # -- the leader ---------------------------------------------------------------------------------------------
    def leader_init(self, params: Any, verify_key: bytes, ctx: bytes, nonces: np.ndarray, public_shares: np.ndarray,
                    input_shares: np.ndarray, seen_nonces=frozenset()) -> Verified:  # noqa: ANN001
        """The leader's verify_init over a batch, chunk by chunk on the workers."""
        vdaf = _vdaf(params)
        codes = _codes(batch.screen_columns(nonces, None, seen_nonces))
        parts = self._map(init_chunk, [(params, verify_key, ctx, 0, nonces[c], public_shares[c], input_shares[c],
                                        codes[c]) for c in self.chunks(nonces.shape[0])])
        state = VerifyState(vdaf, 0, _cat(vdaf, [p["out"] for p in parts]), [s for p in parts for s in p["seeds"]],
                            _reasons([c for p in parts for c in p["codes"]]))
        return Verified(state, _stack([p["shares"] for p in parts], vdaf.verifier_share_size()),
                        np.concatenate([p["live"] for p in parts]) if parts else np.zeros(0, dtype=bool))

    def leader_finish(self, params: Any, ctx: bytes, mine: Verified, peer_shares: np.ndarray, peer_live: np.ndarray
                      ) -> np.ndarray:
        """Combine the leader's verifier shares with the helper's, check every
        proof (on the workers) and run verify_next; the leader's accepted mask."""
        vdaf = _vdaf(params)
        n = mine.shares.shape[0]
        if peer_shares.shape[0] != n or len(peer_live) != n:
            raise ValueError(f"the peer sent {peer_shares.shape[0]} verifier shares for {n} reports")
        parts = self._map(messages_chunk, [(params, ctx, [mine.shares[c], peer_shares[c]],
                                            [mine.live[c], np.asarray(peer_live[c], dtype=bool)])
                                           for c in self.chunks(n)])
        valid = np.concatenate([p["valid"] for p in parts]) if parts else np.zeros(0, dtype=bool)
        seeds = [s for p in parts for s in p["seeds"]] if vdaf.uses_joint_rand else None
        state = mine.state
        for i, code in enumerate(c for p in parts for c in p["codes"]):
            if code is not None and state.reasons[i] is None:
                state.reasons[i] = Rejection(code)
        batch.verify_next_columns(state, valid, seeds)
        return state.accepted


def _stack(mats: list[np.ndarray], width: int) -> np.ndarray:
    return np.concatenate(mats) if mats else np.zeros((0, width), dtype=np.uint8)


def _start_worker(preload: tuple[str, ...]) -> None:
    """A worker process, as it starts (every one, whichever tasks it takes):
    import what its chunks need."""
    import importlib

    import rase_common.vdaf.hpke  # noqa: F401 - cryptography's HPKE

    for name in preload:
        importlib.import_module(name)


def _started() -> int:
    return 0
