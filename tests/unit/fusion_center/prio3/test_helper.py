"""The fusion center as Prio3's helper and collector (fusion_center.prio3.helper,
helper_store): the published aggregate from ready windows, several regions,
k_min at the helper, the store's answers to a repeated batch, the intake's
reasons; and the configs that bind the two parties' keys."""

import json

import pytest
from prometheus_client import CollectorRegistry

from rase_device.entropy import RandomBits
from fog_shuffler.config import FogConfig
from fusion_center.config import FusionConfig
from fusion_center.prio3.helper import Prio3FusionConfig, Prio3Helper, build_aggregate
from fusion_center.prio3.helper_store import HelperStore
from fusion_center.store import AggregateStore
from rase_common.errors import ConfigError, Outage
from rase_common.mechanisms.prio3 import noise_law
from rase_common.protocol.aggregate import Aggregate
from rase_common.protocol.control import ControlMessage
from rase_common.protocol.prio3 import Prio3Params
from rase_common.secagg import write_keys
from tests.seeded_bytes import XorShiftBytes

PARAMS = Prio3Params.for_deployment("sum", key_id="fc", dp_eps=1.0, grid_steps=4000, bands=[10.0])
PRECISION = ControlMessage(mechanism="prio3", eps_levels=[1.0], bands=[10.0], epoch0=1000.0, prio3=PARAMS)


def record(total: int, n: int, draws: int = 1, rejected=None) -> dict:
    return {"params": PARAMS.model_dump(), "received": n + sum((rejected or {}).values()), "ingest_rejected": 1,
            "totals": [total], "accepted": n, "rejected": rejected or {}, "leader_draws": draws}


def test_without_noise_the_aggregate_is_exact_and_says_what_happened():
    agg, est = build_aggregate(7, [("r1", record(9000, 45, 0, {"proof_invalid": 2}))], PRECISION, {"r1"},
                               level=0.95, noise=False, windows_w=(4,))
    agg = Aggregate.model_validate_json(agg.model_dump_json())            # the published JSON round-trips
    assert agg.estimates["mean"].value == 200.0 and agg.estimates["mean"].ci == (200.0, 200.0)
    s = agg.prio3
    assert (s.accepted, s.received, s.rejected) == (45, 47, {"proof_invalid": 2, "ingest": 1})
    assert s.wall_clock.t_start == 1000.0 + 7 * 8.0 and s.wall_clock.t_end_iso.endswith("Z")
    assert s.privacy["eps_per_day"] == pytest.approx(10_800) and s.noise["draws"] == 0
    assert agg.mechanism == "prio3" and agg.windowed["4"]["mean"].present == 1


def test_regions_sum_with_one_helper_draw_and_the_interval_of_all_draws():
    ready = [("r1", record(1000, 20)), ("r2", record(2000, 30))]
    agg, _ = build_aggregate(3, ready, PRECISION, {"r1", "r2", "r3"}, level=0.95, bits=RandomBits(XorShiftBytes(4)))
    assert agg.n == 50 and agg.regions == ["r1", "r2"] and not agg.complete
    assert agg.prio3.noise["draws"] == 3                 # each region's leader, then the helper once
    lo, hi = agg.estimates["mean"].ci
    assert (hi - lo) / 2 == pytest.approx(noise_law(4000, 1.0, 3).half_width(0.95) / 50)


def _helper(tmp_path, **kw) -> tuple[Prio3Helper, AggregateStore]:
    keys = write_keys(tmp_path / "keys")
    cfg = Prio3FusionConfig(private_key_file=keys["private_key_file"], key_id=keys["key_id"],
                            verify_key_file=keys["verify_key_file"], **kw)
    helper = Prio3Helper(cfg, regions=["r1", "r2"], merge_deadline_s=5.0, registry=CollectorRegistry(),
                         storage=Outage("s", None))
    store = AggregateStore(tmp_path / "fusion.sqlite")
    helper.open(store.db)
    return helper, store


