"""The pure rules of the fusion center as Prio3's helper and collector
(secure aggregation, issues 20 and 26): choosing the helper's own params for a
batch, answering it, combining it with the leader's share, and the published
aggregate of a timestamp. No I/O, no clock; noise from os.urandom unless a
test hands its bits. fusion_center.prio3.helper holds the state and the tasks.

The helper trusts only itself (docs/privacy.md section 7): the params it
verifies and noises a batch under are its own (its config, or the previous
params it published, for a few timestamps after a change), never the batch's;
a batch that declares other params is refused. k_min, the regions, the
period and epoch0 are its own config's too."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from fusion_center.estimators import Estimate, windowed
from fusion_center.ldp.context import clip, iso_utc, unit_fields
from fusion_center.ldp.merge import history_key
from rase_common.mechanisms import Setting
from rase_common.mechanisms.prio3 import NoiseSum, central_noise, draw_noise, estimate_total
from rase_common.privacy import UnitPrivacy, privacy_over_time, unit_guarantee
from rase_common.protocol.aggregate import Aggregate, EstimateOut, PrivacyUnit, WindowedOut
from rase_common.protocol.control import ControlMessage
from rase_common.protocol.prio3 import (SEAL_OVERHEAD, PartyView, Prio3Batch, Prio3Params, Prio3Share, Prio3Summary,
                                        Prio3Verify, RegionViews, WallClock, b64, nonce_digest, pack_mask, pack_rows,
                                        parts_of, split_slot, unpack_mask)
from rase_common.secagg import ShareOpener, unshard_signed
from rase_common.vdaf import Prio3Aggregator
from rase_common.vdaf.batch import Rejection

# The helper's own fixed sets for the leader's free-text fields (docs/privacy.md section 7): a value outside
# them becomes OTHER in the helper's metrics and in what it publishes, and is itself a discrepancy
# (LABEL_UNKNOWN), so a lying fog cannot mint metric series or put its words in the aggregate.
OTHER = "other"
LABEL_UNKNOWN = "leader_label_unknown"
REJECTIONS = frozenset(r.value for r in Rejection)
# Why the leader drops a window (fog_shuffler.prio3: its reason before any ':').
LEADER_DROPS = frozenset({"under_k_min", "verification_timeout", "helper_refused"})
# Why the helper itself drops a window in combine() (beside the leader's reasons).
COMBINE_DROPS = frozenset({"batch_mismatch", "accepted_mismatch", "under_k_min"})
# The kinds of the leader's statement.discrepancies (fog_shuffler.prio3.leader_rules.check_helper).
LEADER_DISCREPANCIES = frozenset({"rejected_verified", "accepted_unverified", "reasons_missing"})
# Verdicts on a report that the leader cannot reach for one the helper accepted: the helper accepts a report
# only with the leader's live verifier share and the two shares' combined verdict that the proof holds (the
# same computation at both), and a leader share that failed the leader's own decoding or query is never live.
# (nonce_replayed, nonce_repeated, joint_rand_mismatch, decrypt_failed may be the leader's alone.)
JOINT_VERDICTS = frozenset({Rejection.PROOF_INVALID.value, Rejection.PEER_REJECTED.value,
                            Rejection.PEER_MALFORMED.value, Rejection.NO_MESSAGE.value,
                            Rejection.QUERY_FAILED.value, Rejection.MALFORMED.value})


def own_label(value: str, allowed: frozenset[str]) -> str:
    """A leader's label as the helper counts and publishes it: its own word, or OTHER."""
    return value if value in allowed else OTHER


def own_counts(table: dict[str, int], allowed: frozenset[str]) -> tuple[dict[str, int], int]:
    """The leader's table keyed by the helper's own labels, and how many keys were not among them."""
    out: Counter[str] = Counter()
    for key, k in table.items():
        out[own_label(key, allowed)] += k
    return dict(out), sum(1 for key in table if key not in allowed)


def drop_outcome(reason: str | None) -> str:
    """The metric outcome of a window dropped in combine (its reason before any ':'), from the helper's own set."""
    why = (reason or "").split(":")[0]
    return own_label(why, LEADER_DROPS | COMBINE_DROPS)


