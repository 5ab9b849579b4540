"""What Mosquitto's persistence settings cost and what they protect.

    python benchmarks/broker_persistence.py [--rate 3000] [--kills 4] [--json]

For each setting (Mosquitto's default autosave_interval 1800 s,
autosave_interval 1, and autosave_on_changes with 1000, 100 and 1 changes), on a
real Mosquitto (max_queued_messages 0, max_inflight_messages 0, as shipped):

- cost: QoS 1 messages/s through the broker to one subscriber (the fog's
  session, the fog's own paho client) with the publisher unthrottled, and
  the broker's CPU seconds per 10,000 messages; messages/s the broker
  acknowledges while the fog is away and its session queues (each snapshot
  then holds the whole queue), and the time the fog takes to drain it;
  ratios against the default measured in the same run. One paho publisher
  is the limit of the first number (about 4,500 msg/s here), not the broker;
- protection, at `--rate` reports/s: lost = messages the broker acknowledged
  (PUBACK) and the subscriber never received, over `--kills` SIGKILLs of the
  broker while the fog is connected, and over two SIGKILLs while the fog is
  away (restarting) and reports wait in its session; and how many of those
  were acknowledged outside the 2.5 s before a crash (after a restart, or
  earlier): the part a snapshot every 2 s should have kept.

Publisher and subscriber are tests/integration/broker_load.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulators.broker_load import (  # noqa: E402
    Consumer, PublisherProcess, absent_kills, broker_with, connected_kills, persistence_conf, wait_until)

SETTINGS = [
    ("default (autosave_interval 1800)", persistence_conf(None, False)),
    ("autosave_interval 1", persistence_conf(1, False)),
    ("autosave_on_changes, 1000", persistence_conf(1000, True)),
    ("autosave_on_changes, 100", persistence_conf(100, True)),
    ("autosave_on_changes, 1", persistence_conf(1, True)),
]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(broker, seconds: float) -> dict:
    consumer = Consumer(broker.port, client_id="fog-throughput").start()
    wait_until(consumer.c.is_connected, 10)
    time.sleep(2.5)                       # the session is in a snapshot, as a long-running fog's is
    cpu0 = cpu_s(broker.proc.pid)
    publisher = PublisherProcess(broker.port, 0).start()
    wait_until(lambda: len(consumer.received) > 0, 30)
    t0, n0 = time.monotonic(), len(consumer.received)
    time.sleep(seconds)
    t1, n1 = time.monotonic(), len(consumer.received)
    cpu = cpu_s(broker.proc.pid) - cpu0
    publisher.acked()
    total = len(consumer.received)
    publisher.kill()
    consumer.stop()
    return {"msgs_per_s": (n1 - n0) / (t1 - t0), "cpu_s_per_10k": 10_000 * cpu / max(total, 1)}


def away_throughput(broker, seconds: float) -> dict:
    """The fog away (its session queues): messages/s the broker acknowledges
    while the queue grows for `seconds`, then how long the fog takes to drain it."""
    consumer = Consumer(broker.port, client_id="fog-away").start()
    wait_until(consumer.c.is_connected, 10)
    time.sleep(2.5)
    consumer.stop()
    publisher = PublisherProcess(broker.port, 0).start()
    time.sleep(seconds)
    acked = publisher.acked().keys()
    t0 = time.monotonic()
    consumer.c.reconnect()
    consumer.c.loop_start()
    wait_until(lambda: acked <= consumer.received.keys(), 120)
    drain_s = time.monotonic() - t0
    publisher.kill()
    consumer.stop()
    return {"away_msgs_per_s": len(acked) / seconds, "queued": len(acked), "drain_s": drain_s}


def run(rate: float, kills: int, seconds: float) -> list[dict]:
    rows = []
    for label, extra in SETTINGS:
        with tempfile.TemporaryDirectory() as tmp:
            broker = broker_with(Path(tmp), extra).start()
            try:
                row = {"setting": label, **throughput(broker, seconds), **away_throughput(broker, 2 * seconds)}
                print(f"  {label}: {row['msgs_per_s']:.0f} msg/s; killing under load ...", file=sys.stderr)
                c = connected_kills(broker, rate, kills, 3.0)
                a = absent_kills(broker, rate, 2, 1.5)
                row.update(connected_acked=c.acked, connected_lost=c.lost, absent_acked=a.acked,
                           absent_lost=a.lost, duplicates=c.duplicates + a.duplicates,
                           # lost although acknowledged more than 2.5 s before a crash, or after a restart
                           connected_lost_outside_2s=len(c.lost_outside(2.5)),
                           absent_lost_outside_2s=len(a.lost_outside(2.5)))
            finally:
                broker.stop()
        rows.append(row)
    for row in rows:
        row["throughput_ratio"] = row["msgs_per_s"] / rows[0]["msgs_per_s"]
        row["away_ratio"] = row["away_msgs_per_s"] / rows[0]["away_msgs_per_s"]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=3000.0, help="reports/s during the kills")
    ap.add_argument("--kills", type=int, default=4, help="SIGKILLs with the fog connected")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of the throughput measurement")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args()
    rows = run(args.rate, args.kills, args.seconds)
    print(f"{'setting':<34}{'msg/s':>7}{'x':>6}{'cpu s/10k':>10}{'away msg/s':>11}{'x':>6}{'drain s':>8}"
          f"{'connected lost/acked':>22}{'away lost/acked':>18}{'  lost outside 2 s (conn., away)':>33}")
    for r in rows:
        print(f"{r['setting']:<34}{r['msgs_per_s']:>7.0f}{r['throughput_ratio']:>6.2f}{r['cpu_s_per_10k']:>10.2f}"
              f"{r['away_msgs_per_s']:>11.0f}{r['away_ratio']:>6.2f}{r['drain_s']:>8.1f}"
              f"{r['connected_lost']:>10}/{r['connected_acked']:<11}{r['absent_lost']:>7}/{r['absent_acked']:<10}"
              f"{r['connected_lost_outside_2s']:>20}, {r['absent_lost_outside_2s']}")
    print(f"(connected: {args.kills} SIGKILLs at {args.rate:.0f} reports/s; fog away: 2 SIGKILLs while its "
          "session queues)")
    if args.json:
        print(json.dumps({"rate": args.rate, "kills": args.kills, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
