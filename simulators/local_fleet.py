"""`rase agent --fleet N`: a small local fleet of simulated devices in one
process, so that a first run on one machine ends in an aggregate.

A fog forwards a window only when at least k_min (10 by default) devices
reported for that timestamp; one agent alone never gets there. Each device
here is a real AgentCore (its own budget ledger, the deployment's mechanism
from os.urandom, its own report topic and sequence numbers) replaying its
own column of the bundled REFIT excerpt; only the MQTT connection is shared
(simulators.fleet.FleetTransport). Devices are named as the example fog
config registers them, h1a1 .. h1a9, h2a1, ..., so the fog knows them.

Like an agent, the fleet says when its reports go nowhere: one line when
its devices have no eps level on the menu or a spent budget, one when the
fog says on a device's feedback topic why it rejects its reports, and a
summary of made, delivered and rejected reports every minute and at stop.
Each device publishes its retained status on rase/v1/status/{device} as a
real agent does (state, privacy spent, made / delivered / rejected_by_fog).

A broker with one user per device (`rase acl`: each device may write only
its own topics) cannot take a fleet's reports over one login: with
`passwords` (`rase agent --fleet N --passwords DIR`) every device connects
on its own, as its own user, with the password in DIR/<device> (the layout
of configs/compose/make-secrets.sh's secrets/passwords), and gets its own
last will.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

from edge_agent.config import AgentConfig, SourceConfig
from rase_device.core import AgentCore
from edge_agent.diagnostics import FeedbackWatch, StatusWatch
from edge_agent.service import build_core
from rase_common.clock import ScaledClock, WallClock
from rase_common.loop import seconds_to_next_boundary
from rase_common.service import Service
from simulators.fleet import FleetTransport
from simulators.refit import APPLIANCES, RefitColumnSource, refit_source

log = logging.getLogger(__name__)
BUNDLED_HOUSES = (1, 2, 3, 5, 12)
MAX_FLEET = len(BUNDLED_HOUSES) * APPLIANCES
SUMMARY_EVERY_S = 60.0
STATUS_EVERY_REPORTS = 100   # as an agent: each device's retained status (its counts) refreshed this often


def fleet_devices(n: int, houses: tuple[int, ...] = BUNDLED_HOUSES) -> list[tuple[str, int, int]]:
    """The first n (device, house, appliance) of the houses, in order: h1a1 .. h1a9, h2a1, ..."""
    every = [(f"h{h}a{k}", h, k) for h in houses for k in range(1, APPLIANCES + 1)]
    if not 1 <= n <= len(every):
        raise ValueError(f"--fleet takes 1 to {len(every)} devices (the bundled REFIT appliances), got {n}")
    return every[:n]


def device_config(cfg: AgentConfig, device: str, house: int, appliance: int) -> AgentConfig:
    """The fleet config for one device: the config's region, eps, period, broker and
    budget; its own name, its own ledger file beside the config's, its own REFIT column,
    and, for the household unit, its own house's household (h{house}, as the fog groups them)."""
    data_dir = cfg.source.data_dir if cfg.source is not None and cfg.source.kind == "refit" else None
    source = SourceConfig(kind="refit", house=house, appliance=appliance, data_dir=data_dir)
    ledger = cfg.ledger_path.parent / f"{device}-ledger.json"
    update: dict = {"device": device, "ledger_path": ledger, "source": source}
    if cfg.privacy.unit == "household":
        update["privacy"] = cfg.privacy.model_copy(update={"household": f"h{house}"})
    return cfg.model_copy(update=update)


