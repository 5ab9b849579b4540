"""Every fault of issues 18 and 29 in sequence under load, with the
acknowledged against aggregated accounting: real `rase fog` and `rase fusion`
processes, a real Mosquitto with the shipped config's durability settings, a
load generator that plays the devices' outbox (it keeps each report until the
fog's receipt says it is journaled, and sends it again after a reconnect or
5 s without one; simulators.faults.load), and the fusion center's store read
at the end of each fault. `--puback-only` counts the broker's PUBACK as the
acknowledgement instead (the devices of before issue 29).

    python benchmarks/chaos.py [--rate 3000] [--outage-s 20] [--lateness-periods 1] [--only NAME,...]
                               [--broker-conf configs/mosquitto/mosquitto.conf] [--agents-outage] [--json]

One pipeline runs the whole sequence (as a deployment would live through
it); each fault gets its own stretch of timestamps, with a few seconds of
load before and after the fault, and is accounted on its own:

- acked: distinct reports the fog receipted for those timestamps (with
  --puback-only: that the broker acknowledged);
- aggregated: the sum of n over their stored aggregates (the newest
  revision, once aggregates carry one);
- lost = acked - aggregated per t (summed where positive), twice = the
  reverse (a report counted twice), and of the lost, how many the fog
  rejected as late or out of range (its metrics);
- windows forwarded with two different payloads (a second shuffle) and
  aggregates published with two contents for one (t, revision);
- restarts: planned (the power cut) and unplanned (a process that exited;
  it is started again so the sequence goes on);
- the delay from a timestamp's last report falling due to its aggregate
  being stored, p50 and max, against the no-fault baseline measured first
  in the same run.

Faults, in order: none (the baseline); Mosquitto SIGKILLed 4 times;
a power cut of the fog and the fusion center at once (the faultfs shim:
only fsynced data survives); the fog's disk full for --outage-s, twice: a
tmpfs filled to the last byte (only writes that need new blocks fail, and a
journal in its steady state may need none), then every write refused with
ENOSPC by the shim; the fog's disk read-only for --outage-s (the shim's
EROFS); the broker connection cut while the fog forwards a window and while
the fusion center publishes an aggregate (a TcpProxy cutting at that
packet, once before it reaches the broker and once after); the fog's
acknowledgement lost with its link; the fog's link silent for 5 s. The
agents' 60 s broker outage (issue 18, "late data is data") is a hook, off
unless --agents-outage: with one period of allowed lateness it can only
lose the queued reports.

Issue 29's, after them: Mosquitto SIGKILLed 4 times while the fog is a
second behind (its reports acknowledged and held only in the broker's
memory); four clean-session connections with the fog's client id (what
`use_username_as_clientid` makes of an operator's `mosquitto_sub` with the
fog's user name), and one with the fusion center's while it reconnects;
1,000 TCP connections that never send CONNECT; 40 MiB retained on two
report topics and then a fog restart; three subscribers in a `$share`
group on the fog's report filter; a control message changing the period
without since_t (then the fusion center's put back).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulators.brokers import Mosquitto  # noqa: E402
from simulators.faults.disk import SmallDisk  # noqa: E402
from simulators.faults.load import AckedLoad  # noqa: E402
from simulators.faults.proxy import TcpProxy, puback, publish_to  # noqa: E402
from simulators.faults.rig import Pipeline, PipelineSpec  # noqa: E402

SHIPPED_CONF = ROOT / "configs/mosquitto/mosquitto.conf"
# What decides what a broker crash loses, and the limits: taken from the shipped config as it is.
DURABILITY_KEYS = {"persistence", "autosave_interval", "autosave_on_changes", "max_queued_messages",
                   "max_queued_bytes", "max_inflight_messages", "max_inflight_bytes", "message_size_limit",
                   "max_packet_size", "set_tcp_nodelay", "persistent_client_expiration", "queue_qos0_messages"}
LEAD_S = 4.0          # load before a fault
TAIL_S = 5.0          # load after it


def shipped_mosquitto(workdir: Path, conf: Path = SHIPPED_CONF) -> tuple[Mosquitto, list[str]]:
    """A Mosquitto on a loopback port with the shipped config's durability
    and limit settings; listeners, TLS, passwords and ACL are left out (the
    load generator and the services speak plain MQTT here)."""
    broker = Mosquitto(workdir)
    kept = [line.strip() for line in conf.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#") and line.split()[0] in DURABILITY_KEYS]
    broker.conf_path.write_text(
        f"listener {broker.port} 127.0.0.1\nallow_anonymous true\n"
        + ("user root\n" if os.geteuid() == 0 else "")
        + f"persistence_location {broker.workdir}/\nlog_dest file {broker.log_path}\n"
        "log_type error\nlog_type warning\nlog_type notice\n" + "\n".join(kept) + "\n")
    return broker, kept


class Supervisor:
    """Starts again a service that exited unasked, so the sequence goes on;
    counts the restarts."""

    def __init__(self, rig: Pipeline):
        self.rig = rig
        self.restarts: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for kind in self.rig.restart_exited():
                self.restarts.append((time.monotonic(), kind))
                say(f"  {kind} exited unasked; started again")

    def since(self, t0: float) -> int:
        return sum(1 for at, _ in self.restarts if at >= t0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- the faults: each runs its timeline while the load goes on -----------------------
def fault_none(ctx: "Chaos") -> dict:
    time.sleep(ctx.args.baseline_s)
    return {}


def fault_broker_kills(ctx: "Chaos") -> dict:
    for _ in range(ctx.args.kills):
        ctx.broker.stop(signal.SIGKILL)
        time.sleep(0.5)
        ctx.broker.start()
        time.sleep(4.5)
    return {"kills": ctx.args.kills, "broker_conf": ctx.broker_conf}


def fault_power_cut(ctx: "Chaos") -> dict:
    fog_cut, fusion_cut = ctx.rig.power_cut()
    return {"unsynced_bytes_dropped": fog_cut.total_lost + fusion_cut.total_lost}


def fault_disk_full(ctx: "Chaos") -> dict:
    """A real full disk: only writes that need new blocks fail (a journal
    in its steady state reuses its WAL and free pages and may need none)."""
    if ctx.disk is None:
        return fault_disk_enospc(ctx) | {"how": "faultfs ENOSPC (no tmpfs here: not root)"}
    filled = ctx.disk.fill()
    time.sleep(ctx.args.outage_s)
    ctx.disk.free()
    return {"how": f"tmpfs filled ({filled:,} bytes)"}


def fault_disk_enospc(ctx: "Chaos") -> dict:
    """Every write refused with ENOSPC, whether it needs new blocks or not."""
    ctx.rig.fog_fs.fail_writes("ENOSPC")
    time.sleep(ctx.args.outage_s)
    ctx.rig.fog_fs.fail_writes(None)
    return {"how": "faultfs ENOSPC"}


def fault_disk_read_only(ctx: "Chaos") -> dict:
    ctx.rig.fog_fs.fail_writes("EROFS")
    time.sleep(ctx.args.outage_s)
    ctx.rig.fog_fs.fail_writes(None)
    return {"how": "faultfs EROFS"}


def _cuts(proxy: TcpProxy, direction: str, match, both: bool = True) -> dict:  # noqa: ANN001
    fired = 0
    for deliver in ((False, True) if both else (False,)):
        cut = proxy.cut_on(direction, match, deliver=deliver)
        fired += cut.wait(15)
        time.sleep(2.0)
    return {"cuts": fired}


def fault_drop_forwarding(ctx: "Chaos") -> dict:
    return _cuts(ctx.rig.fog_proxy, "up", publish_to("rase/v1/windows/"))


def fault_drop_publishing(ctx: "Chaos") -> dict:
    return _cuts(ctx.rig.fusion_proxy, "up", publish_to("rase/v1/aggregates/"))


def fault_drop_acknowledging(ctx: "Chaos") -> dict:
    return _cuts(ctx.rig.fog_proxy, "up", puback, both=False)


def fault_silent_link(ctx: "Chaos") -> dict:
    ctx.rig.fog_proxy.silence()
    time.sleep(5.0)
    ctx.rig.fog_proxy.forward()
    return {}


def fault_broker_kills_fog_behind(ctx: "Chaos") -> dict:
    """Each kill while the fog is stopped for a second: a second of reports acknowledged and in memory only."""
    for _ in range(ctx.args.kills):
        ctx.rig.fog.proc.send_signal(signal.SIGSTOP)
        time.sleep(1.0)
        ctx.broker.stop(signal.SIGKILL)
        ctx.rig.fog.proc.send_signal(signal.SIGCONT)
        time.sleep(0.5)
        ctx.broker.start()
        time.sleep(3.5)
    return {"kills": ctx.args.kills}


def _client(port: int, client_id: str = "", clean: bool = True, v5: bool = False):  # noqa: ANN202
    import paho.mqtt.client as mqtt
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                    protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311, **({} if v5 else {"clean_session": clean}))
    c.connect("127.0.0.1", port)
    c.loop_start()
    return c


def _clean_session(port: int, client_id: str, hold_s: float) -> None:
    c = _client(port, client_id)
    time.sleep(hold_s)
    c.disconnect()
    c.loop_stop()


def fault_session_takeover(ctx: "Chaos") -> dict:
    """Four clean sessions with the fog's client id, 1 s each; one with the fusion center's while its link is
    down (its session, and what was queued in it, discarded)."""
    for _ in range(4):
        _clean_session(ctx.broker.port, f"fog-{ctx.rig.name}", 1.0)
        time.sleep(1.5)
    ctx.rig.fusion_proxy.refuse()
    _clean_session(ctx.broker.port, f"fusion-{ctx.rig.name}", 2.0)
    time.sleep(1.0)
    ctx.rig.fusion_proxy.forward()
    return {"fog_resent_windows": ctx.rig.fog.count("fog sends")}


def fault_idle_connections(ctx: "Chaos") -> dict:
    import socket
    socks = []
    for _ in range(1000):
        try:
            socks.append(socket.create_connection(("127.0.0.1", ctx.broker.port), timeout=5))
        except OSError:
            break
    time.sleep(5.0)
    for sock in socks:
        sock.close()
    return {"idle_connections": len(socks)}


def _publish(port: int, topic: str, payload: bytes, retain: bool) -> None:
    c = _client(port)
    c.publish(topic, payload, qos=1, retain=retain).wait_for_publish(60)
    c.disconnect()
    c.loop_stop()


def fault_retained_reports(ctx: "Chaos") -> dict:
    """40 MiB retained on two devices' report topics, then the fog restarted (it is handed them)."""
    from simulators.faults.load import device_name
    topics = [f"rase/v1/reports/r1/{device_name('r1', i)}" for i in (0, 1)]
    for topic in topics:
        _publish(ctx.broker.port, topic, b"x" * (40 << 20), retain=True)
    n = ctx.rig.fog.count("fog subscribed")
    ctx.rig.fog.stop()
    ctx.rig.fog.planned_restarts += 1
    ctx.rig.fog.start()
    ctx.rig.wait_up(n + 1, 0)
    time.sleep(2.0)
    retained = ctx.rig.fog_rejections().get("retained", 0)
    for topic in topics:
        _publish(ctx.broker.port, topic, b"", retain=True)
    return {"retained_ignored": retained}


