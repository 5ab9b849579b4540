"""The pipeline the faults act on: real `rase fog` and `rase fusion`
processes against a real Mosquitto, each service's broker connection through
its own TcpProxy, each service's database under the faultfs shim, and an
observer that records every window and aggregate published.

    rig = Pipeline(workdir, broker.port, PipelineSpec(devices=1000)).start()
    load = AckedLoad(rig.load_spec(seconds=6)).start()
    ...  faults: rig.power_cut(), rig.fog_proxy.drop(), rig.fog_fs.fail_writes("EROFS") ...
    account = rig.account(load.result())
    assert account.lost == 0 and account.twice == 0 and not rig.unexpected_exits()

The accounting compares, per timestamp, the reports the broker acknowledged
with the n of the fusion center's stored aggregate (the newest revision if
aggregates carry one), and counts windows forwarded with two different
payloads (a second, different shuffle) and aggregates published with two
different payloads for the same (t, revision).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import paho.mqtt.client as mqtt

from simulators.faults.children import die_with_parent
from simulators.faults.faultfs import CutReport, FaultFs
from simulators.faults.load import LoadResult, LoadSpec, device_name
from simulators.faults.proxy import TcpProxy
from simulators.brokers import free_port

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class PipelineSpec:
    devices: int = 1000                 # per region: reports per window
    regions: tuple[str, ...] = ("r1",)
    period_s: float = 1.0
    lateness_periods: int = 30          # generous: the faults under test, not the lateness horizon
    k_min: int = 10
    bootstrap_b: int = 100
    merge_deadline_s: float = 5.0
    name: str = "chaos"                 # a random suffix is added: client ids fog-<name>-xxxxxx, fusion-...


class ServiceProcess:
    """One `rase <kind>` process: started, killed, restarted; an exit nobody
    asked for is recorded with the end of its log."""

    def __init__(self, kind: str, config: Path, log: Path, env: dict[str, str]):
        self.kind = kind
        self.config = config
        self.log = log
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.planned_restarts = 0
        self.unexpected: list[str] = []     # "exit code N: last log lines"
        self.restarted_after_exit = 0
        self._expect_exit = False

    def start(self) -> "ServiceProcess":
        self._expect_exit = False
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "rase.cli", "--log-level", "INFO", self.kind,
                                          "--config", str(self.config)], cwd=ROOT, stdout=log,
                                         stderr=subprocess.STDOUT, env={**os.environ, **self.env},
                                         preexec_fn=die_with_parent)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """Record an exit nobody asked for."""
        if self.proc is not None and not self._expect_exit and self.proc.poll() is not None:
            self.unexpected.append(f"exit code {self.proc.returncode}: ...{self.log_text()[-1500:]}")
            self._expect_exit = True

    def expect_exit(self) -> None:
        self._expect_exit = True

    def stop(self) -> None:
        self.expect_exit()
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def count(self, text: str) -> int:
        return self.log_text().count(text)


class Observer:
    """Every window and aggregate published, as a subscriber with a
    persistent session sees them (directly on the broker, not through the
    services' proxies)."""

    def __init__(self, port: int):
        self.lock = threading.Lock()
        self.windows: dict[tuple[str, int, int], list[bytes]] = defaultdict(list)
        self.aggregates: dict[int, list[bytes]] = defaultdict(list)
        self.subscribed = threading.Event()
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"chaos-observer-{uuid.uuid4().hex[:6]}",
                             protocol=mqtt.MQTTv311, clean_session=False)
        self.c.reconnect_delay_set(0.1, 1)
        self.c.on_connect = lambda c, u, f, rc, p: c.subscribe([("rase/v1/windows/#", 1),
                                                                ("rase/v1/aggregates/t/#", 1)])
        self.c.on_subscribe = lambda *a: self.subscribed.set()
        self.c.on_message = self._on_message
        self.c.connect("127.0.0.1", port, keepalive=10)
        self.c.loop_start()
        if not self.subscribed.wait(10):
            raise RuntimeError("the observer's subscription was not acknowledged")

    def _on_message(self, client, userdata, msg) -> None:  # noqa: ANN001
        try:
            body = json.loads(msg.payload)
        except ValueError:
            return
        with self.lock:
            if msg.topic.startswith("rase/v1/windows/"):
                # Per revision: a late batch is a second window of (region, t), not a second shuffle.
                self.windows[(body.get("region"), body.get("t"), body.get("revision", 0))].append(bytes(msg.payload))
            else:
                self.aggregates[body.get("t")].append(bytes(msg.payload))

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


