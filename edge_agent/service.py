"""The CPython agent service: `rase agent --config configs/agent.example.toml`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

from edge_agent.config import AgentConfig
from rase_device.core import AgentCore
from edge_agent.diagnostics import StatusWatch
from rase_device.entropy import RandomBits
from rase_device.ledger import BudgetLedger
from edge_agent.paho_transport import PahoTransport
from edge_agent.sources import Source, make_source
from rase_common.clock import ScaledClock, WallClock
from rase_common.loop import Wakeup, seconds_to_next_boundary
from rase_common.service import Service

log = logging.getLogger(__name__)
STATUS_EVERY_REPORTS = 100   # the retained status (with made / delivered counts) is refreshed this often


def build_core(cfg: AgentConfig, bits: RandomBits | None = None) -> AgentCore:
    Path(cfg.ledger_path).parent.mkdir(parents=True, exist_ok=True)
    budget_eps, budget_period_s = cfg.ledger_budget()
    ledger = BudgetLedger(str(cfg.ledger_path), budget_eps, budget_period_s, cfg.ledger_reserve_reports)
    return AgentCore(device=cfg.device, region=cfg.region, eps=cfg.eps, ledger=ledger,
                     calibration=cfg.calibration.build(), period_s=cfg.period_s, epoch0=cfg.epoch0,
                     bits=bits, outbox_capacity=cfg.outbox_capacity, policy=cfg.policy.build(cfg.period_s),
                     mechanism=cfg.mechanism, confirm_s=cfg.confirm_timeout_s,
                     privacy=cfg.privacy.device_dict(cfg.device))


class AgentService(Service):
    """One agent: read the source once per period, randomize, publish.
    The constructor does no I/O; run() opens the ledger, the source and the
    broker link, and stops on SIGTERM/SIGINT (run_service), on `stop`, or
    after max_reports delivered reports."""

    name = "agent"
    # open() makes these; nothing reads them before.
    source: Source
    core: AgentCore
    transport: PahoTransport

    def __init__(self, cfg: AgentConfig, *, source: Source | None = None, clock=None,
                 pump_interval_s: float = 0.2, control_grace_s: float = 0.5, give_up_s: float = 10.0,
                 max_reports: int | None = None, drain_s: float = 1.5):
        self.cfg = cfg
        self.clock = clock or (WallClock() if cfg.speedup == 1 else ScaledClock(WallClock().now(), cfg.speedup))
        self._source = source
        self.wakeup = Wakeup()
        self.pump_interval_s = pump_interval_s
        self.sensor_errors = 0
        # The retained precision message arrives just after subscribing; wait
        # that long before the first reading so it is calibrated from the start.
        self.control_grace_s = control_grace_s
        self.give_up_s = give_up_s
        self.max_reports = max_reports
        self.drain_s = drain_s             # on stop: this long for queued reports' PUBACKs
        self.watch = StatusWatch(log)      # one line when the device stops reporting, and why
        self._status_at = 0                # core.sent when the status was last refreshed

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        self.wakeup.bind()
        self.core = build_core(self.cfg)
        self.source = self._source or make_source(self.cfg.source, self.clock.now())
        self.transport = PahoTransport(self.core, self.cfg.broker, max_inflight=self.cfg.max_inflight,
                                       wakeup=self.wakeup)
        self.transport.start()
        stack.push_async_callback(self._close)

    def tasks(self):
        return [self._loop()]

    async def _close(self) -> None:
        # Reports already made get a moment to be delivered (SIGTERM is not a crash).
        deadline = time.monotonic() + self.drain_s
        while time.monotonic() < deadline and self.transport.connected.is_set() and (
                len(self.core.outbox) or self.transport.inflight > 0):
            self.transport.pump()
            await asyncio.sleep(0.02)
        # In a worker thread: waiting for the offline status's PUBACK must not
        # block an event loop that may be running the broker itself.
        await asyncio.to_thread(self.transport.stop)
        log.info("agent=%s stopped: made=%d delivered=%d rejected_by_fog=%d outbox=%d dropped=%d budget_skips=%d",
                 self.cfg.device, self.core.sent, self.transport.delivered,
                 self.transport.feedback.count(self.cfg.device), len(self.core.outbox), self.core.outbox.dropped,
                 self.core.skipped_budget)

    async def _loop(self) -> None:
        while True:
            self.tick()
            self.watch.check([self.core])
            if self.core.sent - self._status_at >= STATUS_EVERY_REPORTS:
                self._status_at = self.core.sent
                self.core.status_changed = True      # refresh the retained status's counts
            self.transport.pump()
            if self.max_reports is not None and self.core.sent >= self.max_reports and not len(self.core.outbox):
                return
            # No polling tick: wake at the next period, or when the transport
            # connects, gets a PUBACK or applies a control message.
            await self.wakeup.wait(None, self._idle_s())

    def tick(self) -> str | None:
        """Take one reading now (if this period has none yet) and queue it."""
        if not self.transport.calibrated(self.control_grace_s, self.give_up_s):
            return None
        now = self.clock.now()
        with self.transport.lock:
            if self.core.last_t is not None and self.core.logical_t(now) <= self.core.last_t:
                return None
            try:
                x = self.source.read(now)
            except Exception as err:  # noqa: BLE001 - a sensor failure must not kill the agent
                self.sensor_errors += 1
                log.warning("agent=%s sensor read failed: %s", self.cfg.device, err)
                return None
            if x is None:
                return None
            try:
                payload = self.core.step(x, now)
            except ValueError as err:
                self.sensor_errors += 1
                log.warning("agent=%s bad reading %r: %s", self.cfg.device, x, err)
                return None
            led = self.core.ledger
            if payload is None and led.unwritable and (led.write_errors == 1 or led.write_errors % 100 == 0):
                # Fail closed (rase_device.ledger): no report until a reservation is on disk.
                log.warning("agent=%s cannot write its ledger %s (%s, %d times): not reporting until it can",
                            self.cfg.device, led.path, led.last_write_error, led.write_errors)
            return payload

    def _idle_s(self) -> float:
        """Until the next period boundary (the next reading), or sooner while
        the agent waits for its first calibration or has reports queued."""
        core = self.core
        wait = seconds_to_next_boundary(self.clock, core.schedule, cap_s=core.period_s)
        if not self.transport.calibrated(self.control_grace_s, self.give_up_s):
            wait = min(wait, self.control_grace_s / 4)
        if len(core.outbox):
            wait = min(wait, self.pump_interval_s)   # e.g. offline: retry the hand-off
        resend = self.transport.next_resend_s()
        if resend is not None:
            wait = min(wait, max(resend, self.pump_interval_s))   # a report whose receipt did not come
        return wait
