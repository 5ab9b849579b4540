"""Windows from the fog to the fusion center through a real Kafka-protocol
broker (Tansu): real agents -> Mosquitto -> fog (Kafka sink) -> Tansu ->
fusion center (Kafka consumer group) -> a subscriber."""

import asyncio
import json
import time
from collections import defaultdict

import numpy as np
import pytest

from edge_agent.config import AgentConfig
from edge_agent.service import AgentService
from fog_shuffler.config import FogConfig
from fog_shuffler.service import FogService
from rase_common.protocol.window import WindowMessage
from fusion_center.config import FusionConfig
from rase_common.protocol.aggregate import Aggregate
from fusion_center.service import FusionService
from rase_common.clock import ScaledClock
from rase_common.errors import TransportError
from rase_common.kafka import KafkaConfig, KafkaSink, KafkaSource
from simulators.refit import RefitColumnSource, bundled_dir, epoch0_of, load_house
from simulators.brokers import free_port
from tests.mqtt_helpers import Recorder, ServiceThread

pytestmark = pytest.mark.integration
HOUSES = (1, 2)
# Simulated time 40x real, and a lateness of 4 periods (0.8 s of wall time): a
# loaded 2-core machine delivers reports late by up to a few tenths of a second.
SPEEDUP = 40.0
LATENESS = 4


def _pipeline_through_kafka(mosquitto, tansu, tmp_path, name, during=None):
    """Run 18 REFIT agents -> fog (Kafka sink) -> fusion (Kafka source); call
    `during()` once aggregates flow; return reports by t and the aggregates."""
    houses = [load_house(bundled_dir(), h) for h in HOUSES]
    epoch0 = epoch0_of(houses, 8.0)
    clock = ScaledClock(epoch0 + 8 * 3600, SPEEDUP)
    broker = {"port": mosquitto.port}
    kafka = {"bootstrap_servers": tansu.bootstrap, "idempotent": False, "group_id": name}
    fusion_cfg = FusionConfig.load(None, name=name, regions=["r1"], merge_deadline_s=40.0,
                                   store_path=tmp_path / "fusion.sqlite", windows_w=[4], broker=broker,
                                   source="kafka", kafka=kafka, precision={"epoch0": epoch0, "period_s": 8.0,
                                                                             "mechanism": "br"})
    fog_cfg = FogConfig.load(None, name=name, regions={"r1": {"refit_houses": list(HOUSES)}}, period_s=8.0,
                             epoch0=epoch0, k_min=10, lateness_periods=LATENESS,
                             journal_path=tmp_path / "fog.sqlite", broker=broker, sink="kafka", kafka=kafka,
                             device_mechanism="br")
    rec = Recorder(mosquitto.port, ["rase/v1/aggregates/t/#", "rase/v1/reports/#", "rase/v1/windows/#"],
                   persistent=False)
    fusion = ServiceThread(FusionService(fusion_cfg, clock=clock))
    fog = ServiceThread(FogService(fog_cfg, clock=clock))
    agents = []
    try:
        for h in houses:
            for dev in h.device_ids():
                cfg = AgentConfig.load(None, device=dev, region="r1", eps=1.0, period_s=8.0, epoch0=epoch0,
                                       ledger_path=tmp_path / f"{dev}.json", broker=broker, mechanism="br")
                agents.append(ServiceThread(AgentService(cfg, source=RefitColumnSource(h, dev), clock=clock)))
        assert rec.wait_for(lambda: len(rec.on("rase/v1/aggregates/t/")) >= 10, timeout_s=90)
        if during is not None:
            during()
            seen = len(rec.on("rase/v1/aggregates/t/"))
            assert rec.wait_for(lambda: len(rec.on("rase/v1/aggregates/t/")) >= seen + 20, timeout_s=120)
    finally:
        for a in agents:
            a.stop()
        fog.stop()
        fusion.stop()
    rec.close()
    assert not rec.on("rase/v1/windows/")          # the Kafka sink replaced the MQTT one
    by_t = defaultdict(list)
    for m in rec.on("rase/v1/reports/"):
        r = json.loads(m.payload)
        by_t[r["t"]].append(r["y"])
    aggs = [Aggregate.model_validate_json(m.payload) for m in rec.on("rase/v1/aggregates/t/")]
    return by_t, aggs


