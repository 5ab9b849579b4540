"""The pure rules of the fog as Prio3's leader (secure aggregation, issues 20
and 26): validating a Prio3 report, closing a window into its shuffled batch
for the helper, checking the helper's answer against the leader's own view,
finishing the window, and comparing a published aggregate with what the
leader stated. No I/O, no clock; the randomness of the shuffle is handed in.
fog_shuffler.prio3.leader holds the state and the tasks.

The leader trusts only itself (docs/privacy.md section 7): its params are its
own config's, never the control message's or the helper's; the helper's
answer is checked against what the leader can verify (both aggregators reach
the same verdict on every proof), and what does not fit is a discrepancy."""

from __future__ import annotations

import base64
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from fog_shuffler.ingest import Accepted, IngestRules, Rejected, add_reasons, parse_report, sized_report_topic
from fog_shuffler.reports import split
from fog_shuffler.windows import ClosedWindow
from rase_common.protocol.prio3 import (MAX_PRIO3_REPORT_BYTES, Prio3Batch, Prio3Params, Prio3Report, Prio3Share,
                                        Prio3Statement, Prio3Summary, Prio3Verify, nonce_digest, pack_mask,
                                        pack_rows, parts_of, read_binary_report, share_size_error)
from rase_common.protocol.aggregate import Aggregate
from rase_device import prio3_binary
from rase_common.secagg import masked_share, noisy_share, part_mask, tile
from rase_common.vdaf import Prio3Aggregator
from rase_common.vdaf.batch import Rejection
from rase_common.vdaf.workers import Verified, VerifyPool

PRIO3 = "prio3"
# What the leader refuses beyond the fog's own reasons (fog_shuffler.ingest).
# params_mismatch: a report made under other Prio3 params than the fog's own; prio3_reply_unsolicited:
# a helper answer for a batch the fog never sent (issue 26).
# malformed_report / unknown_version: a binary report (rase_device.prio3_binary) whose framing does not parse,
# or of a version this fog does not read (issue 30).
LEADER_REASONS = ("nonce_repeated", "malformed_share", "prio3_reply_invalid", "params_mismatch",
                  "prio3_reply_unsolicited", "malformed_report", "unknown_version")
add_reasons(LEADER_REASONS)


@dataclass(frozen=True)
class Prio3Accepted(Accepted):
    """An accepted Prio3 report: (nonce, public share, leader share, sealed helper share)."""
    shares: tuple[bytes, bytes, bytes, bytes] = (b"", b"", b"", b"")


def validate_report(topic: str, payload: bytes, now_t: int, rules: IngestRules, params: Prio3Params | None
                    ) -> Prio3Accepted:
    """Accept one Prio3 report, binary or JSON, or raise Rejected(reason)."""
    if payload[:2] == prio3_binary.MAGIC:
        return validate_binary_report(topic, payload, now_t, rules, params)
    region, device, rep = parse_report(topic, payload, now_t, rules, Prio3Report, MAX_PRIO3_REPORT_BYTES)
    if params is None or rules.mechanism != PRIO3:
        raise Rejected("impossible_y", "a Prio3 report, but the deployment's mechanism is " + rules.mechanism)
    if rep.eps != params.dp_eps:
        raise Rejected("eps_not_on_menu", f"eps={rep.eps} (prio3.dp_eps {params.dp_eps})")
    if rep.p != params.params_id:
        # Made under other params (a stale device, or another deployment's): its context cannot
        # verify here, and it would be mis-read if it did (docs/api.md, "The report context").
        raise Rejected("params_mismatch", f"report params {rep.p} are not the fog's {params.params_id}")
    try:
        shares = rep.shares(params.report_sizes())
    except ValueError as err:
        raise Rejected("malformed_share", str(err)[:80]) from None
    return Prio3Accepted(region, device, rep.t, 0.0, float(rep.eps), PRIO3, shares)


