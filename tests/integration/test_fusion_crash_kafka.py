"""The fusion center reading windows from a Kafka consumer group is SIGKILLed
while consuming and restarted: every window is aggregated once, none lost
(offsets are committed only after the window is stored)."""

import asyncio
import signal

import pytest

from rase_common.protocol.window import WindowMessage
from tests.mqtt_helpers import recent_epoch0
from rase_common.kafka import KafkaConfig, KafkaSink
from tests.integration.test_fusion_crash import assert_each_window_aggregated_once, start, stored, wait_log, wait_stored

pytestmark = pytest.mark.integration
N = 300


def window(t: int) -> str:
    values = [float(t + i) for i in range(12)]
    return WindowMessage.uniform("r1", t, values).model_dump_json()


def test_sigkill_while_consuming_from_kafka_loses_and_duplicates_nothing(own_mosquitto, tansu, tmp_path):
    db = tmp_path / "fusion.sqlite"
    cfg = tmp_path / "fusion.toml"
    cfg.write_text(f"""
name = "crash-kafka"
regions = ["r1"]
merge_deadline_s = 60
bootstrap_b = 200
store_path = "{db}"
tick_s = 0.01
source = "kafka"
[precision]
epoch0 = {recent_epoch0()}
[broker]
port = {own_mosquitto.port}
[kafka]
bootstrap_servers = "{tansu.bootstrap}"
idempotent = false
group_id = "crash"
""")
    kafka = KafkaConfig(bootstrap_servers=tansu.bootstrap, idempotent=False)
    log_path = tmp_path / "fusion.log"
    log = open(log_path, "ab")
    proc = start(cfg, log)

    async def produce(ts, kill_at=None):
        sink = KafkaSink(kafka)
        killed = False
        for t in ts:
            await sink.send("r1", window(t))
            if kill_at is not None and not killed and len(stored(db)) >= kill_at:
                proc.send_signal(signal.SIGKILL)   # mid-stream, records fetched but not all stored
                proc.wait(10)
                killed = True
            await asyncio.sleep(0.002)
        await sink.stop()
        return killed

    try:
        wait_log(log_path, "fusion connected", 1)
        asyncio.run(produce(range(1, 31)))
        wait_stored(db, 20, 60)
        killed = asyncio.run(produce(range(31, N + 1), kill_at=60))
        assert killed, "the fusion center never got going"
        proc = start(cfg, log)
        wait_stored(db, N, 90)
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    assert_each_window_aggregated_once(db, N, "\n" + log_path.read_text()[-3000:])
