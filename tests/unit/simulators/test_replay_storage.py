"""The replay's fog and fusion center are the deployed services on scratch
databases: the same tables and statements, without the fsync per commit
(simulators.pipeline.scratch_database); the driver reads the fusion
center's store from the start. No broker: the fog takes an in-memory
source and sink, the fusion center's link to an unused port connects in
the background and is never needed here."""

from __future__ import annotations

import asyncio
import contextlib
import socket

from fog_shuffler.config import FogConfig
from fog_shuffler.service import FogService
from fusion_center.config import FusionConfig
from fusion_center.service import FusionService
from fusion_center.store import AggregateStore
from rase_common.channels import MemorySink, MemorySource
from rase_common.clock import ManualClock
from simulators.pipeline import FusionProcess, ReplayFog, ReplayFusion

FULL, OFF = 2, 0        # PRAGMA synchronous's values


def synchronous_after_open(service, db_of) -> int:  # noqa: ANN001
    async def main() -> int:
        async with contextlib.AsyncExitStack() as stack:
            await service.open(stack)
            return db_of(service).execute("PRAGMA synchronous").fetchone()[0]
    return asyncio.run(main())


def fog_config(tmp_path) -> FogConfig:  # noqa: ANN001
    return FogConfig.load(None, name="scratch", regions={"r1": {"devices": [f"d{i}" for i in range(10)]}},
                          period_s=8.0, k_min=5, journal_path=tmp_path / "fog.sqlite")


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fusion_config(tmp_path) -> FusionConfig:  # noqa: ANN001
    return FusionConfig.load(None, name="scratch", regions=["r1"], store_path=tmp_path / "fusion.sqlite",
                             broker={"host": "127.0.0.1", "port": unused_port()})


def test_the_replays_fog_journal_skips_the_fsync_the_deployed_fog_makes(tmp_path):
    def fog(cls, sub: str):  # noqa: ANN001, ANN202
        return cls(fog_config(tmp_path / sub), clock=ManualClock(0.0), source=MemorySource(), sink=MemorySink())

    assert synchronous_after_open(fog(FogService, "deployed"), lambda s: s.ctx.journal.db) == FULL
    assert synchronous_after_open(fog(ReplayFog, "replay"), lambda s: s.ctx.journal.db) == OFF


def test_the_replays_fusion_store_skips_the_fsync_the_deployed_fusion_center_makes(tmp_path):
    for cls, want in ((FusionService, FULL), (ReplayFusion, OFF)):
        service = cls(fusion_config(tmp_path / cls.__name__), clock=ManualClock(0.0))
        assert synchronous_after_open(service, lambda s: s.store.db) == want


def test_the_driver_counts_nothing_until_the_fusion_center_has_made_its_tables(tmp_path):
    """The driver may look at the store between the fusion center creating
    the file and its tables (a replay whose devices follow an earlier run's
    retained control message starts at once): that is 0 aggregates so far,
    not an error."""
    cfg = fusion_config(tmp_path)
    fusion = FusionProcess(cfg, clock=None)          # never started: only its store is looked at
    assert fusion.stored() == 0                      # no file yet
    cfg.store_path.touch()                           # the file, no tables yet
    assert fusion.stored() == 0
    store = AggregateStore(cfg.store_path)
    store.store_aggregate("all", 5, "{}", 0.0)
    assert fusion.stored() == 1
    store.close()
