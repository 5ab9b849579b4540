"""Two aggregators, one batch: the shape the fog (leader, agg_id 0) and the
fusion center (helper, agg_id 1) use.

    leader = Prio3Aggregator(vdaf, verify_key, ctx, agg_id=0)
    mine = leader.start(nonces, public_shares, leader_input_shares)   # list[bytes | None]
    ... send `mine`, receive the helper's list ...
    accepted = leader.finish(helper_verifier_shares)                  # numpy bool mask
    ... exchange `accepted`; aggregate what both accepted ...
    agg_share = leader.aggregate(accepted & helper_accepted)          # bytes

Both sides combine the same verifier shares into the same verifier messages,
so they agree on every proof; each checks the other's joint randomness part,
so the final set is the intersection of the two accepted masks.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

import numpy as np

from rase_device.prio3 import Prio3
from rase_common.vdaf import batch
from rase_common.vdaf.batch import Rejection


class Prio3Aggregator:
    """One of two Prio3 aggregators over one batch of reports."""

    def __init__(self, vdaf: Prio3, verify_key: bytes, ctx: bytes, agg_id: int):
        if vdaf.SHARES != 2:
            raise ValueError(f"Prio3Aggregator is for two aggregators; this Prio3 has {vdaf.SHARES} shares")
        if agg_id not in (0, 1):
            raise ValueError(f"agg_id is 0 (leader) or 1 (helper), got {agg_id!r}")
        self.vdaf = vdaf
        self.verify_key = bytes(verify_key)
        self.ctx = bytes(ctx)
        self.agg_id = agg_id
        self._state: batch.VerifyState | None = None
        self._mine: list[bytes | None] = []
        self._mine_columns: tuple[np.ndarray, np.ndarray] | None = None

    def start(self, nonces: Sequence[bytes], public_shares: Sequence[bytes],
              input_shares: Sequence[bytes | None], seen_nonces: Container[bytes] = frozenset()) -> list[bytes | None]:
        """verify_init on the batch; returns this side's verifier shares (None = rejected here)."""
        self._state, self._mine = batch.verify_init(self.vdaf, self.verify_key, self.ctx, self.agg_id, nonces,
                                                    public_shares, input_shares, seen_nonces=seen_nonces)
        self._mine_columns = None
        return list(self._mine)

    def start_columns(self, nonces: np.ndarray, public_shares: np.ndarray, input_shares: np.ndarray,
                      present: np.ndarray | None = None, seen_nonces: Container[bytes] = frozenset(),
                      reasons: list | None = None) -> tuple[np.ndarray, np.ndarray]:
        """start() on a batch given as uint8 matrices (one row per report; present:
        the input share is there, False for a helper share that did not open):
        (this side's verifier shares as a matrix, the mask of those it sent)."""
        if reasons is None:
            reasons = batch.screen_columns(nonces, present, seen_nonces)
        self._state, vs, live = batch.verify_init_columns(self.vdaf, self.verify_key, self.ctx, self.agg_id, nonces,
                                                          public_shares, input_shares, reasons)
        self._mine_columns = (vs, live)
        self._mine = []
        return vs, live

    def finish_columns(self, peer_shares: np.ndarray, peer_live: np.ndarray) -> np.ndarray:
        """finish() with the peer's verifier shares as a matrix and its live mask."""
        state = self._require_state()
        mine = self._mine_columns
        if mine is None:
            raise ValueError("finish_columns() after start_columns()")
        if peer_shares.shape[0] != mine[0].shape[0] or len(peer_live) != len(mine[1]):
            raise ValueError(f"the peer sent {peer_shares.shape[0]} verifier shares for {mine[0].shape[0]} reports")
        shares = [mine[0], peer_shares] if self.agg_id == 0 else [peer_shares, mine[0]]
        lives = [mine[1], np.asarray(peer_live, dtype=bool)] if self.agg_id == 0 else \
            [np.asarray(peer_live, dtype=bool), mine[1]]
        valid, seeds, msg_reasons = batch.verifier_messages_columns(self.vdaf, self.ctx, shares, lives)
        self._merge_reasons(state, msg_reasons)
        batch.verify_next_columns(state, valid, seeds)
        return state.accepted

    def _merge_reasons(self, state: batch.VerifyState, msg_reasons: list) -> None:
        """A report this side rejected keeps its own reason; a report only the
        message step rejected gets that step's reason instead of no_message."""
        for i, reason in enumerate(msg_reasons):
            if reason is not None and state.reasons[i] is None:
                state.reasons[i] = reason

    def finish(self, peer_verifier_shares: Sequence[bytes | None]) -> np.ndarray:
        """Combine with the peer's verifier shares and check; the accepted mask."""
        state = self._require_state()
        if not self._mine and self._mine_columns is not None:     # started on columns: the same shares as a list
            vs, live = self._mine_columns
            self._mine = [row.tobytes() if ok else None for row, ok in zip(vs, live)]
        if len(peer_verifier_shares) != len(self._mine):
            raise ValueError(f"the peer sent {len(peer_verifier_shares)} verifier shares for "
                             f"{len(self._mine)} reports")
        peer = list(peer_verifier_shares)
        pair = [self._mine, peer] if self.agg_id == 0 else [peer, self._mine]
        messages, msg_reasons = batch.verifier_shares_to_message(self.vdaf, self.ctx, pair)
        own_before = list(state.reasons)
        batch.verify_next(state, messages)
        for i, reason in enumerate(msg_reasons):
            # A report this side rejected keeps its own reason; a report only the
            # message step rejected gets that step's reason instead of no_message.
            if own_before[i] is None and reason is not None:
                state.reasons[i] = reason
        return state.accepted

    @classmethod
    def of_state(cls, vdaf: Prio3, verify_key: bytes, ctx: bytes, state: batch.VerifyState,
                 mine: tuple[np.ndarray, np.ndarray]) -> "Prio3Aggregator":
        """An aggregator whose verify_init ran elsewhere (a worker process): its state and verifier shares."""
        agg = cls(vdaf, verify_key, ctx, state.agg_id)
        agg._state, agg._mine_columns, agg._mine = state, mine, []
        return agg

    def aggregate(self, accepted_by_both: np.ndarray | None = None) -> bytes:
        """This side's aggregate share over the reports accepted here (and in accepted_by_both)."""
        return batch.aggregate(self._require_state(), accepted_by_both)

    @property
    def state(self) -> batch.VerifyState:
        return self._require_state()

    @property
    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """This side's verifier shares (a uint8 matrix, one row per report) and the mask of those it sent."""
        if self._mine_columns is None:
            state = self._require_state()
            size = self.vdaf.verifier_share_size()
            rows = [np.frombuffer(x, dtype=np.uint8) if x is not None else np.zeros(size, dtype=np.uint8)
                    for x in self._mine]
            self._mine_columns = (np.stack(rows) if rows else np.zeros((0, size), dtype=np.uint8),
                                  np.array([x is not None for x in self._mine], dtype=bool))
            assert len(state.reasons) == len(self._mine)
        return self._mine_columns

    @property
    def reasons(self) -> list[Rejection | None]:
        return list(self._require_state().reasons)

    def rejected_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self._require_state().reasons:
            if r is not None:
                counts[r.value] = counts.get(r.value, 0) + 1
        return counts

    def _require_state(self) -> batch.VerifyState:
        if self._state is None:
            raise ValueError("call start() first")
        return self._state
