"""Kafka down for 60 s while the fog runs (its sink is a real Tansu, stopped
and started again on the same port, its data kept in S3): at most 10 warning
lines for the whole outage, retries that back off to the cap, ingest that
never stalls, and once Kafka is back every window forwarded once, in order."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest

from fog_shuffler.config import FogConfig
from fog_shuffler.service import FogService
from rase_common.channels import MemorySource
from rase_common.clock import ManualClock
from rase_common.kafka import KafkaConfig, KafkaSource
from tests.integration.test_kafka_path import take

pytestmark = pytest.mark.integration
OUTAGE_S = 60.0
DEVICES = [f"d{i}" for i in range(10)]


def report(t: int, i: int) -> str:
    return json.dumps({"v": 1, "t": t, "y": float(100 * i + t), "eps": 1.0, "seq": t})


async def run_fog_through_outage(tansu, tmp_path) -> tuple[FogService, dict]:
    kafka = KafkaConfig(bootstrap_servers=tansu.bootstrap, idempotent=False, topic="outage.windows",
                        request_timeout_s=2.0)
    cfg = FogConfig.load(None, name="outage", regions={"r1": {"devices": DEVICES}}, period_s=8.0, k_min=10,
                         device_mechanism="br",
                         lateness_periods=0, journal_path=tmp_path / "fog.sqlite", sink="kafka",
                         kafka=kafka.model_dump())
    clock = ManualClock(0.0)
    source = MemorySource()
    fog = FogService(cfg, clock=clock, source=source)
    source.wakeup = fog.arrived.set
    stop = asyncio.Event()
    task = asyncio.create_task(fog.run(stop))
    seen: dict = {"acked_during_outage": 0}

    async def until(pred, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not pred() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return pred()

    async def window(t: int) -> None:
        """Every device reports t: the window is complete and closes at once.
        Ingest is never held up by the failing sink: the reports are
        journaled and acknowledged within seconds."""
        clock.set(t * 8.0 + 1)
        before = len(source.acked)
        for i, d in enumerate(DEVICES):
            source.put(f"rase/v1/reports/r1/{d}", report(t, i))
        assert await until(lambda: len(source.acked) == before + len(DEVICES), 5), f"reports of t={t} taken"

    try:
        for t in range(1, 6):
            await window(t)
        assert await until(lambda: fog.windows_sent == 5, 30), "Kafka took the first windows"
        tansu.stop()
        started = time.monotonic()
        t = 6
        while time.monotonic() - started < OUTAGE_S:
            await window(t)
            seen["acked_during_outage"] += len(DEVICES)
            t += 1
            await asyncio.sleep(2.0)
        seen["attempts"] = fog.forwarder.outage.attempts
        seen["backoff_nominal_s"] = fog.forwarder.outage.backoff.nominal_s(fog.forwarder.outage.backoff.attempts - 1)
        seen["outbox_during"] = fog.ctx.outbox.size
        seen["last_t"] = t - 1
        tansu.start()
        assert await until(lambda: fog.ctx.outbox.size == 0, 60), "the outbox was forwarded once Kafka came back"
        seen["sent"] = fog.windows_sent
    finally:
        stop.set()
        await task
    return fog, seen


async def read_back(bootstrap: str) -> list[tuple[str, int]]:
    src = KafkaSource(KafkaConfig(bootstrap_servers=bootstrap, topic="outage.windows", group_id="outage-audit"))
    await src.start()
    out, idle = [], 0
    while idle < 3:
        got = await take(src, 10_000, 2.0)
        idle = 0 if got else idle + 1
        out += [(r.topic, json.loads(r.payload)["t"]) for r in got]
    await src.stop()
    return out


def test_kafka_down_for_60_s_costs_few_warnings_and_no_window(tansu_s3, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        fog, seen = asyncio.run(run_fog_through_outage(tansu_s3, tmp_path))
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) <= 10, [r.getMessage() for r in warnings]
    assert seen["acked_during_outage"] >= 20 * len(DEVICES)
    assert seen["outbox_during"] >= 20                       # windows waited in the journal, none dropped
    assert seen["backoff_nominal_s"] == fog.forwarder.outage.backoff.cap_s    # the retries reached the cap
    assert seen["attempts"] <= OUTAGE_S / fog.forwarder.outage.backoff.cap_s / (1 - fog.forwarder.outage.backoff.jitter) + 10
    windows = asyncio.run(read_back(tansu_s3.bootstrap))
    ts = [t for _, t in windows]
    assert ts == list(range(1, seen["last_t"] + 1)), "every window once, in order"