def fault_shared_subscription(ctx: "Chaos") -> dict:
    got = [0, 0, 0]
    members = []
    for i in range(3):
        c = _client(ctx.broker.port, f"chaos-share-{i}", v5=True)
        c.on_message = lambda _c, _u, _m, i=i: got.__setitem__(i, got[i] + 1)
        c.subscribe("$share/fogs/rase/v1/reports/r1/+", 1)
        members.append(c)
    time.sleep(6.0)
    for c in members:
        c.disconnect()
        c.loop_stop()
    return {"share_members_got": got}


def fault_schedule_without_since_t(ctx: "Chaos") -> dict:
    """A retained control message doubling the period without since_t; the fusion center's put back after."""
    seen: list[bytes] = []
    c = _client(ctx.broker.port)
    c.on_message = lambda _c, _u, m: seen.append(bytes(m.payload))
    c.subscribe("rase/v1/control/precision", 1)
    time.sleep(1.0)
    c.disconnect()
    c.loop_stop()
    if not seen or not seen[-1]:
        return {"skipped": "no retained control message"}
    bad = json.loads(seen[-1])
    for key in ("since_t", "previous_period_s", "previous_epoch0"):
        bad.pop(key, None)
    bad["period_s"] = bad.get("period_s", 1.0) * 2
    _publish(ctx.broker.port, "rase/v1/control/precision", json.dumps(bad).encode(), retain=True)
    time.sleep(5.0)
    refused = ctx.rig.fog_rejections().get("control_refused", 0)
    _publish(ctx.broker.port, "rase/v1/control/precision", seen[-1], retain=True)
    return {"control_refused": refused}