async def take(src: KafkaSource, max_items: int, timeout_s: float) -> list:
    """What the source has fetched within timeout_s (its fetcher runs in the background)."""
    deadline = time.monotonic() + timeout_s
    got = src.take(max_items)
    while not got and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        got = src.take(max_items)
    return got


def kafka_windows(bootstrap: str) -> dict[tuple[str, int], WindowMessage]:
    """Every window the fog put on the topic, read back by an audit consumer group."""
    async def read():
        src = KafkaSource(KafkaConfig(bootstrap_servers=bootstrap, group_id=f"audit-{time.monotonic_ns()}"))
        await src.start()
        out, idle = {}, 0
        while idle < 3:
            got = await take(src, 10_000, 2.0)
            idle = 0 if got else idle + 1
            for r in got:
                w = WindowMessage.model_validate_json(r.payload)
                out[(w.region, w.t)] = w          # a producer retry may repeat a window: the same bytes
        await src.stop()
        return out
    return asyncio.run(read())


def _assert_every_window_once(windows, aggs):
    """Every window on the topic (up to the last aggregate) is aggregated,
    over exactly its values; no aggregate twice."""
    assert len({a.t for a in aggs}) == len(aggs)
    got = {a.t: a for a in aggs}
    last = max(got)
    by_t = defaultdict(list)
    for (region, t), w in windows.items():
        by_t[t].append(w)
    assert len([t for t in by_t if t <= last]) >= 10
    for t, ws in by_t.items():
        if t > last:
            continue
        assert t in got, f"window t={t} lost"
        values = [v for w in ws for v in w.values]
        assert got[t].n == len(values)
        assert got[t].estimates["se"].value == pytest.approx(np.mean(values))


def test_windows_travel_through_kafka_and_aggregate_exactly_the_reports(mosquitto, tansu, tmp_path):
    by_t, aggs = _pipeline_through_kafka(mosquitto, tansu, tmp_path, "kafka-e2e")
    full = [a for a in aggs if a.n == 18]
    assert len(full) >= 6
    for a in full:     # a full window is every report the agents sent for t
        assert a.estimates["se"].value == pytest.approx(np.mean(by_t[a.t]))
    _assert_every_window_once(kafka_windows(tansu.bootstrap), aggs)


def test_restarting_kafka_mid_run_loses_no_window_and_aggregates_none_twice(mosquitto, tansu_s3, tmp_path):
    _, aggs = _pipeline_through_kafka(mosquitto, tansu_s3, tmp_path, "kafka-restart", during=tansu_s3.restart)
    _assert_every_window_once(kafka_windows(tansu_s3.bootstrap), aggs)


def test_kafka_source_commits_only_what_was_acked(tansu):
    """Records not acked (not stored) before a crash are delivered again to
    the next member of the group; acked ones are not."""
    cfg = KafkaConfig(bootstrap_servers=tansu.bootstrap, idempotent=False, group_id="acks", topic="acks.test")

    async def scenario():
        sink = KafkaSink(cfg)
        for t in range(6):
            await sink.send("r1", json.dumps({"t": t}))
        await sink.stop()
        first = KafkaSource(cfg)
        await first.start()
        got = []
        while len(got) < 6:
            got += await take(first, 100, 2.0)
        first.ack(got[:4])
        await first.commit()
        first._fetcher.cancel()
        first.consumer and await first.consumer.stop()  # a crash: no final commit of anything else
        second = KafkaSource(cfg)
        await second.start()
        again = []
        for _ in range(10):
            again += await take(second, 100, 1.0)
            if len(again) >= 2:
                break
        await second.stop()
        return [json.loads(r.payload)["t"] for r in again]

    assert asyncio.run(scenario()) == [4, 5]


def test_kafka_sink_reports_an_unreachable_broker_as_retriable():
    cfg = KafkaConfig(bootstrap_servers=f"127.0.0.1:{free_port()}", request_timeout_s=1.0)

    async def scenario():
        sink = KafkaSink(cfg)
        try:
            await sink.send("r1", "{}")
        finally:
            await sink.stop()

    with pytest.raises(TransportError) as err:
        asyncio.run(scenario())
    assert err.value.retriable and "unreachable" in str(err.value)


