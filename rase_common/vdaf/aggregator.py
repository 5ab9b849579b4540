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

    def start(self, nonces: Sequence[bytes], public_shares: Sequence[bytes],
              input_shares: Sequence[bytes | None], seen_nonces: Container[bytes] = frozenset()) -> list[bytes | None]:
        """verify_init on the batch; returns this side's verifier shares (None = rejected here)."""
        self._state, self._mine = batch.verify_init(self.vdaf, self.verify_key, self.ctx, self.agg_id, nonces,
                                                    public_shares, input_shares, seen_nonces=seen_nonces)
        return list(self._mine)

    def finish(self, peer_verifier_shares: Sequence[bytes | None]) -> np.ndarray:
        """Combine with the peer's verifier shares and check; the accepted mask."""
        state = self._require_state()
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

    def aggregate(self, accepted_by_both: np.ndarray | None = None) -> bytes:
        """This side's aggregate share over the reports accepted here (and in accepted_by_both)."""
        return batch.aggregate(self._require_state(), accepted_by_both)

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
