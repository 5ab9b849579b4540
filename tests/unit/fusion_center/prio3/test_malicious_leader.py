"""The malicious-leader matrix (issue 26): a fog that lies, against an honest
fusion center, through both parties' real role classes (tests/secagg_parties:
Prio3Leader and Prio3Helper on their own SQLite journal and store) with real
reports (the device's bytes: Prio3 shards and proofs, HPKE-sealed helper
shares) and real noise. For each lie, either the helper refuses it (nothing is
released, the refusal is counted by reason), or the published total still
carries the helper's full noise at the deployment's eps.

The statistical cases: 200 windows of 15 devices at eps 1 (the noise does
not depend on n; the lying fog of the issue, with 45 devices, is refused
outright), the published total's error against the exact sum of the
measurements; its standard deviation must be within 10% of the helper's
noise alone (discrete Laplace of scale 4,000 grid steps: sd 5,657). Seed
policy: reports and the leader's side use os.urandom; the helper's noise is
drawn from bits the test hands it (tests/seeded_bytes.XorShiftBytes, one
seed per test), so the statistic is reproducible. At 200 windows the
standard error of the sd of a Laplace sample is about 8%, so an unseeded run
would miss the 10% band now and then; a helper that took the leader's eps
(100: sd 57) or added no noise misses it by orders of magnitude."""

from __future__ import annotations

import base64
import logging
import time
from types import SimpleNamespace

import numpy as np
import pytest

import fog_shuffler.prio3.leader as leader_module
from fog_shuffler.ingest import IngestRules, Rejected
from fog_shuffler.prio3.leader_rules import validate_report
from fusion_center.prio3.role import HelperRole
from rase_common.errors import ProtocolError
from rase_common.protocol.prio3 import Prio3Batch, Prio3Params, Prio3Share, Prio3Verify
from rase_common.secagg import unshard_signed
from rase_common.vdaf import Prio3Aggregator, open_helper_shares
from rase_common.vdaf.batch import Rejection
from rase_device.entropy import RandomBits
from rase_device.secagg import encode_report
from tests.secagg_parties import TwoParties
from tests.seeded_bytes import XorShiftBytes

WINDOWS = 200
MEASUREMENTS = [(37 * i) % 4001 for i in range(45)]
SMALL = MEASUREMENTS[:15]          # the statistical cases' windows


def rewrite(payloads: list[str], model, **change) -> list[str]:  # noqa: ANN001
    return [model.model_validate_json(p).model_copy(update=change).model_dump_json() for p in payloads]


def refusals(bad) -> list[str]:  # noqa: ANN001
    return [b[0] for b in bad if b is not None]


def nothing_released(tp: TwoParties, t: int) -> bool:
    return not tp.fusion_store.has_aggregate("all", t) and tp.helper.store.ready() == []


# -- the lying fog of the issue -------------------------------------------------------------------------

def test_the_lying_fog_of_the_issue_is_refused_and_nothing_is_released(tmp_path, caplog):
    """A fog that writes dp_eps 100 into its batches and adds no noise of its
    own, at a deployment of eps 1 with 45 devices: before issue 26 the helper
    took dp_eps from the batch and published totals with error sd 58.8
    instead of about 8,000. Now the batch is refused, the leader is told, and
    no total of that window is ever published."""
    tp = TwoParties(tmp_path, leader_noise=False)
    weak = tp.params.model_copy(update={"dp_eps": 100.0})
    caplog.set_level(logging.WARNING)
    for t in (100, 101):
        sent = tp.leader_close("r1", t, tp.reports("r1", t, MEASUREMENTS))
        bad = tp.to_helper(rewrite(sent, Prio3Batch, params=weak))
        assert refusals(bad) == ["params_mismatch"]
        answers = tp.helper_step()
        assert [Prio3Verify.model_validate_json(a).refused for a in answers] == ["params_mismatch"]
        assert tp.leader_answer(answers) == []
        share, statement = tp.leader_finish("r1", t)
        assert Prio3Share.model_validate_json(share).dropped == "helper_refused:params_mismatch"
        assert statement.dropped == "helper_refused:params_mismatch"
        assert tp.to_helper([share]) == [None] and tp.helper_step() == []      # late: the window is finished
        assert tp.publish() == [] and nothing_released(tp, t)
    assert tp.metric(tp.helper.metrics.refused, reason="params_mismatch") == 2
    assert tp.metric(tp.leader.metrics.refused, reason="helper_refused_params_mismatch") == 2
    # Logged at WARNING once per episode on each side, not once per window.
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "params_mismatch" in r.getMessage()]
    assert sorted(r.name for r in warned) == ["fog_shuffler.prio3.leader", "fusion_center.prio3.helper"]


