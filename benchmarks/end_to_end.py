"""End to end: publisher processes (as devices) -> Mosquitto -> `rase fog`
process(es) -> `rase fusion` process -> a subscriber, all real processes on
loopback, against the same broker's raw ceilings measured in the same run.

    python benchmarks/end_to_end.py [--devices 10000] [--windows 20] [--publishers 3]
                                    [--rounds 1] [--no-two-fogs] [--no-normal] [--no-receipts-off] [--detection-off]
                                    [--mechanism br|prio3] [--prio3-windows 8] [--prio3-pace 8]
                                    [--json]

Measured, in this order, `--rounds` times:
- ceiling, C subscriber: P load-generator processes -> Mosquitto ->
  `mosquitto_sub -q 1` (libmosquitto, Debian's mosquitto-clients), the same
  payloads. It prints one fixed-format line per message (`-F '%U %t'`: its
  receive time and the topic), which this script counts; the rate is the
  messages over the first-to-last receive time;
- ceiling, paho subscriber: the same load into one paho subscriber;
- one fog, durable acknowledgements (the journal's synchronous=FULL, as
  shipped): sustained reports/s from the first report published to the last
  window seen, windows of `--devices` reports (each closes as soon as all its
  registered devices reported), window-close-to-aggregate latency p50/p99
  (window seen on rase/v1/windows -> its aggregate seen, same subscriber),
  and reports lost (sent - sum of n over aggregates; must be 0);
- with `--detection-off`, one fog (FULL) with its attacker detection off
  (RASE_FOG_DETECTION__ENABLED=false): what detection costs;
- one fog with synchronous=NORMAL (RASE_BENCH_JOURNAL_SYNCHRONOUS, a switch
  for this benchmark only): what the durable acknowledgements cost
  (`--no-normal` leaves it out);
- two fogs, one region each, the same total load (FULL); `--no-two-fogs`
  leaves it out;
- one fog (FULL) with the end-to-end receipts off (issue 29:
  RASE_FOG_RECEIPT_EVERY_S=0, RASE_FOG_WINDOW_CONFIRM_S=0): what the
  receipts cost. In every other run they are on, as shipped: the fog sends
  each device a receipt on its feedback topic (batched every 0.25 s), the
  fusion center the fog one per window, and a `mosquitto_sub` takes them all
  as the devices would (counted in the row's receipts); `--no-receipts-off`
  leaves the comparison out.
These local-DP runs send BR reports (a grid value each), so the services run
mechanism "br" (the deployment default is Duchi).

With `--mechanism prio3`, beside them in the same round, the secure-aggregation
mode: one `rase fog` as Prio3's leader, `rase fusion` as its helper (MQTT
between them), Prio3Sum reports of 12-bit readings (0..4000), noise on both
sides, the journal FULL. The load generators make their reports before the
start (rase_common.vdaf.fast_client: the device's bytes, faster), then all
start together. Two runs of `--prio3-windows` windows of `--devices` reports:
- throughput, sent as fast as possible: reports/s to the last batch
  forwarded (its first part seen on rase/v1/windows) and to the last
  aggregate seen, against both ceilings and the local-DP fog (FULL);
- latency, a window every `--prio3-pace` s (devices reporting every period):
  close-to-aggregate p50/p99, where a window's latency is the leader's close
  (shuffle, verify_init, journal; from the fog's log) plus its batch seen ->
  its aggregate seen (both aggregators' verification, the exchange of
  verifier shares and the aggregate shares);
and reports lost in each (sent - sum of n over aggregates; must be 0). Their
CPU per report is counted from the start to the last aggregate, the fusion
center's with its decryption worker processes; the paced run's rate is the
offered load (`--devices` / `--prio3-pace`).

Every run also gives the CPU time each process spent per report (fog,
fusion center, Mosquitto, load generators, and this script, which holds the
paho subscriber), from /proc, and how many of the machine's cores were busy:
CPU per report is steady on a shared machine where rates are not. The load
generators write pre-encoded MQTT PUBLISH packets over plain sockets, so
they cost the machine little and the subscriber, not the publishers, is the
limit (three paho publishers managed ~8,000 msg/s on two cores).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import paho.mqtt.client as mqtt  # noqa: E402

from rase_device import wire  # noqa: E402
from fog_shuffler.journal import SYNCHRONOUS_ENV  # noqa: E402
from simulators.brokers import Mosquitto  # noqa: E402
from simulators.loadgen import connect, publish_all, publish_packet  # noqa: E402

PERIOD_S = 1.0
LATENESS = 100_000          # windows close only when all their devices reported
PROBE_TOPIC = "rase/v1/reports/probe/probe"
PRIO3_MAX = 4000            # Prio3Sum of readings on the 0..4000 W grid (12 bits)
BARRIER_TIMEOUT_S = 1800    # making prio3 reports is dear on a loaded machine
DETECTION_OFF_ENV = "RASE_FOG_DETECTION__ENABLED"
RECEIPTS_OFF_ENV = {"RASE_FOG_RECEIPT_EVERY_S": "0", "RASE_FOG_WINDOW_CONFIRM_S": "0"}
KEEP_LOGS_ENV = "RASE_BENCH_LOGS"            # a directory: keep the services' logs of every prio3 run there
FUSION_LEVEL_ENV = "RASE_BENCH_FUSION_LEVEL"  # the fusion center's log level (WARNING)


def _device(region: str, i: int) -> str:
    return f"{region}d{i:06d}"


def _reports(regions: list[str], devices: int, windows: int, t0: int, part: int, parts: int) -> list[tuple[str, str]]:
    """Reports for devices part::parts of every region, window by window."""
    out = []
    for k in range(windows):
        for region in regions:
            for i in range(part, devices, parts):
                y = float((i * 37 + k * 11) % 4000)
                out.append((wire.report_topic(region, _device(region, i)), wire.encode_report(t0 + k, y, 1.0, k + 1)))
    return out


class Prio3Reports:
    """Picklable: makes a load generator's share of the Prio3Sum reports
    (every window's reports of devices part::parts), sealed to the helper's
    key, in the load generator's process (publish_all calls it). encoding:
    "binary" (what devices send since issue 30) or "json"."""

    def __init__(self, public_key: str, region: str, devices: int, windows: int, t0: int, part: int, parts: int,
                 key_id: str = "", encoding: str = "binary"):
        self.args = (public_key, region, devices, windows, t0, part, parts, key_id, encoding)

    def __call__(self) -> list[tuple[str, str | bytes]]:
        from rase_device import prio3_binary
        from rase_device.prio3 import prio3_sum
        from rase_device.secagg import encode_report, params_id, report_ctx
        from rase_common.vdaf.fast_client import FastPrio3, fast_make_report

        pk, region, devices, windows, t0, part, parts, key_id, encoding = self.args
        vdaf = FastPrio3(prio3_sum(PRIO3_MAX))
        # The deployment's params, bound into every report's context (issue 26).
        pid = params_id({"kind": "sum", "product": "per-t", "max_measurement": PRIO3_MAX, "dp_eps": 1.0,
                         "key_id": key_id})
        out = []
        for k in range(windows):
            ctx = report_ctx(region, t0 + k, pid)
            for i in range(part, devices, parts):
                m = (i * 37 + k * 11) % (PRIO3_MAX + 1)
                report = fast_make_report(vdaf, ctx, m, bytes.fromhex(pk))
                out.append((wire.report_topic(region, _device(region, i)),
                            prio3_binary.encode(t0 + k, k + 1, pid, report) if encoding == "binary"
                            else encode_report(t0 + k, 1.0, k + 1, report, pid)))
        return out


class Subscriber:
    """Counts reports, and times windows and aggregates by t (paho). A prio3
    window is timed by its batch's first part (the leader closed it); the
    leader's aggregate share, also on rase/v1/windows, is not a window."""

    def __init__(self, port: int, topics: list[str]):
        self.lock = threading.Lock()
        self.count = 0
        self.first = self.last = None
        self.windows: dict[tuple[str, int], float] = {}
        self.aggregates: dict[int, tuple[float, int]] = {}
        self.control_seen = threading.Event()
        self.ready = threading.Event()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"bench-sub-{os.getpid()}",
                             protocol=mqtt.MQTTv311)
        self.c.on_connect = lambda c, u, f, rc, p: c.subscribe([(t, 1) for t in topics])
        self.c.on_subscribe = lambda *a: self.ready.set()
        self.c.on_message = self._on_message
        self.c.connect("127.0.0.1", port, keepalive=60)
        self.c.loop_start()
        assert self.ready.wait(10)

    def _on_message(self, c, u, msg):
        now = time.time()
        with self.lock:
            if msg.topic.startswith("rase/v1/reports/"):
                self.count += 1
                self.first = self.first or now
                self.last = now
            elif msg.topic.startswith("rase/v1/windows/"):
                w = json.loads(msg.payload)
                if w.get("type") == "prio3_share":
                    return
                if w.get("type") == "prio3_batch":
                    self.windows.setdefault((w["region"], w["t"]), now)
                else:
                    self.windows[(w["region"], w["t"])] = now
                self.last = now
            elif msg.topic.startswith("rase/v1/aggregates/t/"):
                a = json.loads(msg.payload)
                self.aggregates[a["t"]] = (now, a["n"])
            elif msg.topic == wire.CONTROL_TOPIC and msg.payload:
                self.control_seen.set()

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


