"""The broker `rase demo` / `rase replay` start themselves: a private
Mosquitto when installed, amqtt in-process otherwise; either carries a QoS 1
message from a publisher to a subscriber, and Mosquitto is gone afterwards."""

import asyncio
import threading

import paho.mqtt.client as mqtt
import pytest

from simulators.embedded_broker import EmbeddedBroker, mosquitto_binary

pytestmark = pytest.mark.integration


def roundtrip(port: int) -> bytes:
    got, ready = [], threading.Event()
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="emb-sub")
    sub.on_message = lambda c, u, m: (got.append(m.payload), ready.set())
    sub.connect("127.0.0.1", port)
    sub.subscribe("rase/test", qos=1)
    sub.loop_start()
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="emb-pub")
    pub.connect("127.0.0.1", port)
    pub.loop_start()
    try:
        for _ in range(50):                      # until the subscription is in place
            pub.publish("rase/test", b"hello", qos=1).wait_for_publish(5)
            if ready.wait(0.1):
                break
    finally:
        for c in (pub, sub):
            c.disconnect()
            c.loop_stop()
    return got[0]


@pytest.mark.parametrize("prefer_mosquitto", [True, False])
def test_embedded_broker_carries_messages(prefer_mosquitto):
    async def main():
        async with EmbeddedBroker(prefer_mosquitto=prefer_mosquitto) as b:
            kind = b.kind
            payload = await asyncio.to_thread(roundtrip, b.port)
            proc = b._proc
        return kind, payload, proc

    kind, payload, proc = asyncio.run(main())
    assert payload == b"hello"
    if prefer_mosquitto:
        assert mosquitto_binary() is not None and kind == "mosquitto"   # `make test` installs Mosquitto
        assert proc.poll() is not None                                  # stopped with the context
    else:
        assert kind == "amqtt" and proc is None


def test_a_replay_that_fails_to_start_leaves_no_broker_behind(tmp_path):
    """A bad setting found after the broker started (an unknown shuffle mode):
    the error reaches the caller and the private Mosquitto is stopped."""
    import os
    from pathlib import Path

    from rase_common.errors import ConfigError
    from simulators.pipeline import PipelineSpec, run_pipeline
    from simulators.refit import bundled_dir

    def my_brokers():
        me = str(os.getpid())
        out = []
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                try:
                    stat = (p / "stat").read_text()
                except OSError:
                    continue
                if "(mosquitto)" in stat and stat.rsplit(")", 1)[1].split()[1] == me:
                    out.append(p.name)
        return out

    before = set(my_brokers())          # the session's shared Mosquitto is a child of this process too
    spec = PipelineSpec(data_dir=bundled_dir(), houses=[1], hours=0.01, shuffle_mode="bogus", progress=False,
                        work_dir=tmp_path)
    with pytest.raises(ConfigError):
        asyncio.run(run_pipeline(spec))
    assert set(my_brokers()) <= before