# -- every privacy-relevant field is the receiver's own ---------------------------------------------------

def _variants(p: Prio3Params) -> dict[str, Prio3Params]:
    return {"kind": Prio3Params(kind="count", product="per-t", dp_eps=p.dp_eps, key_id=p.key_id),
            "max_measurement": p.model_copy(update={"max_measurement": 4095}),
            "product": p.model_copy(update={"product": "hourly"}),
            "dp_eps": p.model_copy(update={"dp_eps": 100.0}),
            "key_id": p.model_copy(update={"key_id": "fc-forged0000"}),
            "kind_histogram": Prio3Params.for_deployment("histogram", key_id=p.key_id, dp_eps=p.dp_eps,
                                                         grid_steps=4000, bands=[10.0, 100.0, 1000.0])}


@pytest.mark.parametrize("field", ["kind", "max_measurement", "product", "dp_eps", "key_id", "kind_histogram"])
def test_a_batch_with_any_params_field_changed_is_refused(tmp_path, field):
    """The batch declares other params (the reports are the deployment's, or
    made under the declared ones): refused, answered with the refusal, never
    verified under the batch's params, never released."""
    tp = TwoParties(tmp_path, devices=12)
    other = _variants(tp.params)[field]
    for t, made_under in ((100, tp.params), (101, other)):
        sent = tp.leader_close("r1", t, tp.reports("r1", t, [m % 2 if other.kind == "count" else m % 4
                                                              for m in MEASUREMENTS[:12]], made_under),
                               params=made_under)
        assert refusals(tp.to_helper(rewrite(sent, Prio3Batch, params=other))) == ["params_mismatch"]
        assert [Prio3Verify.model_validate_json(a).refused for a in tp.helper_step()] == ["params_mismatch"]
        assert nothing_released(tp, t)
    assert tp.metric(tp.helper.metrics.refused, reason="params_mismatch") == 2


def test_the_leaders_messages_cannot_set_k_min_the_period_epoch0_or_the_regions(tmp_path):
    """k_min, the period and epoch0 are not in any leader message, and the
    regions are the helper's own: a batch for a region outside the helper's
    config is refused; the published wall clock is the helper's schedule."""
    for model in (Prio3Batch, Prio3Share):
        assert not {"k_min", "period_s", "epoch0", "regions"} & set(model.model_fields)
    tp = TwoParties(tmp_path, devices=12, leader_regions=("r1", "r9"))
    sent = tp.leader_close("r9", 100, tp.reports("r9", 100, MEASUREMENTS[:12]))
    assert refusals(tp.to_helper(sent)) == ["unknown_region"] and tp.helper_step() == []
    agg = tp.window("r1", 101, MEASUREMENTS[:12])
    start = tp.precision.epoch0 + 101 * tp.precision.period_s
    assert (agg.t_start, agg.period_s, agg.prio3.wall_clock.t_start) == (start, 8.0, start)
    assert agg.regions == ["r1"] and tp.metric(tp.helper.metrics.refused, reason="unknown_region") == 1


def test_a_batch_under_the_helpers_k_min_is_never_published(tmp_path):
    """A leader whose own k_min is 1 sends a window of 9 reports and its share
    over all 9: the helper applies its own k_min (10) and publishes nothing."""
    tp = TwoParties(tmp_path, devices=9, k_min=10, leader_k_min=1, leader_noise=False, helper_noise=False)
    assert tp.window("r1", 100, MEASUREMENTS[:9]) is None
    assert nothing_released(tp, 100)
    assert tp.metric(tp.helper.metrics.windows, outcome="dropped_under_k_min") == 1


