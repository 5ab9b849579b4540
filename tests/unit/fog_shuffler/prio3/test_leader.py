"""The fog as Prio3's leader (fog_shuffler.prio3.leader) and the whole exchange's
pure rules with the helper's (fusion_center.prio3.helper): validation at ingest,
close (shuffle, strip, verify_init), the helper's answer, the leader's share,
the helper's combination; rejected reports counted by reason, k_min on what
both accepted, and no publication when the two disagree on the set."""

import json
import os
import sqlite3
from dataclasses import replace

import numpy as np
import pytest

from rase_device.prio3_report import make_report
from rase_device.secagg import encode_report
from fog_shuffler.ingest import IngestRules, Rejected
from fog_shuffler.prio3.leader import Prio3FogConfig, Prio3Leader
from fog_shuffler.prio3.leader_rules import (Prio3Accepted, close_batch, finish_window, helper_columns, record_of,
                                             split_prio3, validate_report)
from fog_shuffler.journal import Journal
from fog_shuffler.prio3.leader_journal import LeaderJournal
from fog_shuffler.windows import ClosedWindow
from fusion_center.prio3.helper_rules import answer_batch, combine
from prometheus_client import CollectorRegistry
from rase_common.errors import Outage
from rase_common.protocol import prio3 as proto
from rase_common.protocol.prio3 import Prio3Batch, Prio3Params, Prio3Share, Prio3Verify
from rase_common.secagg import ShareOpener
from rase_common.vdaf import generate_keypair

SK, PK = generate_keypair()
VERIFY_KEY = bytes(range(32))
DEVICES = {f"dev{i}": "r1" for i in range(30)}


def params(kind="sum") -> Prio3Params:
    return Prio3Params.for_deployment(kind, key_id="fc", dp_eps=1.0, grid_steps=4000, bands=[10.0, 100.0, 1000.0])


def rules() -> IngestRules:
    return IngestRules(devices=DEVICES, eps_levels=(1.0,), x_min=0.0, x_max=4000.0, lateness_periods=2,
                       mechanism="prio3")


def report(p: Prio3Params, m: int, t: int = 100, region="r1") -> tuple[bytes, bytes, bytes, bytes]:
    return make_report(p.vdaf(), p.ctx(region, t), m, PK)


def forged(p: Prio3Params, t: int = 100) -> tuple[bytes, bytes, bytes, bytes]:
    from rase_device import hpke
    from rase_device.prio3_report import helper_share_info

    vdaf = p.vdaf()
    ctx = p.ctx("r1", t)
    nonce = os.urandom(16)
    public, shares = vdaf.shard_encoded(ctx, [2] + [0] * (vdaf.MEAS_LEN - 1), nonce, os.urandom(vdaf.RAND_SIZE))
    return nonce, public, shares[0], hpke.seal(PK, helper_share_info(ctx, nonce, public), b"", shares[1], os.urandom)


def exchange(p, reports, *, k_min=3, tamper=None, t=100):
    """The three messages through the pure rules of both sides: (helper's record, reason, leader's share)."""
    closed = close_batch(p, VERIFY_KEY, "r1", t, reports, np.random.default_rng(1), ingest_rejected=2)
    parts = [Prio3Batch.model_validate_json(m) for m in closed.messages]
    answer = answer_batch(p, VERIFY_KEY, ShareOpener(SK, 1), "r1", t, parts)
    replies = [Prio3Verify.model_validate_json(m) for m in answer.messages]
    helper = helper_columns(p, replies, len(reports))
    batch = [reports[i] for i in closed.order]
    share, n = finish_window(p, closed.aggregator, "r1", t, [r[0] for r in batch], helper, k_min,
                             noise=False)
    if tamper:
        share = tamper(share)
    record, reason = combine(answer, Prio3Share.model_validate_json(share.model_dump_json()), k_min)
    return record, reason, share


@pytest.mark.parametrize("kind", ["sum", "count", "histogram"])
def test_the_exchange_sums_exactly_the_reports_both_accepted_and_counts_the_forged_one(kind):
    p = params(kind)
    values = [0, 1, 3, 3, 2] if kind != "sum" else [0, 17, 4000, 250, 1]
    values = [min(v, 1) for v in values] if kind == "count" else values
    record, reason, share = exchange(p, [report(p, v) for v in values] + [forged(p)])
    assert reason is None and record["accepted"] == len(values) == share.accepted
    assert record["rejected"] == {"proof_invalid": 1} and record["ingest_rejected"] == 2
    want = [sum(values)] if kind != "histogram" else [values.count(b) for b in range(4)]
    assert record["totals"] == want and record["leader_draws"] == 0


def test_a_window_with_fewer_than_k_min_accepted_is_dropped_by_both():
    p = params()
    record, reason, share = exchange(p, [report(p, 5)] * 0 + [report(p, 5), report(p, 6), forged(p)], k_min=3)
    assert share.dropped == "under_k_min" and share.agg_share is None
    assert record is None and reason == "under_k_min"


