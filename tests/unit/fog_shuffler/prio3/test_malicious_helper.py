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
from rase_common.protocol import topics
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
    lie["estimates"]["mean"]["n"] = 60              # a lie that adds up: only the fog's statement contradicts it
    found = tp.leader.check_aggregate(json.dumps(lie).encode())
    assert found == {"published_accepted": 1, "leader_misquoted": 1}
    assert tp.metric(tp.leader.metrics.discrepancies, kind="published_accepted") == 1
    # What a subscriber compares: the fog's own statement says 45.
    (stated,) = tp.published_statements("r1")
    assert stated.accepted == 45 != Aggregate.model_validate(lie).prio3.regions["r1"].helper.accepted



def test_a_helper_that_publishes_another_n_is_an_alarm_even_if_its_views_are_honest(tmp_path):
    """privacy.md s7: "fusion center | publish another n | the fog compares
    every aggregate with its statement: an alarm". The helper publishes n = 60
    (and prio3.accepted = 60) for a window both accepted 45 reports of, but
    leaves prio3.regions as it was: its n is not the sum of its regions' views,
    which the fog compares with its statement (published_n)."""
    tp = TwoParties(tmp_path, devices=45, leader_noise=False, helper_noise=False)
    agg = tp.window("r1", 100, MEASUREMENTS[:45])
    lie = json.loads(agg.model_dump_json())
    lie["n"] = lie["prio3"]["accepted"] = 60
    lie["estimates"]["mean"]["n"] = 60
    found = tp.leader.check_aggregate(json.dumps(lie).encode())
    assert found == {"published_n": 1}, "an aggregate with n = 60 where the fog stated 45 raised no discrepancy"
    assert tp.metric(tp.leader.metrics.discrepancies, kind="published_n") == 1
    # Only the estimates' n: the same.
    lie = json.loads(agg.model_dump_json())
    lie["estimates"]["mean"]["n"] = 60
    assert tp.leader.check_aggregate(json.dumps(lie).encode()) == {"published_n": 1}
    # The batch size too (prio3.received against the regions' received).
    lie = json.loads(agg.model_dump_json())
    lie["prio3"]["received"] = 50
    assert tp.leader.check_aggregate(json.dumps(lie).encode()) == {"published_received_total": 1}


def test_a_helper_that_drops_the_regions_table_is_an_alarm(tmp_path):
    """The same lie, but the helper also leaves out prio3.regions (or the
    fog's region in it): an aggregate naming the fog's region without its
    views (published_views_missing), whose n its views do not add up to."""
    tp = TwoParties(tmp_path, devices=45, leader_noise=False, helper_noise=False)
    agg = tp.window("r1", 100, MEASUREMENTS[:45])
    lie = json.loads(agg.model_dump_json())
    lie["n"] = lie["prio3"]["accepted"] = lie["prio3"]["received"] = 4500
    lie["prio3"]["regions"] = {}
    assert lie["regions"] == ["r1"]            # the aggregate still says it is r1's
    found = tp.leader.check_aggregate(json.dumps(lie).encode())
    assert found == {"published_views_missing": 1, "published_n": 1, "published_received_total": 1}, \
        "an aggregate of r1 without r1's views (n = 4500) raised no discrepancy"
    assert tp.metric(tp.leader.metrics.discrepancies, kind="published_views_missing") == 1
    # Without r1's views, of a window the fog never released: unstated, as with its views.
    lie["t"] = 999_999
    assert tp.leader.check_aggregate(json.dumps(lie).encode())["published_unstated"] == 1