class CSubscriber:
    """`mosquitto_sub -q 1`, one line per message in a fixed format
    (`%U %t`: its own receive time, then the topic), counted here. Ready once
    a probe published to the subscribed filter comes back."""

    def __init__(self, port: int, topic: str):
        binary = shutil.which("mosquitto_sub")
        if binary is None:
            raise FileNotFoundError("mosquitto_sub is not installed: run `make deps-test` (Debian's "
                                    "mosquitto-clients)")
        self.proc = subprocess.Popen([binary, "-h", "127.0.0.1", "-p", str(port), "-q", "1", "-k", "60",
                                      "-i", f"bench-csub-{os.getpid()}", "-t", topic, "-F", "%U %t"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.count = 0
        self.first = self.last = None
        self.probes = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        probe = connect(port, f"bench-probe-{os.getpid()}")
        try:
            deadline = time.time() + 10
            while not self.probes:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("mosquitto_sub did not receive the probe within 10 s")
                probe.sendall(publish_packet(PROBE_TOPIC, "probe", 1))
                time.sleep(0.1)
            time.sleep(0.3)          # probes still in flight arrive before the load
        finally:
            probe.sendall(b"\xe0\x00")
            probe.close()

    def _read(self) -> None:
        rest = b""
        fd = self.proc.stdout.fileno()
        while True:
            data = os.read(fd, 1 << 16)
            if not data:
                return
            lines = (rest + data).split(b"\n")
            rest = lines.pop()
            for line in lines:
                stamp, _, topic = line.partition(b" ")
                if topic == PROBE_TOPIC.encode():
                    self.probes += 1
                    continue
                at = float(stamp)
                self.first = self.first or at
                self.last = at
                self.count += 1

    def cpu_s(self) -> float:
        return _proc_cpu_s(self.proc.pid) or 0.0

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self._reader.join(5)


def _proc_cpu_s(pid: int, with_children: bool = False) -> float | None:
    """User + system CPU seconds of a live process (Linux /proc), or None.
    with_children: and of its descendants, live (their own /proc) or ended
    and waited for (its cutime and cstime)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        own = (int(fields[11]) + int(fields[12])) / _TICK
        if not with_children:
            return own
        own += (int(fields[13]) + int(fields[14])) / _TICK
        for child in _children(pid):
            own += _proc_cpu_s(child, True) or 0.0      # ended meanwhile: in our cutime next time
        return own
    except (OSError, ValueError, IndexError):
        return None


def _children(pid: int) -> list[int]:
    """The live child processes of pid (every thread's, /proc/<pid>/task/<tid>/children)."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass      # the thread ended
    return out


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class _StartGate:
    """publish_all's start_at: waits for a Unix time or at a barrier (once the
    packets are encoded), then notes the CPU time spent so far, so a load
    generator's CPU is counted from the start only."""

    def __init__(self, start_at):  # noqa: ANN001 - a Unix time or a multiprocessing Barrier
        self.start_at = start_at
        self.cpu_at_start = 0.0

    def wait(self) -> None:
        if isinstance(self.start_at, (int, float)):
            while time.time() < self.start_at:
                time.sleep(0.001)
        else:
            self.start_at.wait(timeout=BARRIER_TIMEOUT_S)
        self.cpu_at_start = time.process_time()


def _loadgen(port: int, cid: str, msgs, start_at, pace: tuple[int, float] | None,  # noqa: ANN001
             cpu: mp.Queue) -> None:
    """publish_all, reporting in cpu the CPU seconds spent from the start on."""
    gate = _StartGate(start_at)
    publish_all(port, cid, msgs, gate, pace)
    cpu.put(time.process_time() - gate.cpu_at_start)


def _run_publishers(port: int, per_proc: list, made_first: bool = False,
                    pace: list[tuple[int, float]] | None = None) -> tuple[float, float]:
    """Start the load generators together: (the time they started, their CPU
    seconds from then on). per_proc: each one's messages, or a callable that
    makes them in its process. made_first: each makes its messages first
    (prio3 reports are dear), then all start at once. pace: per load
    generator, (its messages per window, seconds between windows)."""
    barrier = mp.Barrier(len(per_proc) + 1) if made_first else None
    start_at = barrier or time.time() + 1.0
    cpu: mp.Queue = mp.Queue()
    procs = [mp.Process(target=_loadgen, args=(port, f"bench-pub-{i}-{os.getpid()}", msgs, start_at,
                                               pace[i] if pace else None, cpu))
             for i, msgs in enumerate(per_proc)]
    for p in procs:
        p.start()
    if barrier is not None:
        deadline = time.time() + BARRIER_TIMEOUT_S
        while barrier.n_waiting < len(procs):     # a load generator that died never reaches it
            if any(p.exitcode not in (None, 0) for p in procs) or time.time() > deadline:
                barrier.abort()
                break
            time.sleep(0.1)
        try:
            barrier.wait(timeout=60)
        except threading.BrokenBarrierError:
            pass                                  # the exit codes below say which failed
        start_at = time.time()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"a load generator failed (exit codes {[p.exitcode for p in procs]})")
    return start_at, sum(cpu.get(timeout=5) for _ in procs)


class CpuSampler:
    """Every 50 ms: the machine's busy jiffies (/proc/stat) and each watched
    process group's CPU time, so a run can say how many cores were busy and
    what each process spent per report (Linux only; empty elsewhere). The
    groups named in with_children count their processes' descendants too
    (the fusion center's decryption workers)."""

    def __init__(self, groups: dict[str, list[int]], with_children: tuple[str, ...] = ()):
        self.groups = groups
        self.with_children = with_children
        self.samples: list[tuple[float, float, float, dict[str, float]]] = []   # (time, busy, total, cpu by group)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _read(self):
        try:
            cpu = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        by_group = {}
        for name, pids in self.groups.items():
            got = [_proc_cpu_s(pid, name in self.with_children) for pid in pids]
            if any(g is None for g in got):
                return None
            by_group[name] = sum(got)
        cpu = cpu[:8]       # user .. steal; guest and guest_nice are already inside user and nice
        idle = cpu[3] + cpu[4]
        return time.time(), (sum(cpu) - idle) / _TICK, sum(cpu) / _TICK, by_group

    def _run(self) -> None:
        while not self._stop.is_set():
            s = self._read()
            if s:
                self.samples.append(s)
            time.sleep(0.05)

    def between(self, t_from: float, t_to: float, reports: int) -> dict:
        """Busy cores, and each group's CPU microseconds per report over
        [t_from, t_to] (scaled from the samples inside it to the whole span)."""
        self._stop.set()
        self._thread.join(1)
        inside = [s for s in self.samples if t_from <= s[0] <= t_to]
        if len(inside) < 2:
            return {}
        a, b = inside[0], inside[-1]
        scale = (t_to - t_from) / (b[0] - a[0])
        return {"busy_cores": (b[1] - a[1]) / (b[2] - a[2]) * (os.cpu_count() or 1),
                "cpu_us_per_report": {g: 1e6 * (b[3][g] - a[3][g]) * scale / reports for g in self.groups}}


def _cpu_us(use: dict, name: str, cpu_s: float, reports: int) -> None:
    use.setdefault("cpu_us_per_report", {})[name] = 1e6 * cpu_s / reports


def ceiling_paho(port: int, broker_pid: int, publishers: int, devices: int, windows: int) -> dict:
    sub = Subscriber(port, ["rase/v1/reports/#"])
    parts = [_reports(["c1"], devices, windows, 1, i, publishers) for i in range(publishers)]
    total = sum(len(p) for p in parts)
    cpu = CpuSampler({"broker": [broker_pid], "subscriber (this script)": [os.getpid()]})
    _start, gen_cpu = _run_publishers(port, parts)
    deadline = time.time() + 60
    while sub.count < total and time.time() < deadline:
        time.sleep(0.05)
    sub.close()
    use = cpu.between(sub.first, sub.last + 0.1, total)
    _cpu_us(use, "load generators", gen_cpu, total)
    secs = sub.last - sub.first
    return {"messages": total, "received": sub.count, "seconds": secs, "rate": sub.count / secs, **use}


def ceiling_c(port: int, broker_pid: int, publishers: int, devices: int, windows: int) -> dict:
    sub = CSubscriber(port, "rase/v1/reports/#")
    parts = [_reports(["c2"], devices, windows, 1, i, publishers) for i in range(publishers)]
    total = sum(len(p) for p in parts)
    cpu = CpuSampler({"broker": [broker_pid], "mosquitto_sub": [sub.proc.pid]})
    try:
        _start, gen_cpu = _run_publishers(port, parts)
        deadline = time.time() + 60
        while sub.count < total and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
    finally:
        sub.close()
    use = cpu.between(sub.first, sub.last + 0.1, total)
    _cpu_us(use, "load generators", gen_cpu, total)
    secs = sub.last - sub.first
    return {"messages": total, "received": sub.count, "seconds": secs, "rate": sub.count / secs, **use}


def _write_configs(work: Path, port: int, regions: list[str], devices: int, fog_groups: list[list[str]],
                   tag: str, keys: dict | None = None, parts: int = 1) -> list[Path]:
    """The fusion center's config, then each fog's. Without keys: mechanism
    "br", what _reports makes. keys (rase_common.secagg.write_keys): a prio3
    deployment, Prio3Sum on the 0..PRIO3_MAX grid, eps 1 per release. parts
    (prio3, one region): that many fogs, each a leader worker with every
    parts-th device (issue 30)."""
    fusion = work / "fusion.toml"
    if keys:
        precision = (f'eps_levels = [1.0]\nmechanism = "prio3"\n[precision.prio3]\nkind = "sum"\n'
                     f'max_measurement = {PRIO3_MAX}\ndp_eps = 1.0\nkey_id = "{keys["key_id"]}"\n')
        helper = (f'[prio3]\nprivate_key_file = "{keys["private_key_file"]}"\nkey_id = "{keys["key_id"]}"\n'
                  f'verify_key_file = "{keys["verify_key_file"]}"\nleader_parts = {parts}\n')
        device = 'device_mechanism = "prio3"\neps_levels = [1.0]\n'
        leader = (f'[prio3]\nverify_key_file = "{keys["verify_key_file"]}"\n[prio3.params]\nkind = "sum"\n'
                  f'max_measurement = {PRIO3_MAX}\ndp_eps = 1.0\nkey_id = "{keys["key_id"]}"\n')
    else:
        precision, helper, device, leader = 'mechanism = "br"\n', "", 'device_mechanism = "br"\n', ""
    fusion.write_text(f'name = "bench-{tag}"\nregions = {json.dumps(regions)}\nmerge_deadline_s = 30\n'
                      f'store_path = "{work}/fusion.sqlite"\ntick_s = 0.01\n'
                      f"[precision]\nperiod_s = {PERIOD_S}\n{precision}[broker]\nport = {port}\n{helper}")
    paths = [fusion]
    if parts > 1:
        assert keys and len(fog_groups) == 1 and len(fog_groups[0]) == 1, "parts: one prio3 region"
        (work / "parts.key").write_text(os.urandom(32).hex())
        fog_groups = fog_groups * parts
    for i, owned in enumerate(fog_groups):
        # A fresh name per run: the fog's broker session is persistent.
        text = (f'name = "bench-fog{i}-{tag}"\nperiod_s = {PERIOD_S}\nepoch0 = 0\nlateness_periods = {LATENESS}\n'
                f'k_min = 10\njournal_path = "{work}/fog{i}.sqlite"\ntick_s = 0.01\n{device}'
                f"[broker]\nport = {port}\n{leader}")
        if parts > 1:     # [prio3]'s keys, before its [prio3.params] table
            text = text.replace("[prio3.params]", f'part = {i}\nparts = {parts}\nparts_key_file = "{work}/parts.key"\n'
                                                  "[prio3.params]")
        for region in owned:
            devs = [_device(region, d) for d in range(devices)][i::parts] if parts > 1 else \
                [_device(region, d) for d in range(devices)]
            groups = [devs[j:j + 9] for j in range(0, len(devs), 9)]
            text += f"[regions.{region}]\ngroups = {json.dumps(groups)}\n"
        p = work / f"fog{i}.toml"
        p.write_text(text)
        paths.append(p)
    return paths


def _start(args: list[str], log: Path, env: dict[str, str] | None = None, level: str = "WARNING"
           ) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rase.cli", "--log-level", level, *args],
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, cwd=ROOT,
                            env={**os.environ, **(env or {})})


def _clear_retained_control(port: int) -> None:
    """The fusion center publishes its control message (retained) on every
    connect; cleared first, its arrival says a new fusion center is up."""
    sock = connect(port, f"bench-clear-{os.getpid()}")
    sock.sendall(b"\x33" + publish_packet(wire.CONTROL_TOPIC, "", 1)[1:])   # QoS 1, retained, empty
    sock.sendall(b"\xe0\x00")
    sock.close()


def _wait_ready(port: int, sub: Subscriber, journals: dict[str, Path], timeout_s: float = 60.0) -> None:
    """Until the fusion center published its control message and every fog
    took a probe report (`{}` from an unregistered device: rejected, as
    wrong_type by a local-DP or a prio3 leader fog alike, quarantined in its
    journal, never counted in a window), so no report of the load is
    published before the services subscribed, however loaded the machine."""
    probe = connect(port, f"bench-probe-{os.getpid()}")
    deadline = time.time() + timeout_s
    try:
        waiting = dict(journals)
        while waiting or not sub.control_seen.is_set():
            if time.time() > deadline:
                raise RuntimeError(f"services not ready within {timeout_s:.0f} s (fogs waiting: {sorted(waiting)})")
            # A key is a region (probed from an unregistered device), or a report topic (a leader worker
            # subscribes to its own devices' topics only: probed from one of them).
            for key in waiting:
                probe.sendall(publish_packet(key if "/" in key else wire.report_topic(key, "probe"), "{}", 1))
            time.sleep(0.2)
            for key, path in list(waiting.items()):
                try:
                    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as db:
                        if db.execute("SELECT 1 FROM quarantine WHERE source LIKE ?",
                                      (key if "/" in key else "%/probe",)).fetchone():
                            del waiting[key]
                except sqlite3.Error:
                    pass     # not created yet
    finally:
        probe.sendall(b"\xe0\x00")
        probe.close()


@contextmanager
def _services(port: int, work: Path, fusion_cfg: Path, fog_cfgs: list[Path], journals: dict[str, Path],
              fog_env: dict[str, str] | None = None, fog_level: str = "WARNING"):
    """`rase fusion` and one `rase fog` per config, and a subscriber to
    windows, aggregates and the control message; yields (subscriber, fusion
    process, fog processes) once they are ready, stops them after."""
    _clear_retained_control(port)
    fusion = _start(["fusion", "--config", str(fusion_cfg)], work / "fusion.log",
                    level=os.environ.get(FUSION_LEVEL_ENV, "WARNING"))
    fogs = [_start(["fog", "--config", str(c)], work / f"{c.stem}.log", fog_env, fog_level) for c in fog_cfgs]
    sub = Subscriber(port, ["rase/v1/windows/#", "rase/v1/aggregates/t/#", wire.CONTROL_TOPIC])
    try:
        _wait_ready(port, sub, journals)
        yield sub, fusion, fogs
    finally:
        sub.close()
        for p in [fusion, *fogs]:
            p.terminate()
        for p in [fusion, *fogs]:
            p.wait(15)


def _keep_logs(work: Path, tag: str) -> None:
    """With RASE_BENCH_LOGS=dir, the services' logs of a run are copied there (a run's directory goes with it)."""
    keep = os.environ.get(KEEP_LOGS_ENV)
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for log in work.glob("*.log"):
            shutil.copy(log, Path(keep) / f"{tag}-{log.name}")


def _say_why_lost(work: Path, result: dict) -> dict:
    """A run that lost reports says so on stderr, with the end of each service's log (gone with the run's
    directory otherwise)."""
    if result["lost"]:
        print(f"  {result['lost']} of {result['reports']} reports lost; the services' logs end:", file=sys.stderr)
        for log in sorted(work.glob("*.log")):
            print(f"  --- {log.name}\n" + "\n".join(log.read_text().splitlines()[-12:]), file=sys.stderr)
    return result


def _percentiles(values: list[float]) -> dict:
    """p50 and p99 (ms) of latencies in seconds."""
    lat = sorted(values)
    return {"latency_p50_ms": 1000 * lat[len(lat) // 2] if lat else None,
            "latency_p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None}


@contextmanager
def _receipt_sink(port: int, work: Path):
    """What the devices (and the fog) would read of the receipts: a mosquitto_sub on their topics,
    one line per receipt; yields a function counting them."""
    out = work / "receipts.txt"
    with open(out, "wb") as f:
        proc = subprocess.Popen(["mosquitto_sub", "-p", str(port), "-q", "1", "-t", "rase/v1/feedback/#",
                                 "-t", "rase/v1/windows-kept/#", "-F", "%t"], stdout=f, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    try:
        yield lambda: out.read_bytes().count(b"\n")
    finally:
        proc.terminate()
        proc.wait(10)


def pipeline(port: int, broker_pid: int, fogs: int, publishers: int, devices: int, windows: int,
             synchronous: str = "FULL", detection: bool = True, receipts: bool = True) -> dict:
    """`fogs` fog processes, one region each, each region `devices` devices (local DP, BR);
    detection False: the fogs' attacker detection off (RASE_FOG_DETECTION__ENABLED=false)."""
    regions = [f"r{i + 1}" for i in range(fogs)]
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    with tempfile.TemporaryDirectory(prefix="rase-e2e-") as tmp:
        work = Path(tmp)
        fusion_cfg, *fog_cfgs = _write_configs(work, port, regions, devices, [[r] for r in regions], tag)
        journals = {r: work / f"fog{i}.sqlite" for i, r in enumerate(regions)}
        env = {SYNCHRONOUS_ENV: synchronous, **({} if detection else {DETECTION_OFF_ENV: "false"}),
               **({} if receipts else RECEIPTS_OFF_ENV)}
        with _receipt_sink(port, work) as receipts_seen, _services(port, work, fusion_cfg, fog_cfgs, journals,
                                                                   env) as (sub, fusion, fog_procs):
            cpu = CpuSampler({"fog": [p.pid for p in fog_procs], "fusion": [fusion.pid], "broker": [broker_pid],
                              "subscriber (this script)": [os.getpid()]})
            t0 = int(time.time() // PERIOD_S) - LATENESS // 2
            parts = [_reports(regions, devices, windows, t0, i, publishers) for i in range(publishers)]
            sent = sum(len(p) for p in parts)
            started, gen_cpu = _run_publishers(port, parts)
            expect = windows * fogs
            deadline = time.time() + 120
            while (len(sub.windows) < expect or len(sub.aggregates) < windows) and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
        last_window = max(sub.windows.values()) if sub.windows else float("nan")
        by_t = {}
        for t, (at, _n) in sorted(sub.aggregates.items()):
            seen = [ts for (r, tt), ts in sub.windows.items() if tt == t]
            if seen:
                by_t[t] = at - max(seen)
        n_agg = sum(n for _at, n in sub.aggregates.values())
        secs = last_window - started
        use = cpu.between(started, last_window, sent)
        _cpu_us(use, "load generators", gen_cpu, sent)
        result = {"fogs": fogs, "synchronous": synchronous, "receipts_on": receipts, "receipts": receipts_seen(),
                  "reports": sent, "seconds": secs, "rate": sent / secs,
                  **use, "windows": len(sub.windows), "aggregates": len(sub.aggregates), "lost": sent - n_agg,
                  "latency_ms_in_t_order": [round(1000 * v) for v in by_t.values()],
                  **_percentiles(list(by_t.values()))}
        return _say_why_lost(work, result)


def secure_pipeline(port: int, broker_pid: int, publishers: int, devices: int, windows: int,
                    pace_s: float | None = None, parts: int = 1) -> dict:
    """One fog as Prio3's leader and the fusion center as its helper; Prio3Sum
    reports. pace_s: a window every pace_s seconds (devices reporting every
    pace_s), else as fast as possible. parts: that many fogs, leader workers
    of the region's devices (issue 30), the fusion center summing their parts."""
    from rase_common.secagg import write_keys

    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    with tempfile.TemporaryDirectory(prefix="rase-e2e-prio3-") as tmp:
        work = Path(tmp)
        keys = write_keys(work / "keys")
        fusion_cfg, *fog_cfgs = _write_configs(work, port, ["r1"], devices, [["r1"]], tag, keys, parts)
        journals = ({wire.report_topic("r1", _device("r1", k)): work / f"fog{k}.sqlite" for k in range(parts)}
                    if parts > 1 else {"r1": work / "fog0.sqlite"})
        # INFO: the leader logs each window's close time.
        with _services(port, work, fusion_cfg, fog_cfgs, journals, fog_level="INFO") as (sub, fusion, fogs):
            cpu = CpuSampler({"fog (leader)": [f.pid for f in fogs], "fusion (helper)": [fusion.pid],
                              "broker": [broker_pid], "subscriber (this script)": [os.getpid()]},
                             with_children=("fusion (helper)", "fog (leader)"))   # both verify on workers
            t0 = int(time.time() // PERIOD_S) - LATENESS // 2
            generators = [Prio3Reports(keys["public_key"], "r1", devices, windows, t0, i, publishers, keys["key_id"])
                          for i in range(publishers)]
            sent = devices * windows
            pace = [(len(range(i, devices, publishers)), pace_s) for i in range(publishers)] if pace_s else None
            print(f"  making {sent} prio3 reports ...", file=sys.stderr, flush=True)
            started, gen_cpu = _run_publishers(port, generators, made_first=True, pace=pace)
            deadline = time.time() + 180 + windows * (pace_s or 0)
            while len(sub.aggregates) < windows and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
        # The leader's close per window (shuffle, verify_init, journal), before its batch goes out.
        closes: dict[int, float] = {}      # a window's close: its slowest part's
        for k in range(parts):
            for t, secs in re.findall(r"fog prio3 \(r1, (\d+)\): closed, \d+ reports, batch queued in ([0-9.]+) s",
                                      (work / f"fog{k}.log").read_text()):
                closes[int(t)] = max(closes.get(int(t), 0.0), float(secs))
        _keep_logs(work, f"prio3-{'paced' if pace_s else 'throughput'}")
        by_t = {t: at - sub.windows[("r1", t)] for t, (at, _n) in sorted(sub.aggregates.items())
                if ("r1", t) in sub.windows}
        n_agg = sum(n for _at, n in sub.aggregates.values())
        last_batch = max(sub.windows.values()) if sub.windows else float("nan")
        last_agg = max(at for at, _n in sub.aggregates.values()) if sub.aggregates else float("nan")
        use = cpu.between(started, last_agg, sent)
        _cpu_us(use, "load generators", gen_cpu, sent)
        result = {"paced_s": pace_s, "parts": parts, "offered_rate": devices / pace_s if pace_s else None,
                  "reports": sent,
                  "seconds": last_batch - started,
                  "rate": sent / (last_batch - started), "rate_to_last_aggregate": sent / (last_agg - started),
                  **use, "windows": len(sub.windows), "aggregates": len(sub.aggregates), "lost": sent - n_agg,
                  "closes_logged": len(closes), "close_s_mean": statistics.mean(closes.values()) if closes else None,
                  "close_s_max": max(closes.values(), default=None),
                  "batch_to_aggregate_ms_in_t_order": [round(1000 * v) for v in by_t.values()],
                  **_percentiles([v + closes.get(t, 0.0) for t, v in by_t.items()])}
        return _say_why_lost(work, result)


def one_round(broker: Mosquitto, args: argparse.Namespace) -> dict:
    port, pid, pubs, devs, wins = broker.port, broker.proc.pid, args.publishers, args.devices, args.windows
    out = {"load_average_before": os.getloadavg()}
    runs = {"ceiling_c": lambda: ceiling_c(port, pid, pubs, devs, wins),
            "ceiling_paho": lambda: ceiling_paho(port, pid, pubs, devs, wins),
            "one_fog_full": lambda: pipeline(port, pid, 1, pubs, devs, wins, "FULL")}
    if args.detection_off:
        runs["one_fog_full_no_detection"] = lambda: pipeline(port, pid, 1, pubs, devs, wins, "FULL", detection=False)
    if args.normal:
        runs["one_fog_normal"] = lambda: pipeline(port, pid, 1, pubs, devs, wins, "NORMAL")
    if args.two_fogs:
        runs["two_fogs_full"] = lambda: pipeline(port, pid, 2, pubs, devs // 2, wins)
    if args.receipts_off:
        runs["one_fog_full_no_receipts"] = lambda: pipeline(port, pid, 1, pubs, devs, wins, "FULL", receipts=False)
    if args.mechanism == "prio3":
        runs["prio3"] = lambda: secure_pipeline(port, pid, pubs, devs, args.prio3_windows)
        runs["prio3_paced"] = lambda: secure_pipeline(port, pid, pubs, devs, args.prio3_windows, args.prio3_pace)
        if args.prio3_parts > 1:
            runs["prio3_parts"] = lambda: secure_pipeline(port, pid, pubs, devs, args.prio3_windows,
                                                          parts=args.prio3_parts)
    for name, run in runs.items():
        print(f"  {name} ...", file=sys.stderr, flush=True)
        out[name] = run()
    out["load_average_after"] = os.getloadavg()
    c, paho, local = out["ceiling_c"]["rate"], out["ceiling_paho"]["rate"], out["one_fog_full"]["rate"]
    for name in ("one_fog_full", "one_fog_full_no_detection", "one_fog_normal", "two_fogs_full",
                 "one_fog_full_no_receipts", "prio3"):
        if name in out:
            out[name]["vs_c_ceiling"] = out[name]["rate"] / c
            out[name]["vs_paho_ceiling"] = out[name]["rate"] / paho
            out[name]["vs_local_dp"] = out[name]["rate"] / local
    if "prio3" in out:
        to_agg = out["prio3"]["rate_to_last_aggregate"]
        out["prio3"].update(to_aggregate_vs_c_ceiling=to_agg / c, to_aggregate_vs_paho_ceiling=to_agg / paho,
                            to_aggregate_vs_local_dp=to_agg / local)
    out["paho_vs_c_ceiling"] = paho / c
    if "one_fog_normal" in out:
        out["full_vs_normal"] = out["one_fog_full"]["rate"] / out["one_fog_normal"]["rate"]
    return out


def _row(name: str, rate: float, r: dict, x: dict, stats: bool = True, ratios: bool = True) -> str:
    """One line of the table: rate against both ceilings and the local-DP fog
    (FULL); with stats, latency, lost, busy cores and CPU per report."""
    c, paho, local = r["ceiling_c"]["rate"], r["ceiling_paho"]["rate"], r["one_fog_full"]["rate"]
    vs_c, vs_paho = (f"{rate / c:.2f}", f"{rate / paho:.2f}") if ratios else ("", "")
    vs_local = f"{rate / local:.2f}" if ratios and not name.startswith("ceiling") else ""
    cells = ["", "", "", "", ""]
    if stats:
        cells = [f"{x[k]:.0f}" if x.get(k) is not None else "" for k in ("latency_p50_ms", "latency_p99_ms")]
        cells += [str(x["lost"]) if "lost" in x else "", f"{x['busy_cores']:.2f}" if "busy_cores" in x else "",
                  ", ".join(f"{g} {us:.1f}" for g, us in x.get("cpu_us_per_report", {}).items())]
    p50, p99, lost, busy, cpu = cells
    return (f"{name:<36}{rate:>11,.0f}{vs_c:>10}{vs_paho:>8}{vs_local:>7}{p50:>8}{p99:>8}"
            f"{lost:>6}{busy:>6}  {cpu}")


def _print_round(k: int, r: dict, args: argparse.Namespace) -> None:
    print(f"\nround {k + 1}: load average {r['load_average_before'][0]:.1f} before, "
          f"{r['load_average_after'][0]:.1f} after (1-minute)")
    print(f"{'run':<36}{'reports/s':>11}{'/ C ceil':>10}{'/ paho':>8}{'/ DP':>7}{'p50 ms':>8}{'p99 ms':>8}"
          f"{'lost':>6}{'busy':>6}  CPU us per report")
    rows = [("ceiling: C sub (mosquitto_sub)", r["ceiling_c"]), ("ceiling: paho sub", r["ceiling_paho"]),
            ("one fog, synchronous=FULL", r["one_fog_full"])]
    if "one_fog_full_no_detection" in r:
        rows.append(("one fog, FULL, detection off", r["one_fog_full_no_detection"]))
    if "one_fog_normal" in r:
        rows.append(("one fog, synchronous=NORMAL", r["one_fog_normal"]))
    if "two_fogs_full" in r:
        rows.append(("two fogs (half each), FULL", r["two_fogs_full"]))
    if "one_fog_full_no_receipts" in r:
        rows.append(("one fog, FULL, receipts off", r["one_fog_full_no_receipts"]))
    for name, x in rows:
        print(_row(name, x["rate"], r, x))
    if "prio3" in r:
        p, q = r["prio3"], r["prio3_paced"]
        print(_row("prio3, one fog, to last batch", p["rate"], r, p, stats=False))
        print(_row("prio3, to last aggregate", p["rate_to_last_aggregate"], r, p))
        paced = f"prio3, a window every {args.prio3_pace:g} s (offered)"
        print(_row(paced, q["offered_rate"], r, q, ratios=False))
        if "prio3_parts" in r:
            x = r["prio3_parts"]
            print(_row(f"prio3, {x['parts']} leader workers, to last agg", x["rate_to_last_aggregate"], r, x))
    ratios = [f"synchronous FULL / NORMAL: {r['full_vs_normal']:.2f}"] if "full_vs_normal" in r else []
    if "one_fog_full_no_detection" in r:
        ratios.append(f"detection on / off: {r['one_fog_full']['rate'] / r['one_fog_full_no_detection']['rate']:.2f}")
    if "two_fogs_full" in r:
        ratios.append(f"two fogs / one fog: {r['two_fogs_full']['rate'] / r['one_fog_full']['rate']:.2f}")
    if "one_fog_full_no_receipts" in r:
        on, off = r["one_fog_full"], r["one_fog_full_no_receipts"]
        ratios.append(f"receipts on / off: {on['rate'] / off['rate']:.2f} ({on['receipts']:,} receipts delivered "
                      f"for {on['reports']:,} reports)")
    print("; ".join(ratios))
    if "prio3" in r:
        for name, x in (("throughput", r["prio3"]), ("paced", r["prio3_paced"])):
            close = (f"mean {x['close_s_mean']:.3f} s, max {x['close_s_max']:.3f} s"
                     if x["close_s_mean"] is not None else "not in the fog's log")
            print(f"prio3 {name}: leader close per window (shuffle, verify_init, journal; in the latency) {close}; "
                  f"batch -> aggregate ms in t order: {x['batch_to_aggregate_ms_in_t_order']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=10_000, help="reports per window (devices per region)")
    ap.add_argument("--windows", type=int, default=20, help="windows (timestamps) per region")
    ap.add_argument("--publishers", type=int, default=3, help="load-generator processes")
    ap.add_argument("--rounds", type=int, default=1, help="repeat every run this many times, interleaved")
    ap.add_argument("--no-two-fogs", dest="two_fogs", action="store_false", help="leave out the two-fog run")
    ap.add_argument("--no-normal", dest="normal", action="store_false",
                    help="leave out the one-fog run with the journal's synchronous=NORMAL")
    ap.add_argument("--no-receipts-off", dest="receipts_off", action="store_false",
                    help="leave out the one-fog run with the end-to-end receipts off")
    ap.add_argument("--detection-off", action="store_true",
                    help="also one fog (FULL) with its attacker detection off, beside the one with it on")
    ap.add_argument("--mechanism", choices=["br", "prio3"], default="br",
                    help="prio3: the secure-aggregation runs too, beside the local-DP (BR) ones in the same round")
    ap.add_argument("--prio3-windows", type=int, default=8, help="prio3: windows of --devices reports per run")
    ap.add_argument("--prio3-pace", type=float, default=8.0,
                    help="prio3 latency run: a window every this many seconds, as devices reporting every period "
                         "(default %(default)s; the throughput run sends as fast as possible)")
    ap.add_argument("--prio3-parts", type=int, default=1,
                    help="prio3: also a throughput run with the region's devices over this many leader workers "
                         "(fogs; issue 30), beside the one-worker runs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rounds = []
    with tempfile.TemporaryDirectory(prefix="rase-e2e-broker-") as tmp:
        broker = Mosquitto(Path(tmp)).start()
        try:
            for k in range(args.rounds):
                print(f"round {k + 1} of {args.rounds} ...", file=sys.stderr, flush=True)
                rounds.append(one_round(broker, args))
        finally:
            broker.stop()
    print(f"cores: {os.cpu_count()}; windows of {args.devices} reports, {args.windows} windows"
          + (f" ({args.prio3_windows} for prio3)" if args.mechanism == "prio3" else "")
          + f"; {args.publishers} load-generator processes; / DP: against one local-DP fog (FULL)")
    for k, r in enumerate(rounds):
        _print_round(k, r, args)
    summary = {key: statistics.median(r["one_fog_full"][key] for r in rounds)
               for key in ("vs_c_ceiling", "vs_paho_ceiling")}
    if args.normal:
        summary["full_vs_normal"] = statistics.median(r["full_vs_normal"] for r in rounds)
    if args.detection_off:
        summary["no_detection_vs_c_ceiling"] = statistics.median(r["one_fog_full_no_detection"]["vs_c_ceiling"]
                                                                 for r in rounds)
    summary["paho_vs_c_ceiling"] = statistics.median(r["paho_vs_c_ceiling"] for r in rounds)
    print(f"\nmedian over {len(rounds)} round(s): one fog (FULL) / C ceiling {summary['vs_c_ceiling']:.2f}, "
          f"/ paho ceiling {summary['vs_paho_ceiling']:.2f}"
          + (f"; FULL / NORMAL {summary['full_vs_normal']:.2f}" if "full_vs_normal" in summary else "")
          + (f"; detection off / C ceiling {summary['no_detection_vs_c_ceiling']:.2f}"
             if "no_detection_vs_c_ceiling" in summary else "")
          + f"; paho / C ceiling {summary['paho_vs_c_ceiling']:.2f}")
    if args.mechanism == "prio3":
        for key in ("vs_c_ceiling", "vs_local_dp", "to_aggregate_vs_local_dp"):
            summary[f"prio3_{key}"] = statistics.median(r["prio3"][key] for r in rounds)
        summary["prio3_paced_p99_ms"] = statistics.median(r["prio3_paced"]["latency_p99_ms"] or float("nan")
                                                          for r in rounds)
        print(f"prio3 / local DP (one fog, FULL): {summary['prio3_vs_local_dp']:.2f} to the last batch, "
              f"{summary['prio3_to_aggregate_vs_local_dp']:.2f} to the last aggregate; paced p99 "
              f"{summary['prio3_paced_p99_ms']:.0f} ms")
    if args.json:
        print(json.dumps({"rounds": rounds, "median": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