def test_the_helper_never_publishes_when_the_two_disagree_on_the_report_set():
    p = params()
    reports = [report(p, v) for v in (1, 2, 3, 4)]

    def drop_one(share):       # the leader claims it summed a different set than its mask says
        mask = proto.unpack_mask(share.leader_accepted, share.total, "m")
        mask[0] = False
        return share.model_copy(update={"leader_accepted": proto.pack_mask(mask)})
    record, reason, _ = exchange(p, reports, tamper=drop_one)
    assert record is None and reason == "accepted_mismatch"

    def other_digest(share):
        return share.model_copy(update={"accepted_digest": "0" * 64})
    assert exchange(p, reports, tamper=other_digest)[1] == "accepted_mismatch"


def test_replayed_and_moved_reports_fail_verification():
    """The context binds a report to its region and t: one copied into another
    window does not open (its sealed share's info) and its proof fails."""
    p = params()
    good = [report(p, v) for v in (1, 2, 3)]
    moved = report(p, 9, t=99)                      # made for t = 99, replayed into t = 100
    record, _, _ = exchange(p, good + [moved, good[0]])
    assert record["accepted"] == 3
    assert record["rejected"] == {"decrypt_failed": 1, "nonce_repeated": 1}


def test_a_batch_in_several_parts(monkeypatch):
    monkeypatch.setattr(proto, "MAX_PART_BYTES", 100)
    p = params()
    values = list(range(7))
    closed = close_batch(p, VERIFY_KEY, "r1", 100, [report(p, v) for v in values], np.random.default_rng(2))
    assert len(closed.messages) == 7        # one report per part at this size
    record, reason, _ = exchange(p, [report(p, v) for v in values])
    assert record["totals"] == [sum(values)]
    with pytest.raises(ValueError, match="overlap"):
        parts = [Prio3Verify.model_validate_json(m) for m in answer_batch(
            p, VERIFY_KEY, ShareOpener(SK, 1), "r1", 100,
            [Prio3Batch.model_validate_json(m) for m in closed.messages]).messages]
        helper_columns(p, parts + [parts[0].model_copy(update={"first": 0, "count": 2})], 7)


def test_close_shuffles_uniformly():
    """Position of the first journaled report over 350 closes: uniform over 7 positions."""
    from scipy import stats

    p = params("count")
    reports = [report(p, v % 2) for v in range(7)]
    first = [close_batch(p, VERIFY_KEY, "r1", 100, reports, np.random.default_rng(s)).order.index(0)
             for s in range(350)]
    assert stats.chisquare(np.bincount(first, minlength=7)).pvalue > 1e-3


# -- ingest ---------------------------------------------------------------------------------------------

def payload(p, m=5, t=100, eps=1.0, **change):
    d = json.loads(encode_report(t, eps, 1, report(p, m, t), p.params_id))
    d.update(change)
    return json.dumps(d).encode()


@pytest.mark.parametrize("change,reason", [
    ({"eps": 0.5}, "eps_not_on_menu"), ({"t": 90}, "t_out_of_range"), ({"leader": "AAAA"}, "malformed_share"),
    ({"sealed": "!!"}, "malformed_share"), ({"nonce": 3}, "wrong_type"), ({"pub": None}, "wrong_type")])
def test_ingest_rejects_with_a_reason(change, reason):
    with pytest.raises(Rejected) as err:
        validate_report("rase/v1/reports/r1/dev1", payload(params(), **change), 100, rules(), params())
    assert err.value.reason == reason


def test_ingest_rejects_unknown_devices_and_a_deployment_that_is_not_prio3():
    with pytest.raises(Rejected, match="unknown_device"):
        validate_report("rase/v1/reports/r1/stranger", payload(params()), 100, rules(), params())
    with pytest.raises(Rejected, match="impossible_y"):
        validate_report("rase/v1/reports/r1/dev1", payload(params()), 100, replace(rules(), mechanism="br"), None)
    ok = validate_report("rase/v1/reports/r1/dev1", payload(params()), 100, rules(), params())
    assert isinstance(ok, Prio3Accepted) and ok.mechanism == "prio3" and len(ok.shares[3]) == 80


def _leader(tmp_path) -> Prio3Leader:
    key = tmp_path / "verify.key"
    key.write_text(VERIFY_KEY.hex())
    leader = Prio3Leader(Prio3FogConfig(verify_key_file=key), name="f", regions=["r1"], k_min=2,
                         registry=CollectorRegistry(), storage=Outage("s", None), sink_name="memory")
    leader.open(Journal(tmp_path / "fog.sqlite").db)
    return leader


