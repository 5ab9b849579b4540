"""Errors that decide (rase_common.deadletter): an aggregate the broker's ACL
refuses is dead-lettered once, with one ERROR line, and every aggregate
queued behind it is published; `rase deadletters` lists it and, once the ACL
admits it, sends it again. Against a real Mosquitto whose ACL denies one
aggregate topic (MQTT 5: the PUBACK says 0x87, not authorized)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time

import pytest

from fusion_center.config import FusionConfig
from fusion_center.service import FusionService
from rase_common.channels import MemorySource
from rase_common.clock import ManualClock
from rase_common.protocol.window import WindowMessage
from simulators.brokers import Mosquitto
from tests.mqtt_helpers import Recorder

pytestmark = pytest.mark.integration
EPOCH0 = 1_700_000_000.0
REFUSED_T = 102


def window(t: int) -> str:
    return WindowMessage.uniform("r1", t, [100.0 + t] * 10, kind="br").model_dump_json()


def broker_with_acl(tmp_path, deny: bool) -> Mosquitto:
    tmp_path.mkdir(parents=True, exist_ok=True)
    acl = tmp_path / "acl"
    acl.write_text("topic readwrite #\n" + (f"topic deny rase/v1/aggregates/t/{REFUSED_T}\n" if deny else ""))
    return Mosquitto(tmp_path / "mq", extra_conf=f"acl_file {acl}\n")


async def run_fusion(cfg: FusionConfig, windows: list[int], done) -> None:  # noqa: ANN001
    source = MemorySource()
    fusion = FusionService(cfg, clock=ManualClock(EPOCH0 + 106 * 8.0 + 1), source=source)
    source.wakeup = lambda: fusion.ctx.arrived.set()
    stop = asyncio.Event()
    task = asyncio.create_task(fusion.run(stop))
    try:
        for t in windows:
            source.put("rase/v1/windows/r1", window(t))
        deadline = time.monotonic() + 30
        while not done(fusion) and time.monotonic() < deadline and not task.done():
            await asyncio.sleep(0.05)
        assert done(fusion), "the fusion center did not get there within 30 s"
    finally:
        stop.set()
        await task


def test_a_refused_aggregate_is_dead_lettered_once_and_the_queue_goes_on(tmp_path, caplog):
    broker = broker_with_acl(tmp_path, deny=True).start()
    store = tmp_path / "f.sqlite"
    try:
        cfg = FusionConfig.load(None, name="dl", regions=["r1"], merge_deadline_s=0.0, bootstrap_b=50,
                                store_path=store, home_assistant_discovery=False,
                                precision={"period_s": 8.0, "epoch0": EPOCH0, "mechanism": "br"},
                                broker={"port": broker.port})
        rec = Recorder(broker.port, ["rase/v1/aggregates/t/#"], client_id="dl-rec")
        ts = list(range(100, 106))
        with caplog.at_level(logging.ERROR):
            asyncio.run(run_fusion(cfg, ts, lambda f: f.metrics.registry.get_sample_value(
                "rase_fusion_dead_letters_total") == 1 and not f.store.unpublished()))
        assert rec.wait_for(lambda: len(rec.on("rase/v1/aggregates/t/")) >= len(ts) - 1)
        got = sorted(int(m.topic.rsplit("/", 1)[1]) for m in rec.on("rase/v1/aggregates/t/"))
        assert got == [t for t in ts if t != REFUSED_T]            # every aggregate behind it went out
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR and "dead letter" in r.getMessage()]
        assert len(errors) == 1, [r.getMessage() for r in errors]  # one line, not one per retry
        rec.close()
    finally:
        broker.stop()

    listed = subprocess.run([sys.executable, "-m", "rase.cli", "deadletters", "list", "--store", str(store), "--json"],
                            capture_output=True, text=True, check=True)
    assert '"outbox": "aggregates"' in listed.stdout and f"t={REFUSED_T}" in listed.stdout
    assert "not authorized" in listed.stdout.lower() or "0x87" in listed.stdout or "135" in listed.stdout

    # The operator fixes the ACL and sends it again: the next run publishes it.
    out = subprocess.run([sys.executable, "-m", "rase.cli", "deadletters", "resend", "--store", str(store), "--all"],
                         capture_output=True, text=True, check=True)
    assert "1 dead letter" in out.stdout
    broker = broker_with_acl(tmp_path / "again", deny=False).start()
    try:
        cfg = cfg.model_copy(update={"broker": cfg.broker.model_copy(update={"port": broker.port})})
        rec = Recorder(broker.port, ["rase/v1/aggregates/t/#"], client_id="dl-rec2")
        asyncio.run(run_fusion(cfg, [], lambda f: f.store is not None and not f.store.unpublished()))
        assert rec.wait_for(lambda: len(rec.on("rase/v1/aggregates/t/")) >= 1)
        assert [m.topic for m in rec.on("rase/v1/aggregates/t/")] == [f"rase/v1/aggregates/t/{REFUSED_T}"]
        rec.close()
    finally:
        broker.stop()
