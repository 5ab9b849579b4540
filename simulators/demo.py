"""`rase demo`: zero-setup run on an embedded broker with the bundled REFIT excerpt.

Until the fog and fusion center land, the demo runs the real edge agents of
two REFIT houses at high speed and prints what they publish.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections import Counter
from pathlib import Path

from edge_agent.config import AgentConfig
from edge_agent.schema import Report
from edge_agent.service import AgentService
from simulators.embedded_broker import EmbeddedBroker
from simulators.refit import RefitColumnSource, bundled_dir, epoch0_of, load_house
from rase.clock import ScaledClock

DEMO_HOUSES = (1, 2)
SPEEDUP = 160.0  # one 8 s REFIT period every 50 ms


async def run_demo(out_dir: Path, periods: int = 300) -> int:
    logging.getLogger("edge_agent").setLevel(logging.WARNING)
    out_dir.mkdir(parents=True, exist_ok=True)
    houses = [load_house(bundled_dir(), h) for h in DEMO_HOUSES]
    epoch0 = epoch0_of(houses, 8.0)
    async with EmbeddedBroker() as broker:
        print(f"embedded MQTT broker on {broker.url}; replaying REFIT houses {DEMO_HOUSES} at {SPEEDUP:.0f}x")
        import paho.mqtt.client as mqtt

        got: list[tuple[str, bytes]] = []
        sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="demo-subscriber")
        sub.on_message = lambda c, u, m: got.append((m.topic, m.payload))
        sub.connect(broker.host, broker.port)
        sub.subscribe("rase/v1/reports/#", qos=1)
        sub.loop_start()
        clock = ScaledClock(epoch0, SPEEDUP)
        services = []
        for h in houses:
            for dev in h.device_ids():
                cfg = AgentConfig.load(None, device=dev, region="r1", eps=1.0, period_s=8.0, epoch0=epoch0,
                                       ledger_path=out_dir / "ledgers" / f"{dev}.json",
                                       broker={"host": broker.host, "port": broker.port})
                services.append(AgentService(cfg, source=RefitColumnSource(h, dev), clock=clock))
        stop = asyncio.Event()
        tasks = [asyncio.create_task(s.run(stop)) for s in services]
        t_end = epoch0 + periods * 8.0
        while clock.now() < t_end:
            done = int((clock.now() - epoch0) / 8.0)
            print(f"\r  t={done:>5}/{periods}  reports received: {len(got):>7}", end="", file=sys.stderr)
            await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(*tasks)
        await asyncio.sleep(0.5)
        sub.disconnect()
        sub.loop_stop()
        print(file=sys.stderr)
    per_dev = Counter(topic.rsplit("/", 1)[-1] for topic, _ in got)
    reports = [Report.model_validate_json(p) for _, p in got]
    (out_dir / "reports.jsonl").write_text("".join(
        json.dumps({"topic": t, **json.loads(p)}) + "\n" for t, p in got))
    print(f"devices: {len(per_dev)}  reports: {len(reports)}  "
          f"clamped to a bound: {sum(r.y in (0.0, 4000.0) for r in reports)}")
    for t, p in got[:5]:
        print(f"  {t}  {p.decode()}")
    print(f"all reports written to {out_dir / 'reports.jsonl'}")
    return 0 if reports else 1
