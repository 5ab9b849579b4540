"""rase_common.mqtt.Client: buffered reads and batched acks, against a
socketpair and a real Mosquitto."""

from __future__ import annotations

import socket
import threading
import time

import paho.mqtt.client as mqtt
import pytest

from rase_common.mqtt import (BrokerConfig, MqttLink, ReadBufferedSocket, connect_in_background, paho_client,
                              v5_session_connect)


def _pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    return ReadBufferedSocket(a), b


def test_small_reads_come_from_one_kernel_read_and_pending_counts_them():
    sock, peer = _pair()
    peer.sendall(b"\x30\x03abc\x30\x02de")
    time.sleep(0.05)
    assert sock.recv(1) == b"\x30"
    assert sock.pending() == 8                     # the rest is buffered
    assert sock.recv(1) == b"\x03"
    assert sock.recv(3) == b"abc"
    assert sock.recv(1) == b"\x30" and sock.recv(1) == b"\x02"
    assert sock.recv(5) == b"de"                   # a short read, as from the kernel
    assert sock.pending() == 0
    with pytest.raises(BlockingIOError):           # nothing buffered, nothing sent: paho's would-block
        sock.recv(1)
    peer.close()
    time.sleep(0.05)
    assert sock.recv(1) == b""                     # end of stream passes through


def test_a_large_read_bypasses_the_buffer_and_other_calls_reach_the_socket():
    sock, peer = _pair()
    peer.sendall(b"x" * 10)
    time.sleep(0.05)
    assert sock.recv(100_000) == b"x" * 10
    assert sock.pending() == 0
    assert sock.fileno() == sock._sock.fileno()
    assert sock.send(b"y") == 1 and peer.recv(1) == b"y"
    peer.close()


@pytest.mark.integration
@pytest.mark.parametrize("mqtt5", [False, True], ids=["mqtt311", "mqtt5"])
@pytest.mark.parametrize("batched", [True, False])
def test_ack_batch_acknowledges_every_message_to_a_real_broker(mosquitto, batched, mqtt5):
    """A persistent session receives 500 QoS 1 messages and acks them with
    ack_batch (or not at all): after reconnecting, the broker redelivers
    exactly what was not acknowledged. MQTT 5 too (the fusion center's link):
    its session outlives the connection only with a session expiry interval,
    and the batched 4-byte PUBACKs are valid MQTT 5 PUBACKs (success)."""
    broker = BrokerConfig(port=mosquitto.port)
    topic = f"test/ackbatch/{batched}/{mqtt5}"
    got: list[mqtt.MQTTMessage] = []
    lock = threading.Lock()

    def subscriber() -> mqtt.Client:
        c = paho_client(broker, f"ackbatch-{batched}-{mqtt5}", clean_session=False, manual_ack=True, mqtt5=mqtt5)
        c.on_connect = lambda cl, u, f, rc, p: cl.subscribe(topic, qos=1)
        c.on_message = lambda cl, u, m: (lock.acquire(), got.append(m), lock.release())
        connect_in_background(c, broker, **(v5_session_connect(False) if mqtt5 else {}))
        return c

    sub = subscriber()
    deadline = time.time() + 10
    while not sub.is_connected() and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)                                    # subscribed
    pub = paho_client(broker, f"ackbatch-pub-{batched}")
    connect_in_background(pub, broker)
    while not pub.is_connected() and time.time() < deadline:
        time.sleep(0.02)
    infos = [pub.publish(topic, str(i), qos=1) for i in range(500)]
    for info in infos:
        info.wait_for_publish(10)
    while len(got) < 500 and time.time() < deadline:
        time.sleep(0.02)
    assert len(got) == 500
    if batched:
        with lock:
            sub.ack_batch(list(got))
    time.sleep(0.5)
    sub.disconnect()
    sub.loop_stop()
    got.clear()
    sub = subscriber()                                 # same session: unacknowledged messages come again
    time.sleep(1.5)
    redelivered = len(got)
    sub.ack_batch(list(got))
    time.sleep(0.3)
    sub.disconnect()
    sub.loop_stop()
    pub.disconnect()
    pub.loop_stop()
    assert redelivered == (0 if batched else 500)


@pytest.mark.integration
def test_an_mqtt5_link_hears_the_broker_refuse_a_publish(tmp_path):
    """MQTT 5 PUBACKs carry a reason: a publish the ACL denies fails with
    TransportError instead of counting as delivered."""
    import asyncio

    from rase_common.errors import TransportError
    from simulators.brokers import Mosquitto

    acl = tmp_path / "acl"
    acl.write_text("topic readwrite allowed/#\n")
    broker = Mosquitto(tmp_path / "mq", extra_conf=f"acl_file {acl}\n").start()
    try:
        async def run() -> None:
            link = MqttLink(BrokerConfig(port=broker.port), "v5-refused", mqtt5=True)
            link.start()
            for _ in range(200):
                if link.connected.is_set():
                    break
                await asyncio.sleep(0.02)
            await link.publish("allowed/x", "1")
            with pytest.raises(TransportError, match="refused"):
                await link.publish("denied/x", "1")
            link.stop()

        asyncio.run(run())
    finally:
        broker.stop()