def own_params_for(declared: Prio3Params, own: list[Prio3Params]) -> Prio3Params | None:
    """The helper's own params that a batch declaring `declared` is verified
    under (the candidates for its t, newest first), or None: refuse it. Equal
    params ids make and verify the same reports (their canonical text agrees);
    what is used is the helper's own object, never the batch's."""
    return next((p for p in own if p.params_id == declared.params_id), None)


@dataclass
class Answer:
    params: Prio3Params
    aggregator: Prio3Aggregator
    accepted: np.ndarray           # what the helper accepted, in batch order
    nonces: list[bytes]
    messages: list[str]
    ingest_rejected: int
    nonce_rows: np.ndarray | None = None   # the same nonces as a (N, 16) matrix (the digest reads it)


def answer_batch(params: Prio3Params, verify_key: bytes, opener: ShareOpener, region: str, t: int,
                 parts: list[Prio3Batch], seen_nonces=frozenset(), part: int = 0  # noqa: ANN001 - a Container
                 ) -> Answer:
    """Open, verify and answer one window's batch (its parts in order) under
    the helper's own `params`, the share bytes in arrays throughout, on the
    opener's worker processes when the batch is large. seen_nonces: nonces the
    helper aggregated in another window (rejected as nonce_replayed: a report
    is aggregated once)."""
    vdaf = params.vdaf()
    cols = [p.arrays(vdaf) for p in parts]
    sizes = (16, vdaf.public_share_size(), vdaf.input_share_size(1) + SEAL_OVERHEAD, vdaf.verifier_share_size())
    nonces, pubs, sealed, leader_vs = (np.concatenate([c[k] for c in cols]) if cols else
                                       np.zeros((0, sizes[k]), dtype=np.uint8) for k in range(4))
    leader_live = np.concatenate([c[4] for c in cols]) if cols else np.zeros(0, dtype=bool)
    ctx = params.ctx(region, t)
    v = opener.helper_verify(params, opener.private_key, verify_key, ctx, nonces, pubs, sealed, leader_vs,
                             leader_live, seen_nonces)
    agg = Prio3Aggregator.of_state(vdaf, verify_key, ctx, v.state, (v.shares, v.live))
    accepted = v.state.accepted
    reasons = v.state.reasons
    vs = vdaf.verifier_share_size()
    messages = [Prio3Verify(type="prio3_verify", region=region, part=part, t=t, total=len(reasons), first=first,
                            count=count,
                            helper_verifier_shares=pack_rows(v.shares[first:first + count]),
                            helper_live=pack_mask(v.live[first:first + count]),
                            helper_accepted=pack_mask(accepted[first:first + count]),
                            helper_rejected=dict(Counter(r.value for r in reasons[first:first + count]
                                                         if r is not None))).model_dump_json()
                for first, count in parts_of(len(reasons), vs)]
    return Answer(params, agg, accepted, _rows(nonces), messages, sum(p.ingest_rejected for p in parts), nonces)


def _rows(matrix: np.ndarray) -> list[bytes]:
    raw, k = matrix.tobytes(), matrix.shape[1]
    return [raw[i * k:(i + 1) * k] for i in range(matrix.shape[0])]


def refusal(region: str, t: int, total: int, reason: str, part: int = 0) -> str:
    """The helper's answer to a batch it will not verify (the leader drops the window and alarms)."""
    return Prio3Verify(type="prio3_verify", region=region, part=part, t=t, total=total, first=0, count=0,
                       refused=reason[:64]).model_dump_json()