def fault_agents_outage(ctx: "Chaos") -> dict:
    """HOOK (issue 18, "late data is data"): the devices' broker down for
    60 s; their reports queue (keeping their t) and go out afterwards. Needs
    the fog to accept reports minutes late and the fusion center to publish
    revised aggregates; until then it measures what a one-period horizon loses."""
    ctx.devices_proxy.refuse()
    time.sleep(60.0)
    ctx.devices_proxy.forward()
    return {}


FAULTS = [  # name, what it is, its timeline
    ("none", "no fault (baseline)", fault_none),
    ("broker_kill", "Mosquitto SIGKILL x4 (shipped durability settings)", fault_broker_kills),
    ("power_cut", "power cut of fog and fusion at once", fault_power_cut),
    ("disk_full", "fog disk full (tmpfs filled)", fault_disk_full),
    ("disk_enospc", "fog disk full (every write ENOSPC)", fault_disk_enospc),
    ("disk_read_only", "fog disk read-only", fault_disk_read_only),
    ("drop_forwarding", "link cut while the fog forwards a window", fault_drop_forwarding),
    ("drop_publishing", "link cut while fusion publishes an aggregate", fault_drop_publishing),
    ("drop_acknowledging", "fog's PUBACK lost with its link", fault_drop_acknowledging),
    ("silent_link", "fog's broker link silent 5 s", fault_silent_link),
    ("agents_outage", "agents' broker down 60 s [hook]", fault_agents_outage),
    ("broker_kill_fog_behind", "Mosquitto SIGKILL x4, the fog 1 s behind", fault_broker_kills_fog_behind),
    ("session_takeover", "clean sessions as fog x4 and as fusion", fault_session_takeover),
    ("idle_connections", "1,000 connections that never send CONNECT", fault_idle_connections),
    ("retained_reports", "40 MiB retained on 2 report topics, fog restart", fault_retained_reports),
    ("shared_subscription", "3 subscribers on a $share of the reports", fault_shared_subscription),
    ("schedule_without_since_t", "control: period x2 without since_t", fault_schedule_without_since_t),
]
EXPECTED_S = {"none": lambda a: a.baseline_s, "broker_kill": lambda a: 5.0 * a.kills, "power_cut": lambda a: 8.0,
              "disk_full": lambda a: a.outage_s, "disk_enospc": lambda a: a.outage_s,
              "disk_read_only": lambda a: a.outage_s,
              "drop_forwarding": lambda a: 6.0, "drop_publishing": lambda a: 6.0,
              "drop_acknowledging": lambda a: 3.0, "silent_link": lambda a: 5.0, "agents_outage": lambda a: 60.0,
              "broker_kill_fog_behind": lambda a: 5.0 * a.kills, "session_takeover": lambda a: 14.0,
              "idle_connections": lambda a: 6.0, "retained_reports": lambda a: 12.0,
              "shared_subscription": lambda a: 7.0, "schedule_without_since_t": lambda a: 7.0}


