"""Closing the fog's due windows: each is suppressed (under k_min), handed to
the Prio3 leader (secure aggregation), or shuffled (fog_shuffler.ldp.release)
and journaled in the outbox for the forwarder. Journal writes raise
StorageError; the caller treats that as an outage."""

from __future__ import annotations

import asyncio
import logging
import time

from fog_shuffler.config import FogConfig
from fog_shuffler.intake import OutboxCount
from fog_shuffler.journal import Journal
from fog_shuffler.prio3.leader import Prio3Leader, split_prio3
from fog_shuffler.metrics import FogMetrics
from fog_shuffler.protocol import ProtocolGate
from fog_shuffler.shuffle.randomness import window_rng
from fog_shuffler.ldp.release import release_window
from fog_shuffler.windows import ClosedWindow, RegionCounters, WindowManager

log = logging.getLogger(__name__)
LARGE_WINDOW = 20_000  # shuffle in a worker thread above this many reports


class WindowCloser:
    def __init__(self, cfg: FogConfig, *, journal: Journal, metrics: FogMetrics, counters: RegionCounters,
                 outbox: OutboxCount, gate: ProtocolGate, leader: Prio3Leader | None):
        self.cfg = cfg
        self.journal = journal
        self.metrics = metrics
        self.counters = counters
        self.outbox = outbox
        self.gate = gate
        self.leader = leader
        self.graphs = {r: rc.graph() for r, rc in cfg.regions.items()}
        self.params = cfg.shuffler.params()

    async def close_due(self, windows: WindowManager, now_t: int) -> int:
        """Close every due window; forget and prune what is past the horizon."""
        closed = 0
        for region, t in windows.due(now_t):
            cw = windows.close(region, t)
            self.metrics.eps_dropped.inc(cw.eps_level_dropped)
            if cw.revision == 0:
                # Behind schedule (a storage outage held it): how many periods late it closes.
                self.metrics.close_delay.observe(max(0, now_t - (t + 1 + self.cfg.lateness_periods)))
            if self.leader is not None and self.leader.owns(cw):
                closed += 1
                cw = await self._close_prio3(cw)
                if cw is None:
                    continue
            if cw.suppressed:
                self._suppress(cw)
                continue
            await self._release(cw)
            closed += 1
            await asyncio.sleep(0)      # ingest and a stop are not held up by a backlog of windows
        t_min = windows.horizon_t(now_t) - 1
        windows.forget_before(t_min)
        if closed:
            # Reports older than t_min are rejected as out of range, so their
            # windows' closed markers and sent messages are no longer needed.
            self.journal.prune(t_min)
            if self.leader is not None:
                self.leader.prune(t_min)
        return closed

    async def _close_prio3(self, cw: ClosedWindow) -> ClosedWindow | None:
        """Secure aggregation: the leader closes the window's Prio3 reports; the
        rest of the window (None: nothing) goes on as usual."""
        mine, rest = split_prio3(cw)
        if await self.leader.close(mine, self.gate.candidates(cw.t), self.counters.rejected[cw.region],
                                   dict(self.counters.rejected_by.get(cw.region, {}))):
            self.counters.forwarded(cw.region)
        else:
            self.metrics.suppressed.inc()
            self.counters.suppressed[cw.region] += 1
        return rest

    def _suppress(self, cw: ClosedWindow) -> None:
        self.journal.close_window(cw.region, cw.t, None, cw.revision)
        self.metrics.suppressed.inc()
        self.counters.suppressed[cw.region] += 1
        k_min = self.cfg.k_min
        total = len(cw.values) + cw.eps_level_dropped
        why = (f"< k_min {k_min}" if total < k_min else
               f"but fewer than k_min {k_min} at each eps level (levels are never mixed)")
        log.info("%s (%s, %d) suppressed: %d report%s %s; not forwarded (counted in "
                 "rase_fog_reports_eps_level_dropped)", "late batch" if cw.revision else "window", cw.region, cw.t,
                 total, "" if total == 1 else "s", why)

    async def _release(self, cw: ClosedWindow) -> None:
        counts = self.counters.window_counts(cw)
        args = (cw, self.graphs[cw.region], self.params, counts)
        kw = {"privacy_delta": self.cfg.privacy_delta, "rng_factory": window_rng}
        t0 = time.perf_counter()
        if len(cw.values) > LARGE_WINDOW:
            msg = await asyncio.to_thread(release_window, *args, **kw)
        else:
            msg = release_window(*args, **kw)
        self.metrics.shuffle_seconds.observe(time.perf_counter() - t0)
        self.journal.close_window(cw.region, cw.t, msg.model_dump_json(), cw.revision)
        if cw.revision:
            self.metrics.late_batches.inc()
        self.counters.forwarded(cw.region)
        self.outbox.added()
        self.metrics.window_size.observe(msg.n)
        # "mallows" or "buds" when every level got that shuffle, else "uniform".
        mechs = {b.mechanism for b in msg.batches}
        self.metrics.forwarded.labels(mechs.pop() if len(mechs) == 1 else "uniform").inc()