def test_a_nonce_seen_before_is_rejected_but_a_redelivered_report_is_a_duplicate(tmp_path):
    leader = _leader(tmp_path)
    raw = payload(params())
    rep = leader.validate("rase/v1/reports/r1/dev1", raw, 100, rules(), params())
    leader.accepted(rep)
    with pytest.raises(Rejected, match="nonce_repeated"):      # another device, same nonce, same batch
        leader.validate("rase/v1/reports/r1/dev2", raw, 100, rules(), params())
    leader.commit([])
    assert leader.validate("rase/v1/reports/r1/dev1", raw, 100, rules(), params()) == rep   # QoS 1 redelivery
    leader2 = _leader(tmp_path)                                 # after a restart, from the journal
    with pytest.raises(Rejected, match="nonce_repeated"):
        leader2.validate("rase/v1/reports/r1/dev3", raw, 100, rules(), params())


def test_closing_strips_devices_in_one_transaction(tmp_path):
    journal = Journal(tmp_path / "fog.sqlite")
    lj = LeaderJournal(journal.db)
    p = params()
    reports = [report(p, i) for i in range(3)]
    rows = [("r1", 100, f"sa-dev-{i}", record_of(r), 1.0) for i, r in enumerate(reports)]
    lj.add(rows, [])
    assert [r[2] for r in lj.open_reports()] == ["sa-dev-0", "sa-dev-1", "sa-dev-2"]
    batch = lj.records_of("r1", 100, ["sa-dev-2", "sa-dev-0", "sa-dev-1"])
    assert batch == record_of(reports[2]) + record_of(reports[0]) + record_of(reports[1])
    lj.close("r1", 100, batch, p.model_dump_json(), ["m0", "m1"], 1.0, total=3)
    assert lj.open_reports() == [] and ("r1", 100) in journal.closed_windows()
    assert lj.batch("r1", 100) == batch and [r[3] for r in lj.unsent()] == ["m0", "m1"]
    assert lj.nonces() == {r[0]: ("r1", 100, f"sa-dev-{i}") for i, r in enumerate(reports)}   # kept past the close
    db = sqlite3.connect(tmp_path / "fog.sqlite")
    assert "device" not in [c[1] for c in db.execute("PRAGMA table_info(prio3_batch_blob)")]
    assert not any(b"sa-dev-" in (v if isinstance(v, bytes) else str(v).encode())
                   for row in db.execute("SELECT * FROM prio3_batch_blob") for v in row)
    lj.finish("r1", 100, "share", "done")
    assert lj.batch("r1", 100) == b"" and [r[3] for r in lj.unsent()] == ["m0", "m1", "share"]
    for row in lj.unsent():
        lj.mark_sent(*row[:3])
    lj.resend("r1", 100, 2.0)            # a finished window's messages can be sent again, same bytes
    assert [r[3] for r in lj.unsent()] == ["m0", "m1", "share"]


def test_split_around_a_change_of_mechanism():
    cw = ClosedWindow("r1", 5, ["a", "b", "c"], [0.0, 1.0, 2.0], [1.0] * 3, 0, 0, False, ["prio3", "br", "prio3"])
    mine, rest = split_prio3(cw)
    assert mine.devices == ["a", "c"] and rest.devices == ["b"] and rest.mechanisms == ["br"]
    assert split_prio3(replace(cw, mechanisms=["prio3"] * 3))[1] is None


def test_a_batch_the_helper_does_not_answer_is_sent_again_then_dropped_with_a_reason(tmp_path):
    import asyncio

    key = tmp_path / "verify.key"
    key.write_text(VERIFY_KEY.hex())
    leader = Prio3Leader(Prio3FogConfig(verify_key_file=key, verify_timeout_s=10, verify_deadline_s=60), name="f",
                         regions=["r1"], k_min=2, registry=CollectorRegistry(), storage=Outage("s", None),
                         sink_name="memory")
    leader.open(Journal(tmp_path / "fog.sqlite").db)
    p = params()
    batch = b"".join(record_of(report(p, v)) for v in (1, 2, 3))
    leader.journal.close("r1", 100, batch, p.model_dump_json(), ["part0"], now=1000.0, total=3)
    for row in leader.journal.unsent():
        leader.journal.mark_sent(*row[:3])
    assert asyncio.run(leader.step(1005.0)) == 0 and leader.journal.unsent() == []       # not yet
    asyncio.run(leader.step(1011.0))
    assert [r[3] for r in leader.journal.unsent()] == ["part0"]                         # sent again
    assert leader.metrics.resent._value.get() == 1
    asyncio.run(leader.step(1022.0))
    assert leader.metrics.resent._value.get() == 2                                     # every verify_timeout_s
    asyncio.run(leader.step(1061.0))          # verify_deadline_s after the first send, however often resent
    share = Prio3Share.model_validate_json(leader.journal.unsent()[-1][3])
    assert share.dropped == "verification_timeout" and share.agg_share is None
    assert leader.journal.state("r1", 100) == "dropped" and leader.journal.batch("r1", 100) == b""
