"""Review (fresh eyes): a lying fog against an honest fusion center, through
the real role classes (tests/secagg_parties). Each test states the claim of
docs/privacy.md section 7 / SPEC 8 it checks and fails where the code does
not hold it."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import numpy as np

import fog_shuffler.prio3.leader as leader_module
from fusion_center.prio3.role import HelperRole
from rase_common.errors import ProtocolError
from rase_common.protocol.prio3 import Prio3Share, Prio3Statement
from rase_common.vdaf.batch import Rejection
from rase_device.entropy import RandomBits
from tests.secagg_parties import TwoParties
from tests.seeded_bytes import XorShiftBytes

MEASUREMENTS = [(37 * i) % 4001 for i in range(45)]


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


def _batch_of(tp: TwoParties, region: str, t: int, reports: list) -> list[str]:
    """A batch of these reports for (region, t), made with the leader's own rules."""
    from fog_shuffler.prio3.leader_rules import close_batch

    return close_batch(tp.params, tp.leader.verify_key, region, t, reports, np.random.default_rng(7)).messages


# -- 4. k_min against a lying fog ----------------------------------------------------------------------

WINDOWS = 200
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