@dataclass
class Account:
    """Acknowledged against aggregated, over the load's timestamps."""
    acked: int = 0                      # distinct reports the broker acknowledged
    aggregated: int = 0                 # sum of n over the stored aggregates (newest revision per t)
    lost: int = 0                       # acknowledged, in no aggregate
    twice: int = 0                      # in an aggregate more often than acknowledged
    missing_t: list[int] = field(default_factory=list)            # timestamps with no stored aggregate
    short_t: dict[int, tuple[int, int]] = field(default_factory=dict)   # t -> (acked, aggregated) where they differ
    windows_reshuffled: int = 0         # (region, t) forwarded with two different payloads
    windows_resent: int = 0             # (region, t) forwarded again with the same bytes
    aggregates_differing: int = 0       # (t, revision) published with two different payloads
    aggregates_republished: int = 0     # (t, revision) published again with the same bytes
    delays_s: list[float] = field(default_factory=list)   # per t: its last report due -> its aggregate stored

    def line(self) -> str:
        return (f"acked {self.acked}, aggregated {self.aggregated}, lost {self.lost}, twice {self.twice}, "
                f"missing t {self.missing_t[:10]}, windows reshuffled {self.windows_reshuffled} "
                f"(resent {self.windows_resent}), aggregates differing {self.aggregates_differing} "
                f"(republished {self.aggregates_republished})")


