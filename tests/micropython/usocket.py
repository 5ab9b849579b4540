# A scripted MQTT 3.1.1 broker behind a fake `usocket`, for the board loop
# under the MicroPython WebAssembly port, which has no sockets. The real
# umqtt.simple talks to it byte for byte; the script injects the faults a
# board meets: refused CONNACKs and a socket that breaks mid-publish.
#
# Loaded as /lib/usocket.py by the tests only (the name says it is a fake).

import json
import struct

BROKER = None


class ScriptedBroker:
    def __init__(self, refuse_connects=0, refuse_code=5, break_on_publish=(), receipts=False, lose_acked=()):
        self.refuse_connects = refuse_connects   # CONNACK return code != 0 this many times
        self.refuse_code = refuse_code
        self.break_on_publish = set(break_on_publish)  # n-th PUBLISH (1-based) breaks the socket
        self.connects = 0
        self.refused = 0
        self.publishes = 0
        self.broken = 0
        self.received = []     # (topic, payload) acknowledged with PUBACK
        # Playing the fog too: a receipt (fog_shuffler.receipts) for each report, except the n-th
        # reports (1-based) in lose_acked, which the broker acknowledges and then loses (a crash).
        self.receipts = receipts
        self.lose_acked = set(lose_acked)
        self.reports = 0
        self.kept = []         # the t of each report the fog journaled, repeats included
        self.passwords = []


class socket:
    def __init__(self, *args):
        self.inbuf = b""
        self.outbuf = b""
        self.blocking = True
        self.dead = False

    def connect(self, addr):
        if BROKER is None:
            raise OSError(113)  # EHOSTUNREACH: no broker configured

    def settimeout(self, s):
        pass

    def setblocking(self, flag):
        self.blocking = flag

    def close(self):
        self.dead = True

    def write(self, data, n=None):
        if self.dead:
            raise OSError(32)  # EPIPE
        if isinstance(data, str):  # MicroPython streams take str as UTF-8
            data = data.encode()
        data = bytes(data if n is None else data[:n])
        self.inbuf += data
        self._serve()
        if self.dead:
            raise OSError(104)  # ECONNRESET, mid-packet
        return len(data)

    def read(self, n):
        if self.dead:
            raise OSError(104)
        if not self.outbuf:
            if not self.blocking:
                return None
            raise OSError(110)  # ETIMEDOUT: a real socket timeout
        out, self.outbuf = self.outbuf[:n], self.outbuf[n:]
        return out

    def _publish_qos0(self, topic, payload):
        t = topic.encode()
        body = struct.pack("!H", len(t)) + t + payload
        self.outbuf += bytes([0x30, len(body)]) + body     # bodies here are < 128 bytes

    def _packet(self):
        """One whole packet from inbuf, or None."""
        buf = self.inbuf
        if len(buf) < 2:
            return None
        n, shift, i = 0, 0, 1
        while True:
            if i >= len(buf):
                return None
            b = buf[i]
            n |= (b & 0x7F) << shift
            i += 1
            if not b & 0x80:
                break
            shift += 7
        if len(buf) < i + n:
            return None
        self.inbuf = buf[i + n:]
        return buf[0], buf[i:i + n]

    def _serve(self):
        while not self.dead:
            pkt = self._packet()
            if pkt is None:
                return
            self._handle(pkt[0], pkt[1])

    def _handle(self, head, body):
        kind = head & 0xF0
        br = BROKER
        if kind == 0x10:  # CONNECT
            br.connects += 1
            rc = 0
            if br.refused < br.refuse_connects:
                br.refused += 1
                rc = br.refuse_code
            self.outbuf += bytes([0x20, 0x02, 0x00, rc])
        elif kind == 0x30:  # PUBLISH
            br.publishes += 1
            if br.publishes in br.break_on_publish:
                br.broken += 1
                self.dead = True
                return
            tlen = struct.unpack("!H", body[:2])[0]
            topic = body[2:2 + tlen].decode()
            rest = body[2 + tlen:]
            if head & 0x06:
                pid, payload = rest[:2], rest[2:]
                self.outbuf += b"\x40\x02" + pid
            else:
                payload = rest
            br.received.append((topic, payload.decode()))
            if br.receipts and topic.startswith("rase/v1/reports/"):
                br.reports += 1
                if br.reports not in br.lose_acked:
                    t = json.loads(payload)["t"]
                    br.kept.append(t)
                    self._publish_qos0("rase/v1/feedback/" + topic[len("rase/v1/reports/"):],
                                       json.dumps({"v": 1, "kept": [t]}).encode())
        elif kind == 0x80:  # SUBSCRIBE
            self.outbuf += b"\x90\x03" + body[:2] + b"\x01"
        elif kind == 0xC0:  # PINGREQ
            self.outbuf += b"\xd0\x00"
        elif kind == 0xE0:  # DISCONNECT
            self.dead = True


def getaddrinfo(host, port, *args):
    return [(2, 1, 0, "", (host, port))]
