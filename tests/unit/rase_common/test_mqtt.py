"""rase_common.mqtt.Client: buffered reads, batched reads of PUBLISH
packets and batched acks, against a socketpair and a real Mosquitto."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import paho.mqtt.client as mqtt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rase_common.mqtt import (LARGE_PACKET, BrokerConfig, MqttLink, ReadBufferedSocket, connect_in_background,
                              paho_client, split_publishes, v5_session_connect)
from simulators.loadgen import varint


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


def _publish_all(broker: BrokerConfig, client_id: str, topic: str, mqtt5: bool, n: int = 300):  # noqa: ANN202
    """n QoS 1 publishes, each completed: (info, mid, reason code value) per on_publish call."""
    done: list[tuple[int, int]] = []
    pub = paho_client(broker, client_id, mqtt5=mqtt5)
    pub.on_publish = lambda c, u, mid, rc, props: done.append((mid, rc.value))
    connect_in_background(pub, broker)
    deadline = time.time() + 10
    while not pub.is_connected() and time.time() < deadline:
        time.sleep(0.02)
    infos = [pub.publish(topic, str(i), qos=1) for i in range(n)]
    for info in infos:
        info.wait_for_publish(10)
    pub.disconnect()
    pub.loop_stop()
    assert all(info.is_published() for info in infos)
    return infos, done


@pytest.mark.integration
@pytest.mark.parametrize("mqtt5", [False, True], ids=["mqtt311", "mqtt5"])
def test_plain_pubacks_complete_every_publish_without_pahos_decoder(mosquitto, mqtt5, monkeypatch):
    """The broker's two-byte PUBACKs (MQTT 3.1.1, and MQTT 5 success) complete
    each QoS 1 publish once, with paho's success reason code, without paho's
    own PUBACK handler; a PUBACK with a reason (MQTT 5 "no matching
    subscribers") still goes through paho and keeps its reason."""
    import rase_common.mqtt as rmqtt

    assert rmqtt.FAST_PUBACKS
    slow = []
    paho_handler = mqtt.Client._handle_pubackcomp
    monkeypatch.setattr(mqtt.Client, "_handle_pubackcomp",
                        lambda self, cmd: (slow.append(cmd), paho_handler(self, cmd))[1])
    broker = BrokerConfig(port=mosquitto.port)
    topic = f"test/fastpuback/{mqtt5}"
    sub = paho_client(broker, f"fastpuback-sub-{mqtt5}")
    sub.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, qos=1)
    sub.on_subscribe = lambda *a: subscribed.set()
    subscribed = threading.Event()
    connect_in_background(sub, broker)
    assert subscribed.wait(10)
    infos, done = _publish_all(broker, f"fastpuback-{mqtt5}", topic, mqtt5)
    sub.disconnect()
    sub.loop_stop()
    assert sorted(done) == sorted((info.mid, 0) for info in infos)
    assert slow == []
    if mqtt5:
        infos, done = _publish_all(broker, "fastpuback-nobody", "test/fastpuback/nobody", mqtt5, n=20)
        assert sorted(done) == sorted((info.mid, 16) for info in infos)    # 0x10: no matching subscribers
        assert slow == ["PUBACK"] * 20


# -- batched reads: split_publishes ------------------------------------------------


def _publish(topic: bytes, payload: bytes, qos: int, mid: int, retain: bool = False, dup: bool = False) -> bytes:
    body = len(topic).to_bytes(2, "big") + topic + (mid.to_bytes(2, "big") if qos else b"") + payload
    return bytes([0x30 | (8 if dup else 0) | qos << 1 | retain]) + varint(len(body)) + body


# Packets paho must read itself, and how many of their bytes split_publishes needs to see to know it.
STOPPERS = {
    "puback": (b"\x40\x02\x00\x05", lambda p: 1),
    "pingresp": (b"\xd0\x00", lambda p: 1),
    "qos2": (_publish(b"a/b", b"x", 2, 9), lambda p: 1),
    "not utf-8": (_publish(b"a/\xff", b"x", 1, 9), len),
    "empty topic": (_publish(b"", b"x", 1, 9), len),
    "large": (_publish(b"a/b", b"x" * (LARGE_PACKET + 10), 1, 9), lambda p: 4),
}

message = st.tuples(st.text(min_size=1, max_size=20).filter(lambda t: "\x00" not in t),
                    st.one_of(st.binary(max_size=60), st.binary(min_size=120, max_size=200),
                              st.just(b"z" * 20_000)),
                    st.sampled_from([0, 1]), st.integers(1, 65535), st.booleans(), st.booleans())


@settings(deadline=None, database=None)
@given(st.lists(message, min_size=1, max_size=12), st.sampled_from([None, *STOPPERS]), st.data())
def test_split_publishes_takes_exactly_the_complete_publishes_before_anything_paho_must_read(msgs, stopper, data):
    packets = [_publish(t.encode(), p, q, m, r, d) for t, p, q, m, r, d in msgs]
    buf = b"".join(packets) + (STOPPERS[stopper][0] if stopper else b"")
    cut = data.draw(st.integers(0, len(buf)), label="bytes received so far")
    got, pos, paho_next = split_publishes(buf[:cut], 0, 1.5)
    end, expected = 0, []
    for packet, (t, p, q, m, r, d) in zip(packets, msgs):
        if end + len(packet) > cut:
            break
        end += len(packet)
        expected.append((t, p, q, m if q else 0, r, d, 1.5))
    assert [(g.topic, g.payload, g.qos, g.mid, g.retain, g.dup, g.timestamp) for g in got] == expected
    assert pos == end
    complete = len(expected) == len(packets)
    stop_seen = stopper is not None and complete and cut - end >= STOPPERS[stopper][1](STOPPERS[stopper][0])
    assert paho_next == stop_seen


