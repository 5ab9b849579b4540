"""End to end: publisher processes (as devices) -> Mosquitto -> `rase fog`
process(es) -> `rase fusion` process -> a subscriber, all real processes on
loopback, against the same broker's raw ceiling measured in the same run.

    python benchmarks/end_to_end.py [--devices 10000] [--windows 20] [--publishers 3] [--json]

Measured:
- ceiling: P load-generator processes -> Mosquitto -> one paho subscriber,
  QoS 1, the same payloads (the rate the subscriber receives them). The load
  generators write pre-encoded MQTT PUBLISH packets over plain sockets, so
  they cost the machine little and the subscriber, not the publishers, is
  the limit (three paho publishers managed ~8,000 msg/s on two cores);
- one fog: sustained reports/s from the first report published to the last
  window seen, windows of `--devices` reports (each closes as soon as all its
  registered devices reported), window-close-to-aggregate latency p50/p99
  (window seen on rase/v1/windows -> its aggregate seen, same subscriber),
  and reports lost (sent - sum of n over aggregates; must be 0);
- two fogs, one region each, the same total load.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import paho.mqtt.client as mqtt  # noqa: E402

from edge_agent import wire  # noqa: E402
from simulators.brokers import Mosquitto, free_port, wait_port  # noqa: E402
from simulators.loadgen import publish_all  # noqa: E402

PERIOD_S = 1.0
LATENESS = 100_000          # windows close only when all their devices reported


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
    """Counts reports, and times windows and aggregates by t."""

    def __init__(self, port: int, topics: list[str]):
        self.lock = threading.Lock()
        self.count = 0
        self.first = self.last = None
        self.windows: dict[tuple[str, int], float] = {}
        self.aggregates: dict[int, tuple[float, int]] = {}
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

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def _run_publishers(port: int, per_proc: list[list[tuple[str, str]]]) -> float:
    start_at = time.time() + 1.0
    procs = [mp.Process(target=publish_all, args=(port, f"bench-pub-{i}-{os.getpid()}", msgs, start_at))
             for i, msgs in enumerate(per_proc)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"a load generator failed (exit codes {[p.exitcode for p in procs]})")
    return start_at


def ceiling(port: int, publishers: int, devices: int, windows: int) -> dict:
    sub = Subscriber(port, ["rase/v1/reports/#"])
    parts = [_reports(["c1"], devices, windows, 1, i, publishers) for i in range(publishers)]
    total = sum(len(p) for p in parts)
    _run_publishers(port, parts)
    deadline = time.time() + 60
    while sub.count < total and time.time() < deadline:
        time.sleep(0.05)
    sub.close()
    secs = sub.last - sub.first
    return {"messages": total, "received": sub.count, "seconds": secs, "rate": sub.count / secs}


def _write_configs(work: Path, port: int, regions: list[str], devices: int, fog_groups: list[list[str]]) -> list[Path]:
    fusion = work / "fusion.toml"
    fusion.write_text(f'name = "bench"\nregions = {json.dumps(regions)}\nmerge_deadline_s = 30\n'
                      f'store_path = "{work}/fusion.sqlite"\ntick_s = 0.01\n'
                      f"[precision]\nperiod_s = {PERIOD_S}\n[broker]\nport = {port}\n")
    paths = [fusion]
    for i, owned in enumerate(fog_groups):
        text = (f'name = "bench-fog{i}"\nperiod_s = {PERIOD_S}\nepoch0 = 0\nlateness_periods = {LATENESS}\n'
                f'k_min = 10\njournal_path = "{work}/fog{i}.sqlite"\ntick_s = 0.01\n[broker]\nport = {port}\n')
        for region in owned:
            devs = [_device(region, d) for d in range(devices)]
            groups = [devs[j:j + 9] for j in range(0, devices, 9)]
            text += f"[regions.{region}]\ngroups = {json.dumps(groups)}\n"
        p = work / f"fog{i}.toml"
        p.write_text(text)
        paths.append(p)
    return paths


def _start(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rase.cli", "--log-level", "WARNING", *args],
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, cwd=ROOT)


class CpuSampler:
    """Every 50 ms: the machine's busy jiffies (/proc/stat) and the fog
    processes' CPU time, so a run can say how many cores were busy and how
    many reports a fog takes per CPU second (Linux only; empty elsewhere)."""

    def __init__(self, pids: list[int]):
        self.pids = pids
        self.samples: list[tuple[float, float, float, float]] = []   # (time, busy, total, fog cpu) in seconds
        self._stop = threading.Event()
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _read(self):
        try:
            cpu = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
            fog = 0
            for pid in self.pids:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                fog += int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            return None
        cpu = cpu[:8]       # user .. steal; guest and guest_nice are already inside user and nice
        idle = cpu[3] + cpu[4]
        return time.time(), (sum(cpu) - idle) / self._tick, sum(cpu) / self._tick, fog / self._tick

    def _run(self) -> None:
        while not self._stop.is_set():
            s = self._read()
            if s:
                self.samples.append(s)
            time.sleep(0.05)

    def between(self, t_from: float, t_to: float) -> dict:
        self._stop.set()
        inside = [s for s in self.samples if t_from <= s[0] <= t_to]
        if len(inside) < 2:
            return {}
        a, b = inside[0], inside[-1]
        return {"busy_cores": (b[1] - a[1]) / (b[2] - a[2]) * (os.cpu_count() or 1),
                "fog_cpu_s": b[3] - a[3], "window_s": b[0] - a[0]}


def pipeline(port: int, fogs: int, publishers: int, devices: int, windows: int) -> dict:
    """`fogs` fog processes, one region each, each region `devices` devices."""
    regions = [f"r{i + 1}" for i in range(fogs)]
    with tempfile.TemporaryDirectory(prefix="rase-e2e-") as tmp:
        work = Path(tmp)
        fusion_cfg, *fog_cfgs = _write_configs(work, port, regions, devices, [[r] for r in regions])
        procs = [_start(["fusion", "--config", str(fusion_cfg)], work / "fusion.log")]
        procs += [_start(["fog", "--config", str(c)], work / f"{c.stem}.log") for c in fog_cfgs]
        sub = Subscriber(port, ["rase/v1/windows/#", "rase/v1/aggregates/t/#"])
        cpu = CpuSampler([p.pid for p in procs[1:]])
        try:
            time.sleep(3.0)   # services connected and subscribed
            t0 = int(time.time() // PERIOD_S) - LATENESS // 2
            parts = [_reports(regions, devices, windows, t0, i, publishers) for i in range(publishers)]
            sent = sum(len(p) for p in parts)
            started = _run_publishers(port, parts)
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
        use = cpu.between(started, last_window)
        if use:
            # The fogs' CPU over the sampled span, scaled to the whole run.
            use["reports_per_fog_cpu_s"] = sent / (use["fog_cpu_s"] * secs / use["window_s"])
        return {"fogs": fogs, "reports": sent, "seconds": secs, "rate": sent / secs, **use,
                "windows": len(sub.windows), "aggregates": len(sub.aggregates), "lost": sent - n_agg,
                "latency_ms_in_t_order": [round(1000 * v) for v in by_t.values()],
                "latency_p50_ms": 1000 * lat[len(lat) // 2] if lat else None,
                "latency_p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=10_000, help="reports per window (devices per region)")
    ap.add_argument("--windows", type=int, default=20, help="windows (timestamps) per region")
    ap.add_argument("--publishers", type=int, default=3, help="load-generator processes")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rase-e2e-broker-") as tmp:
        broker = Mosquitto(Path(tmp)).start()
        try:
            ceil = ceiling(broker.port, args.publishers, args.devices, args.windows)
            one = pipeline(broker.port, 1, args.publishers, args.devices, args.windows)
            two = pipeline(broker.port, 2, args.publishers, args.devices // 2, args.windows)
        finally:
            broker.stop()
    print(f"cores: {os.cpu_count()}; windows of {args.devices} reports; {args.publishers} load-generator processes")
    print(f"{'run':<34}{'reports/s':>12}{'vs ceiling':>12}{'p50 ms':>10}{'p99 ms':>10}{'lost':>7}"
          f"{'busy cores':>12}{'per fog CPU s':>15}")
    print(f"{'ceiling: pubs -> Mosquitto -> 1 sub':<34}{ceil['rate']:>12,.0f}{1.0:>12.2f}")
    for name, r in (("one fog", one), ("two fogs (half the devices each)", two)):
        p50 = f"{r['latency_p50_ms']:.0f}" if r["latency_p50_ms"] is not None else "-"
        p99 = f"{r['latency_p99_ms']:.0f}" if r["latency_p99_ms"] is not None else "-"
        busy = f"{r['busy_cores']:.2f}" if "busy_cores" in r else "-"
        per_cpu = f"{r['reports_per_fog_cpu_s']:,.0f}" if "reports_per_fog_cpu_s" in r else "-"
        print(f"{name:<34}{r['rate']:>12,.0f}{r['rate'] / ceil['rate']:>12.2f}{p50:>10}{p99:>10}{r['lost']:>7}"
              f"{busy:>12}{per_cpu:>15}")
    print(f"two fogs / one fog: {two['rate'] / one['rate']:.2f}")
    if args.json:
        print(json.dumps({"ceiling": ceil, "one_fog": one, "two_fogs": two,
                          "one_fog_vs_ceiling": one["rate"] / ceil["rate"],
                          "two_fogs_vs_one": two["rate"] / one["rate"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