# -- reports of another window, region or params --------------------------------------------------------

def test_a_report_made_for_max_measurement_4095_is_rejected_by_sum_4000_aggregators(tmp_path):
    """Prio3 alone does not bind its parameters: a Sum(4095) report verified
    by Sum(4000) aggregators under the same context is accepted and decodes to
    another in-range value (4095 -> 4000, 2048 -> 1953). Bound into the
    context, it is refused at the fog's ingest (params_mismatch, counted) and,
    forwarded by a lying fog anyway, its helper share does not open: rejected
    (decrypt_failed), never mis-read."""
    tp = TwoParties(tmp_path, devices=14, leader_noise=False, helper_noise=False)
    stale = tp.params.model_copy(update={"max_measurement": 4095})
    # The hazard: the same context, other params.
    ctx = b"a context without the params"
    from rase_common.vdaf.fast_client import FastPrio3, fast_make_report
    for m, read_as in ((4095, 4000), (2048, 1953)):
        nonce, pub, leader_share, sealed = fast_make_report(FastPrio3(stale.vdaf()), ctx, m, tp.public_key)
        vdaf = tp.params.vdaf()
        helper_share = open_helper_shares(bytes.fromhex(open(tp.keys["private_key_file"]).read().strip()), ctx,
                                          [nonce], [pub], [sealed])[0]
        aggs = [Prio3Aggregator(vdaf, bytes(32), ctx, a) for a in (0, 1)]
        shares = [aggs[0].start([nonce], [pub], [leader_share]), aggs[1].start([nonce], [pub], [helper_share])]
        both = aggs[0].finish(shares[1]) & aggs[1].finish(shares[0])
        assert both.all() and vdaf.unshard([a.aggregate(both) for a in aggs], 1) == read_as
    # At the fog's ingest: its own reason.
    report = tp.reports("r1", 100, [4095], stale)[0]
    payload = encode_report(100, 1.0, 1, report, stale.params_id).encode()
    rules = IngestRules(devices={"dev000": "r1"}, eps_levels=(1.0,), x_min=0.0, x_max=4000.0, lateness_periods=2,
                        mechanism="prio3")
    with pytest.raises(Rejected) as err:
        validate_report("rase/v1/reports/r1/dev000", payload, 100, rules, tp.params)
    assert err.value.reason == "params_mismatch"
    # Forwarded by a lying fog among 12 honest reports: rejected by the verification, counted.
    stale_reports = tp.reports("r1", 100, [4095, 2048], stale)
    sent = tp.leader_close("r1", 100, tp.reports("r1", 100, MEASUREMENTS[:12]) + stale_reports)
    tp.to_helper(sent)
    tp.leader_answer(tp.helper_step())
    share, statement = tp.leader_finish("r1", 100)
    tp.to_helper([share])
    tp.helper_step()
    (agg,) = tp.publish()
    assert agg.n == 12 and agg.prio3.total == sum(MEASUREMENTS[:12])
    assert agg.prio3.regions["r1"].helper.rejected == {"decrypt_failed": 2}
    assert statement.helper_rejected == {"decrypt_failed": 2} and statement.discrepancies == {}


def test_reports_of_another_window_or_region_are_rejected(tmp_path):
    """A batch of (r1, 100) with reports made for (r1, 99) and (r2, 100):
    their helper shares do not open under (r1, 100)'s context."""
    tp = TwoParties(tmp_path, devices=46, regions=("r1", "r2"), leader_noise=False, helper_noise=False)
    honest = tp.reports("r1", 100, MEASUREMENTS[:40])
    moved = tp.reports("r1", 99, [1, 2, 3]) + tp.reports("r2", 100, [4, 5, 6])
    tp.to_helper(tp.leader_close("r1", 100, honest + moved))
    tp.leader_answer(tp.helper_step())
    share, _ = tp.leader_finish("r1", 100)
    tp.to_helper([share])
    tp.helper_step()
    (agg,) = tp.publish()
    assert agg.n == 40 and agg.prio3.total == sum(MEASUREMENTS[:40])
    assert agg.prio3.rejected == {"decrypt_failed": 6}


