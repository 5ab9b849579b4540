"""Devices under load, with the broker's acknowledgements counted: every
report of a fixed schedule is published at QoS 1 until the broker has
acknowledged it, through broker restarts and outages, and the reports the
broker acknowledged are recorded per timestamp.

The schedule: `devices` devices per region, each reporting once per period
at a fixed phase (device i of D at i/D of the period, within the first
`spread` of it), for timestamps t_first..t_last of the wall clock
(t = floor((unix - epoch0) / period_s)). A report keeps its t however late
it goes out, as a device's outbox keeps it; a report not acknowledged when
the connection drops is sent again after reconnecting (the fog drops the
repeat by (device, t)). The generator writes pre-encoded MQTT 3.1.1 PUBLISH
packets over a plain socket (simulators.loadgen), in a process of its own,
so neither Python's GIL nor the test's threads slow it down
(`python -m simulators.faults.load SPEC_JSON`: progress lines on stdout,
the result as the last line).

With `receipts` (issue 29), the generator does what a device's outbox does
(rase_device.outbox): it subscribes to the devices' feedback topics, keeps
each report the broker acknowledged until the fog's receipt names it, and
sends it again after a reconnect or `confirm_s` without one. `acked` then
counts the reports the fog receipted (journaled), `pubacked` those the
broker acknowledged.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rase_device import wire
from simulators.faults.children import die_with_parent
from simulators.loadgen import connect, publish_packet

INFLIGHT = 2000        # unacknowledged PUBLISHes at most
CHUNK = 100            # PUBLISHes per socket write


@dataclass(frozen=True)
class LoadSpec:
    port: int
    regions: tuple[str, ...]
    devices: int                  # per region
    period_s: float
    t_first: int
    t_last: int
    epoch0: float = 0.0
    spread: float = 0.8           # the reports of a period go out within its first `spread`
    client_id: str = "chaos-devices"
    host: str = "127.0.0.1"
    receipts: bool = False        # keep each report until the fog's receipt (rase_device.outbox)
    confirm_s: float = 5.0        # ... sending it again this long after its PUBACK without one

    @property
    def per_t(self) -> int:
        return self.devices * len(self.regions)

    @property
    def rate_per_s(self) -> float:
        return self.per_t / self.period_s

    def due_at(self, t: int, k: int) -> float:
        """When report k (of per_t) of timestamp t falls due (unix s)."""
        return self.epoch0 + self.period_s * (t + self.spread * k / self.per_t)

    def report(self, t: int, k: int) -> tuple[str, str]:
        region = self.regions[k % len(self.regions)]
        i = k // len(self.regions)
        y = float((i * 37 + t * 11) % 4000)
        return wire.report_topic(region, device_name(region, i)), wire.encode_report(t, y, 1.0, t)


def device_name(region: str, i: int) -> str:
    return f"{region}d{i:05d}"


@dataclass
class LoadResult:
    acked: dict[int, int] = field(default_factory=dict)       # t -> distinct reports acknowledged
    pubacked: int = 0             # distinct reports the broker acknowledged (with receipts: before the fog's)
    receipts: int = 0             # receipt messages read
    resent_unconfirmed: int = 0   # reports sent again for want of a receipt
    scheduled: int = 0
    published: int = 0            # PUBLISH packets written (resends included)
    resent: int = 0
    reconnects: int = 0
    max_behind_s: float = 0.0     # the longest a due report waited to be written
    finished: bool = False

    @property
    def total_acked(self) -> int:
        return sum(self.acked.values())


class Generator:
    def __init__(self, spec: LoadSpec, stop: threading.Event | None = None):
        self.spec = spec
        self.stop = stop
        self.result = LoadResult(scheduled=spec.per_t * (spec.t_last - spec.t_first + 1))
        self.acked: dict[int, bytearray] = {t: bytearray(spec.per_t) for t in range(spec.t_first, spec.t_last + 1)}
        self.pubacked: dict[int, bytearray] = {t: bytearray(spec.per_t) for t in range(spec.t_first, spec.t_last + 1)}
        self.awaiting: dict[tuple[int, int], float] = {}     # (t, k) acknowledged by the broker -> when
        self.swept = 0.0
        self.pending: collections.deque[tuple[int, int]] = collections.deque()   # (t, k) to write, oldest first
        self.inflight: dict[int, tuple[int, int]] = {}                             # mid -> (t, k)
        self.next_due = (spec.t_first, 0)
        self.next_mid = 1
        self.sock: socket.socket | None = None
        self.buf = b""

    # -- schedule ------------------------------------------------------------------
    def _release_due(self, now: float) -> None:
        t, k = self.next_due
        while t <= self.spec.t_last and self.spec.due_at(t, k) <= now:
            self.pending.append((t, k))
            k += 1
            if k == self.spec.per_t:
                t, k = t + 1, 0
        self.next_due = (t, k)

    def _all_released(self) -> bool:
        return self.next_due[0] > self.spec.t_last

    # -- connection ----------------------------------------------------------------
    def _connect(self) -> bool:
        try:
            self.sock = connect(self.spec.port, self.spec.client_id)
        except (OSError, RuntimeError):
            self.sock = None
            return False
        if self.spec.receipts:
            # The devices' feedback topics, QoS 0 (a lost receipt is a report sent again); SUBACK read in _read.
            topic = b"rase/v1/feedback/#"
            body = (1).to_bytes(2, "big") + len(topic).to_bytes(2, "big") + topic + b"\x00"
            self.sock.sendall(b"\x82" + bytes([len(body)]) + body)
            # What the broker acknowledged before the link went may be lost with it (a crash): again.
            again = sorted(self.awaiting)
            self.awaiting.clear()
            self.result.resent_unconfirmed += len(again)
            self.pending.extendleft(reversed(again))
        self.sock.setblocking(False)
        self.buf = b""
        return True

    def _lost(self) -> None:
        """The connection is gone: what was in flight goes out again first."""
        if self.sock is not None:
            self.sock.close()
        self.sock = None
        again = sorted(self.inflight.values())
        self.inflight.clear()
        self.result.resent += len(again)
        self.pending.extendleft(reversed(again))
        self.result.reconnects += 1

    def _mid(self) -> int:
        while True:
            mid = self.next_mid
            self.next_mid = 1 + self.next_mid % 65535
            if mid not in self.inflight:
                return mid

    def _write(self, now: float) -> None:
        room = INFLIGHT - len(self.inflight)
        if room <= 0 or not self.pending:
            return
        packets = []
        for _ in range(min(room, CHUNK, len(self.pending))):
            t, k = self.pending.popleft()
            self.result.max_behind_s = max(self.result.max_behind_s, now - self.spec.due_at(t, k))
            mid = self._mid()
            self.inflight[mid] = (t, k)
            packets.append(publish_packet(*self.spec.report(t, k), mid))
        data = b"".join(packets)
        self.sock.setblocking(True)
        self.sock.settimeout(5.0)           # a silent broker: give up on this connection, not forever
        try:
            self.sock.sendall(data)
        finally:
            if self.sock is not None:
                self.sock.setblocking(False)
        self.result.published += len(packets)

    def _read(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionResetError("the broker closed the connection")
        self.buf += data
        if not self.spec.receipts:
            n = len(self.buf) // 4 * 4
            for i in range(0, n, 4):
                if self.buf[i] != 0x40:        # only PUBACKs come back (no subscriptions, no pings)
                    raise ConnectionError(f"unexpected packet type {self.buf[i]:#x} from the broker")
                self._puback(int.from_bytes(self.buf[i + 2:i + 4], "big"))
            self.buf = self.buf[n:]
            return
        pos, buf = 0, self.buf
        while True:                        # PUBACKs, the SUBACK and QoS 0 receipts
            if len(buf) - pos < 2:
                break
            length, shift, i = 0, 0, pos + 1
            while i < len(buf) and buf[i] & 0x80:
                length |= (buf[i] & 0x7F) << shift
                shift, i = shift + 7, i + 1
            if i >= len(buf):
                break
            length |= buf[i] << shift
            start = i + 1
            if len(buf) < start + length:
                break
            kind = buf[pos] & 0xF0
            if kind == 0x40:
                self._puback(int.from_bytes(buf[start:start + 2], "big"))
            elif kind == 0x30:
                tlen = int.from_bytes(buf[start:start + 2], "big")
                self._receipt(buf[start + 2:start + 2 + tlen].decode(), buf[start + 2 + tlen:start + length])
            elif kind != 0x90:
                raise ConnectionError(f"unexpected packet type {buf[pos]:#x} from the broker")
            pos = start + length
        self.buf = buf[pos:]

    def _puback(self, mid: int) -> None:
        tk = self.inflight.pop(mid, None)
        if tk is None:
            return
        t, k = tk
        if not self.pubacked[t][k]:
            self.pubacked[t][k] = 1
            self.result.pubacked += 1
        if not self.spec.receipts:
            self._kept(t, k)
        elif not self.acked[t][k]:
            self.awaiting[tk] = time.monotonic()

    def _kept(self, t: int, k: int) -> None:
        if not self.acked[t][k]:
            self.acked[t][k] = 1
            self.result.acked[t] = self.result.acked.get(t, 0) + 1

    def _receipt(self, topic: str, payload: bytes) -> None:
        # rase/v1/feedback/{region}/{region}d{i:05d} (device_name)
        parts = topic.split("/")
        if len(parts) != 5 or parts[3] not in self.spec.regions:
            return
        region = parts[3]
        try:
            k = int(parts[4][len(region) + 1:]) * len(self.spec.regions) + self.spec.regions.index(region)
            msg = json.loads(payload)
        except ValueError:
            return
        if "kept" not in msg:
            return
        self.result.receipts += 1
        for t in msg["kept"]:
            if t in self.acked:
                self.awaiting.pop((t, k), None)
                self._kept(t, k)

    def _resend_unconfirmed(self) -> None:
        """Acknowledged by the broker, no receipt within confirm_s: sent again (the fog drops the repeat)."""
        now = time.monotonic()
        if not self.spec.receipts or now - self.swept < 0.25:
            return
        self.swept = now
        due = sorted(tk for tk, at in self.awaiting.items() if now - at >= self.spec.confirm_s)
        for tk in due:
            del self.awaiting[tk]
        self.result.resent_unconfirmed += len(due)
        self.pending.extendleft(reversed(due))

    # -- the loop --------------------------------------------------------------------
    def done(self) -> bool:
        return self._all_released() and not self.pending and not self.inflight and not self.awaiting

    def run_until_done(self, progress=None) -> LoadResult:  # noqa: ANN001 - called with the acked count
        backoff = 0.1
        said = 0.0
        while not self.done() and not (self.stop is not None and self.stop.is_set()):
            now = time.time()
            if progress is not None and now - said >= 0.2:
                progress(self.result.total_acked)
                said = now
            self._release_due(now)
            self._resend_unconfirmed()
            if self.sock is None:
                if not self._connect():
                    time.sleep(backoff)
                    backoff = min(1.0, backoff * 2)
                    continue
                backoff = 0.1
            try:
                self._write(now)
                wait = 0.0 if self.pending else 0.01 if self._all_released() else \
                    max(0.0, min(0.01, self.spec.due_at(*self.next_due) - time.time()))
                readable, _, _ = select.select([self.sock], [], [], wait)
                if readable:
                    self._read()
            except (OSError, ConnectionError):
                self._lost()
        if self.sock is not None:
            try:
                self.sock.setblocking(True)
                self.sock.sendall(b"\xe0\x00")   # DISCONNECT
            except OSError:
                pass
            self.sock.close()
        self.result.finished = self.done()
        return self.result


class AckedLoad:
    """The generator in a process of its own: start(), acked(), result()."""

    def __init__(self, spec: LoadSpec):
        self.spec = spec
        self._acked = 0
        self._last = ""
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._result: LoadResult | None = None

    def start(self) -> "AckedLoad":
        root = Path(__file__).resolve().parents[2]
        self._proc = subprocess.Popen([sys.executable, "-m", "simulators.faults.load",
                                       json.dumps(dataclasses.asdict(self.spec))], cwd=root,
                                      stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            if line.startswith("acked "):
                self._acked = int(line.split()[1])
            elif line.startswith("{"):
                self._last = line

    def acked(self) -> int:
        return self._acked

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def result(self, timeout_s: float = 120.0) -> LoadResult:
        """Wait until every scheduled report was acknowledged (at most
        timeout_s, then stop the generator) and return what it recorded."""
        if self._result is None:
            try:
                self._proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.send_signal(signal.SIGTERM)
                self._proc.wait(30)
            self._reader.join(10)
            if not self._last:
                raise RuntimeError(f"the load generator exited ({self._proc.returncode}) without a result")
            raw = json.loads(self._last)
            raw["acked"] = {int(t): n for t, n in raw["acked"].items()}
            self._result = LoadResult(**raw)
        return self._result

    def stop(self) -> LoadResult | None:
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
        return self.result(30)


def main(argv: list[str]) -> int:
    spec = LoadSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(argv[0]).items()})
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    result = Generator(spec, stop).run_until_done(lambda n: print(f"acked {n}", flush=True))
    print(json.dumps(dataclasses.asdict(result)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