def test_a_partial_publish_stays_buffered_until_the_rest_comes():
    sock, peer = _pair()
    packets = [_publish(f"r/{i}".encode(), b"p" * i, 1, i + 1) for i in range(1, 40)]
    stream = b"".join(packets)
    got = []
    for start in range(0, len(stream), 37):          # the stream arrives in odd-sized pieces
        peer.sendall(stream[start:start + 37])
        time.sleep(0.002)
        assert sock.fill()
        msgs, paho_next = sock.take_publishes(0.0)
        assert not paho_next
        got += msgs
    assert [(m.topic, m.payload, m.mid) for m in got] == [(f"r/{i}", b"p" * i, i + 1) for i in range(1, 40)]
    assert sock.pending() == 0 and not sock.fill()   # nothing left, nothing more to read
    peer.close()
    time.sleep(0.05)
    assert not sock.fill() and sock.eof
    assert sock.take_publishes(0.0) == ([], True)     # the end of the stream is paho's to see
    assert sock.recv(1) == b""


@pytest.mark.integration
@pytest.mark.parametrize("manual_ack", [True, False])
def test_a_link_receives_a_mixed_flood_in_order_and_every_message_is_acknowledged(mosquitto, manual_ack):
    """QoS 0, 1 and 2 messages, small and larger than a read, through
    MqttLink (batched reads) from a real Mosquitto: each arrives once, QoS 1
    ones in order, and once acknowledged (by the link, or paho's auto-ack)
    none is redelivered to the same session."""
    broker = BrokerConfig(port=mosquitto.port)
    topic = f"test/batchread/{manual_ack}"
    n = 1500

    def qos_of(i: int) -> int:
        return 2 if i % 300 == 7 else 0 if i % 200 == 3 else 1

    def payload_of(i: int) -> bytes:
        return (f"{i:05d}:".encode() + b"x" * (150_000 if i % 500 == 11 else i % 90))

    async def receive(cid: str, expect: int, seconds: float) -> list:
        link = MqttLink(broker, cid, subscriptions=[(f"{topic}/#", 2)], clean_session=False, manual_ack=manual_ack)
        link.start()
        got: list = []
        try:
            deadline = time.monotonic() + 10
            while not link.subscribed.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if expect:
                pub = paho_client(broker, f"{cid}-pub")
                connect_in_background(pub, broker)
                while not pub.is_connected() and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                infos = [pub.publish(f"{topic}/{i % 7}", payload_of(i), qos=qos_of(i)) for i in range(n)]
            deadline = time.monotonic() + seconds
            while len(got) < expect and time.monotonic() < deadline or not expect and time.monotonic() < deadline:
                batch = link.take(500)
                got += batch
                if manual_ack:
                    link.ack(batch)
                await asyncio.sleep(0.01)
            if expect:
                for info in infos:
                    info.wait_for_publish(10)
                pub.disconnect()
                pub.loop_stop()
            await asyncio.sleep(0.5)                  # the last acks reach the broker
        finally:
            link.stop()
        return got

    got = asyncio.run(receive(f"batchread-{manual_ack}", n, 60))
    seqs = [int(m.payload[:5]) for m in got]
    assert sorted(seqs) == list(range(n))
    assert all(m.payload == payload_of(int(m.payload[:5])) and m.qos == qos_of(int(m.payload[:5])) for m in got)
    assert all(m.topic == f"{topic}/{int(m.payload[:5]) % 7}" for m in got)
    qos1 = [s for s in seqs if qos_of(s) == 1]
    assert qos1 == sorted(qos1)
    assert asyncio.run(receive(f"batchread-{manual_ack}", 0, 1.5)) == []   # nothing left to redeliver


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
            from tests.mqtt_helpers import started_link

            link = await started_link(broker.port, "v5-refused", mqtt5=True)
            await link.publish("allowed/x", "1")
            with pytest.raises(TransportError, match="refused"):
                await link.publish("denied/x", "1")
            link.stop()

        asyncio.run(run())
    finally:
        broker.stop()


@pytest.mark.parametrize("protocol", [mqtt.MQTTv311, mqtt.MQTTv5])
def test_qos0_packets_are_the_bytes_paho_writes(protocol):
    """publish_qos0's one write holds, for each note, the PUBLISH paho's own publish(qos=0) builds
    (a long payload too: a two-byte remaining length)."""
    from rase_common.mqtt import qos0_packets

    notes = [("rase/v1/feedback/r1/d1", '{"v":1,"kept":[5],"late":0}'), ("rase/v1/feedback/r1/d2", "x" * 300),
             ("rase/v1/feedback/r1/dé", b"\x00\x01")]
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=protocol)
    written = bytearray()
    c._sock = object()                                   # paho builds the packet only for a connected socket
    c._packet_queue = lambda command, packet, mid, qos, info=None: written.extend(packet)
    for topic, payload in notes:
        c._send_publish(0, topic.encode(), payload.encode() if isinstance(payload, str) else payload, qos=0)
    n, ours = qos0_packets(notes, mqtt5=protocol == mqtt.MQTTv5)
    assert n == 3 and bytes(ours) == bytes(written)
