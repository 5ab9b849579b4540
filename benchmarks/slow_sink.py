"""A slow sink must not slow acknowledgement: the fog's report-to-PUBACK
latency with a sink that takes 2 s per window, against the same run with an
instant sink (the no-stall baseline), same load, same broker.

    python benchmarks/slow_sink.py [--rate 2000] [--seconds 20] [--sink-delay 2] [--json]

Report-to-PUBACK: from the moment the fog's MQTT client received a report
(paho stamps each message on arrival) to the moment the fog acknowledged it
to the broker, which it does only after the report is journaled (fsynced).
Real Mosquitto, a real fog (in this process, so its acks can be timed), a
paced load generator; the sink is the in-memory one with a delay, standing in
for a slow Kafka or broker on the forwarding side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from fog_shuffler.config import FogConfig  # noqa: E402
from fog_shuffler.service import FogService  # noqa: E402
from rase_common.channels import MemorySink  # noqa: E402
from rase_common.clock import WallClock  # noqa: E402
from simulators.brokers import Mosquitto  # noqa: E402
from simulators.loadgen import publish_paced  # noqa: E402

DEVICES = 200          # per window: every device reports every period
PERIOD_S = 1.0


class TimedFog(FogService):
    """The fog, with each acknowledgement's delay since arrival recorded."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ack_delays_s: list[float] = []

    async def open(self, stack):  # noqa: ANN001
        await super().open(stack)
        ack = self.source.ack

        def timed_ack(items) -> None:  # noqa: ANN001
            now = time.monotonic()
            self.ack_delays_s.extend(now - m.timestamp for m in items if m.topic.startswith("rase/v1/reports/"))
            ack(items)
        self.source.ack = timed_ack


def run(rate: float, seconds: float, sink_delay_s: float, work: Path) -> dict:
    broker = Mosquitto(work / f"mosquitto-{sink_delay_s}").start()
    devices = [f"d{i:04d}" for i in range(DEVICES)]
    cfg = FogConfig.load(None, name=f"slow{int(sink_delay_s * 10)}", regions={"r1": {"devices": devices}},
                         period_s=PERIOD_S, k_min=10, lateness_periods=1, journal_path=work / f"fog-{sink_delay_s}.db",
                         broker={"port": broker.port})
    sink = MemorySink(delay_s=sink_delay_s)
    fog = TimedFog(cfg, sink=sink, clock=WallClock())
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    thread = threading.Thread(target=lambda: loop.run_until_complete(fog.run(stop)), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not fog.subscribed and time.monotonic() < deadline:
            time.sleep(0.05)
        # Steady reports: each device once per period, t from the fog's clock.
        n_periods = int(seconds / PERIOD_S)
        t0 = int(time.time() // PERIOD_S) + 1
        msgs = [(f"rase/v1/reports/r1/{d}", json.dumps({"v": 1, "t": t0 + k, "y": 1.0, "eps": 1.0, "seq": k}))
                for k in range(n_periods) for d in devices]
        paced_rate = min(rate, len(devices) / PERIOD_S)
        while time.time() < t0 * PERIOD_S:
            time.sleep(0.001)
        publish_paced(broker.port, f"slow-load-{sink_delay_s}", msgs, paced_rate)
        deadline = time.monotonic() + 30
        while len(fog.ack_delays_s) < len(msgs) and time.monotonic() < deadline:
            time.sleep(0.05)
        windows_sent = fog.windows_sent
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        broker.stop()
    d = np.asarray(fog.ack_delays_s) * 1000
    return {"sink_delay_s": sink_delay_s, "reports": len(msgs), "acked": int(d.size), "windows_sent": windows_sent,
            "ack_p50_ms": float(np.percentile(d, 50)), "ack_p99_ms": float(np.percentile(d, 99)),
            "ack_max_ms": float(d.max())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=DEVICES / PERIOD_S, help="reports per second (default %(default)s)")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each run")
    ap.add_argument("--sink-delay", type=float, default=2.0, help="seconds the slow sink takes per window")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = run(args.rate, args.seconds, 0.0, Path(tmp))
        slow = run(args.rate, args.seconds, args.sink_delay, Path(tmp))
    ratio = slow["ack_p99_ms"] / base["ack_p99_ms"]
    print(f"{'sink':>14} {'reports':>8} {'acked':>8} {'windows':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for r, name in ((base, "instant"), (slow, f"{args.sink_delay:g} s/window")):
        print(f"{name:>14} {r['reports']:>8} {r['acked']:>8} {r['windows_sent']:>8} {r['ack_p50_ms']:>8.1f} "
              f"{r['ack_p99_ms']:>8.1f} {r['ack_max_ms']:>8.1f}")
    print(f"p99 report-to-PUBACK with the slow sink / without: {ratio:.2f} (target <= 2)")
    if args.json:
        print(json.dumps({"benchmark": "slow_sink", "baseline": base, "slow": slow, "p99_ratio": ratio}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