def test_a_helper_that_drops_the_prio3_summary_is_an_alarm(tmp_path):
    """An aggregate of a prio3 deployment, mechanism "prio3", regions ["r1"],
    with no prio3 summary at all: published_summary_missing (and its n, 4500,
    is not its estimates' 45)."""
    tp = TwoParties(tmp_path, devices=45, leader_noise=False, helper_noise=False)
    agg = tp.window("r1", 100, MEASUREMENTS[:45])
    lie = json.loads(agg.model_dump_json())
    lie["prio3"] = None
    lie["n"] = 4500
    found = tp.leader.check_aggregate(json.dumps(lie).encode())
    assert found == {"published_summary_missing": 1, "published_n": 1}, \
        "a prio3 aggregate of r1 without its prio3 summary raised no discrepancy"
    lie["n"] = 45                               # n agrees with the estimates: the summary is still missing
    assert tp.leader.check_aggregate(json.dumps(lie).encode()) == {"published_summary_missing": 1}
    assert tp.metric(tp.leader.metrics.discrepancies, kind="published_summary_missing") == 2


def test_the_fog_checks_the_aggregate_that_home_assistant_reads(tmp_path):
    """Home Assistant's discovery config points at rase/v1/aggregates/latest
    (retained): the fog subscribes to it and compares it like a per-t one, so
    a helper cannot publish honest numbers on t/{t} and anything on latest.
    The retained one repeats a per-t one and comes again on each subscribe:
    the same bytes are counted once; a latest of a t before the fog's journal
    is not the fog's to judge."""
    tp = TwoParties(tmp_path, devices=45, leader_noise=False, helper_noise=False)
    subscribed = [s for s, _ in tp.leader.subscriptions()]
    assert topics.AGGREGATE_LATEST_TOPIC in subscribed and tp.leader.is_aggregate(topics.AGGREGATE_LATEST_TOPIC), \
        f"the fog reads only {subscribed}: the 'latest' aggregate is never compared with its statements"
    assert topics.AGGREGATE_LATEST_TOPIC in [s for s, _ in tp.leader.subscriptions(replies_over_mqtt=False)]
    agg = tp.window("r1", 100, MEASUREMENTS[:45])
    honest = agg.model_dump_json().encode()
    assert tp.leader.check_aggregate(honest) == {} and tp.leader.check_aggregate(honest, retained=True) == {}
    lie = json.loads(agg.model_dump_json())
    lie["n"] = lie["prio3"]["accepted"] = lie["estimates"]["mean"]["n"] = 60
    lie["prio3"]["regions"]["r1"]["helper"]["accepted"] = 60
    latest = json.dumps(lie).encode()
    assert tp.leader.check_aggregate(latest, retained=True) == {"published_accepted": 1}
    assert tp.leader.check_aggregate(latest, retained=True) == {}          # redelivered on a new subscribe
    assert tp.metric(tp.leader.metrics.discrepancies, kind="published_accepted") == 1
    old = json.loads(agg.model_dump_json())
    old["t"] = 50                                # before the fog's first window: an unknown t, not a lie
    old["n"] = old["prio3"]["accepted"] = 4500
    assert tp.leader.check_aggregate(json.dumps(old).encode(), retained=True) == {}


def test_an_honest_aggregate_over_leader_workers_agrees_with_each(tmp_path):
    """With leader workers (issue 30) the aggregate's views are per part
    (r1/0, r1/1): each worker finds its own part's, and n is their sum."""
    tp = TwoParties(tmp_path, devices=60, parts=2, leader_noise=False, helper_noise=False)
    ms = [(37 * i) % 4001 for i in range(60)]
    agg = tp.window_parts("r1", 100, [ms[k::2] for k in range(2)])
    assert agg is not None and agg.n == 60
    assert [leader.check_aggregate(agg.model_dump_json().encode()) for leader in tp.leaders] == [{}, {}]
    lie = json.loads(agg.model_dump_json())
    del lie["prio3"]["regions"]["r1/1"]
    found = [leader.check_aggregate(json.dumps(lie).encode()) for leader in tp.leaders]
    assert found == [{"published_n": 1, "published_received_total": 1},
                     {"published_views_missing": 1, "published_n": 1, "published_received_total": 1}]

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
