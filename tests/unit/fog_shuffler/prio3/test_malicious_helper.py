"""The malicious-helper matrix (issue 26): a fusion center that lies, against
an honest fog, through both parties' real role classes (tests/secagg_parties)
with real reports and real HPKE. Prio3 cannot stop an aggregator from
spoiling a result; the fog compares what it sent with what came back, and
every lie is visible: a discrepancy by kind in the fog's metrics and alarm,
in the fog's own statement of the window (rase/v1/prio3/statements/{region},
which only the fog may write), and in the aggregate's prio3.regions and
prio3.discrepancies, where each party's received, accepted and rejected
counts stand side by side.

A lying helper is modelled where it lies: its own answer (the Answer the
helper's code builds, rewritten consistently, so its later steps believe the
lie), its messages in transit, or the aggregate it publishes."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest

import fusion_center.prio3.helper as helper_module
from fusion_center.prio3.helper_rules import Answer
from rase_common.protocol.aggregate import Aggregate
from rase_common.protocol.prio3 import Prio3Verify, pack, pack_mask
from tests.secagg_parties import TwoParties

MEASUREMENTS = [(53 * i) % 4001 for i in range(100)]


def lying_answers(monkeypatch, lie) -> None:  # noqa: ANN001
    """The helper's own answer_batch, then `lie(answer) -> accepted mask`:
    its answer to the leader and its own state say the same thing."""
    honest = helper_module.answer_batch

    def answer_batch(params, verify_key, opener, region, t, parts, seen=frozenset(), **kw):  # noqa: ANN001
        a = honest(params, verify_key, opener, region, t, parts, seen, **kw)
        accepted = lie(a)
        msgs = [Prio3Verify.model_validate_json(m) for m in a.messages]
        msgs = [m.model_copy(update={"helper_accepted": pack_mask(accepted[m.first:m.first + m.count]),
                                     "helper_rejected": {}}).model_dump_json() for m in msgs]
        return Answer(a.params, a.aggregator, accepted, a.nonces, msgs, a.ingest_rejected)
    monkeypatch.setattr(helper_module, "answer_batch", answer_batch)


def test_a_helper_that_rejects_honest_reports_without_a_reason_is_an_alarm(tmp_path, monkeypatch, caplog):
    """The issue's case: 100 honest reports, the helper accepts 10 (k_min) and
    gives no reason. The aggregate goes out with n = 10, but the fog's
    statement and the aggregate say the helper rejected 90 reports whose
    proofs verified, without a reason."""
    tp = TwoParties(tmp_path, devices=100, k_min=10, leader_noise=False, helper_noise=False)

    def keep_ten(a: Answer) -> np.ndarray:
        out = np.zeros(len(a.accepted), dtype=bool)
        out[:10] = True
        return out
    lying_answers(monkeypatch, keep_ten)
    caplog.set_level(logging.WARNING)
    aggs = [tp.window("r1", t, MEASUREMENTS) for t in (100, 101)]
    for t, agg in zip((100, 101), aggs):
        (stated,) = [s for s in tp.published_statements("r1") if s.t == t]
        assert (stated.received, stated.accepted, stated.helper_accepted) == (100, 10, 10)
        assert stated.helper_rejected == {} and stated.leader_rejected == {}
        assert stated.discrepancies == {"rejected_verified": 90, "reasons_missing": 90}
        # The aggregate: each party's view, and the leader's discrepancies.
        views = agg.prio3.regions["r1"]
        assert agg.n == 10 and views.leader.received == views.helper.received == 100
        assert agg.prio3.discrepancies == {"leader:rejected_verified": 90, "leader:reasons_missing": 90}
    assert tp.metric(tp.leader.metrics.discrepancies, kind="rejected_verified") == 180
    warned = [r for r in caplog.records if r.name == "fog_shuffler.prio3.leader" and r.levelno == logging.WARNING
              and "rejected_verified" in r.getMessage()]
    assert len(warned) == 1                                   # once per episode, counted every time


def test_a_helper_that_claims_another_n_is_an_alarm(tmp_path):
    """The helper publishes an aggregate whose n for the fog's region is not
    what both accepted, and misquotes the fog's view: the fog, reading the
    aggregate, finds both against its own statement."""
    tp = TwoParties(tmp_path, devices=45, leader_noise=False, helper_noise=False)
    agg = tp.window("r1", 100, MEASUREMENTS[:45])
    assert tp.leader.check_aggregate(agg.model_dump_json().encode()) == {}          # the honest one agrees
    lie = json.loads(agg.model_dump_json())
    lie["n"] = lie["prio3"]["accepted"] = 60
    lie["prio3"]["regions"]["r1"]["helper"]["accepted"] = 60
    lie["prio3"]["regions"]["r1"]["leader"]["accepted"] = 60
    found = tp.leader.check_aggregate(json.dumps(lie).encode())
    assert found == {"published_accepted": 1, "leader_misquoted": 1}
    assert tp.metric(tp.leader.metrics.discrepancies, kind="published_accepted") == 1
    # What a subscriber compares: the fog's own statement says 45.
    (stated,) = tp.published_statements("r1")
    assert stated.accepted == 45 != Aggregate.model_validate(lie).prio3.regions["r1"].helper.accepted


def test_a_helper_answer_for_a_batch_it_was_not_sent_is_refused(tmp_path):
    """An answer for a window the fog never sent a batch for is refused
    (reply_unsolicited), an answer that does not fit the batch it was sent
    (reply_mismatch) is refused too, and an aggregate for a window the fog
    never released is a discrepancy (published_unstated)."""
    tp = TwoParties(tmp_path, devices=45, leader_noise=False, helper_noise=False)
    agg = tp.window("r1", 100, MEASUREMENTS[:45])
    forged = Prio3Verify(type="prio3_verify", region="r1", t=555, total=45, first=0, count=0).model_dump_json()
    assert tp.leader_answer([forged]) == ["prio3_reply_unsolicited"]
    assert tp.metric(tp.leader.metrics.refused, reason="reply_unsolicited") == 1
    # A real batch, answered for another size.
    sent = tp.leader_close("r1", 101, tp.reports("r1", 101, MEASUREMENTS[:45]))
    tp.to_helper(sent)
    answers = [Prio3Verify.model_validate_json(a).model_copy(update={"total": 44, "count": 44}).model_dump_json()
               for a in tp.helper_step()]
    tp.leader_answer(answers)
    assert tp.leader_finish("r1", 101) == (None, None)              # not finished on a misfit answer
    assert tp.metric(tp.leader.metrics.refused, reason="reply_mismatch") == 1
    # An aggregate claiming the fog's region at a t the fog never released.
    ghost = json.loads(agg.model_dump_json())
    ghost["t"] = 999_999
    assert tp.leader.check_aggregate(json.dumps(ghost).encode()) == {"published_unstated": 1}


def test_a_helper_that_returns_wrong_verifier_shares_is_an_alarm(tmp_path):
    """The helper sends random verifier shares and says it accepted every
    report: no proof checks out, so no report is aggregated (the window is
    dropped under k_min), and the fog finds the helper accepting 45 reports it
    could not have verified."""
    tp = TwoParties(tmp_path, devices=45, leader_noise=False, helper_noise=False)
    vs = tp.params.vdaf().verifier_share_size()

    def garble(answers: list[str]) -> list[str]:
        out = []
        for a in answers:
            m = Prio3Verify.model_validate_json(a)
            out.append(m.model_copy(update={"helper_verifier_shares": pack([os.urandom(vs)] * m.count, vs),
                                            "helper_live": pack_mask([True] * m.count),
                                            "helper_accepted": pack_mask([True] * m.count),
                                            "helper_rejected": {}}).model_dump_json())
        return out
    assert tp.window("r1", 100, MEASUREMENTS[:45], answer=garble) is None
    (stated,) = tp.published_statements("r1")
    assert stated.dropped == "under_k_min" and stated.accepted == 0
    assert sum(stated.leader_rejected.values()) == 45
    assert stated.discrepancies == {"accepted_unverified": 45}
    assert tp.metric(tp.leader.metrics.discrepancies, kind="accepted_unverified") == 45


@pytest.mark.parametrize("forged_reports", [0, 1])
def test_every_aggregate_states_each_partys_counts(tmp_path, forged_reports):
    """Honest parties: the aggregate's prio3.regions carries received,
    accepted and rejections by reason as each party saw them (a forged proof
    counted by both), and the fog's statement agrees; no discrepancy."""
    from rase_common.vdaf.fast_client import FastPrio3
    from rase_common.vdaf import hpke as server_hpke
    from rase_device.prio3_report import helper_share_info

    tp = TwoParties(tmp_path, devices=20, leader_noise=False, helper_noise=False)
    reports = tp.reports("r1", 100, MEASUREMENTS[:19])
    if forged_reports:                    # an out-of-range measurement with an honest prover's (false) proof
        vdaf = FastPrio3(tp.params.vdaf())
        ctx = tp.params.ctx("r1", 100)
        nonce = os.urandom(16)
        public, shares = vdaf.shard_encoded(ctx, [2] + [0] * (vdaf.MEAS_LEN - 1), nonce, os.urandom(vdaf.RAND_SIZE))
        reports.append((nonce, public, shares[0], server_hpke.seal(tp.public_key, helper_share_info(ctx, nonce, public),
                                                                  shares[1])))
    agg = tp.window_from(reports, "r1", 100)
    views = agg.prio3.regions["r1"]
    rejected = {"proof_invalid": 1} if forged_reports else {}
    assert views.leader.received == views.helper.received == 19 + forged_reports
    assert views.leader.accepted == views.helper.accepted == agg.n == 19
    assert views.leader.rejected == views.helper.rejected == agg.prio3.rejected == rejected
    assert agg.prio3.discrepancies == {} and tp.leader.check_aggregate(agg.model_dump_json().encode()) == {}
    (stated,) = tp.published_statements("r1")
    assert (stated.received, stated.accepted, stated.leader_rejected) == (19 + forged_reports, 19, rejected)
