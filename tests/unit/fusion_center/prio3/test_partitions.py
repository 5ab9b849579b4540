"""A region's reports partitioned over several leader workers (issue 30):
each worker verifies and aggregates its part of the devices, its share
carries a zero-sum mask (only part 0 adds the leader's noise), and the helper
sums the parts before its single noisy release. Real parties (the fog's
Prio3Leader per part, each on its own journal, and the fusion center's
Prio3Helper), real reports and real noise, the messages passed by hand."""

import base64
import os

import numpy as np
import pytest

from rase_common.protocol.prio3 import Prio3Share, slot, split_slot
from rase_common.secagg import part_mask, write_keys
from tests.secagg_parties import TwoParties

MEASUREMENTS = [(37 * i) % 4001 for i in range(60)]


def parted(tmp_path, **kw) -> TwoParties:
    return TwoParties(tmp_path, devices=60, parts=2, leader_noise=False, helper_noise=False, **kw)


def by_part(tp: TwoParties, ms: list[int]) -> list[list[int]]:
    return [ms[k::tp.parts] for k in range(tp.parts)]


def test_two_leader_workers_sum_exactly_to_one_aggregate(tmp_path):
    tp = parted(tmp_path)
    agg = tp.window_parts("r1", 100, by_part(tp, MEASUREMENTS))
    assert agg is not None and agg.n == 60 and agg.regions == ["r1"] and agg.complete
    assert agg.prio3.total == sum(MEASUREMENTS) and agg.prio3.noise["draws"] == 0
    assert set(agg.prio3.regions) == {"r1/0", "r1/1"}               # each part's two views
    assert agg.prio3.regions["r1/1"].leader.accepted == 30 and agg.prio3.discrepancies == {}
    assert tp.fusion_store.count() == 1


def test_one_parts_share_alone_is_masked_and_the_masks_cancel(tmp_path):
    keys = write_keys(tmp_path / "keys")
    key = os.urandom(32)
    vdaf = TwoParties(tmp_path / "p", devices=2).params.vdaf()
    p = vdaf.field.MODULUS
    for parts in (2, 3, 5):
        masks = [part_mask(vdaf, key, "r1", 7, k, parts) for k in range(parts)]
        assert [sum(col) % p for col in zip(*masks)] == [0] * vdaf.OUTPUT_LEN
        assert all(any(m) for m in masks)
    assert part_mask(vdaf, key, "r1", 7, 0, 2) != part_mask(vdaf, key, "r1", 8, 0, 2) != \
        part_mask(vdaf, os.urandom(32), "r1", 7, 0, 2)
    with pytest.raises(ValueError):
        part_mask(vdaf, key, "r1", 7, 2, 2)
    assert keys and slot("r1", 1, 2) == "r1/1" and split_slot("r1/1") == ("r1", 1) and slot("r1", 0, 1) == "r1"


def test_a_parts_share_is_uniform_whatever_the_readings(tmp_path):
    """What the helper sees of one part: its masked share. Over 120 windows of
    the same readings, part 1's share (a Field64 element) is spread over the
    field: its top byte takes many values (uniform: 256), where unmasked it
    would be one value every time."""
    tp = parted(tmp_path)
    tops = set()
    for t in range(200, 320):
        shares = {}
        tp.window_parts("r1", t, by_part(tp, MEASUREMENTS), share=lambda k, s: shares.setdefault(k, s) or s)
        share = Prio3Share.model_validate_json(shares[1][0])
        value = tp.params.vdaf().field.decode_vec(base64.b64decode(share.agg_share or ""))
        tops.add(value[0] >> 56)
    assert len(tops) > 80              # 120 draws of 256 equally likely values: about 96 distinct expected


def test_a_missing_part_releases_nothing(tmp_path):
    """The helper may use the parts only all together: without part 1's share,
    part 0's (masked) share is never released on its own."""
    tp = parted(tmp_path)
    agg = tp.window_parts("r1", 100, by_part(tp, MEASUREMENTS), share=lambda k, s: [] if k == 1 else s)
    assert agg is None and tp.fusion_store.count() == 0 and tp.helper.store.ready() == []


def test_a_part_under_k_min_contributes_only_its_mask(tmp_path):
    """k_min is each leader part's own: a part with fewer both-accepted reports
    adds none of them, only its mask, and the region's total is the other
    part's; the helper's k_min applies to the region's parts together."""
    tp = parted(tmp_path)
    ms = [MEASUREMENTS[:30], MEASUREMENTS[30:35]]           # part 1: 5 reports, k_min 10
    agg = tp.window_parts("r1", 100, ms)
    assert agg is not None and agg.n == 30 and agg.prio3.total == sum(ms[0])
    assert agg.prio3.regions["r1/1"].leader.accepted == 0
    small = tp.window_parts("r1", 101, [MEASUREMENTS[:6], MEASUREMENTS[6:12]])   # 6 + 6: neither part counts
    assert small is None and not tp.fusion_store.has_aggregate("all", 101)


def test_with_noise_the_leader_draws_once_for_all_its_parts(tmp_path):
    tp = TwoParties(tmp_path, devices=60, parts=2)
    agg = tp.window_parts("r1", 100, by_part(tp, MEASUREMENTS))
    assert agg is not None and agg.prio3.noise["draws"] == 2          # part 0's, then the helper's: as one leader
    assert abs(agg.prio3.total - sum(MEASUREMENTS)) < 40 * 4000       # noise of scale 4000 per draw, far within


def test_a_leader_worker_that_restarts_sends_the_same_share(tmp_path):
    tp = parted(tmp_path)
    parts = by_part(tp, MEASUREMENTS)
    for k, ms in enumerate(parts):
        tp.to_helper(tp.leader_close("r1", 100, tp.reports("r1", 100, ms), part=k))
    for key, payload in tp.helper_step_to():
        tp.leader_answer([payload], part=split_slot(key)[1])
    first, _ = tp.leader_finish("r1", 100, part=1)
    leader = tp.restart_leader(1)                      # its share is journaled: the same bytes go again
    leader.journal.resend("r1", 100, 0.0)
    again = [r[3] for r in leader.journal.unsent() if r[2] >= (1 << 30) and r[2] < (1 << 30) + 1]
    assert again == [first]
    mine, _ = tp.leader_finish("r1", 100, part=0)
    tp.to_helper([mine, first, first])                 # the repeat is ignored
    tp.helper_step()
    (agg,) = tp.publish()
    assert agg.n == 60 and agg.prio3.total == sum(MEASUREMENTS)


def test_the_helper_refuses_a_part_beyond_its_own_count(tmp_path):
    tp = parted(tmp_path)
    sent = tp.leader_close("r1", 100, tp.reports("r1", 100, MEASUREMENTS[:30]), part=0)
    from rase_common.protocol.prio3 import Prio3Batch

    other = [Prio3Batch.model_validate_json(p).model_copy(update={"part": 2}).model_dump_json() for p in sent]
    assert [b[0] for b in tp.to_helper(other) if b] == ["unknown_part"]
    assert np.all([b is None for b in tp.to_helper(sent)])
