"""`rase replay --unit household --product interval`: fleets of household
meters (simulators.households) through the real fog and fusion center, one
report per household per interval, at the unit's daily eps divided by the
day's releases (issue 28).

The fog runs in the driver's process and the fusion center in its own (as a
--fast replay's), on a real broker (embedded Mosquitto unless --broker); the
devices are real device cores (their ledgers, their randomizer or Prio3
client) in a fleet process of their own, fed each interval's clipped mean of
their samples by the vectorised definition of simulators.households, and in
the secure mode making their Prio3 reports with a CPython prover that makes
the device's shares byte for byte (simulators.fast_sum, on the XOF and HPKE
of rase_common.vdaf.fast_client).

Output (write_jsonl): the first line lists every household (its source
house, its time shift, the clipping range) and the run's parameters, so
anyone can recompute the truth from the raw CSVs; each later line is one
release: t, t_start (Unix seconds), interval_s, n, estimates (mean: value
and ci), and the privacy unit with its eps per day.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing as mp
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fog_shuffler.config import FogConfig
from fusion_center.config import FusionConfig
from rase_common.clock import SharedManualClock
from rase_common.mqtt import BrokerConfig
from rase_common.privacy import UnitPrivacy
from rase_common.protocol.control import ControlMessage
from rase_device.interval import check_interval, eps_per_release, releases_per_day
from rase_device.mechanisms import DEFAULT_MECHANISM
from simulators.fleet import FleetGate, FleetProcess, run_interval_fleet
from simulators.households import Household, day_start_of, interval_means, make_households, truth
from simulators.pipeline import FusionProcess, ReplayFog, _progress, _wait, fresh_work_dir, on_broker
from simulators.refit import load_house
from simulators.secagg import Prio3Setup

log = logging.getLogger(__name__)


@dataclass
class HouseholdSpec:
    data_dir: Path
    houses: list[int]
    households: int | None = None        # None: one per house
    hours: float = 24.0
    start_offset_s: float = 0.0          # from the replayed day's start (UTC midnight), rounded down to intervals
    interval_s: float = 1800.0
    period_s: float = 8.0                # the meters' sampling period
    eps_day: float = 4.0                 # per household per UTC day
    x_min: float = 0.0
    x_max: float = 8000.0
    gamma: float = 1.0
    k_min: int = 10
    lateness_periods: int = 2            # in intervals; complete windows close at once anyway
    mechanism: str = DEFAULT_MECHANISM   # a mean mechanism, or "prio3" (secure aggregation, kind sum)
    central_noise: bool = True
    broker_url: str | None = None
    work_dir: Path | None = None
    progress: bool = True
    windows_w: list[int] = field(default_factory=lambda: [8])
    bootstrap_b: int = 200

    # what PipelineSpec's Prio3Setup reads
    @property
    def eps(self) -> float:
        return eps_per_release(self.eps_day, releases_per_day(self.interval_s))

    @property
    def device_mechanism(self) -> str:
        return self.mechanism

    prio3_kind: str = "sum"

    @property
    def product(self) -> str:
        return "interval"

    bands: list[float] = field(default_factory=lambda: [10.0])


@dataclass
class HouseholdResult:
    params: dict
    aggregates: list[dict]
    households: list[Household]
    reports: int
    fog: dict
    elapsed_s: float


async def run_households(spec: HouseholdSpec) -> HouseholdResult:
    """The replay on spec.broker_url, or on a broker of its own (stopped however the run ends)."""
    check_interval(spec.interval_s, spec.period_s)
    return await on_broker(spec.broker_url, lambda broker, label: _run_on(spec, broker, label))


async def _run_on(spec: HouseholdSpec, broker: BrokerConfig, broker_label: str) -> HouseholdResult:
    started = time.monotonic()
    houses = {h: load_house(spec.data_dir, h) for h in spec.houses}
    households = make_households(spec.houses, spec.households)
    day_start = day_start_of(min(int(h.unix[0]) for h in houses.values()))
    epoch0 = float(day_start)
    t0 = int(spec.start_offset_s // spec.interval_s)
    n_int = int(spec.hours * 3600 // spec.interval_s)
    eps = spec.eps
    means = interval_means(houses, households, day_start=day_start, epoch0=epoch0, t0=t0, intervals=n_int,
                           interval_s=spec.interval_s, period_s=spec.period_s, x_min=spec.x_min, x_max=spec.x_max)
    work = fresh_work_dir(spec.work_dir, "rase-households-")
    clock = SharedManualClock(mp.get_context("spawn").Value("d", epoch0 + t0 * spec.interval_s, lock=False))
    secure = Prio3Setup.of(spec, work) if spec.mechanism == "prio3" else None
    privacy = UnitPrivacy(unit="household", eps_day=spec.eps_day)
    precision = ControlMessage(x_min=spec.x_min, x_max=spec.x_max, gamma=spec.gamma, period_s=spec.period_s,
                               mechanism=spec.mechanism, epoch0=epoch0, eps_levels=[eps], interval_s=spec.interval_s,
                               bands=spec.bands, prio3=secure.params if secure else None)
    params = {"unit": "household", "households": [hh.as_dict(spec.x_min, spec.x_max) for hh in households],
              "houses": spec.houses, "devices": len(households), "day_start": day_start, "epoch0": epoch0,
              "period_s": spec.period_s, "interval_s": spec.interval_s, "t_start": t0, "intervals": n_int,
              "releases_per_day": releases_per_day(spec.interval_s), "eps_day": spec.eps_day, "eps": eps,
              "x_min": spec.x_min, "x_max": spec.x_max, "gamma": spec.gamma, "k_min": spec.k_min,
              "device_mechanism": spec.mechanism, "product": "interval",
              "sampling": "every period_s from each interval's start; each sample the last row at or before the "
                          "shifted sample time; the interval's mean clipped to [x_min, x_max]",
              "broker": broker_label}
    if secure is not None:
        params["prio3"] = {**secure.summary(), "interval_s": spec.interval_s}
    b = broker.model_dump()
    name = f"households{id(spec) % 10000}"
    devices = [hh.id for hh in households]
    fog = ReplayFog(FogConfig.load(None, name=name, regions={"r1": {"devices": devices}}, period_s=spec.period_s,
                                   epoch0=epoch0, interval_s=spec.interval_s, k_min=spec.k_min,
                                   lateness_periods=spec.lateness_periods, allowed_lateness_s=0,
                                   privacy=privacy.model_dump(), x_min=spec.x_min, x_max=spec.x_max,
                                   journal_path=work / "fog.sqlite", device_mechanism=spec.mechanism,
                                   bands=spec.bands, tick_s=0.01, broker=b, receipt_every_s=0,
                                   window_confirm_s=0, **(secure.fog_settings() if secure else {})),
                    clock=clock)
    fusion_cfg = FusionConfig.load(None, name=name, regions=["r1"], merge_deadline_s=spec.interval_s,
                                   bootstrap_b=spec.bootstrap_b, windows_w=spec.windows_w,
                                   store_path=work / "fusion.sqlite", tick_s=0.01, precision=precision.model_dump(),
                                   privacy=privacy.model_dump(), broker=b, revise_for_s=0,
                                   max_window_age_s=max(86400.0, 2 * spec.hours * 3600),
                                   **(secure.fusion_settings() if secure else {}))
    fusion = FusionProcess(fusion_cfg, clock)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(fog.run(stop)), fusion.start(stop)]
    core_args = {"devices": devices, "region": "r1", "work": str(work / "ledgers"), "eps_day": spec.eps_day,
                 "unit": "household", "calibration": {"x_min": spec.x_min, "x_max": spec.x_max, "gamma": spec.gamma},
                 "period_s": spec.period_s, "epoch0": epoch0, "mechanism": spec.mechanism,
                 "policy": secure.agent_settings()["policy"] if secure else {}}
    try:
        reports = await _drive(spec, core_args, means, broker, clock, epoch0, t0, n_int, fog, fusion)
        if not await _wait(lambda: fog.reports_taken >= reports, 60):
            log.warning("the fog took %d of %d reports within 60 s", fog.reports_taken, reports)
        clock.set(epoch0 + (t0 + n_int + spec.lateness_periods + 2) * spec.interval_s)
        fog.wakeup.set()
        if not await _wait(lambda: not fog.ctx.windows.open and not fog.ctx.journal.unsent() and fog.roles.idle()
                           and fusion.caught_up(fog.windows_sent + fog.roles.released), 300):
            log.warning("the fusion center has stored %d aggregates of the %d windows the fog released",
                        fusion.stored(), fog.windows_sent + fog.roles.released)
        fog_stats = fog.metrics.summary()
        fog_stats["budget_refused"] = int(fog.metrics.value("reports_rejected", reason="unit_budget_exceeded"))
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await fusion.stop()
    aggregates = fusion.aggregates(t0, t0 + n_int)
    _progress(spec, n_int, n_int, reports, lambda: len(aggregates), {}, final=True)
    return HouseholdResult(params, aggregates, households, reports, fog_stats, time.monotonic() - started)


async def _drive(spec, core_args, means, broker, clock, epoch0, t0, n_int, fog, fusion) -> int:  # noqa: ANN001
    """Each interval: the clock moves just past its end, the fleet makes its reports (one interval ahead
    at most), and the next interval waits until the fog has taken the one before last."""
    ctx = mp.get_context("spawn")
    gate = FleetGate(ctx, n_int)
    proc = ctx.Process(target=run_interval_fleet, name="rase-households-fleet", daemon=True,
                       args=(core_args, means.astype(np.float64), t0, epoch0, spec.interval_s, broker,
                             f"households-fleet-{id(spec) % 10000}", gate))
    proc.start()

    fleet = FleetProcess(proc, gate, fusion.check, 0.005)
    until = fleet.until

    state: dict = {}
    try:
        await until(gate.control.is_set, "before the precision broadcast reached the devices", 180)
        await until(lambda: fog.subscribed, "before the broker confirmed the fog's subscription", 60)
        for i in range(n_int):
            t = t0 + i
            clock.set(epoch0 + (t + 1) * spec.interval_s + 1.0)      # just past interval t's end
            fog.wakeup.set()
            gate.allowed.value = i + 2                               # t and t + 1
            if i >= 1:
                await until(lambda: gate.done.value > i - 1 and fog.reports_taken >= gate.produced[i - 1],
                            f"the fog taking every report of interval t={t - 1}", 600)
            done = gate.done.value
            _progress(spec, i + 1, n_int, gate.produced[done - 1] if done else 0, fusion.stored, state)
        return await fleet.delivered(n_int, 600)
    finally:
        await fleet.stop()


def release_line(a: dict) -> dict:
    """One release of the replay's output: its interval, n, estimates, and the privacy unit with its day."""
    pu = a.get("privacy_unit") or {}
    return {"t": a["t"], "t_start": a.get("t_start"), "t_start_iso": a.get("t_start_iso"),
            "interval_s": a.get("period_s"), "n": a["n"], "estimates": a["estimates"],
            "privacy": {"unit": pu.get("unit"), "eps_per_release": pu.get("eps_per_release"),
                        "releases_per_day": pu.get("releases_per_day"), "eps_per_day": pu.get("eps_per_unit_day"),
                        "eps_day_budget": pu.get("eps_day_budget"), "guarantee": pu.get("guarantee"),
                        "statement": pu.get("statement")},
            "mechanism": a.get("mechanism"), **({"prio3": a["prio3"]} if a.get("prio3") else {})}