class LocalFleetService(Service):
    """N simulated devices, on one connection (or one each, with `passwords`);
    each reads its source once per period."""

    name = "fleet"

    def __init__(self, cfg: AgentConfig, n: int, *, clock=None, max_reports: int | None = None,
                 control_grace_s: float = 1.0, give_up_s: float = 10.0, drain_s: float = 1.5,
                 passwords: Path | None = None):
        self.cfg = cfg
        self.devices = fleet_devices(n)
        self.clock = clock or (WallClock() if cfg.speedup == 1 else ScaledClock(WallClock().now(), cfg.speedup))
        self.max_reports = max_reports
        self.control_grace_s = control_grace_s
        self.give_up_s = give_up_s
        self.drain_s = drain_s
        self.passwords = passwords
        self.cores: list[AgentCore] = []
        self.sources: list[RefitColumnSource] = []
        self.transports: list[FleetTransport] = []
        self._status_at: list[int] = []
        self._source_of: dict[int, RefitColumnSource] = {}
        self.watch = StatusWatch(log)
        self.feedback = FeedbackWatch(log)
        self.started_at = time.monotonic()
        self._said_first = False

    @property
    def transport(self) -> FleetTransport:
        """The first (with one shared connection, the only) transport."""
        return self.transports[0]

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        now = self.clock.now()
        for device, house, appliance in self.devices:
            dcfg = device_config(self.cfg, device, house, appliance)
            self.cores.append(build_core(dcfg))
            self.sources.append(refit_source(dcfg.source, device, now))
        self._status_at = [0] * len(self.cores)
        self._source_of = {id(core): source for core, source in zip(self.cores, self.sources)}
        if self.passwords is not None:
            for core in self.cores:
                broker = self.cfg.broker.model_copy(update={"username": core.device, "password": None,
                                                            "password_file": self.passwords / core.device})
                self.transports.append(FleetTransport([core], broker, f"agent-{core.device}",
                                                      max_inflight=self.cfg.max_inflight, feedback=self.feedback,
                                                      statuses=True))
        else:
            if self.cfg.broker.username:
                log.warning("fleet: all %d devices share one login (%s); a broker with one user per device "
                            "(rase acl) lets it write only that user's own topics: give --passwords DIR to log "
                            "each device in as itself", len(self.cores), self.cfg.broker.username)
            self.transports.append(FleetTransport(self.cores, self.cfg.broker, f"fleet-{self.cfg.device}",
                                                  max_inflight=self.cfg.max_inflight, feedback=self.feedback,
                                                  statuses=True))
        for t in self.transports:
            t.start()
        stack.push_async_callback(self._close)
        log.info("fleet of %d simulated devices (%s .. %s) replaying the REFIT excerpt in region %s, eps %g, "
                 "every %g s, %s", len(self.cores), self.devices[0][0], self.devices[-1][0], self.cfg.region,
                 self.cfg.eps, self.cfg.period_s,
                 "each device logged in as itself" if self.passwords is not None else "on one connection")

    def tasks(self):
        return [self._loop()]

    def made(self) -> int:
        return sum(c.sent for c in self.cores)

    def delivered(self) -> int:
        return sum(sum(t.delivered) for t in self.transports)

    def summary(self) -> str:
        return (f"fleet: {len(self.cores)} devices made={self.made()} delivered={self.delivered()} "
                f"rejected_by_fog={sum(self.feedback.rejected.values())} "
                f"outbox={sum(len(c.outbox) for c in self.cores)} dropped={sum(c.outbox.dropped for c in self.cores)}")

    def _calibrated(self, t: FleetTransport) -> bool:
        """A control message was applied, none came within the grace after
        subscribing (no fusion center yet), or the broker stayed away."""
        if t.control_applied.is_set():
            return True
        if t.subscribed_at is not None and time.monotonic() - t.subscribed_at >= self.control_grace_s:
            return True
        return time.monotonic() - self.started_at >= self.give_up_s

    def calibrated(self) -> bool:
        return all(self._calibrated(t) for t in self.transports)

    def tick(self) -> int:
        """Every device reads and reports once for the current t (if it has not yet)."""
        now = self.clock.now()
        made = 0
        for t in self.transports:
            if not self._calibrated(t):
                continue
            with t.lock:
                for core in t.cores:
                    if core.last_t is not None and core.logical_t(now) <= core.last_t:
                        continue
                    x = self._source_of[id(core)].read(now)
                    if x is not None and core.step(x, now) is not None:
                        made += 1
        if made and not self._said_first:
            self._said_first = True
            t = self.cores[0].logical_t(now)
            log.info("fleet: first %d reports for t=%d sent; the fog forwards a window once it closes, "
                     "if at least k_min (10 by default) devices reported for its t", made, t)
        return made

    def _refresh_statuses(self) -> None:
        for i, core in enumerate(self.cores):
            if core.sent - self._status_at[i] >= STATUS_EVERY_REPORTS:
                self._status_at[i] = core.sent
                core.status_changed = True

    async def _loop(self) -> None:
        next_summary = time.monotonic() + SUMMARY_EVERY_S
        while True:
            self.tick()
            self.watch.check(self.cores)
            self._refresh_statuses()
            for t in self.transports:
                t.pump()
            if self.max_reports is not None and all(c.sent >= self.max_reports for c in self.cores) \
                    and not any(len(c.outbox) for c in self.cores):
                return
            if time.monotonic() >= next_summary:
                next_summary += SUMMARY_EVERY_S
                log.info(self.summary())
            wait = seconds_to_next_boundary(self.clock, self.cores[0].schedule, cap_s=self.cores[0].period_s)
            if not self.calibrated() or any(len(c.outbox) for c in self.cores) \
                    or any(c.status_changed for c in self.cores):
                wait = min(wait, 0.1)
            await asyncio.sleep(wait)

    async def _close(self) -> None:
        deadline = time.monotonic() + self.drain_s
        while time.monotonic() < deadline and any(t.connected.is_set() for t in self.transports) and (
                any(len(c.outbox) for c in self.cores) or any(t.inflight > 0 for t in self.transports)):
            for t in self.transports:
                t.pump()
            await asyncio.sleep(0.02)
        await asyncio.gather(*(asyncio.to_thread(t.stop) for t in self.transports))
        log.info("%s (stopped)", self.summary())