def validate_binary_report(topic: str, payload: bytes, now_t: int, rules: IngestRules, params: Prio3Params | None
                           ) -> Prio3Accepted:
    """A binary report (rase_device.prio3_binary), checked as a JSON one is,
    in the same order: its size, topic, framing (malformed_report,
    unknown_version), device, t, the deployment's mechanism, its params id
    (params_mismatch) and its share sizes (malformed_share). No eps to check:
    the params id commits to dp_eps."""
    region, device = sized_report_topic(topic, payload, MAX_PRIO3_REPORT_BYTES)
    sizes = params.report_sizes() if params is not None else None
    try:
        t, _seq, pid, *shares = read_binary_report(payload, sizes)
    except ValueError as err:
        reason, _, detail = str(err).partition(": ")
        raise Rejected(reason if reason == "unknown_version" else "malformed_report", detail[:80]) from None
    if rules.devices.get(device) != region:
        raise Rejected("unknown_device", f"{region}/{device}"[:80])
    if t > now_t + 1 or (rules.lateness_periods is not None and t < now_t - rules.lateness_periods):
        raise Rejected("t_out_of_range", f"t={t} now={now_t}")
    if params is None or sizes is None or rules.mechanism != PRIO3:
        raise Rejected("impossible_y", "a Prio3 report, but the deployment's mechanism is " + rules.mechanism)
    if pid != params.params_id:
        raise Rejected("params_mismatch", f"report params {pid} are not the fog's {params.params_id}")
    nonce, pub, leader, sealed = shares
    why = share_size_error((nonce, pub, leader, sealed), sizes)
    if why:
        raise Rejected("malformed_share", why[:80])
    return Prio3Accepted(region, device, t, 0.0, float(params.dp_eps), PRIO3, (nonce, pub, leader, sealed))


def split_prio3(cw: ClosedWindow) -> tuple[ClosedWindow, ClosedWindow | None]:
    """A closed window's Prio3 reports, and the rest (None: none), around a change of mechanism."""
    return split(cw, frozenset({PRIO3}))


def record_of(shares: tuple[bytes, bytes, bytes, bytes]) -> bytes:
    """A report's record in the leader's journal: nonce || public || leader || sealed (fixed sizes per params)."""
    return b"".join(shares)


def records_matrix(params: Prio3Params, rows) -> np.ndarray:  # noqa: ANN001 - records, 4-tuples or their bytes
    """The reports of a window as one (N, record size) uint8 matrix: from their
    records concatenated (bytes), or a list of records or of (nonce, public,
    leader, sealed) tuples."""
    width = sum(params.report_sizes())
    if isinstance(rows, np.ndarray):
        return rows
    if isinstance(rows, (bytes, bytearray, memoryview)):
        raw = bytes(rows)
    else:
        raw = b"".join(r if isinstance(r, (bytes, bytearray)) else record_of(r) for r in rows)
    if len(raw) % width:
        raise ValueError(f"{len(raw)} bytes of records are not whole records of {width} bytes")
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, width)


