"""The whole pipeline in one process, driven by a manual clock: real agents
(AgentCore + paho) for REFIT devices -> broker -> fog -> fusion center.

Used by `rase demo` and `rase replay`. Each logical timestamp t is replayed by
setting the clock just before the end of period t, letting every agent take
its reading (the documented REFIT mapping: the last row with
Unix < epoch0 + (t+1) period_s), and waiting until the fog has taken every
report before moving on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import contextlib
import multiprocessing as mp
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from edge_agent.config import AgentConfig
from rase_device.mechanisms import DEFAULT_MECHANISM
from rase_device.report_kind import DEFAULT_BANDS, DEFAULT_ON_ABOVE
from edge_agent.service import AgentService
from fog_shuffler.config import FogConfig
from fog_shuffler.service import FogService
from fusion_center.config import FusionConfig
from rase_common.protocol.control import ControlMessage
from fusion_center.service import FusionService
from fusion_center.store import AggregateStore
from rase_common.clock import ManualClock, ScaledClock, SharedManualClock
from rase_common.mqtt import BrokerConfig
from simulators.embedded_broker import EmbeddedBroker
from simulators.secagg import Prio3Setup
from simulators.fleet import FleetGate, FleetProcess, as_replay_child, run_fleet
from simulators.refit import DEFAULT_MAX_HOLD_S, House, RefitColumnSource, epoch0_of, grid_readings, load_house

log = logging.getLogger(__name__)
R = TypeVar("R")


@dataclass
class PipelineSpec:
    data_dir: Path
    houses: list[int]
    hours: float = 3.0
    start_offset_s: float = 0.0          # from epoch0
    eps: float = 5.0
    period_s: float = 8.0
    clone: int = 1
    clone_shift_s: float = 3600.0        # clone c replays its house c * this later (wrapping round the trace)
    k_min: int = 10
    lateness_periods: int = 8            # lets the fleet run a few timestamps ahead of the fog (windows that are
                                         # complete close at once whatever this is)
    alpha: float = 30.0
    group_size: int = 9
    bootstrap_b: int = 1000
    windows_w: list[int] = field(default_factory=lambda: [8, 64])
    x_min: float = 0.0
    x_max: float = 4000.0
    gamma: float = 1.0
    broker_url: str | None = None
    work_dir: Path | None = None
    progress: bool = True
    speedup: float | None = None         # None: --fast (manual clock); else simulated time this many times real
    device_mechanism: str = DEFAULT_MECHANISM   # the deployment's device mechanism, broadcast in the control message
    shuffle_mode: str = "rs"             # the fog's shuffle: rs, dsigma or buds
    on_above: float = DEFAULT_ON_ABOVE   # binary: an appliance above this many W is on
    bands: list[float] = field(default_factory=lambda: list(DEFAULT_BANDS))   # categorical: band edges in W
    central_eps: float | None = None     # binary: a central (eps, 1e-6) target over all devices (uniform shuffle)
    # device_mechanism "prio3" (secure aggregation): the report kind, the product, and central noise
    # (off only for exactness tests); eps is then each release's dp_eps.
    prio3_kind: str = "sum"
    product: str = "per-t"
    central_noise: bool = True


@dataclass
class Device:
    id: str
    house: House
    column: str
    shift_s: float


@dataclass
class PipelineResult:
    params: dict
    aggregates: list[dict]
    devices: list[Device]
    reports: int
    fog: dict
    elapsed_s: float


def scratch_database(db: sqlite3.Connection) -> None:
    """A replay's fog journal and fusion store are scratch: `_run_on`
    deletes them before every run and nothing resumes from them, so the
    fsyncs that make their commits survive a power cut (synchronous=FULL,
    rase_common.sqlite: about 50,000 in a 24 h replay, each blocking the fog's
    or the fusion center's event loop) buy a replay nothing. With
    synchronous=OFF the same statements run in the same order and the files
    are as complete once the services have closed them (`rase query` reads
    the store after a replay); only an OS crash mid-replay could leave them
    torn, and a replay then starts over anyway."""
    db.execute("PRAGMA synchronous=OFF")


class ReplayFog(FogService):
    """The fog as deployed, on a scratch journal (scratch_database)."""

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        await super().open(stack)
        scratch_database(self.ctx.journal.db)


class ReplayFusion(FusionService):
    """The fusion center as deployed, on a scratch store (scratch_database)."""

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        await super().open(stack)
        scratch_database(self.store.db)


def fleet(houses: list[House], clone: int, clone_shift_s: float) -> list[Device]:
    out = []
    for h in houses:
        for c in range(clone):
            for col in h.device_ids():
                dev = col if clone == 1 else col.replace(f"h{h.house}", f"h{h.house}c{c}", 1)
                out.append(Device(dev, h, col, c * clone_shift_s))
    return out


def truth(devices: list[Device], epoch0: float, period_s: float, t0: int, n_t: int,
          max_hold_s: float = DEFAULT_MAX_HOLD_S) -> tuple[np.ndarray, np.ndarray]:
    """True mean reading per timestamp over the devices that have a reading
    (the documented mapping), and how many devices that is."""
    rows = []
    for d in devices:
        r = grid_readings(d.house, d.column, epoch0, period_s, t0 + n_t, max_hold_s, shift_s=d.shift_s)[t0:]
        rows.append(r)
    m = np.vstack(rows)
    present = ~np.isnan(m)
    with np.errstate(invalid="ignore"):
        mean = np.nansum(m, axis=0) / present.sum(axis=0)
    return mean, present.sum(axis=0)


async def _wait(pred, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        await asyncio.sleep(0.002)
    return pred()


def _progress(spec: PipelineSpec, i: int, n_t: int, reports: int, stored, state: dict, final: bool = False) -> None:
    """stored() counts the aggregates; it is called only when a line is printed.
    The final line comes once the last windows closed and the fusion center
    caught up, so its count is the summary's (the line at i == n_t comes
    before the last lateness periods' windows are even closed)."""
    tty = sys.stderr.isatty()
    if spec.progress and (time.monotonic() - state.get("last", 0) > (1.0 if tty else 10.0) or i == n_t or final):
        state["last"] = time.monotonic()
        line = f"  replay t {i:>6}/{n_t}  reports {reports:>8}  aggregates {stored():>6}"
        if final:
            line += "  (done: every window closed)"
        print("\r" + line if tty else line, end="\n" if final or not tty else "", file=sys.stderr, flush=True)


async def _drive_fleet(spec, cfgs, devices, broker, clock, epoch0, t0, n_t, taken, fog, fusion) -> int:
    """Manual clock, the fleet in a process of its own (one shared
    connection): each t just before its end every simulated device reads and
    randomizes. The fleet may run one t ahead of the clock (the fog accepts
    t + 1) and the fog may lag max_lag t behind, so the fleet, the fog and
    the fusion center work at the same time, on both cores."""
    ctx = mp.get_context("spawn")     # the driver's process has paho threads running: no fork
    gate = FleetGate(ctx, n_t)
    readings = [grid_readings(d.house, d.column, epoch0, spec.period_s, t0 + n_t, shift_s=d.shift_s)[t0:]
                for d in devices]
    proc = ctx.Process(target=run_fleet, name="rase-replay-fleet", daemon=True,
                       args=(cfgs, readings, t0, n_t, epoch0, spec.period_s, broker,
                             f"replay-fleet-{id(spec) % 10000}", gate))
    proc.start()

    fleet = FleetProcess(proc, gate, fusion.check, 0.0005)
    until = fleet.until

    max_lag = max(0, spec.lateness_periods - 2)
    state: dict = {}
    try:
        await until(gate.control.is_set, "before the precision broadcast reached the devices", 90)
        await until(lambda: fog.subscribed, "before the broker confirmed the fog's subscription", 60)
        for i, t in enumerate(range(t0, t0 + n_t)):
            clock.set(epoch0 + (t + 1) * spec.period_s - 1e-3)
            fog.wakeup.set()            # a manual clock moved: windows may be due
            fusion.wake()
            gate.allowed.value = i + 2  # t and t + 1
            j = i - max_lag
            if j >= 0:
                await until(lambda: gate.done.value > j and taken() >= gate.produced[j],
                            f"the fog taking every report of t={t0 + j}", 60)
            running_total = gate.produced[min(gate.done.value, n_t) - 1] if gate.done.value else 0
            _progress(spec, i + 1, n_t, running_total, fusion.stored, state)
        return await fleet.delivered(n_t, 120)
    finally:
        await fleet.stop()


async def _drive_scaled(spec, agents, clock, epoch0, t0, n_t, stored) -> int:
    """Scaled clock: the agents run their own loops, as deployed."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(a.run(stop)) for a in agents]
    end = epoch0 + (t0 + n_t) * spec.period_s
    state: dict = {}
    while clock.now() < end:
        i = min(n_t, int((clock.now() - epoch0) // spec.period_s) - t0)
        _progress(spec, i, n_t, sum(a.core.sent for a in agents), stored, state)
        await asyncio.sleep(0.2)
    stop.set()
    await asyncio.gather(*tasks)
    return sum(a.core.sent for a in agents)


class InProcessFusion:
    """The fusion center on the driver's loop (scaled-clock replays)."""

    def __init__(self, service: FusionService):
        self.service = service

    def start(self, stop: asyncio.Event) -> asyncio.Task:
        return asyncio.create_task(self.service.run(stop))

    def wake(self) -> None:
        self.service.wakeup.set()

    def check(self) -> None:
        pass

    def stored(self) -> int:
        return self.service.store.count()

    def caught_up(self, windows_sent: int) -> bool:
        return not self.service.roles.pending() and self.stored() >= windows_sent

    async def stop(self) -> None:
        pass

    def aggregates(self, t_from: int, t_to: int) -> list[dict]:
        return self.service.store.recent("all", t_from, t_to)


def _fusion_main(cfg: FusionConfig, clock: SharedManualClock, stop_flag) -> None:  # noqa: ANN001
    """A fusion center process on the driver's shared clock, until stop_flag is set."""
    driver_gone = as_replay_child()
    logging.getLogger("fusion_center").setLevel(logging.WARNING)

    async def main() -> None:
        service = ReplayFusion(cfg, clock=clock)
        stop = asyncio.Event()
        task = asyncio.create_task(service.run(stop))
        while not stop_flag.is_set() and not task.done() and not driver_gone():
            await asyncio.sleep(0.05)
        stop.set()
        await task

    asyncio.run(main())


class FusionProcess:
    """The fusion center in a process of its own (--fast replays), so the
    estimates use the second core while the fog takes the next reports. It
    follows the driver's clock through shared memory and wakes on windows
    (MQTT) and on its merge deadline; its store is read once it has stopped."""

    def __init__(self, cfg: FusionConfig, clock: SharedManualClock):
        ctx = mp.get_context("spawn")
        self.cfg = cfg
        self.stop_flag = ctx.Event()
        self.proc = ctx.Process(target=_fusion_main, args=(cfg, clock, self.stop_flag), name="rase-replay-fusion",
                                daemon=True)
        self._reader: AggregateStore | None = None

    def start(self, stop: asyncio.Event) -> asyncio.Task:
        self.proc.start()

        async def watch() -> None:
            await stop.wait()
            self.stop_flag.set()
        return asyncio.create_task(watch())

    def wake(self) -> None:
        pass           # it looks at the shared clock on its own: at most tick_s (5 ms) later

    def check(self) -> None:
        if not self.proc.is_alive():
            raise RuntimeError(f"the replay's fusion center stopped (exit code {self.proc.exitcode})")

    def stored(self) -> int:
        """Aggregates stored so far: 0 while the fusion center has not
        created its store, or has created the file but not yet its tables."""
        if self._reader is None:
            if not Path(self.cfg.store_path).exists():
                return 0
            self._reader = AggregateStore(self.cfg.store_path, readonly=True)
        try:
            return self._reader.count()
        except sqlite3.OperationalError:       # no such table (yet): look again next time
            self._reader.close()
            self._reader = None
            return 0

    def caught_up(self, windows_sent: int) -> bool:
        self.check()
        return self.stored() >= windows_sent

    async def stop(self) -> None:
        self.stop_flag.set()
        await asyncio.to_thread(self.proc.join, 30)
        if self.proc.is_alive():
            self.proc.terminate()
            await asyncio.to_thread(self.proc.join, 5)
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def aggregates(self, t_from: int, t_to: int) -> list[dict]:
        store = AggregateStore(self.cfg.store_path, readonly=True)
        try:
            return store.recent("all", t_from, t_to)
        finally:
            store.close()


async def run_pipeline(spec: PipelineSpec) -> PipelineResult:
    """Run the replay on spec.broker_url, or on a broker of its own that is
    stopped however the run ends."""
    return await on_broker(spec.broker_url, lambda broker, label: _run_on(spec, broker, label))


async def on_broker(broker_url: str | None, run_on: Callable[[BrokerConfig, str], Awaitable[R]]) -> R:
    """run_on(broker, its label) on the broker at broker_url, or on an embedded
    one that is stopped however the run ends."""
    if broker_url is not None:
        broker = BrokerConfig.from_url(broker_url)
        return await run_on(broker, f"{broker.host}:{broker.port}")
    async with EmbeddedBroker() as eb:
        return await run_on(BrokerConfig(host=eb.host, port=eb.port), f"{eb.host}:{eb.port} (embedded {eb.kind})")


def fresh_work_dir(work_dir: str | Path | None, prefix: str) -> Path:
    """The run's folder (a new temporary one unless given), without an earlier
    run's journals; the services' INFO lines kept out of the replay's output."""
    work = Path(work_dir or tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    for f in ("fog.sqlite", "fusion.sqlite"):
        for suffix in ("", "-wal", "-shm"):
            (work / (f + suffix)).unlink(missing_ok=True)
    for noisy in ("edge_agent", "fog_shuffler", "fusion_center"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return work


async def _run_on(spec: PipelineSpec, broker: BrokerConfig, broker_label: str) -> PipelineResult:
    started = time.monotonic()
    houses = [load_house(spec.data_dir, h) for h in spec.houses]
    epoch0 = epoch0_of(houses, spec.period_s)
    t0 = int(spec.start_offset_s // spec.period_s)
    n_t = int(spec.hours * 3600 // spec.period_s)
    devices = fleet(houses, spec.clone, spec.clone_shift_s)
    work = fresh_work_dir(spec.work_dir, "rase-pipeline-")
    start = epoch0 + t0 * spec.period_s
    clock = (SharedManualClock(mp.get_context("spawn").Value("d", start, lock=False)) if spec.speedup is None
             else ScaledClock(start, spec.speedup))
    secure = Prio3Setup.of(spec, work) if spec.device_mechanism == "prio3" else None
    precision = ControlMessage(x_min=spec.x_min, x_max=spec.x_max, gamma=spec.gamma, period_s=spec.period_s,
                                 mechanism=spec.device_mechanism, on_above=spec.on_above, bands=spec.bands,
                                 epoch0=epoch0, eps_levels=[spec.eps], prio3=secure.params if secure else None)
    params = {"period_s": spec.period_s, "epoch0": epoch0, "t_start": t0, "timestamps": n_t,
              "houses": spec.houses, "devices": len(devices), "clone": spec.clone, "eps": spec.eps,
              "x_min": spec.x_min, "x_max": spec.x_max, "gamma": spec.gamma, "k_min": spec.k_min,
              "mechanism": {"alpha": spec.alpha, "group_size": spec.group_size, "shuffle_mode": spec.shuffle_mode,
                            "mallows_delta_range": [spec.alpha, 10 * spec.alpha]},
              "bootstrap_b": spec.bootstrap_b, "windows_w": spec.windows_w,
              "lateness_periods": spec.lateness_periods,
              "device_mechanism": spec.device_mechanism, "on_above": spec.on_above, "bands": spec.bands}
    if secure is not None:
        params["prio3"] = secure.summary()
    params["broker"] = broker_label
    b = broker.model_dump()
    region = {"refit_houses": spec.houses, "refit_clones": spec.clone}
    fog = ReplayFog(FogConfig.load(None, name=f"pipeline{id(spec) % 10000}", regions={"r1": region},
                                    period_s=spec.period_s, epoch0=epoch0, k_min=spec.k_min,
                                    lateness_periods=spec.lateness_periods, eps_levels=[spec.eps],
                                    x_min=spec.x_min, x_max=spec.x_max, journal_path=work / "fog.sqlite",
                                    device_mechanism=spec.device_mechanism, on_above=spec.on_above,
                                    bands=spec.bands,
                                    tick_s=0.005, broker=b,
                                    # the papers' Mallows range, matching params["mechanism"] (the fog's own
                                    # default since issue 12 is alpha 2, delta_max_factor 20)
                                    shuffler={"alpha": spec.alpha, "group_size": spec.group_size,
                                              "delta_max_factor": 10.0, "shuffle_mode": spec.shuffle_mode},
                                    central_target=None if spec.central_eps is None else {"eps": spec.central_eps},
                                    **(secure.fog_settings() if secure else {})),
                     clock=clock)
    fusion_cfg = FusionConfig.load(None, name=f"pipeline{id(spec) % 10000}", regions=["r1"],
                                   merge_deadline_s=spec.period_s * 4, bootstrap_b=spec.bootstrap_b,
                                   windows_w=spec.windows_w, store_path=work / "fusion.sqlite",
                                   tick_s=0.005, precision=precision.model_dump(), broker=b,
                                   central_target=None if spec.central_eps is None else
                                   {"eps": spec.central_eps, "devices": len(devices)},
                                   # Each REFIT house's appliances are a household: every aggregate states
                                   # what the replay's per-report stream (event-level) costs one per day.
                                   privacy={"unit": "household", "devices_per_unit": 9, "event_level": True},
                                   **(secure.fusion_settings() if secure else {}))
    # --fast: the fusion center runs in a process of its own, on the driver's shared clock.
    fusion = (FusionProcess(fusion_cfg, clock) if isinstance(clock, SharedManualClock)
              else InProcessFusion(ReplayFusion(fusion_cfg, clock=clock)))
    stop = asyncio.Event()
    tasks = [asyncio.create_task(fog.run(stop)), fusion.start(stop)]
    agents = []
    try:
        cfgs = []
        for d in devices:
            cfgs.append(AgentConfig.load(None, device=d.id, region="r1", eps=spec.eps, period_s=spec.period_s,
                                         epoch0=epoch0, budget_eps=1e9, ledger_path=work / "ledgers" / f"{d.id}.json",
                                         # Simulated devices: one ledger write per 1000 reports, not per report.
                                         ledger_reserve_reports=1000, outbox_capacity=100_000, broker=b,
                                         **(secure.agent_settings() if secure else {})))
            (work / "ledgers" / f"{d.id}.json").unlink(missing_ok=True)
        taken = lambda: fog.reports_taken  # noqa: E731
        if spec.speedup is None:
            reports = await _drive_fleet(spec, cfgs, devices, broker, clock, epoch0, t0, n_t, taken, fog, fusion)
        else:
            agents = [AgentService(cfg, source=RefitColumnSource(d.house, d.column, phase_s=d.shift_s), clock=clock)
                      for cfg, d in zip(cfgs, devices)]
            reports = await _drive_scaled(spec, agents, clock, epoch0, t0, n_t, fusion.stored)
        if not await _wait(lambda: taken() >= reports, 30):
            log.warning("the fog took %d of %d reports within 30 s; the rest will count as late", taken(), reports)
        # Let the last windows close (lateness, in windows: an hour each for the hourly product)
        # and the fusion center catch up.
        window_s = secure.params.window_period_s(spec.period_s) if secure else spec.period_s
        flush_to = epoch0 + (t0 + n_t) * spec.period_s + (spec.lateness_periods + 2) * window_s
        if isinstance(clock, ManualClock):
            clock.set(flush_to)
            fog.wakeup.set()
            fusion.wake()
        else:
            await asyncio.sleep(max(0.0, (flush_to - clock.now()) / spec.speedup))
        if not await _wait(lambda: not fog.ctx.windows.open and not fog.ctx.journal.unsent() and fog.roles.idle()
                           and fusion.caught_up(fog.windows_sent + fog.roles.released), 60):
            log.warning("after 30 s the fusion center has stored %d aggregates of the %d windows the fog sent "
                        "(windows it quarantined, e.g. estimate_failed, have none); %d windows still open at the fog",
                        fusion.stored(), fog.windows_sent, len(fog.ctx.windows.open))
        await asyncio.sleep(0.2)
        fog_stats = fog.metrics.summary()
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await fusion.stop()
    aggregates = fusion.aggregates(t0, t0 + n_t)
    _progress(spec, n_t, n_t, reports, lambda: len(aggregates), {}, final=True)
    return PipelineResult(params, aggregates, devices, reports, fog_stats, time.monotonic() - started)


def write_jsonl(result: PipelineResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        f.write(json.dumps({"params": result.params}) + "\n")
        for a in result.aggregates:
            f.write(json.dumps({"t": a["t"], "n": a["n"], "estimates": a["estimates"], "clamped": a["clamped"],
                                "share_at_bound": a["share_at_bound"], "windowed": a["windowed"],
                                "frequencies": a.get("frequencies", []),
                                **({"prio3": a["prio3"]} if a.get("prio3") else {})}) + "\n")