def test_two_fogs_for_two_regions_merge_per_t_at_one_fusion_center(mosquitto, tansu, tmp_path):
    houses = [load_house(bundled_dir(), h) for h in HOUSES]
    epoch0 = epoch0_of(houses, 8.0)
    clock = ScaledClock(epoch0 + 8 * 3600, SPEEDUP)
    broker = {"port": mosquitto.port}
    kafka = {"bootstrap_servers": tansu.bootstrap, "idempotent": False, "group_id": "two-fogs"}
    fusion_cfg = FusionConfig.load(None, name="two-fogs", regions=["r1", "r2"], merge_deadline_s=80.0,
                                   store_path=tmp_path / "fusion.sqlite", windows_w=[4], broker=broker,
                                   source="kafka", kafka=kafka, precision={"epoch0": epoch0, "period_s": 8.0,
                                                                             "mechanism": "br"})
    fogs = [ServiceThread(FogService(FogConfig.load(
        None, name=f"fog-{region}", regions={region: {"refit_houses": [house]}}, period_s=8.0, epoch0=epoch0,
        k_min=5, lateness_periods=LATENESS, journal_path=tmp_path / f"fog-{region}.sqlite", broker=broker,
        sink="kafka", kafka=kafka, device_mechanism="br"), clock=clock)) for region, house in (("r1", 1), ("r2", 2))]
    rec = Recorder(mosquitto.port, ["rase/v1/aggregates/t/#", "rase/v1/reports/#"], persistent=False)
    fusion = ServiceThread(FusionService(fusion_cfg, clock=clock))
    agents = []
    try:
        for region, h in zip(("r1", "r2"), houses):
            for dev in h.device_ids():
                cfg = AgentConfig.load(None, device=dev, region=region, eps=1.0, period_s=8.0, epoch0=epoch0,
                                       ledger_path=tmp_path / f"{dev}.json", broker=broker, mechanism="br")
                agents.append(ServiceThread(AgentService(cfg, source=RefitColumnSource(h, dev), clock=clock)))
        assert rec.wait_for(lambda: sum(Aggregate.model_validate_json(m.payload).complete
                                        for m in rec.on("rase/v1/aggregates/t/")) >= 8, timeout_s=90)
    finally:
        for a in agents:
            a.stop()
        for f in fogs:
            f.stop()
        fusion.stop()
    rec.close()
    by_t = defaultdict(list)
    for m in rec.on("rase/v1/reports/"):
        r = json.loads(m.payload)
        by_t[r["t"]].append(r["y"])
    aggs = [Aggregate.model_validate_json(m.payload) for m in rec.on("rase/v1/aggregates/t/")]
    assert len({a.t for a in aggs}) == len(aggs)
    complete = [a for a in aggs if a.complete]
    assert len(complete) >= 8
    windows = kafka_windows(tansu.bootstrap)
    for a in complete:
        parts = [windows[(r, a.t)] for r in ("r1", "r2")]
        assert a.regions == ["r1", "r2"] and a.n == sum(w.n for w in parts)
        assert a.estimates["se"].value == pytest.approx(np.mean([v for w in parts for v in w.values]))


def test_the_documented_outside_client_reads_the_windows_from_tansu(tansu, tmp_path):
    """docs/deployment.md's kafka-python block, run as written (only the broker's
    address is this test's), prints every window the Kafka sink produced with its
    region; kcat, which the docs say cannot talk to Tansu, is not what they show."""
    import re
    import subprocess
    import sys

    from tests.integration.shipped import ROOT

    doc = (ROOT / "docs/deployment.md").read_text()
    block = re.search(r"<!-- tested: reading the windows with kafka-python -->\n```python\n(.*?)```", doc,
                      re.S).group(1)
    assert 'bootstrap_servers="127.0.0.1:9092"' in block
    cfg = KafkaConfig(bootstrap_servers=tansu.bootstrap, idempotent=False)
    windows = [json.dumps({"v": 1, "region": r, "t": t, "values": [1.0, 2.0]}) for r, t in (("r1", 5), ("r2", 5))]

    async def produce() -> None:
        sink = KafkaSink(cfg)
        try:
            for w in windows:
                await sink.send(json.loads(w)["region"], w)
        finally:
            await sink.stop()

    asyncio.run(produce())
    script = tmp_path / "windows.py"
    script.write_text(block.replace("127.0.0.1:9092", tansu.bootstrap))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == [f"{json.loads(w)['region']} {w}" for w in windows]