def test_a_t_is_published_when_all_regions_are_ready_or_its_deadline_passed(tmp_path):
    helper, _ = _helper(tmp_path, k_min=10, unsafe_no_noise_for_tests=True)
    helper.store.finish("r1", 5, record(100, 12, 0), now=100.0)
    assert helper.due(101.0) == []                        # r2 not ready, deadline 5 s
    assert [t for t, *_ in helper.due(105.0)] == [5]
    helper.store.finish("r2", 5, record(100, 12, 0), now=101.0)
    (t, ready, first), = helper.due(101.5)
    assert first == 100.0 and sorted(r for r, _ in ready) == ["r1", "r2"]
    agg, _ = helper.aggregate(5, ready, PRECISION, level=0.95, history={}, windows_w=())
    assert agg.n == 24 and agg.prio3.total == 200
    helper.aggregated(5, stored=True)
    assert helper.store.ready() == []


def test_the_helper_publishes_nothing_under_its_own_k_min(tmp_path):
    helper, _ = _helper(tmp_path, k_min=30)
    assert helper.aggregate(5, [("r1", record(100, 12))], PRECISION, level=0.95, history={}, windows_w=()) is None


def test_the_intake_stores_parts_once_counts_bad_ones_and_answers_a_repeat_again(tmp_path):
    helper, _ = _helper(tmp_path)
    hs: HelperStore = helper.store
    bad = helper.take([b'{"type":"prio3_batch","v":1}', b"not json"], 1.0, lambda t: False)
    assert [b[0] for b in bad] == ["prio3_invalid", "prio3_invalid"]
    assert hs.add([("r1", 5, 0, "part")], [], 1.0) == ([], {}, {})
    hs.answered("r1", 5, ["answer"], 2.0)
    for row in hs.unsent():
        hs.mark_sent(*row[:3])
    assert hs.add([("r1", 5, 0, "part")], [], 3.0) == ([("r1", 5)], {}, {})    # the leader asked again
    assert [r[3] for r in hs.unsent()] == ["answer"]
    hs.finish("r1", 5, None, 4.0, "under_k_min")
    # After the window is finished: the same part again is ignored; a share for it is late (ignored);
    # another part for it is refused.
    assert hs.add([("r1", 5, 0, "part")], [("r1", 5, "share")], 5.0) == ([], {}, {})
    assert hs.add([("r1", 5, 0, "other part")], [], 5.0) == ([], {0: "batch_conflict"}, {})
    assert hs.add([("r1", 5, 1, "a new part")], [], 5.0) == ([], {0: "batch_after_release"}, {})
    assert hs.windows() == []


def test_configs_bind_the_parties_to_their_keys(tmp_path):
    keys = write_keys(tmp_path / "keys")
    with pytest.raises(FileExistsError):
        write_keys(tmp_path / "keys")              # never overwritten: devices pinned the old key
    prec = json.loads(PRECISION.model_dump_json())
    prec["prio3"]["key_id"] = keys["key_id"]
    good = {"private_key_file": keys["private_key_file"], "key_id": keys["key_id"],
            "verify_key_file": keys["verify_key_file"]}
    FusionConfig.load(None, regions=["r1"], precision=prec, prio3=good)
    with pytest.raises(ConfigError, match="not this fusion center's key"):
        FusionConfig.load(None, regions=["r1"], precision=prec, prio3={**good, "key_id": "another"})
    with pytest.raises(ConfigError, match="needs a \\[prio3\\] table"):
        FusionConfig.load(None, regions=["r1"], precision=prec)
    with pytest.raises(ConfigError, match="needs a \\[prio3\\] table"):
        FogConfig.load(None, regions={"r1": {"devices": ["a"]}}, device_mechanism="prio3")
    bad = tmp_path / "bad.key"
    bad.write_text("12")
    helper = Prio3Helper(Prio3FusionConfig(**{**good, "private_key_file": bad}), regions=[], merge_deadline_s=1,
                         registry=CollectorRegistry(), storage=Outage("s", None))
    with pytest.raises(ConfigError, match="holds 1 bytes, expected 32"):
        helper.open(AggregateStore(tmp_path / "f.sqlite").db)