def test_a_replay_across_windows_is_never_aggregated_twice(tmp_path):
    """Window 100's 45 reports, released, are replayed into window 101's
    batch beside 12 new ones: only the 12 are aggregated."""
    tp = TwoParties(tmp_path, devices=57, leader_noise=False, helper_noise=False)
    first = tp.reports("r1", 100, MEASUREMENTS)
    tp.to_helper(tp.leader_close("r1", 100, first))
    tp.leader_answer(tp.helper_step())
    tp.to_helper([tp.leader_finish("r1", 100)[0]])
    tp.helper_step()
    assert [a.n for a in tp.publish()] == [45]
    tp.to_helper(tp.leader_close("r1", 101, tp.reports("r1", 101, MEASUREMENTS[:12]) + first))
    tp.leader_answer(tp.helper_step())
    tp.to_helper([tp.leader_finish("r1", 101)[0]])
    tp.helper_step()
    (agg,) = tp.publish()
    assert agg.n == 12 and agg.prio3.total == sum(MEASUREMENTS[:12]) and agg.prio3.rejected == {"decrypt_failed": 45}


def test_a_nonce_aggregated_once_is_rejected_in_any_other_window(tmp_path):
    """Reports made for (r2, 101), valid there, whose nonces the helper
    already verified in (r1, 100): rejected as nonce_replayed (one report,
    one aggregation), across a restart of the helper too."""
    tp = TwoParties(tmp_path, devices=45, regions=("r1", "r2"), leader_noise=False, helper_noise=False)
    nonces = [bytes([i]) * 16 for i in range(45)]
    first = [tp.reports("r1", 100, [m], read=_nonce_first(n))[0] for m, n in zip(MEASUREMENTS, nonces)]
    assert tp.window_from(first, "r1", 100).n == 45
    tp.restart_helper()
    again = [tp.reports("r2", 101, [m], read=_nonce_first(n))[0] for m, n in zip(MEASUREMENTS[:5], nonces)]
    fresh = tp.reports("r2", 101, MEASUREMENTS[5:17])
    agg = tp.window_from(again + fresh, "r2", 101)
    assert agg.n == 12 and agg.prio3.regions["r2"].helper.rejected == {"nonce_replayed": 5}


def _nonce_first(nonce: bytes):  # noqa: ANN202
    """A CSPRNG read whose first 16 bytes are `nonce` (a report's nonce is its first read)."""
    import os

    state = {"first": True}

    def read(n: int) -> bytes:
        if state["first"] and n == 16:
            state["first"] = False
            return nonce
        return os.urandom(n)
    return read


# -- a batch is collected once ---------------------------------------------------------------------------

def test_overlapping_batches_a_differencing_attack_are_refused_across_a_restart(tmp_path):
    """After window (r1, 100) is released, the leader sends it again minus one
    report (the difference would be that report's reading): refused, before
    and after the helper restarts; there is one aggregate of t = 100."""
    tp = TwoParties(tmp_path, devices=45)
    reports = tp.reports("r1", 100, MEASUREMENTS)
    assert tp.window_from(reports, "r1", 100).n == 45
    minus_one = _batch_of(tp, "r1", 100, reports[1:])
    assert refusals(tp.to_helper(minus_one)) == ["batch_conflict"]
    assert [Prio3Verify.model_validate_json(a).refused for a in tp.helper_step()] == ["batch_conflict"]
    tp.restart_helper()
    assert refusals(tp.to_helper(minus_one)) == ["batch_conflict"]
    assert tp.helper_step() == [] and tp.publish() == [] and tp.fusion_store.count() == 1
    assert tp.metric(tp.helper.metrics.refused, reason="batch_conflict") == 1      # the new helper's count


def test_one_window_split_into_two_batches_is_refused(tmp_path):
    """The leader sends (r1, 100) as a batch of 20 reports, then another of 25:
    the second is another membership for a window already taken."""
    tp = TwoParties(tmp_path, devices=45, leader_noise=False, helper_noise=False)
    reports = tp.reports("r1", 100, MEASUREMENTS)
    first, second = _batch_of(tp, "r1", 100, reports[:20]), _batch_of(tp, "r1", 100, reports[20:])
    assert refusals(tp.to_helper(first)) == []
    answers = tp.helper_step()
    assert refusals(tp.to_helper(second)) == ["batch_conflict"]
    refused = [Prio3Verify.model_validate_json(a) for a in tp.helper_step()]
    assert [r.refused for r in refused] == ["batch_conflict"]
    assert len(answers) == 1 and Prio3Verify.model_validate_json(answers[0]).total == 20


