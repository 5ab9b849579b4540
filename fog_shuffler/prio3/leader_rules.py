"""The pure rules of the fog as Prio3's leader (secure aggregation, issue 20):
validating a Prio3 report, closing a window into its shuffled batch for the
helper, finishing it with the helper's answer. No I/O, no clock; the
randomness of the shuffle is handed in. fog_shuffler.prio3.leader holds the state
and the tasks."""

from __future__ import annotations

import base64
from collections import Counter
from dataclasses import dataclass

import numpy as np

from rase_device.secagg import report_ctx
from fog_shuffler.ingest import Accepted, IngestRules, Rejected, add_reasons, parse_report
from fog_shuffler.reports import split
from fog_shuffler.windows import ClosedWindow
from rase_common.protocol.prio3 import (MAX_PRIO3_REPORT_BYTES, Prio3Batch, Prio3Params, Prio3Report, Prio3Share,
                                        Prio3Verify, nonce_digest, pack, pack_mask, parts_of)
from rase_common.secagg import noisy_share, tile
from rase_common.vdaf import Prio3Aggregator

PRIO3 = "prio3"
# What the leader refuses beyond the fog's own reasons (fog_shuffler.ingest).
LEADER_REASONS = ("nonce_repeated", "malformed_share", "prio3_reply_invalid")
add_reasons(LEADER_REASONS)


@dataclass(frozen=True)
class Prio3Accepted(Accepted):
    """An accepted Prio3 report: (nonce, public share, leader share, sealed helper share)."""
    shares: tuple[bytes, bytes, bytes, bytes] = (b"", b"", b"", b"")


def validate_report(topic: str, payload: bytes, now_t: int, rules: IngestRules, params: Prio3Params | None
                    ) -> Prio3Accepted:
    """Accept one Prio3 report or raise Rejected(reason)."""
    region, device, rep = parse_report(topic, payload, now_t, rules, Prio3Report, MAX_PRIO3_REPORT_BYTES)
    if params is None or rules.mechanism != PRIO3:
        raise Rejected("impossible_y", "a Prio3 report, but the deployment's mechanism is " + rules.mechanism)
    if rep.eps != params.dp_eps:
        raise Rejected("eps_not_on_menu", f"eps={rep.eps} (prio3.dp_eps {params.dp_eps})")
    try:
        shares = rep.shares(params.report_sizes())
    except ValueError as err:
        raise Rejected("malformed_share", str(err)[:80]) from None
    return Prio3Accepted(region, device, rep.t, 0.0, float(rep.eps), PRIO3, shares)


def split_prio3(cw: ClosedWindow) -> tuple[ClosedWindow, ClosedWindow | None]:
    """A closed window's Prio3 reports, and the rest (None: none), around a change of mechanism."""
    return split(cw, frozenset({PRIO3}))


@dataclass
class ClosedBatch:
    order: list[int]                      # batch position -> index into the window's reports
    messages: list[str]                   # the Prio3Batch parts for the helper
    aggregator: Prio3Aggregator           # the leader's verification state


def close_batch(params: Prio3Params, verify_key: bytes, region: str, t: int,
                reports: list[tuple[bytes, bytes, bytes, bytes]], rng: np.random.Generator,
                ingest_rejected: int = 0) -> ClosedBatch:
    """Shuffle a window's reports uniformly, verify_init on the leader's shares,
    and cut the batch for the helper into parts."""
    order = [int(i) for i in rng.permutation(len(reports))]
    batch = [reports[i] for i in order]
    vdaf = params.vdaf()
    agg = Prio3Aggregator(vdaf, verify_key, report_ctx(region, params.product, t), 0)
    mine = agg.start([r[0] for r in batch], [r[1] for r in batch], [r[2] for r in batch])
    sizes = params.report_sizes()
    vs = vdaf.verifier_share_size()
    messages = []
    for first, count in parts_of(len(batch), sizes[0] + sizes[1] + sizes[3] + vs):
        rows = batch[first:first + count]
        mine_part = mine[first:first + count]
        messages.append(Prio3Batch(
            type="prio3_batch", region=region, t=t, total=len(batch), first=first, count=count, params=params,
            nonces=pack([r[0] for r in rows], sizes[0]), public_shares=pack([r[1] for r in rows], sizes[1]),
            sealed=pack([r[3] for r in rows], sizes[3]), leader_verifier_shares=pack(mine_part, vs),
            leader_live=pack_mask([x is not None for x in mine_part]),
            ingest_rejected=ingest_rejected if first == 0 else 0).model_dump_json())
    return ClosedBatch(order, messages, agg)


def helper_columns(params: Prio3Params, replies: list[Prio3Verify], total: int
                   ) -> tuple[list[bytes | None], np.ndarray] | None:
    """The helper's verifier shares and accepted mask over the whole batch, once its parts cover it."""
    ordered = tile(replies, total)
    if ordered is None:
        return None
    vdaf = params.vdaf()
    shares: list[bytes | None] = []
    masks = []
    for r in ordered:
        s, m = r.columns(vdaf)
        shares += s
        masks.append(m)
    return shares, (np.concatenate(masks) if masks else np.zeros(0, dtype=bool))


def finish_window(params: Prio3Params, agg: Prio3Aggregator, region: str, t: int, nonces: list[bytes],
                  helper_shares: list[bytes | None], helper_accepted: np.ndarray, k_min: int, *,
                  noise: bool = True) -> tuple[Prio3Share, int]:
    """The leader's last message for a window whose helper answered: (message, reports both accepted)."""
    mine = agg.finish(helper_shares)
    both = mine & helper_accepted
    n = int(both.sum())
    reasons = agg.reasons
    leader_rejected = Counter(r.value for i in np.flatnonzero(helper_accepted & ~mine) if (r := reasons[i]) is not None)
    common = dict(type="prio3_share", region=region, t=t, total=len(both), count=len(both),
                  leader_accepted=pack_mask(mine), accepted=n, accepted_digest=nonce_digest(nonces, both),
                  leader_rejected=dict(leader_rejected), noise_draws=1 if noise else 0)
    if n < k_min:
        return Prio3Share(**common, dropped="under_k_min"), n
    share = noisy_share(agg.vdaf, agg.aggregate(both), params, noise=noise)
    return Prio3Share(**common, agg_share=base64.b64encode(share).decode()), n


def dropped_share(region: str, t: int, total: int, reason: str) -> Prio3Share:
    return Prio3Share(type="prio3_share", region=region, t=t, total=total, count=total,
                      leader_accepted=pack_mask(np.zeros(total, dtype=bool)), accepted=0, dropped=reason,
                      noise_draws=0)
