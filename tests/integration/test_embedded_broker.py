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