def test_a_second_request_for_the_same_batch_releases_nothing_new(tmp_path):
    """The same bytes again are a retry: answered again (the same answer)
    while the window is open, ignored once it is released; a second, other
    share for a released window is refused (share_conflict)."""
    tp = TwoParties(tmp_path, devices=45)
    sent = tp.leader_close("r1", 100, tp.reports("r1", 100, MEASUREMENTS))
    tp.to_helper(sent)
    answers = tp.helper_step()
    assert tp.to_helper(sent) == [None] and tp.helper_step() == answers          # idempotent
    tp.leader_answer(answers)
    share, _ = tp.leader_finish("r1", 100)
    tp.to_helper([share])
    tp.helper_step()
    (agg,) = tp.publish()
    assert tp.to_helper(sent + [share]) == [None, None] and tp.helper_step() == [] and tp.publish() == []
    other = Prio3Share.model_validate_json(share).model_copy(update={"agg_share": base64.b64encode(
        bytes(len(base64.b64decode(Prio3Share.model_validate_json(share).agg_share)))).decode()})
    assert refusals(tp.to_helper([other.model_dump_json()])) == ["share_conflict"]
    tp.restart_helper()
    assert refusals(tp.to_helper([other.model_dump_json()])) == ["share_conflict"]
    assert tp.publish() == [] and tp.fusion_store.count() == 1 and agg.n == 45


def _batch_of(tp: TwoParties, region: str, t: int, reports: list) -> list[str]:
    """A lying leader's batch of these reports for (region, t), made with the leader's own rules."""
    from fog_shuffler.prio3.leader_rules import close_batch

    return close_batch(tp.params, tp.leader.verify_key, region, t, reports, np.random.default_rng(7)).messages


# -- what the leader cannot stop: the helper's noise ------------------------------------------------------

def _errors(tp: TwoParties, share_rewrite) -> np.ndarray:  # noqa: ANN001
    out = []
    for k in range(WINDOWS):
        t = 1000 + k
        truth = sum(SMALL)
        agg = tp.window("r1", t, SMALL, share=lambda shares: share_rewrite(tp, shares, t))
        out.append(agg.prio3.total - truth - getattr(tp, "offset", {}).get(t, 0))
    return np.array(out, dtype=float)


def test_the_leaders_noise_withheld_leaves_the_helpers_full_noise(tmp_path):
    """The leader adds no noise and says it did (noise_draws 1): the error of
    the published totals is the helper's noise alone, at eps 1."""
    tp = TwoParties(tmp_path, devices=len(SMALL), leader_noise=False)
    tp.helper.noise_bits = RandomBits(XorShiftBytes(2601))
    errors = _errors(tp, lambda tp, shares, t: rewrite(shares, Prio3Share, noise_draws=1))
    sd = errors.std(ddof=1)
    assert abs(sd / tp.helper_noise_sd() - 1) < 0.10, (sd, tp.helper_noise_sd())


def test_a_forged_leader_share_leaves_the_helpers_full_noise(tmp_path):
    """The leader replaces its aggregate share by one of its choosing (its
    exact share plus an offset it knows): the total, less that offset, is the
    exact sum plus the helper's full noise: the leader learns nothing more."""
    tp = TwoParties(tmp_path, devices=len(SMALL), leader_noise=False)
    tp.helper.noise_bits = RandomBits(XorShiftBytes(2602))
    tp.offset = {}
    rng = np.random.default_rng(26)
    vdaf = tp.params.vdaf()

    def forge(tp: TwoParties, shares: list[str], t: int) -> list[str]:
        share = Prio3Share.model_validate_json(shares[0])
        exact = vdaf.field.decode_vec(base64.b64decode(share.agg_share))
        tp.offset[t] = int(rng.integers(-10**6, 10**6))
        forged = vdaf.field.encode_vec([(x + tp.offset[t]) % vdaf.field.MODULUS for x in exact])
        assert unshard_signed(vdaf, [forged]) != unshard_signed(vdaf, [base64.b64decode(share.agg_share)])
        return [share.model_copy(update={"agg_share": base64.b64encode(forged).decode()}).model_dump_json()]
    errors = _errors(tp, forge)
    assert abs(errors.std(ddof=1) / tp.helper_noise_sd() - 1) < 0.10