def record_columns(params: Prio3Params, records: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(nonces, public shares, leader shares, sealed helper shares) of a records matrix: views, no copy."""
    out, at = [], 0
    for k in params.report_sizes():
        out.append(records[:, at:at + k])
        at += k
    return out[0], out[1], out[2], out[3]


@dataclass
class ClosedBatch:
    order: list[int]                      # batch position -> index into the window's reports
    messages: list[str]                   # the Prio3Batch parts for the helper
    aggregator: Prio3Aggregator           # the leader's verification state
    records: np.ndarray | None = None     # the window's records in batch order (N, record size)


def leader_verify(params: Prio3Params, verify_key: bytes, ctx: bytes, records: np.ndarray,
                  pool: VerifyPool | None = None) -> Prio3Aggregator:
    """The leader's verify_init over a batch's records (on the pool's workers when large)."""
    nonces, pubs, leaders, _ = record_columns(params, records)
    v = (pool or VerifyPool(1)).leader_init(params, verify_key, ctx, nonces, pubs, leaders)
    return Prio3Aggregator.of_state(params.vdaf(), verify_key, ctx, v.state, (v.shares, v.live))


def close_batch(params: Prio3Params, verify_key: bytes, region: str, t: int, reports, rng: np.random.Generator,
                ingest_rejected: int = 0, pool: VerifyPool | None = None, part: int = 0
                ) -> ClosedBatch:  # noqa: ANN001
    """Shuffle a window's reports uniformly, verify_init on the leader's shares,
    and cut the batch for the helper into parts. reports: the window's records
    (records_matrix's forms: a matrix, their bytes, or (nonce, public, leader,
    sealed) tuples)."""
    window = records_matrix(params, reports)
    order = [int(i) for i in rng.permutation(window.shape[0])]
    batch = window[np.asarray(order, dtype=np.intp)] if order else window
    agg = leader_verify(params, verify_key, params.ctx(region, t), batch, pool)
    vs, live = agg.columns
    nonces, pubs, _, sealed = record_columns(params, batch)
    sizes = params.report_sizes()
    messages = []
    for first, count in parts_of(len(order), sizes[0] + sizes[1] + sizes[3] + vs.shape[1]):
        cut = slice(first, first + count)
        messages.append(Prio3Batch(
            type="prio3_batch", region=region, part=part, t=t, total=len(order), first=first, count=count,
            params=params,
            nonces=pack_rows(nonces[cut]), public_shares=pack_rows(pubs[cut]), sealed=pack_rows(sealed[cut]),
            leader_verifier_shares=pack_rows(vs[cut]), leader_live=pack_mask(live[cut]),
            ingest_rejected=ingest_rejected if first == 0 else 0).model_dump_json())
    return ClosedBatch(order, messages, agg, batch)


@dataclass
class HelperAnswer:
    """The helper's answer over the whole batch: its verifier shares (a uint8
    matrix, one row per report; `live` where it sent one), the reports it says
    it accepted, its reasons, or its refusal."""
    shares: np.ndarray
    accepted: np.ndarray
    rejected: Counter = field(default_factory=Counter)
    refused: str | None = None
    live: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


def helper_columns(params: Prio3Params, replies: list[Prio3Verify], total: int) -> HelperAnswer | None:
    """The helper's answer over the whole batch once its parts cover it (None:
    not yet). A refusal (any part with `refused`) is an answer too. ValueError:
    parts that do not fit the batch."""
    vdaf = params.vdaf()
    refusal = next((r.refused for r in replies if r.refused), None)
    if refusal is not None:
        return HelperAnswer(np.zeros((total, vdaf.verifier_share_size()), dtype=np.uint8),
                            np.zeros(total, dtype=bool), refused=refusal, live=np.zeros(total, dtype=bool))
    if any(r.total != total for r in replies):
        raise ValueError(f"the answer is for a batch of {replies[0].total} reports, the leader sent {total}")
    ordered = tile(replies, total)
    if ordered is None:
        return None
    cols = [r.arrays(vdaf) for r in ordered]
    reasons: Counter = Counter()
    for r in ordered:
        reasons.update(r.helper_rejected)
    if not cols:
        return HelperAnswer(np.zeros((0, vdaf.verifier_share_size()), dtype=np.uint8), np.zeros(0, dtype=bool),
                            reasons, live=np.zeros(0, dtype=bool))
    return HelperAnswer(np.concatenate([c[0] for c in cols]), np.concatenate([c[2] for c in cols]), reasons,
                        live=np.concatenate([c[1] for c in cols]))


# What the helper can only have concluded from its verifier share, which the leader combined too: an
# honest helper never accepts a report the leader rejected for one of these.
_JOINT = {Rejection.PEER_REJECTED, Rejection.PEER_MALFORMED, Rejection.PROOF_INVALID}


def check_helper(reasons: list[Rejection | None], answer: HelperAnswer) -> dict[str, int]:
    """Where the helper's answer contradicts what the leader checked, by kind
    (empty: nothing). Both aggregators combine the same two verifier shares and
    reach the same verdict on every proof, so:
    - rejected_verified: the helper sent a verifier share, the proof checked
      out, and it still says it did not accept the report;
    - accepted_unverified: it says it accepted a report it sent no valid
      verifier share for, or whose proof failed;
    - reasons_missing: it rejected more reports than its reasons account for."""
    live, accepted = answer.live, answer.accepted
    leader_ok = np.array([r is None for r in reasons], dtype=bool)
    joint_bad = np.array([r in _JOINT for r in reasons], dtype=bool)
    out = {"rejected_verified": int((live & leader_ok & ~accepted).sum()),
           "accepted_unverified": int((accepted & joint_bad).sum()),
           "reasons_missing": max(0, int((~accepted).sum()) - sum(answer.rejected.values()))}
    return {k: v for k, v in out.items() if v}


@dataclass(frozen=True)
class PartOf:
    """This leader worker's part of each region's reports (issue 30): part
    `part` of `parts`, and the parts key its zero-sum masks come from."""
    part: int = 0
    parts: int = 1
    key: bytes = b""


def finish_window(params: Prio3Params, agg: Prio3Aggregator, region: str, t: int, nonces: list[bytes] | np.ndarray,
                  answer: HelperAnswer, k_min: int, *, noise: bool = True, ingest_rejected: dict | None = None,
                  bits=None, pool: VerifyPool | None = None, part: PartOf = PartOf()  # noqa: ANN001, B008
                  ) -> tuple[Prio3Share, int]:
    """The leader's last message for a window whose helper answered: (message,
    reports both accepted), with the leader's statement of the window inside.

    As one of several leader workers (part.parts > 1) its share carries its
    part's zero-sum mask (rase_common.secagg.part_mask) and only part 0 adds
    the leader's noise: the helper can use the parts only all together, and
    their sum is the region's share with the leader's noise once. A part with
    fewer than k_min reports both accepted contributes none of them, only its
    mask (and part 0's noise): every report that counts comes in a part of at
    least k_min, and the other parts of the window still add up."""
    if answer.refused is not None:
        share = dropped_share(region, t, len(nonces), f"helper_refused:{answer.refused}"[:64], part.part)
        return share.model_copy(update={"statement": statement_of(params, share, answer, [], ingest_rejected)}), 0
    if pool is not None and pool.workers > 1 and len(nonces) >= pool.small:
        state, (vs, live) = agg.state, agg.columns
        mine = pool.leader_finish(params, agg.ctx, Verified(state, vs, live), answer.shares, answer.live)
    else:
        mine = agg.finish_columns(answer.shares, answer.live)
    both = mine & answer.accepted
    n = int(both.sum())
    reasons = agg.reasons
    leader_rejected = Counter(r.value for i in np.flatnonzero(answer.accepted & ~mine) if (r := reasons[i]) is not None)
    draws = 1 if noise and part.part == 0 else 0
    if part.parts > 1 and n < k_min:       # this part contributes its mask (and part 0 its noise) only
        both = np.zeros(len(both), dtype=bool)
        mine, n = both, 0
    common = dict(type="prio3_share", region=region, part=part.part, t=t, total=len(both), count=len(both),
                  leader_accepted=pack_mask(mine), accepted=n, accepted_digest=nonce_digest(nonces, both),
                  leader_rejected=dict(leader_rejected), noise_draws=draws)
    if part.parts <= 1 and n < k_min:
        share = Prio3Share(**common, dropped="under_k_min")
    else:
        agg_share = noisy_share(agg.vdaf, agg.aggregate(both), params, noise=bool(draws), bits=bits)
        if part.parts > 1:
            agg_share = masked_share(agg.vdaf, agg_share, part_mask(agg.vdaf, part.key, region, t, part.part,
                                                                   part.parts))
        share = Prio3Share(**common, agg_share=base64.b64encode(agg_share).decode())
    return share.model_copy(update={"statement": statement_of(params, share, answer, reasons, ingest_rejected)}), n


def statement_of(params: Prio3Params, share: Prio3Share, answer: HelperAnswer | None,
                 reasons: list[Rejection | None], ingest_rejected: dict | None) -> Prio3Statement:
    """The leader's account of a finished (or dropped) window (of its part)."""
    helper = answer if answer is not None and answer.refused is None else None
    return Prio3Statement(
        region=share.region, part=share.part, t=share.t, params_id=params.params_id, received=share.total,
        ingest_rejected=dict(ingest_rejected or {}),
        leader_rejected=dict(Counter(r.value for r in reasons if r is not None)),
        helper_accepted=int(helper.accepted.sum()) if helper is not None else 0,
        helper_rejected=dict(helper.rejected) if helper is not None else {},
        accepted=share.accepted, discrepancies=check_helper(reasons, helper) if helper is not None else {},
        dropped=share.dropped, noise_draws=share.noise_draws)


def dropped_share(region: str, t: int, total: int, reason: str, part: int = 0) -> Prio3Share:
    return Prio3Share(type="prio3_share", region=region, part=part, t=t, total=total, count=total,
                      leader_accepted=pack_mask(np.zeros(total, dtype=bool)), accepted=0, dropped=reason,
                      noise_draws=0)


def compare_published(stated: Prio3Statement | None, region: str, summary: Prio3Summary, named: bool = False
                      ) -> dict[str, int]:
    """Where a published aggregate's account of this leader's region
    contradicts the leader's own statement, by kind (empty: it agrees).
    region: the leader's key of it (the region, or region/part); named: the
    aggregate's `regions` lists the region.
    - published_unstated: it includes the region, but the leader released no
      share for that window (a helper answering for a batch it was not sent);
    - published_views_missing: it names the region, whose window the leader
      released, but carries no views of it (nothing to compare: its n unaccounted for);
    - published_accepted / published_received: its n or its batch size for the
      region is not what the leader counted;
    - leader_misquoted: the leader's view it carries is not the leader's statement."""
    views = summary.regions.get(region)
    if views is None and not named:
        return {}
    if stated is None or stated.dropped is not None:
        return {"published_unstated": 1}
    if views is None:
        return {"published_views_missing": 1}
    out = {}
    if views.helper.accepted != stated.accepted:
        out["published_accepted"] = 1
    if views.helper.received != stated.received:
        out["published_received"] = 1
    mine = statement_view(stated)
    if views.leader is not None and views.leader != mine:
        out["leader_misquoted"] = 1
    return out


def published_totals(agg: Aggregate) -> dict[str, int]:
    """Where a published secure aggregate contradicts itself, by kind (empty:
    it adds up). Its regions' views are what the leaders compare with their
    statements, so the totals must be theirs, or the views vouch for nothing:
    - published_n: its n, its estimates' n, prio3.accepted and the sum of
      its regions' accepted (prio3.regions.*.helper.accepted) are not all one number;
    - published_received_total: prio3.received is not the sum of its regions' received."""
    ns = {agg.n} | {e.n for e in agg.estimates.values()} | {e.n for e in agg.frequencies}
    out = {}
    if agg.prio3 is not None:
        views = agg.prio3.regions.values()
        ns |= {agg.prio3.accepted, sum(v.helper.accepted for v in views)}
        if agg.prio3.received != sum(v.helper.received for v in views):
            out["published_received_total"] = 1
    if len(ns) > 1:
        out["published_n"] = 1
    return out


def statement_view(s: Prio3Statement):  # noqa: ANN201 - a PartyView
    """The leader's statement as the aggregate carries it (Prio3Summary.regions[...].leader)."""
    from rase_common.protocol.prio3 import PartyView

    return PartyView(received=s.received, accepted=s.accepted, rejected=dict(s.leader_rejected),
                     ingest_rejected=dict(s.ingest_rejected))