def combine(answer: Answer, share: Prio3Share, k_min: int) -> tuple[dict | None, str | None]:
    """The region's ready record from the leader's share, or (None, why it is
    dropped). The record carries the helper's own params (answer.params),
    its own view of the window, the leader's statement as the share carried
    it, and the discrepancies the helper found between the two."""
    agg = answer.aggregator
    total = len(answer.nonces)
    own_rejected = Counter(r.value for r in agg.reasons if r is not None)
    rejected = Counter(own_rejected)
    base = {"params": answer.params.model_dump(), "received": total, "ingest_rejected": answer.ingest_rejected}
    if share.dropped is not None:
        return None, share.dropped
    if share.total != total:
        return None, "batch_mismatch"
    both = answer.accepted & unpack_mask(share.leader_accepted, total, "leader_accepted")
    n = int(both.sum())
    nonces = answer.nonce_rows if answer.nonce_rows is not None else answer.nonces
    if n != share.accepted or nonce_digest(nonces, both) != share.accepted_digest:
        return None, "accepted_mismatch"      # the two would publish different report sets: never
    if n < k_min:
        return None, "under_k_min"
    found: dict[str, int] = {}
    unknown = 0
    leader_rejected, bad = own_counts(share.leader_rejected, REJECTIONS)
    unknown += bad
    rejected.update(leader_rejected)
    # Every report the leader says it rejected here is one the helper accepted (finish_window): a verdict the
    # two reach together from the same verifier shares is one the helper knows is false.
    contradicted = sum(k for why, k in leader_rejected.items() if why in JOINT_VERDICTS and k > 0)
    if contradicted:
        found["leader_rejected_verified"] = contradicted
    totals = unshard_signed(agg.vdaf, [b64(share.agg_share or "", "agg_share"), agg.aggregate(both)])
    stated = share.statement
    stated_rejected: dict[str, int] = {}
    if stated is not None:
        if stated.helper_accepted != int(answer.accepted.sum()):
            found["leader_misquoted_helper"] = 1      # the leader's statement misreports the helper's answer
        if stated.received != total or stated.accepted != n:
            found["leader_statement_mismatch"] = 1
        stated_kinds, bad = own_counts(stated.discrepancies, LEADER_DISCREPANCIES)
        unknown += bad
        for kind, k in stated_kinds.items():
            found[f"leader:{kind}"] = found.get(f"leader:{kind}", 0) + k
        stated_rejected, bad = own_counts(stated.leader_rejected, REJECTIONS)
        unknown += bad
    if unknown:
        found[LABEL_UNKNOWN] = unknown
    views = {"helper": PartyView(received=total, accepted=n, rejected=dict(own_rejected)).model_dump(),
             "leader": None if stated is None else PartyView(
                 received=stated.received, accepted=stated.accepted, rejected=stated_rejected,
                 ingest_rejected=dict(stated.ingest_rejected)).model_dump()}
    return {**base, "totals": totals, "accepted": n, "rejected": dict(rejected),
            "leader_draws": share.noise_draws, "views": views, "discrepancies": found}, None


def merge_ready(records: list[dict], params: Prio3Params, *, noise: bool = True, bits=None
                ) -> tuple[list[int], int, int]:  # noqa: ANN001
    """(noisy totals, accepted n, noise draws) of one t: the regions' totals
    summed, plus the helper's own noise, once (os.urandom unless a test hands bits)."""
    totals = [sum(col) for col in zip(*[r["totals"] for r in records])]
    draws = sum(r["leader_draws"] for r in records)
    if noise:
        z = draw_noise(central_noise(params.sensitivity, params.dp_eps), len(totals), bits)
        totals = [x + e for x, e in zip(totals, z)]
        draws += 1
    return [int(x) for x in totals], sum(r["accepted"] for r in records), draws


