"""The secure-aggregation messages (rase_common.protocol.prio3) and the CPython
client simulators use (rase_common.vdaf.fast_client), byte for byte the device's."""

import json
import os

import numpy as np
import pytest
from pydantic import ValidationError

from rase_device.prio3 import prio3_count, prio3_histogram, prio3_sum
from rase_device.prio3_report import helper_share_info
from rase_common.protocol import prio3 as proto
from rase_common.protocol.prio3 import (Prio3Params, Prio3Report, Prio3Share, is_prio3_message, nonce_digest, pack,
                                        pack_mask, parse_leader_message, parts_of, unpack, unpack_mask)
from rase_common.vdaf import generate_keypair
from rase_common.vdaf.fast_client import FastPrio3, fast_make_report
from rase_common.vdaf.hpke import open_sealed


def test_per_report_columns_and_masks_round_trip():
    items = [os.urandom(5), None, os.urandom(5)]
    assert unpack(pack(items, 5), 5, 3, "x") == [items[0], bytes(5), items[2]]
    mask = np.array([True, False, True, True, False, False, False, True, True])
    assert (unpack_mask(pack_mask(mask), 9, "m") == mask).all()
    with pytest.raises(ValueError, match="expected 4 x 5"):
        unpack(pack(items, 5), 5, 4, "x")
    with pytest.raises(ValueError, match="not base64"):
        unpack("a!b=", 5, 1, "x")


def test_parts_stay_under_kafkas_record_size():
    for per_report in (120, 400, 2000):
        parts = parts_of(100_003, per_report)
        assert sum(c for _, c in parts) == 100_003 and all(c * per_report <= proto.MAX_PART_BYTES for _, c in parts)
        assert all(f == sum(c for _, c in parts[:i]) for i, (f, _) in enumerate(parts))
    assert parts_of(0, 120) == [(0, 0)]


def test_leader_messages_are_told_apart_from_windows_by_their_first_field():
    share = Prio3Share(type="prio3_share", region="r1", t=3, total=2, count=2, leader_accepted=pack_mask([1, 0]),
                       accepted=1, agg_share="AAAA")
    raw = share.model_dump_json().encode()
    assert is_prio3_message(raw) and parse_leader_message(raw) == share
    assert not is_prio3_message(b'{"v":2,"region":"r1"}')
    with pytest.raises(ValidationError, match="either agg_share or dropped"):
        Prio3Share(type="prio3_share", region="r1", t=3, total=2, count=2, leader_accepted="", accepted=0)
    with pytest.raises(ValidationError, match="within its batch"):
        Prio3Share(type="prio3_share", region="r1", t=3, total=2, first=1, count=2, leader_accepted="", accepted=0,
                   dropped="x")


def test_params_validate_their_kind():
    with pytest.raises(ValidationError, match="max_measurement is set exactly"):
        Prio3Params(kind="count", key_id="k", max_measurement=10)
    with pytest.raises(ValidationError, match="averages readings"):
        Prio3Params(kind="histogram", key_id="k", buckets=4, chunk_length=2, product="hourly")
    p = Prio3Params.for_deployment("histogram", key_id="k", dp_eps=1.0, grid_steps=1, bands=[1.0, 2.0, 3.0])
    assert (p.buckets, p.chunk_length, p.sensitivity) == (4, 2, 2)
    assert Prio3Params.for_deployment("sum", key_id="k", dp_eps=1.0, grid_steps=4000, bands=[1.0],
                                      product="hourly").window_period_s(8.0) == 3600.0


def test_a_report_checks_its_shares_sizes():
    p = Prio3Params.for_deployment("count", key_id="k", dp_eps=1.0, grid_steps=1, bands=[1.0])
    rep = Prio3Report(v=1, t=1, eps=1.0, seq=1, nonce="AAAA", pub="", leader="", sealed="")
    with pytest.raises(ValueError, match="nonce has 3 bytes, expected 16"):
        rep.shares(p.report_sizes())


def test_the_digest_names_the_set_by_nonce():
    n = [os.urandom(16) for _ in range(3)]
    assert nonce_digest(n, [1, 0, 1]) == nonce_digest([n[0], os.urandom(16), n[2]], [1, 0, 1])
    assert nonce_digest(n, [1, 0, 1]) != nonce_digest(n, [1, 1, 0])


@pytest.mark.parametrize("vdaf,m", [(prio3_sum(4000), 1234), (prio3_count(), 1), (prio3_histogram(4, 2), 3),
                                    (prio3_histogram(20, 4), 19)])
def test_the_fast_client_shards_byte_for_byte_as_the_device(vdaf, m):
    fast = FastPrio3(vdaf)
    for _ in range(20):
        nonce, rand = os.urandom(16), os.urandom(vdaf.RAND_SIZE)
        assert fast.shard(b"rase/v1/prio3/r1/per-t/5", m, nonce, rand) == vdaf.shard(b"rase/v1/prio3/r1/per-t/5", m,
                                                                                      nonce, rand)
    sk, pk = generate_keypair()
    nonce, public, leader, sealed = fast_make_report(vdaf, b"ctx", m, pk)
    assert open_sealed(sk, helper_share_info(b"ctx", nonce, public), sealed) is not None
    assert json.dumps(len(leader)) == json.dumps(vdaf.input_share_size(0))
