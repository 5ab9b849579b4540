"""End to end: publisher processes (as devices) -> Mosquitto -> `rase fog`
process(es) -> `rase fusion` process -> a subscriber, all real processes on
loopback, against the same broker's raw ceilings measured in the same run.

    python benchmarks/end_to_end.py [--devices 10000] [--windows 20] [--publishers 3]
                                    [--rounds 1] [--no-two-fogs] [--json]

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
- one fog with synchronous=NORMAL (RASE_BENCH_JOURNAL_SYNCHRONOUS, a switch
  for this benchmark only): what the durable acknowledgements cost;
- two fogs, one region each, the same total load (FULL); `--no-two-fogs`
  leaves it out.

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
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import paho.mqtt.client as mqtt  # noqa: E402

from edge_agent import wire  # noqa: E402
from fog_shuffler.journal import SYNCHRONOUS_ENV  # noqa: E402
from simulators.brokers import Mosquitto  # noqa: E402
from simulators.loadgen import connect, publish_all, publish_packet  # noqa: E402

PERIOD_S = 1.0
LATENESS = 100_000          # windows close only when all their devices reported
PROBE_TOPIC = "rase/v1/reports/probe/probe"


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


class Subscriber:
    """Counts reports, and times windows and aggregates by t (paho)."""

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


def _proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a live process (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, ValueError, IndexError):
        return None


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _loadgen(port: int, cid: str, msgs: list[tuple[str, str]], start_at: float, cpu: mp.Queue) -> None:
    """publish_all, reporting the CPU seconds spent from start_at on (after
    the packets were encoded) in cpu."""
    at_start: list[float] = []
    timer = threading.Timer(max(0.0, start_at - time.time()), lambda: at_start.append(time.process_time()))
    timer.start()
    publish_all(port, cid, msgs, start_at)
    timer.join()
    cpu.put(time.process_time() - at_start[0])


def _run_publishers(port: int, per_proc: list[list[tuple[str, str]]]) -> tuple[float, float]:
    """(the time the load generators started, their CPU seconds from then on)."""
    start_at = time.time() + 1.0
    cpu: mp.Queue = mp.Queue()
    procs = [mp.Process(target=_loadgen, args=(port, f"bench-pub-{i}-{os.getpid()}", msgs, start_at, cpu))
             for i, msgs in enumerate(per_proc)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"a load generator failed (exit codes {[p.exitcode for p in procs]})")
    return start_at, sum(cpu.get(timeout=5) for _ in procs)


class CpuSampler:
    """Every 50 ms: the machine's busy jiffies (/proc/stat) and each watched
    process group's CPU time, so a run can say how many cores were busy and
    what each process spent per report (Linux only; empty elsewhere)."""

    def __init__(self, groups: dict[str, list[int]]):
        self.groups = groups
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
            got = [_proc_cpu_s(pid) for pid in pids]
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
                   tag: str) -> list[Path]:
    fusion = work / "fusion.toml"
    fusion.write_text(f'name = "bench-{tag}"\nregions = {json.dumps(regions)}\nmerge_deadline_s = 30\n'
                      f'store_path = "{work}/fusion.sqlite"\ntick_s = 0.01\n'
                      f"[precision]\nperiod_s = {PERIOD_S}\n[broker]\nport = {port}\n")
    paths = [fusion]
    for i, owned in enumerate(fog_groups):
        # A fresh name per run: the fog's broker session is persistent.
        text = (f'name = "bench-fog{i}-{tag}"\nperiod_s = {PERIOD_S}\nepoch0 = 0\nlateness_periods = {LATENESS}\n'
                f'k_min = 10\njournal_path = "{work}/fog{i}.sqlite"\ntick_s = 0.01\n[broker]\nport = {port}\n')
        for region in owned:
            devs = [_device(region, d) for d in range(devices)]
            groups = [devs[j:j + 9] for j in range(0, devices, 9)]
            text += f"[regions.{region}]\ngroups = {json.dumps(groups)}\n"
        p = work / f"fog{i}.toml"
        p.write_text(text)
        paths.append(p)
    return paths


def _start(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rase.cli", "--log-level", "WARNING", *args],
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
    took a probe report (from an unregistered device: rejected, quarantined
    in its journal, never counted in a window), so no report of the load is
    published before the services subscribed, however loaded the machine."""
    probe = connect(port, f"bench-probe-{os.getpid()}")
    deadline = time.time() + timeout_s
    try:
        waiting = dict(journals)
        while waiting or not sub.control_seen.is_set():
            if time.time() > deadline:
                raise RuntimeError(f"services not ready within {timeout_s:.0f} s (fogs waiting: {sorted(waiting)})")
            for region in waiting:
                probe.sendall(publish_packet(wire.report_topic(region, "probe"), "{}", 1))
            time.sleep(0.2)
            for region, path in list(waiting.items()):
                try:
                    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as db:
                        if db.execute("SELECT 1 FROM quarantine WHERE source LIKE '%/probe'").fetchone():
                            del waiting[region]
                except sqlite3.Error:
                    pass     # not created yet
    finally:
        probe.sendall(b"\xe0\x00")
        probe.close()