def build_aggregate(t: int, ready: list[tuple[str, dict]], precision: ControlMessage, known: set[str], *,
                    level: float, noise: bool = True, dropped: dict[str, str] | None = None,
                    history: dict[str, dict[int, Estimate]] | None = None, windows_w: tuple[int, ...] = (),
                    bits=None, clip_bias_bound: float | None = None, unit: UnitPrivacy | None = None
                    ) -> tuple[Aggregate, dict[str, Estimate]]:  # noqa: ANN001
    """The published aggregate of t from its regions' ready records (all of
    one deployment's params: the helper's own, stored with each record)."""
    params = Prio3Params(**ready[0][1]["params"])
    records = [r for _, r in ready]
    totals, n, draws = merge_ready(records, params, noise=noise, bits=bits)
    d = central_noise(params.sensitivity, params.dp_eps)
    law = NoiseSum(d.t, d.s, draws)
    out = estimate_total(params.kind, totals, n, law, Setting.of(precision), level)
    est = dict(out.named)
    win: dict[str, dict[str, WindowedOut]] = {}
    for w in windows_w:
        win[str(w)] = {name: WindowedOut(**windowed({**(history or {}).get(history_key("prio3", name), {}), t: e},
                                                    t, w, level)) for name, e in est.items()}
    rejected: Counter[str] = Counter()
    for r in records:
        rejected.update(r["rejected"])
        if r["ingest_rejected"]:
            rejected["ingest"] += r["ingest_rejected"]
    period = params.window_period_s(precision.period_s)
    found: Counter = Counter()
    views = {}
    for region, r in ready:
        found.update(r.get("discrepancies", {}))
        if "views" in r:
            views[region] = RegionViews(**r["views"])
    summary = Prio3Summary(
        kind=params.kind, product=params.product, received=sum(r["received"] for r in records), accepted=n,
        rejected=dict(rejected), dropped_regions=dropped or {}, total=float(totals[0]) if params.kind != "histogram"
        else float(sum(totals)), counts=[float(x) for x in totals] if params.kind == "histogram" else [],
        noise={"distribution": "discrete Laplace", "scale_per_draw": law.scale, "draws": draws,
               "sensitivity": params.sensitivity, "off_for_tests": "yes" if draws == 0 else "no"},
        wall_clock=wall_clock(t, params, precision), privacy=privacy_unit(params, period),
        regions=views, discrepancies=dict(found), params_id=params.params_id)
    regions = sorted({split_slot(r)[0] for r, _ in ready})       # with leader workers, "region/part" keys
    agg = Aggregate(t=t, n=n, regions=regions, complete=known <= set(regions), level=level,
                    estimates={k: _out(e) for k, e in est.items()}, what=dict(out.meaning), mechanism="prio3",
                    frequencies=[_out(e) for e in out.frequencies], clamped=False, share_at_bound=0.0, windowed=win,
                    privacy=[{"region": r, "mechanism": "prio3", "dp_eps": params.dp_eps} for r in regions],
                    prio3=summary)
    return with_context(agg, params, precision, clip_bias_bound, unit), est


def with_context(agg: Aggregate, params: Prio3Params, precision: ControlMessage,
                 clip_bias_bound: float | None, own_unit: UnitPrivacy | None = None) -> Aggregate:
    """The fields every aggregate has beside its estimates (fusion_center.ldp.context):
    wall-clock time, the privacy unit (the helper's own [privacy]) and, for a sum, the clipping."""
    assert agg.prio3 is not None
    wc = agg.prio3.wall_clock
    day = privacy_over_time(params.dp_eps, wc.period_s, 24.0)
    g = unit_guarantee(own_unit or UnitPrivacy(), params.dp_eps, 86400.0 / wc.period_s)
    unit = PrivacyUnit(
        eps_per_report=params.dp_eps, period_s=wc.period_s, eps_per_hour=day.eps_per_hour, eps_per_day=day.eps_total,
        shuffle="none", central_eps=params.dp_eps, central_delta=0.0,
        statement=(f"{g.statement()}; secure aggregation: central ({params.dp_eps:g}, 0)-DP per report's "
                   f"release, one report per device per {wc.period_s:g} s, if the fog or the fusion center is honest "
                   "(docs/privacy.md section 7)"), **unit_fields(g))
    update = {"t_start": wc.t_start, "t_end": wc.t_end, "t_start_iso": iso_utc(wc.t_start),
              "t_end_iso": iso_utc(wc.t_end), "period_s": wc.period_s, "privacy_unit": unit}
    if params.kind == "sum":
        clipping, estimates = clip(agg, precision.x_max, clip_bias_bound)
        update |= {"clipping": clipping, "estimates": estimates}
    return agg.model_copy(update=update)


def wall_clock(t: int, params: Prio3Params, precision: ControlMessage) -> WallClock:
    """When t was: on the control message's schedule (piecewise across a
    schedule change) for per-t, on epoch0's grid of hours or days for a product."""
    if params.product == "per-t":
        schedule = precision.schedule()
        return WallClock.span(schedule.start_of(t), schedule.end_of(t))
    return WallClock.of(t, precision.epoch0, params.window_period_s(precision.period_s))


def privacy_unit(params: Prio3Params, period_s: float) -> dict:
    per_hour = 3600.0 / period_s
    return {"unit": "one device's report: its reading (or its average over the product's period)",
            "eps_per_release": params.dp_eps, "delta": 0.0, "releases_per_hour": per_hour,
            "eps_per_hour": params.dp_eps * per_hour, "eps_per_day": params.dp_eps * 24 * per_hour,
            "composition": "basic (the ledger's)", "holds_if": "the fog or the fusion center is honest"}


def _out(e: Estimate) -> EstimateOut:
    return EstimateOut(value=e.value, ci=(e.lo, e.hi), n=e.n, method=e.method or None)
