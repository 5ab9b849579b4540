"""A power cut of the fog and the fusion center at once, at an arbitrary
instant under load, modelled by the faultfs shim (simulators/faults/faultfs.c):
each service's files keep only what was fsynced before the cut (the torn
mode also keeps a random half of the unsynced sectors). Real `rase fog` and
`rase fusion` processes, a real Mosquitto (which stays up), 2,000 reports/s.

After the restart: every report the broker acknowledged is in an aggregate,
none twice; every aggregate published before the cut is still stored, with
the same bytes; no window was forwarded with a second, different shuffle (a
window forwarded again carries the same bytes)."""

from __future__ import annotations

import random
import time

import pytest

from simulators.faults.rig import PipelineSpec
from tests.integration.chaos_helpers import (assert_once_and_complete, assert_services_up, finish,  # noqa: F401
                                             make_pipeline, run_load)

pytestmark = pytest.mark.integration
RNG = random.Random(18)           # the cut's instant within the load and the torn sectors' seed


@pytest.mark.parametrize("torn", [False, True], ids=["synced-only", "torn"])
def test_power_cut_of_fog_and_fusion_under_load_loses_no_acknowledged_report(make_pipeline, torn):
    rig = make_pipeline(PipelineSpec(devices=2000))
    spec, load = run_load(rig, seconds=7)
    cut_after_s = RNG.uniform(2.0, 4.5)
    torn_seed = RNG.randrange(1 << 30) if torn else None
    time.sleep(1.0 + cut_after_s)                 # the load starts a second from now
    acked_before = load.acked()
    with rig.observer.lock:
        published = {t: set(p) for t, p in rig.observer.aggregates.items()}
    restored_before = rig.fog.count("fog restored")
    fog_cut, fusion_cut = rig.power_cut(torn_seed=torn_seed)
    result, account = finish(rig, spec, load)

    assert acked_before > 0 and published, "the cut came before the load reached the services"
    assert rig.fog.count("fog restored") > restored_before, "the fog had no open window at the cut"
    stored = rig.stored_payloads()
    for t, payloads in published.items():
        assert {p.decode() for p in payloads} == {stored.get(t)}, f"aggregate t={t} published before the cut " \
                                                                  f"is not stored as published"
    assert_services_up(rig)
    detail = f"cut {cut_after_s:.2f} s into the load, torn seed {torn_seed}: {fog_cut}, {fusion_cut}"
    assert account.acked == result.scheduled, detail
    assert_once_and_complete(rig, account)