class Chaos:
    def __init__(self, args: argparse.Namespace, work: Path):
        self.args = args
        self.work = work
        self.broker, self.broker_conf = shipped_mosquitto(work / "mosquitto", args.broker_conf)
        self.disk: SmallDisk | None = None
        self.rig: Pipeline | None = None
        self.devices_proxy: TcpProxy | None = None
        self.supervisor: Supervisor | None = None

    def start(self) -> None:
        self.broker.start()
        if SmallDisk.available(self.work):
            self.disk = SmallDisk(self.work / "fog-disk", "256m").mount()
        spec = PipelineSpec(devices=self.args.rate, period_s=1.0, lateness_periods=self.args.lateness_periods,
                            bootstrap_b=200, merge_deadline_s=5.0)
        self.rig = Pipeline(self.work / "rig", self.broker.port, spec,
                            fog_data=self.disk.mountpoint if self.disk else None).start()
        self.devices_proxy = TcpProxy(self.broker.port).start()
        self.supervisor = Supervisor(self.rig)

    def stop(self) -> None:
        if self.supervisor:
            self.supervisor.stop()
        if self.rig:
            self.rig.stop()
        if self.devices_proxy:
            self.devices_proxy.stop()
        self.broker.stop()
        if self.disk:
            self.disk.unmount()

    def run_fault(self, name: str, what: str, timeline) -> dict:  # noqa: ANN001
        seconds = LEAD_S + EXPECTED_S[name](self.args) + TAIL_S
        via_proxy = name == "agents_outage"
        spec = self.rig.load_spec(seconds, port=self.devices_proxy.port if via_proxy else None,
                                  client_id=f"devices-{self.rig.name}-{name}")
        if not self.args.puback_only:
            spec = dataclasses.replace(spec, receipts=True, confirm_s=5.0)
        say(f"{name}: {what}; {spec.t_last - spec.t_first + 1} s of load at {spec.rate_per_s:,.0f} reports/s")
        rejected_before = self.rig.rejections_total()
        outages_before = self.rig.fog.count("fog journal unavailable")
        planned_before = self.rig.fog.planned_restarts + self.rig.fusion.planned_restarts
        t0 = time.monotonic()
        load = AckedLoad(spec).start()
        time.sleep(max(0.0, spec.due_at(spec.t_first, 0) - time.time()) + LEAD_S)
        notes = timeline(self)
        result = load.result(timeout_s=300)
        self.rig.wait_aggregated(spec, timeout_s=120)
        _settled(self.rig, result, spec)     # revisions for the late batches of reports sent again
        self.rig.wait_fog_idle()           # its backlog (and its rejections) counted in this fault's row
        account = self.rig.account(result, spec)
        rejected = self.rig.rejections_total() - rejected_before
        delays = sorted(account.delays_s)
        row = {"fault": name, "what": what, "acked": account.acked, "aggregated": account.aggregated,
               "lost": account.lost, "twice": account.twice, "missing_t": len(account.missing_t),
               "rejected": dict(rejected), "windows_reshuffled": account.windows_reshuffled,
               "windows_resent": account.windows_resent, "aggregates_differing": account.aggregates_differing,
               "aggregates_republished": account.aggregates_republished,
               "restarts_planned": self.rig.fog.planned_restarts + self.rig.fusion.planned_restarts - planned_before,
               "restarts_unplanned": self.supervisor.since(t0), "load_finished": result.finished,
               "fog_storage_outages": self.rig.fog.count("fog journal unavailable") - outages_before,
               "load_reconnects": result.reconnects, "seconds_of_load": spec.t_last - spec.t_first + 1,
               "pubacked": result.pubacked, "resent_unconfirmed": result.resent_unconfirmed,
               "delay_p50_s": delays[len(delays) // 2] if delays else None,
               "delay_max_s": delays[-1] if delays else None, **notes}
        say(f"  acked {row['acked']:,}, aggregated {row['aggregated']:,}, lost {row['lost']:,}, "
            f"twice {row['twice']}, rejected {row['rejected']}, restarts {row['restarts_planned']}+"
            f"{row['restarts_unplanned']}")
        return row


def _settled(rig: Pipeline, result, spec, timeout_s: float = 60.0) -> None:  # noqa: ANN001
    """Until every acknowledged report is in an aggregate, or the stored ones stop changing for 15 s."""
    deadline, last, since = time.monotonic() + timeout_s, None, time.monotonic()
    while time.monotonic() < deadline:
        a = rig.account(result, spec)
        if a.lost == 0 and not a.missing_t:
            return
        if a.aggregated != last:
            last, since = a.aggregated, time.monotonic()
        elif time.monotonic() - since > 15.0:
            return
        time.sleep(0.5)


def table(rows: list[dict], base: dict | None) -> str:
    head = (f"{'fault':<48}{'acked':>9}{'aggregated':>11}{'lost':>8}{'judged late':>12}{'twice':>6}"
            f"{'reshuffled':>11}{'agg. differ':>12}{'restarts':>10}{'delay p50 s':>12}{'max s':>7}{'vs base':>8}")
    out = [head]
    base_max = base.get("delay_max_s") if base else None
    for r in rows:
        late = sum(v for k, v in r["rejected"].items() if k in ("t_out_of_range", "late"))
        p50 = f"{r['delay_p50_s']:.2f}" if r["delay_p50_s"] is not None else "-"
        dmax = f"{r['delay_max_s']:.1f}" if r["delay_max_s"] is not None else "-"
        ratio = f"{r['delay_max_s'] / base_max:.1f}x" if base_max and r["delay_max_s"] is not None else "-"
        out.append(f"{r['what']:<48}{r['acked']:>9,}{r['aggregated']:>11,}{r['lost']:>8,}{late:>12,}{r['twice']:>6}"
                   f"{r['windows_reshuffled']:>11}{r['aggregates_differing']:>12}"
                   f"{str(r['restarts_planned']) + '+' + str(r['restarts_unplanned']):>10}{p50:>12}{dmax:>7}{ratio:>8}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=3000, help="reports per second (devices, each once per 1 s period)")
    ap.add_argument("--outage-s", type=float, default=20.0, help="how long the disk stays full, then read-only")
    ap.add_argument("--kills", type=int, default=4, help="Mosquitto SIGKILLs")
    ap.add_argument("--baseline-s", type=float, default=6.0, help="load seconds of the no-fault baseline's middle")
    ap.add_argument("--lateness-periods", type=int, default=1,
                    help="the fog's lateness_periods (1: the shipped default)")
    ap.add_argument("--broker-conf", type=Path, default=SHIPPED_CONF,
                    help="the Mosquitto config whose durability settings to use (default: the shipped one)")
    ap.add_argument("--only", default="", help="comma-separated fault names to run (the baseline always runs)")
    ap.add_argument("--agents-outage", action="store_true",
                    help="also run the hook for the agents' 60 s broker outage (needs late-data support)")
    ap.add_argument("--puback-only", action="store_true",
                    help="count the broker's PUBACK as the acknowledgement (no receipts: devices before issue 29)")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args(argv)
    wanted = {n for n in args.only.split(",") if n}
    faults = [f for f in FAULTS if f[0] == "none" or (not wanted and f[0] != "agents_outage") or f[0] in wanted
              or (f[0] == "agents_outage" and args.agents_outage)]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rase-chaos-") as tmp:
        chaos = Chaos(args, Path(tmp))
        rows = []
        try:
            chaos.start()
            say(f"broker durability settings from {args.broker_conf}: {', '.join(chaos.broker_conf)}")
            for name, what, timeline in faults:
                rows.append(chaos.run_fault(name, what, timeline))
        finally:
            chaos.stop()
    base = rows[0] if rows and rows[0]["fault"] == "none" else None
    print(f"{args.rate:,} reports/s (period 1 s), fog lateness_periods {args.lateness_periods}, "
          f"outages {args.outage_s:g} s; {time.monotonic() - started:.0f} s in all")
    print(f"broker: {', '.join(chaos.broker_conf)}")
    print(table(rows, base))
    if args.json:
        delays = [r["delay_max_s"] for r in rows if r["delay_max_s"] is not None]
        print(json.dumps({"benchmark": "chaos", "rate": args.rate, "lateness_periods": args.lateness_periods,
                          "outage_s": args.outage_s, "broker_conf": chaos.broker_conf, "faults": rows,
                          "baseline_delay_max_s": base["delay_max_s"] if base else None,
                          "worst_delay_vs_baseline": (max(delays) / base["delay_max_s"])
                          if base and base["delay_max_s"] and delays else None,
                          "lost_total": sum(r["lost"] for r in rows[1:]),
                          "twice_total": sum(r["twice"] for r in rows)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