def write_jsonl(result: HouseholdResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        f.write(json.dumps({"params": result.params}) + "\n")
        for a in result.aggregates:
            f.write(json.dumps(release_line(a)) + "\n")


def score(data_dir: Path, path: Path) -> dict:
    """MAE, bias and coverage of a household replay's half-hourly (interval) mean against the truth
    recomputed from the raw CSVs by the definition of simulators.households, from the first line alone."""
    lines = Path(path).read_text().splitlines()
    params = json.loads(lines[0])["params"]
    rows = [json.loads(line) for line in lines[1:]]
    houses = {h: load_house(data_dir, h) for h in sorted({hh["house"] for hh in params["households"]})}
    hhs = [Household(hh["id"], hh["house"], hh["shift_s"]) for hh in params["households"]]
    lo = {hh["x_min"] for hh in params["households"]}
    hi = {hh["x_max"] for hh in params["households"]}
    assert len(lo) == len(hi) == 1, "one clipping range for every household"
    means = interval_means(houses, hhs, day_start=params["day_start"], epoch0=params["epoch0"], t0=params["t_start"],
                           intervals=params["intervals"], interval_s=params["interval_s"],
                           period_s=params["period_s"], x_min=lo.pop(), x_max=hi.pop())
    true_mean, n_true = truth(means)
    err, covered, n_ok = [], [], []
    for r in rows:
        j = r["t"] - params["t_start"]
        if not 0 <= j < len(true_mean) or "mean" not in r["estimates"]:
            continue
        m = r["estimates"]["mean"]
        err.append(m["value"] - true_mean[j])
        covered.append(m["ci"][0] <= true_mean[j] <= m["ci"][1])
        n_ok.append(r["n"] == n_true[j])
    e = np.asarray(err)
    return {"mechanism": params["device_mechanism"], "households": params["devices"], "eps_day": params["eps_day"],
            "eps_per_release": params["eps"], "interval_s": params["interval_s"], "releases": len(e),
            "intervals": params["intervals"], "mae": float(np.mean(np.abs(e))) if len(e) else float("nan"),
            "bias": float(np.mean(e)) if len(e) else float("nan"),
            "bias_se": float(np.std(e, ddof=1) / np.sqrt(len(e))) if len(e) > 1 else float("nan"),
            "coverage": float(np.mean(covered)) if covered else float("nan"),
            "true_mean": float(np.nanmean(true_mean)), "n_matches_truth": bool(all(n_ok)),
            "mae_over_true_mean": float(np.mean(np.abs(e)) / np.nanmean(true_mean)) if len(e) else float("nan")}