# -- lies of the leader the helper detects (a fresh-eyes review of privacy.md section 7) ------------------

# -- 1. a leader that drops reports both aggregators verified is not compared --------------------------

def test_a_leader_that_rejects_reports_the_helper_verified_is_an_alarm(tmp_path, monkeypatch):
    """SPEC 8: "What a lying party can spoil but not prevent (dropped
    reports, a wrong n) is compared by the other party and raised as an
    alarm". The mirror of test_malicious_helper's first case: 45 honest
    reports, both send live verifier shares, the proofs verify; the leader
    keeps 10 (k_min) and says the other 35 had an invalid proof (a verdict
    both sides compute from the same two verifier shares, so the helper
    knows it is false). Its statement is consistent with its lie. The helper
    publishes n = 10 with no discrepancy and no alarm."""
    honest = leader_module.finish_window

    def lying_finish_window(params, agg, region, t, nonces, answer, k_min, **kw):  # noqa: ANN001
        real_finish = agg.finish_columns      # what finish_window calls (with one leader process)

        def finish_columns(shares, live):  # noqa: ANN001
            mine = real_finish(shares, live).copy()
            for i in range(10, len(nonces)):
                agg._state.reasons[i] = Rejection.PROOF_INVALID
                mine[i] = False
            return mine
        agg.finish_columns = finish_columns
        share, n = honest(params, agg, region, t, nonces, answer, k_min, **kw)
        stated = share.statement.model_copy(update={"discrepancies": {}})   # its own account agrees with its lie
        return share.model_copy(update={"statement": stated}), n
    monkeypatch.setattr(leader_module, "finish_window", lying_finish_window)

    tp = TwoParties(tmp_path, devices=45, leader_noise=False, helper_noise=False)
    agg = tp.window("r1", 100, MEASUREMENTS)
    assert agg is not None and agg.n == 10
    views = agg.prio3.regions["r1"]
    assert views.helper.rejected == {}                   # the helper verified all 45 itself
    assert agg.prio3.rejected == {"proof_invalid": 35}   # ... and publishes the leader's word for it
    # 35 reports the helper verified were dropped by the leader as proof_invalid: a discrepancy, published and alarmed
    assert agg.prio3.discrepancies == {"leader_rejected_verified": 35}
    assert tp.metric(tp.helper.metrics.discrepancies, kind="leader_rejected_verified") == 35
    assert "leader_rejected_verified" in tp.helper.alarm.active


# -- 2. a batch for a t far in the future moves the helper's pruning horizon for good -----------------

