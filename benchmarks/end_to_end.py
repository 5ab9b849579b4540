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
- two fogs, one region each, the same total load;
- with `--mechanism prio3`, beside the local-DP path in the same run: the
  secure-aggregation mode (the fog as Prio3's leader, the fusion center as
  helper, Prio3Sum reports of 12-bit readings, noise on), one fog:
  sustained reports/s (to the last batch forwarded, and to the last
  aggregate), window-close-to-aggregate latency p50/p99 (the leader's close
  work, from the fog's log, plus batch seen -> aggregate seen: both
  aggregators' verification, the exchange of verifier shares and the
  shares), and reports lost. The load generators make the reports before
  the start (rase_common.vdaf.fast_client: the device's bytes, faster).
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


class Prio3Reports:
    """Picklable: makes this load generator's share of the Prio3Sum reports
    (every window's reports of devices part::parts), sealed to the helper's key."""

    def __init__(self, public_key: str, max_measurement: int, region: str, devices: int, windows: int, t0: int,
                 part: int, parts: int):
        self.args = (public_key, max_measurement, region, devices, windows, t0, part, parts)

    def __call__(self) -> list[tuple[str, str]]:
        from edge_agent.prio3 import prio3_sum
        from edge_agent.secagg import encode_report, report_ctx
        from rase_common.vdaf.fast_client import FastPrio3, fast_make_report

        pk, top, region, devices, windows, t0, part, parts = self.args
        vdaf = FastPrio3(prio3_sum(top))
        out = []
        for k in range(windows):
            ctx = report_ctx(region, "per-t", t0 + k)
            for i in range(part, devices, parts):
                m = (i * 37 + k * 11) % (top + 1)
                report = fast_make_report(vdaf, ctx, m, bytes.fromhex(pk))
                out.append((wire.report_topic(region, _device(region, i)), encode_report(t0 + k, 1.0, k + 1, report)))
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
                if w.get("type") in ("prio3_batch", "prio3_share"):    # the first batch part: the window closed
                    if w["type"] == "prio3_batch":
                        self.windows.setdefault((w["region"], w["t"]), now)
                        self.last = now
                    return
                self.windows[(w["region"], w["t"])] = now
                self.last = now
            elif msg.topic.startswith("rase/v1/aggregates/t/"):
                a = json.loads(msg.payload)
                self.aggregates[a["t"]] = (now, a["n"])

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def _run_publishers(port: int, per_proc: list, made_first: bool = False,
                    pace: list[tuple[int, float]] | None = None) -> float:
    """Start the load generators together; the start time. made_first: each
    makes its messages first (prio3 reports are dear), then all start at once.
    pace: per load generator, (its messages per window, seconds between windows)."""
    barrier = mp.Barrier(len(per_proc) + 1) if made_first else None
    start_at = barrier or time.time() + 1.0
    procs = [mp.Process(target=publish_all, args=(port, f"bench-pub-{i}-{os.getpid()}", msgs, start_at,
                                                   pace[i] if pace else None))
             for i, msgs in enumerate(per_proc)]
    for p in procs:
        p.start()
    if barrier is not None:
        barrier.wait(timeout=1800)
        start_at = time.time()
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


def _write_configs(work: Path, port: int, regions: list[str], devices: int, fog_groups: list[list[str]],
                   keys: dict | None = None) -> list[Path]:
    """keys (rase_common.secagg.write_keys): a prio3 deployment, Prio3Sum on the 0..4000 W grid, eps 1 per release."""
    fusion = work / "fusion.toml"
    prio3 = ""
    if keys:
        prio3 = (f'eps_levels = [1.0]\nmechanism = "prio3"\n[precision.prio3]\nkind = "sum"\nmax_measurement = 4000\n'
                 f'dp_eps = 1.0\nkey_id = "{keys["key_id"]}"\n')
    fusion.write_text(f'name = "bench"\nregions = {json.dumps(regions)}\nmerge_deadline_s = 30\n'
                      f'store_path = "{work}/fusion.sqlite"\ntick_s = 0.01\n'
                      f"[precision]\nperiod_s = {PERIOD_S}\n{prio3}[broker]\nport = {port}\n"
                      + (f'[prio3]\nprivate_key_file = "{keys["private_key_file"]}"\nkey_id = "{keys["key_id"]}"\n'
                         f'verify_key_file = "{keys["verify_key_file"]}"\n' if keys else ""))
    paths = [fusion]
    for i, owned in enumerate(fog_groups):
        text = (f'name = "bench-fog{i}"\nperiod_s = {PERIOD_S}\nepoch0 = 0\nlateness_periods = {LATENESS}\n'
                f'k_min = 10\njournal_path = "{work}/fog{i}.sqlite"\ntick_s = 0.01\n'
                + ('device_mechanism = "prio3"\neps_levels = [1.0]\n' if keys else "")
                + f"[broker]\nport = {port}\n")
        if keys:
            text += (f'[prio3]\nverify_key_file = "{keys["verify_key_file"]}"\n[prio3.params]\nkind = "sum"\n'
                     f'max_measurement = 4000\ndp_eps = 1.0\nkey_id = "{keys["key_id"]}"\n')
        for region in owned:
            devs = [_device(region, d) for d in range(devices)]
            groups = [devs[j:j + 9] for j in range(0, devices, 9)]
            text += f"[regions.{region}]\ngroups = {json.dumps(groups)}\n"
        p = work / f"fog{i}.toml"
        p.write_text(text)
        paths.append(p)
    return paths


READY = {"fog": "fog subscribed", "fusion": "fusion subscribed"}


def _wait_ready(logs: list[Path], timeout_s: float = 120.0) -> None:
    """Until every service logged its subscription (a loaded machine starts them slowly)."""
    deadline = time.time() + timeout_s
    for log in logs:
        word = READY["fog" if log.stem.startswith("fog") else "fusion"]
        while not (log.exists() and word in log.read_text()):
            if time.time() > deadline:
                raise RuntimeError(f"{log.stem} did not subscribe within {timeout_s:.0f} s:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)


def _start(args: list[str], log: Path, level: str = "INFO") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rase.cli", "--log-level", level, *args],
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


def _stop(sub: Subscriber, procs: list[subprocess.Popen]) -> None:
    sub.close()
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(15)


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
            _wait_ready([work / "fusion.log"] + [work / f"{c.stem}.log" for c in fog_cfgs])
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
            _stop(sub, procs)
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


def secure_pipeline(port: int, publishers: int, devices: int, windows: int, pace_s: float | None = None) -> dict:
    """One fog as Prio3's leader and the fusion center as helper; Prio3Sum reports.
    pace_s: a window every pace_s seconds (devices reporting every pace_s), else as fast as possible."""
    import re

    from rase_common.secagg import write_keys

    with tempfile.TemporaryDirectory(prefix="rase-e2e-prio3-") as tmp:
        work = Path(tmp)
        keys = write_keys(work / "keys")
        fusion_cfg, fog_cfg = _write_configs(work, port, ["r1"], devices, [["r1"]], keys)
        procs = [_start(["fusion", "--config", str(fusion_cfg)], work / "fusion.log"),
                 _start(["fog", "--config", str(fog_cfg)], work / "fog.log")]
        sub = Subscriber(port, ["rase/v1/windows/#", "rase/v1/aggregates/t/#"])
        cpu = CpuSampler([procs[1].pid])
        try:
            _wait_ready([work / "fusion.log", work / "fog.log"])
            t0 = int(time.time() // PERIOD_S) - LATENESS // 2
            parts = [Prio3Reports(keys["public_key"], 4000, "r1", devices, windows, t0, i, publishers)
                     for i in range(publishers)]
            sent = devices * windows
            pace = [(len(range(i, devices, publishers)), pace_s) for i in range(publishers)] if pace_s else None
            started = _run_publishers(port, parts, made_first=True, pace=pace)
            deadline = time.time() + 180 + windows * (pace_s or 0)
            while len(sub.aggregates) < windows and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
        finally:
            _stop(sub, procs)
        closes = [float(x) for x in re.findall(r"batch queued in ([0-9.]+) s", (work / "fog.log").read_text())]
        by_t = {t: at - sub.windows[("r1", t)] for t, (at, _n) in sub.aggregates.items() if ("r1", t) in sub.windows}
        lat = sorted(v + max(closes, default=0.0) for v in by_t.values())
        n_agg = sum(n for _at, n in sub.aggregates.values())
        last_batch = max(sub.windows.values()) if sub.windows else float("nan")
        last_agg = max(at for at, _n in sub.aggregates.values()) if sub.aggregates else float("nan")
        use = cpu.between(started, last_batch)
        return {"reports": sent, "seconds": last_batch - started, "rate": sent / (last_batch - started),
                "rate_to_last_aggregate": sent / (last_agg - started), "windows": len(sub.windows),
                "aggregates": len(sub.aggregates), "lost": sent - n_agg, **use,
                "close_s_max": max(closes, default=None), "close_s_mean": sum(closes) / len(closes) if closes else None,
                "batch_to_aggregate_ms_in_t_order": [round(1000 * v) for v in by_t.values()],
                "latency_p50_ms": 1000 * lat[len(lat) // 2] if lat else None,
                "latency_p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=10_000, help="reports per window (devices per region)")
    ap.add_argument("--windows", type=int, default=20, help="windows (timestamps) per region")
    ap.add_argument("--publishers", type=int, default=3, help="load-generator processes")
    ap.add_argument("--mechanism", choices=["br", "prio3"], default="br",
                    help="prio3: the secure-aggregation mode too, beside the local-DP (BR) path in the same run")
    ap.add_argument("--prio3-windows", type=int, default=8, help="prio3: windows of --devices reports")
    ap.add_argument("--prio3-pace", type=float, default=8.0,
                    help="prio3 latency run: a window every this many seconds, as devices reporting every period "
                         "(default %(default)s; the throughput run sends as fast as possible)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rase-e2e-broker-") as tmp:
        broker = Mosquitto(Path(tmp)).start()
        try:
            ceil = ceiling(broker.port, args.publishers, args.devices, args.windows)
            one = pipeline(broker.port, 1, args.publishers, args.devices, args.windows)
            two = pipeline(broker.port, 2, args.publishers, args.devices // 2, args.windows)
            secure = paced = None
            if args.mechanism == "prio3":
                secure = secure_pipeline(broker.port, args.publishers, args.devices, args.prio3_windows)
                paced = secure_pipeline(broker.port, args.publishers, args.devices, args.prio3_windows,
                                        pace_s=args.prio3_pace)
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
    if secure is not None:
        r = secure
        print(f"{'prio3, one fog (to last batch)':<34}{r['rate']:>12,.0f}{r['rate'] / ceil['rate']:>12.2f}"
              f"{r['latency_p50_ms'] or float('nan'):>10.0f}{r['latency_p99_ms'] or float('nan'):>10.0f}"
              f"{r['lost']:>7}{r.get('busy_cores', float('nan')):>12.2f}")
        print(f"{'prio3, to last aggregate':<34}{r['rate_to_last_aggregate']:>12,.0f}"
              f"{r['rate_to_last_aggregate'] / ceil['rate']:>12.2f}")
        print(f"prio3 / local DP (one fog): {r['rate'] / one['rate']:.2f}; leader close (shuffle, verify_init, "
              f"journal) per window: mean {r['close_s_mean']:.3f} s, max {r['close_s_max']:.3f} s (in the latency)")
        p = paced
        print(f"prio3, a window every {args.prio3_pace:g} s: close-to-aggregate p50 {p['latency_p50_ms']:.0f} ms, "
              f"p99 {p['latency_p99_ms']:.0f} ms, lost {p['lost']}; leader close mean {p['close_s_mean']:.3f} s")
    print(f"two fogs / one fog: {two['rate'] / one['rate']:.2f}")
    if args.json:
        out = {"ceiling": ceil, "one_fog": one, "two_fogs": two, "one_fog_vs_ceiling": one["rate"] / ceil["rate"],
               "two_fogs_vs_one": two["rate"] / one["rate"]}
        if secure is not None:
            out.update(prio3=secure, prio3_paced=paced, prio3_vs_local=secure["rate"] / one["rate"])
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
