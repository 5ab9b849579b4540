"""The fog's ingest with attacker detection on and off: CPU time per report of
FogService.roles.ingest (validation, windows, the detector's update, one
journal commit per batch, the acknowledgements) for a fleet of Duchi
devices, against the same reports with detection off, measured in the same
run (alternating, best of 3; CPU time, not wall time, because the machine
is shared: the journal's fsync waits are left out of both).

    python benchmarks/fog_detection.py [--devices 2000] [--periods 10] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from fog_shuffler.config import FogConfig  # noqa: E402
from fog_shuffler.service import BATCH, FogService  # noqa: E402
from rase_common.channels import MemorySink, MemorySource, Message  # noqa: E402
from rase_common.clock import ManualClock  # noqa: E402
from rase_common.mechanisms import Setting, mechanism  # noqa: E402


def messages(devices: list[str], periods: int) -> list[list[Message]]:
    rng = np.random.default_rng(1)
    out = []
    for t in range(periods):
        ys = mechanism("duchi").sample(Setting(), 1.0, rng.exponential(50.0, len(devices)), rng)
        out.append([Message(f"rase/v1/reports/r1/{d}", json.dumps({"v": 1, "t": t, "y": float(y), "eps": 1.0,
                                                                   "seq": t}).encode(), mid=i)
                    for i, (d, y) in enumerate(zip(devices, ys))])
    return out


async def seconds_per_report(devices: list[str], batches: list[list[Message]], detection: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = FogConfig.load(None, name="bench", regions={"r1": {"devices": devices}}, device_mechanism="duchi",
                             lateness_periods=len(batches) + 2, journal_path=Path(tmp) / "fog.sqlite",
                             detection={"enabled": detection})
        clock = ManualClock(0.0)
        fog = FogService(cfg, clock=clock, source=MemorySource(), sink=MemorySink())
        async with contextlib.AsyncExitStack() as stack:
            await fog.open(stack)
            total = 0.0
            for t, period in enumerate(batches):
                clock.set(t * cfg.period_s + 1.0)
                for i in range(0, len(period), BATCH):
                    chunk = [(m, t) for m in period[i:i + BATCH]]
                    t0 = time.process_time()
                    fog.source.ack(fog.roles.ingest(chunk))
                    total += time.process_time() - t0
            assert fog.metrics.value("reports_accepted") == sum(len(p) for p in batches)
    return total / sum(len(p) for p in batches)


def run(n_devices: int, periods: int, repeat: int = 3) -> dict:
    devices = [f"d{i:06d}" for i in range(n_devices)]
    batches = messages(devices, periods)
    off, on = [], []
    for _ in range(repeat):
        off.append(asyncio.run(seconds_per_report(devices, batches, False)))
        on.append(asyncio.run(seconds_per_report(devices, batches, True)))
    return {"devices": n_devices, "reports": n_devices * periods, "off_us_per_report": min(off) * 1e6,
            "on_us_per_report": min(on) * 1e6, "on_over_off": min(on) / min(off)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--devices", type=int, default=2000)
    p.add_argument("--periods", type=int, default=10)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    r = run(args.devices, args.periods)
    print(f"fog ingest, {r['reports']} Duchi reports from {r['devices']} devices (batches of {BATCH}, one journal "
          "commit each), best of 3")
    print(f"{'detection':<12}{'us/report':>10}")
    print(f"{'off':<12}{r['off_us_per_report']:>10.1f}")
    print(f"{'on':<12}{r['on_us_per_report']:>10.1f}   ({r['on_over_off']:.2f}x)")
    if args.json:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