class Pipeline:
    def __init__(self, workdir: Path, broker_port: int, spec: PipelineSpec = PipelineSpec(), *,
                 fog_data: Path | None = None):
        self.workdir = Path(workdir)
        self.broker_port = broker_port
        self.spec = spec
        self.name = f"{spec.name}-{uuid.uuid4().hex[:6]}"
        self.fog_data = Path(fog_data) if fog_data is not None else self.workdir / "fog-data"
        self.fusion_data = self.workdir / "fusion-data"
        self.fog_proxy = TcpProxy(broker_port)
        self.fusion_proxy = TcpProxy(broker_port)
        self.fog_fs = FaultFs(self.fog_data, self.workdir / "fog-faults")
        self.fusion_fs = FaultFs(self.fusion_data, self.workdir / "fusion-faults")
        self.fog_metrics_port = free_port()
        self.fog: ServiceProcess | None = None
        self.fusion: ServiceProcess | None = None
        self.observer: Observer | None = None
        self.cuts: list[tuple[CutReport, CutReport]] = []
        self._rejections_before: Counter = Counter()   # counted by fog processes that have since ended

    # -- configuration -------------------------------------------------------------
    @property
    def store_path(self) -> Path:
        return self.fusion_data / "fusion.sqlite"

    @property
    def journal_path(self) -> Path:
        return self.fog_data / "fog.sqlite"

    def _write_configs(self) -> tuple[Path, Path]:
        s = self.spec
        fusion = self.workdir / "fusion.toml"
        fusion.write_text(f'name = "{self.name}"\nregions = {json.dumps(list(s.regions))}\n'
                          f"merge_deadline_s = {s.merge_deadline_s}\nbootstrap_b = {s.bootstrap_b}\n"
                          f'store_path = "{self.store_path}"\ntick_s = 0.02\n'
                          f'[precision]\nperiod_s = {s.period_s}\nmechanism = "br"\n'
                          f"[broker]\nport = {self.fusion_proxy.port}\n")
        fog = self.workdir / "fog.toml"
        text = (f'name = "{self.name}"\nperiod_s = {s.period_s}\nepoch0 = 0\nlateness_periods = {s.lateness_periods}\n'
                f'k_min = {s.k_min}\njournal_path = "{self.journal_path}"\ntick_s = 0.02\n'
                'device_mechanism = "br"\n'     # the load generator's reports are BR's (a grid value each)
                f"metrics_port = {self.fog_metrics_port}\n[broker]\nport = {self.fog_proxy.port}\n")
        for region in s.regions:
            devs = [device_name(region, i) for i in range(s.devices)]
            groups = [devs[j:j + 9] for j in range(0, len(devs), 9)]
            text += f"[regions.{region}]\ngroups = {json.dumps(groups)}\n"
        fog.write_text(text)
        return fog, fusion

    def load_spec(self, seconds: float, *, lead_s: float = 1.0, client_id: str | None = None,
                  port: int | None = None) -> LoadSpec:
        """A schedule of whole periods starting `lead_s` from now."""
        p = self.spec.period_s
        t_first = int((time.time() + lead_s) // p) + 1
        return LoadSpec(port=port or self.broker_port, regions=self.spec.regions, devices=self.spec.devices,
                        period_s=p, t_first=t_first, t_last=t_first + max(1, round(seconds / p)) - 1,
                        client_id=client_id or f"devices-{self.name}")

    # -- lifecycle -----------------------------------------------------------------
    def start(self, timeout_s: float = 60.0) -> "Pipeline":
        self.fog_proxy.start()
        self.fusion_proxy.start()
        fog_cfg, fusion_cfg = self._write_configs()
        self.observer = Observer(self.broker_port)
        self.fusion = ServiceProcess("fusion", fusion_cfg, self.workdir / "fusion.log", self.fusion_fs.env()).start()
        self.fog = ServiceProcess("fog", fog_cfg, self.workdir / "fog.log", self.fog_fs.env()).start()
        self.wait_up(1, 1, timeout_s)
        return self

    def wait_up(self, fog_count: int, fusion_count: int, timeout_s: float = 60.0) -> None:
        """Until the fog's and the fusion center's logs say they subscribed
        `fog_count` and `fusion_count` times."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check()
            if (self.fog.count("fog subscribed") >= fog_count
                    and self.fusion.count("fusion subscribed") >= fusion_count):
                return
            for svc in (self.fog, self.fusion):
                if svc.unexpected:
                    raise RuntimeError(f"{svc.kind} exited: {svc.unexpected[-1]}")
            time.sleep(0.05)
        raise TimeoutError(f"services not subscribed within {timeout_s} s:\nfog: {self.fog.log_text()[-2000:]}\n"
                           f"fusion: {self.fusion.log_text()[-2000:]}")

    def check(self) -> None:
        for svc in (self.fog, self.fusion):
            if svc is not None:
                svc.check()

    def unexpected_exits(self) -> list[str]:
        self.check()
        return [f"{s.kind}: {e}" for s in (self.fog, self.fusion) if s is not None for e in s.unexpected]

    def power_cut(self, *, torn_seed: int | None = None, down_s: float = 0.0, timeout_s: float = 60.0) \
            -> tuple[CutReport, CutReport]:
        """Cut the power of the fog and the fusion center at one instant,
        leave them off `down_s`, and start them again."""
        fog_n, fusion_n = self.fog.count("fog subscribed"), self.fusion.count("fusion subscribed")
        self._rejections_before += self.fog_rejections()
        for svc in (self.fog, self.fusion):
            svc.expect_exit()
        procs = [self.fog.proc, self.fusion.proc]
        for p in procs:                       # one instant: both stopped, then both killed
            p.send_signal(signal.SIGSTOP)
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait(30)
        cut = (self.fog_fs.revert(torn_seed=torn_seed), self.fusion_fs.revert(torn_seed=torn_seed))
        self.cuts.append(cut)
        time.sleep(down_s)
        for svc in (self.fusion, self.fog):
            svc.planned_restarts += 1
            svc.start()
        self.wait_up(fog_n + 1, fusion_n + 1, timeout_s)
        return cut

    def stop(self) -> None:
        for svc in (self.fog, self.fusion):
            if svc is not None:
                svc.check()
                svc.stop()
        if self.observer is not None:
            self.observer.close()
        self.fog_proxy.stop()
        self.fusion_proxy.stop()

    # -- what happened ---------------------------------------------------------------
    def stored_rows(self) -> dict[int, tuple[str, float]]:
        """t -> (payload, created) of the newest revision of its stored
        aggregate (the store read-only, as it is on disk now)."""
        if not self.store_path.exists():
            return {}
        db = sqlite3.connect(f"file:{self.store_path}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT t, payload, created FROM aggregates WHERE scope='all'").fetchall()
        finally:
            db.close()
        out: dict[int, tuple[str, float]] = {}
        for t, payload, created in rows:
            if t not in out or _revision(json.loads(payload)) > _revision(json.loads(out[t][0])):
                out[t] = (payload, created)
        return out

    def stored_payloads(self) -> dict[int, str]:
        return {t: p for t, (p, _) in self.stored_rows().items()}

    def stored_aggregates(self) -> dict[int, dict]:
        """t -> the newest revision of its stored aggregate."""
        return {t: json.loads(p) for t, (p, _) in self.stored_rows().items()}

    def wait_aggregated(self, load: LoadSpec, timeout_s: float = 60.0, settle_s: float | None = None) -> bool:
        """Until every timestamp of the load has a stored aggregate, or no
        new one was stored for `settle_s` (default: long enough for a window
        short of reports to close at its lateness and be merged, after which
        a missing one is not coming)."""
        if settle_s is None:
            settle_s = (self.spec.lateness_periods + 1) * self.spec.period_s + self.spec.merge_deadline_s + 3.0
        deadline = time.monotonic() + timeout_s
        want = set(range(load.t_first, load.t_last + 1))
        seen, changed = -1, time.monotonic()
        while time.monotonic() < deadline:
            have = want & set(self.stored_aggregates())
            if have == want:
                return True
            if len(have) != seen:
                seen, changed = len(have), time.monotonic()
            elif time.monotonic() - changed > settle_s:
                return False
            time.sleep(0.2)
        return False

    def account(self, result: LoadResult, load: LoadSpec) -> Account:
        rows = self.stored_rows()
        a = Account()
        for t in range(load.t_first, load.t_last + 1):
            acked = result.acked.get(t, 0)
            n = json.loads(rows[t][0])["n"] if t in rows else 0
            if t in rows:
                a.delays_s.append(rows[t][1] - load.due_at(t, load.per_t - 1))
            else:
                a.missing_t.append(t)
            a.acked += acked
            a.aggregated += n
            a.lost += max(0, acked - n)
            a.twice += max(0, n - acked)
            if acked != n:
                a.short_t[t] = (acked, n)
        with self.observer.lock:
            for (_region, t, _rev), payloads in self.observer.windows.items():
                if load.t_first <= t <= load.t_last:
                    a.windows_reshuffled += len(set(payloads)) > 1
                    a.windows_resent += len(payloads) > len(set(payloads))
            per_revision: dict[tuple[int, int], list[bytes]] = defaultdict(list)
            for t, payloads in self.observer.aggregates.items():
                for p in payloads:
                    per_revision[(t, _revision(json.loads(p)))].append(p)
            for (t, _rev), payloads in per_revision.items():
                if load.t_first <= t <= load.t_last:
                    a.aggregates_differing += len(set(payloads)) > 1
                    a.aggregates_republished += len(payloads) > len(set(payloads))
        return a

    def restart_exited(self) -> list[str]:
        """Start again a service that exited unasked (a benchmark goes on);
        the kinds restarted."""
        out = []
        for svc in (self.fog, self.fusion):
            svc.check()
            if svc.proc is not None and svc.proc.poll() is not None and svc.unexpected \
                    and len(svc.unexpected) > svc.restarted_after_exit:
                svc.restarted_after_exit += 1
                svc.start()
                out.append(svc.kind)
        return out

    def wait_fog_idle(self, stable_s: float = 2.0, timeout_s: float = 120.0) -> bool:
        """Until the fog has taken no report (accepted, repeated, late or
        rejected) for stable_s: its backlog is worked off."""
        deadline = time.monotonic() + timeout_s
        last, since = None, time.monotonic()
        while time.monotonic() < deadline:
            taken = sum(self.fog_counts().values())
            if taken != last:
                last, since = taken, time.monotonic()
            elif time.monotonic() - since >= stable_s:
                return True
            time.sleep(0.2)
        return False

    def rejections_total(self) -> Counter:
        """The fog's rejected (and late) reports by reason over every fog
        process so far (counts of a process that was killed unasked are lost)."""
        return self._rejections_before + self.fog_rejections()

    def fog_rejections(self) -> Counter:
        """The fog's rejected reports by reason, and late ones, since its
        last start (its metrics)."""
        counts = self.fog_counts()
        return Counter({k: v for k, v in counts.items() if k not in ("accepted", "duplicate")})

    def fog_counts(self) -> Counter:
        """The fog's report counters since its last start: accepted,
        duplicate, late, and rejected by reason."""
        out: Counter = Counter()
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.fog_metrics_port}/metrics", timeout=5).read()
        except OSError:
            return out
        for line in text.decode().splitlines():
            if line.startswith("rase_fog_reports_rejected_total{"):
                reason = line.split('reason="', 1)[1].split('"', 1)[0]
                out[reason] += int(float(line.rsplit(" ", 1)[1]))
            else:
                for name in ("accepted", "duplicate", "late"):
                    if line.startswith(f"rase_fog_reports_{name}_total "):
                        out[name] += int(float(line.rsplit(" ", 1)[1]))
        return out


def _revision(agg: dict) -> int:
    """The revision of an aggregate (0 for the first, and for aggregates
    that carry none)."""
    rev = agg.get("revision", 0)
    return rev if isinstance(rev, int) else 0