def pipeline(port: int, broker_pid: int, fogs: int, publishers: int, devices: int, windows: int,
             synchronous: str = "FULL") -> dict:
    """`fogs` fog processes, one region each, each region `devices` devices."""
    regions = [f"r{i + 1}" for i in range(fogs)]
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    with tempfile.TemporaryDirectory(prefix="rase-e2e-") as tmp:
        work = Path(tmp)
        fusion_cfg, *fog_cfgs = _write_configs(work, port, regions, devices, [[r] for r in regions], tag)
        _clear_retained_control(port)
        fusion = _start(["fusion", "--config", str(fusion_cfg)], work / "fusion.log")
        fog_procs = [_start(["fog", "--config", str(c)], work / f"{c.stem}.log", {SYNCHRONOUS_ENV: synchronous})
                     for c in fog_cfgs]
        procs = [fusion, *fog_procs]
        sub = Subscriber(port, ["rase/v1/windows/#", "rase/v1/aggregates/t/#", wire.CONTROL_TOPIC])
        cpu = CpuSampler({"fog": [p.pid for p in fog_procs], "fusion": [fusion.pid], "broker": [broker_pid],
                          "subscriber (this script)": [os.getpid()]})
        try:
            _wait_ready(port, sub, {r: work / f"fog{i}.sqlite" for i, r in enumerate(regions)})
            t0 = int(time.time() // PERIOD_S) - LATENESS // 2
            parts = [_reports(regions, devices, windows, t0, i, publishers) for i in range(publishers)]
            sent = sum(len(p) for p in parts)
            started, gen_cpu = _run_publishers(port, parts)
            expect = windows * fogs
            deadline = time.time() + 120
            while (len(sub.windows) < expect or len(sub.aggregates) < windows) and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
        finally:
            sub.close()
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(15)
        last_window = max(sub.windows.values()) if sub.windows else float("nan")
        by_t = {}
        for t, (at, _n) in sorted(sub.aggregates.items()):
            seen = [ts for (r, tt), ts in sub.windows.items() if tt == t]
            if seen:
                by_t[t] = at - max(seen)
        lat = sorted(by_t.values())
        n_agg = sum(n for _at, n in sub.aggregates.values())
        secs = last_window - started
        use = cpu.between(started, last_window, sent)
        _cpu_us(use, "load generators", gen_cpu, sent)
        return {"fogs": fogs, "synchronous": synchronous, "reports": sent, "seconds": secs, "rate": sent / secs,
                **use, "windows": len(sub.windows), "aggregates": len(sub.aggregates), "lost": sent - n_agg,
                "latency_ms_in_t_order": [round(1000 * v) for v in by_t.values()],
                "latency_p50_ms": 1000 * lat[len(lat) // 2] if lat else None,
                "latency_p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None}


def one_round(broker: Mosquitto, args: argparse.Namespace) -> dict:
    pid = broker.proc.pid
    out = {"load_average_before": os.getloadavg()}
    out["ceiling_c"] = ceiling_c(broker.port, pid, args.publishers, args.devices, args.windows)
    out["ceiling_paho"] = ceiling_paho(broker.port, pid, args.publishers, args.devices, args.windows)
    out["one_fog_full"] = pipeline(broker.port, pid, 1, args.publishers, args.devices, args.windows, "FULL")
    out["one_fog_normal"] = pipeline(broker.port, pid, 1, args.publishers, args.devices, args.windows, "NORMAL")
    if args.two_fogs:
        out["two_fogs_full"] = pipeline(broker.port, pid, 2, args.publishers, args.devices // 2, args.windows)
    out["load_average_after"] = os.getloadavg()
    c, paho = out["ceiling_c"]["rate"], out["ceiling_paho"]["rate"]
    for name in ("one_fog_full", "one_fog_normal", "two_fogs_full"):
        if name in out:
            out[name]["vs_c_ceiling"] = out[name]["rate"] / c
            out[name]["vs_paho_ceiling"] = out[name]["rate"] / paho
    out["paho_vs_c_ceiling"] = paho / c
    out["full_vs_normal"] = out["one_fog_full"]["rate"] / out["one_fog_normal"]["rate"]
    return out


def _print_round(k: int, r: dict) -> None:
    print(f"\nround {k + 1}: load average {r['load_average_before'][0]:.1f} before, "
          f"{r['load_average_after'][0]:.1f} after (1-minute)")
    print(f"{'run':<34}{'reports/s':>11}{'/ C ceil':>10}{'/ paho':>8}{'p50 ms':>8}{'p99 ms':>8}{'lost':>6}"
          f"{'busy':>6}  CPU us per report")
    rows = [("ceiling: C sub (mosquitto_sub)", r["ceiling_c"]), ("ceiling: paho sub", r["ceiling_paho"]),
            ("one fog, synchronous=FULL", r["one_fog_full"]), ("one fog, synchronous=NORMAL", r["one_fog_normal"])]
    if "two_fogs_full" in r:
        rows.append(("two fogs (half each), FULL", r["two_fogs_full"]))
    c, paho = r["ceiling_c"]["rate"], r["ceiling_paho"]["rate"]
    for name, x in rows:
        p50 = f"{x['latency_p50_ms']:.0f}" if x.get("latency_p50_ms") is not None else ""
        p99 = f"{x['latency_p99_ms']:.0f}" if x.get("latency_p99_ms") is not None else ""
        lost = str(x["lost"]) if "lost" in x else ""
        busy = f"{x['busy_cores']:.2f}" if "busy_cores" in x else ""
        cpu = ", ".join(f"{g} {us:.1f}" for g, us in x.get("cpu_us_per_report", {}).items())
        print(f"{name:<34}{x['rate']:>11,.0f}{x['rate'] / c:>10.2f}{x['rate'] / paho:>8.2f}{p50:>8}{p99:>8}"
              f"{lost:>6}{busy:>6}  {cpu}")
    print(f"synchronous FULL / NORMAL: {r['full_vs_normal']:.2f}"
          + (f"; two fogs / one fog: {r['two_fogs_full']['rate'] / r['one_fog_full']['rate']:.2f}"
             if "two_fogs_full" in r else ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=10_000, help="reports per window (devices per region)")
    ap.add_argument("--windows", type=int, default=20, help="windows (timestamps) per region")
    ap.add_argument("--publishers", type=int, default=3, help="load-generator processes")
    ap.add_argument("--rounds", type=int, default=1, help="repeat every run this many times, interleaved")
    ap.add_argument("--no-two-fogs", dest="two_fogs", action="store_false", help="leave out the two-fog run")
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
    print(f"cores: {os.cpu_count()}; windows of {args.devices} reports, {args.windows} windows; "
          f"{args.publishers} load-generator processes")
    for k, r in enumerate(rounds):
        _print_round(k, r)
    summary = {key: statistics.median(r["one_fog_full"][key] for r in rounds)
               for key in ("vs_c_ceiling", "vs_paho_ceiling")}
    summary["full_vs_normal"] = statistics.median(r["full_vs_normal"] for r in rounds)
    summary["paho_vs_c_ceiling"] = statistics.median(r["paho_vs_c_ceiling"] for r in rounds)
    print(f"\nmedian over {len(rounds)} round(s): one fog (FULL) / C ceiling {summary['vs_c_ceiling']:.2f}, "
          f"/ paho ceiling {summary['vs_paho_ceiling']:.2f}; FULL / NORMAL {summary['full_vs_normal']:.2f}; "
          f"paho / C ceiling {summary['paho_vs_c_ceiling']:.2f}")
    if args.json:
        print(json.dumps({"rounds": rounds, "median": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