def test_a_batch_far_in_the_future_does_not_stop_the_helper_for_good(tmp_path):
    """A batch's t is bounded by the helper's own clock and schedule. A lying
    fog sends one window of 10 reports it made itself (anyone holding the
    public key can) for t = now_t + 10**9. Were it verified and published,
    aggregated() would prune below t - 100,000, and from then on every real
    window would be refused as too_old, across restarts (pruned_before is in
    the store). It is refused (future_t), counted and alarmed; nothing is
    pruned for it."""
    tp = TwoParties(tmp_path, devices=45)
    now_t = int((time.time() - tp.precision.epoch0) // tp.precision.period_s)
    far = now_t + 10**9
    horizon = tp.helper.store.pruned_before()
    assert tp.window("r1", far, MEASUREMENTS[:10]) is None            # refused, never published
    assert tp.metric(tp.helper.metrics.refused, reason="future_t") >= 1
    assert "future_t" in tp.helper.alarm.active
    assert tp.helper.store.pruned_before() == horizon
    tp.restart_helper()
    sent = tp.leader_close("r1", now_t, tp.reports("r1", now_t, MEASUREMENTS))
    bad = tp.to_helper(sent)
    assert bad == [None], f"an honest window of now was refused: {bad}"


# -- 3. the region is the payload's, never the topic's --------------------------------------------------

def test_a_fog_cannot_take_a_window_of_a_region_it_does_not_own(tmp_path):
    """deployment.md: each fog may write "only its own regions' window
    topics" (the ACL). The helper reads the region from the payload and never
    compares it with the topic: the fog of r1 writes, on its own topic
    rase/v1/windows/r1, a batch of (r2, t) made of its own reports; it is
    taken as r2's window (one membership per (region, t)), so the honest fog
    of r2 is refused (batch_conflict) and r2 is published with the r1 fog's
    numbers."""
    tp = TwoParties(tmp_path, devices=45, regions=("r1", "r2"), leader_regions=("r1", "r2"))
    role = HelperRole.__new__(HelperRole)
    role.helper = tp.helper
    role.ctx = SimpleNamespace(precision=tp.precision, clock=SimpleNamespace(now=time.time),
                               late_hook=lambda: (lambda t: tp.fusion_store.has_aggregate("all", t)))
    forged = _batch_of(tp, "r2", 100, tp.reports("r2", 100, MEASUREMENTS[:10]))    # the r1 fog's own reports
    msg = SimpleNamespace(topic="rase/v1/windows/r1", payload=forged[0].encode())
    try:
        taken = role.take(msg, 100)
    except ProtocolError as err:
        taken = err.reason
    with tp.fusion_store.db:
        tp.fusion_store.db.execute("BEGIN")
        role.write(tp.fusion_store.db)
    role.committed()
    # What follows: the honest r2 fog's own batch of (r2, 100) is refused.
    honest_r2 = _batch_of(tp, "r2", 100, tp.reports("r2", 100, MEASUREMENTS[10:]))
    refused = [b[0] for b in tp.to_helper(honest_r2) if b is not None]
    assert taken == "region_topic_mismatch", (f"a batch of r2 written on rase/v1/windows/r1 was taken as r2's "
                                              f"window; the r2 fog's own batch then: {refused}")
    assert refused == []                               # the r2 fog's own window is taken
    assert tp.metric(tp.helper.metrics.refused, reason="region_topic_mismatch") == 1
    assert tp.helper.store.unsent() == []              # no refusal answered on r2's verify topic for the forgery


# -- 4. k_min against a lying fog ----------------------------------------------------------------------

VICTIM = 3210


def test_against_a_lying_fog_the_helpers_noise_is_what_protects_a_device(tmp_path):
    """k_min counts reports, not devices: a lying fog makes 9 reports of its
    own (value 0: it holds the helper's public key like any device) and adds
    ONE device's report; the helper sees 10 valid reports and publishes
    (a Sybil attack; nothing short of device signatures stops it, privacy.md
    s7). What holds is the helper's own noise, drawn from its own eps: over
    200 such windows (the fog adding no noise of its own), the published
    total less the victim's reading spreads as the helper's noise law, never
    the fog's exact sum."""
    tp = TwoParties(tmp_path, devices=10, k_min=10, leader_noise=False)
    tp.helper.noise_bits = RandomBits(XorShiftBytes(2603))
    errors = []
    for k in range(WINDOWS):
        t = 2000 + k
        agg = tp.window_from(tp.reports("r1", t, [VICTIM]) + tp.reports("r1", t, [0] * 9), "r1", t)
        assert agg is not None and agg.n == 10             # published: k_min does not stop it
        errors.append(agg.prio3.total - VICTIM)
    sd = np.array(errors, dtype=float).std(ddof=1)
    assert abs(sd / tp.helper_noise_sd() - 1) < 0.10, (sd, tp.helper_noise_sd())


# -- 5. leader lies the helper detects but does not alarm ------------------------------------------------

def test_a_leader_share_for_another_batch_size_is_an_alarm(tmp_path):
    """The leader's share declares another batch size than the batch it sent
    (combine: batch_mismatch). The helper drops the window, but counts it
    only as rase_fusion_prio3_windows{outcome="dropped_batch_mismatch"}:
    neither rase_fusion_prio3_refused nor _discrepancies, so no
    RaseSecaggRefused / RaseSecaggDiscrepancy alert."""
    tp = TwoParties(tmp_path, devices=45)

    def other_total(shares: list[str]) -> list[str]:
        s = Prio3Share.model_validate_json(shares[0])
        return [s.model_copy(update={"total": 46, "count": 46}).model_dump_json()]
    assert tp.window("r1", 100, MEASUREMENTS, share=other_total) is None
    assert tp.metric(tp.helper.metrics.windows, outcome="dropped_batch_mismatch") == 1
    alarmed = sum(m._value.get() for c in (tp.helper.metrics.refused, tp.helper.metrics.discrepancies)
                  for m in c._metrics.values())
    assert alarmed > 0, "a leader share contradicting its own batch raised neither a refusal nor a discrepancy"
    assert tp.metric(tp.helper.metrics.discrepancies, kind="batch_mismatch") == 1
    assert "batch_mismatch" in tp.helper.alarm.active


def test_the_leader_cannot_mint_metric_labels(tmp_path):
    """The leader's free-text fields become Prometheus label values at the
    helper: dropped -> rase_fusion_prio3_windows{outcome=dropped_<text>},
    leader_rejected keys -> rase_fusion_prio3_reports_rejected{reason},
    statement.discrepancies keys -> rase_fusion_prio3_discrepancies{kind="leader:<key>"}.
    Up to 16 + 32 new series per window, for ever: a lying fog can grow the
    fusion center's metrics (and Prometheus) without bound."""
    tp = TwoParties(tmp_path, devices=45, leader_noise=False, helper_noise=False)

    def mint(t: int):  # noqa: ANN202
        def rewrite(shares: list[str]) -> list[str]:
            s = Prio3Share.model_validate_json(shares[0])
            stated = s.statement.model_copy(update={"discrepancies": {f"x{t}_{i}": 1 for i in range(32)}})
            return [s.model_copy(update={"statement": stated,
                                         "leader_rejected": {f"y{t}_{i}": 0 for i in range(16)}}).model_dump_json()]
        return rewrite
    published = [tp.window("r1", t, MEASUREMENTS, share=mint(t)) for t in range(100, 105)]
    series = len(tp.helper.metrics.discrepancies._metrics) + len(tp.helper.metrics.rejected._metrics)
    assert series < 50, f"5 windows of a lying fog made {series} metric series at the helper"
    # Each unknown key is the helper's own "other", and itself a discrepancy (5 windows x 48 keys).
    assert set(tp.helper.metrics.discrepancies._metrics) == {("leader:other",), ("leader_label_unknown",)}
    assert tp.metric(tp.helper.metrics.discrepancies, kind="leader_label_unknown") == 5 * 48
    assert set(tp.helper.metrics.rejected._metrics) <= {("other",)}
    for agg in published:          # the published aggregate carries no key of the leader's
        assert agg is not None and agg.prio3 is not None
        assert set(agg.prio3.discrepancies) == {"leader:other", "leader_label_unknown"}
        assert set(agg.prio3.rejected) <= {"other"}


def test_a_leader_drop_reason_outside_the_helpers_own_set_is_other(tmp_path):
    """The leader's share names why it dropped the window: free text that
    became rase_fusion_prio3_windows{outcome="dropped_<text>"}. A reason the
    helper does not know is counted as dropped_other and as a discrepancy."""
    tp = TwoParties(tmp_path, devices=45)

    def dropped(t: int):  # noqa: ANN202
        def rewrite(shares: list[str]) -> list[str]:
            s = Prio3Share.model_validate_json(shares[0])
            return [s.model_copy(update={"dropped": f"z{t}", "agg_share": None}).model_dump_json()]
        return rewrite
    for t in range(100, 103):
        assert tp.window("r1", t, MEASUREMENTS, share=dropped(t)) is None
    outcomes = {labels[0] for labels in tp.helper.metrics.windows._metrics}
    assert outcomes == {"answered", "dropped_other"}
    assert tp.metric(tp.helper.metrics.windows, outcome="dropped_other") == 3
    assert tp.metric(tp.helper.metrics.discrepancies, kind="leader_label_unknown") == 3
