"""The fog's local-DP role: randomized reports into windows, and each closed
window shuffled (RS or the configured mode, fog_shuffler.ldp.release) and
journaled in the outbox for the forwarder. It serves every local-DP mechanism
of the registry (BR, Duchi, Piecewise, Hybrid, binary, categorical) and takes
whatever reports and window parts no more specific role claims.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

from fog_shuffler.context import FogContext
from fog_shuffler.ingest import Accepted
from fog_shuffler.ldp.release import release_window
from fog_shuffler.reports import ReportRole
from fog_shuffler.shuffle.randomness import window_rng
from fog_shuffler.windows import ClosedWindow, Outcome
from rase_common.protocol import topics

log = logging.getLogger("fog_shuffler.service")
LARGE_WINDOW = 20_000  # shuffle in a worker thread above this many reports


class LdpReports(ReportRole):
    name = "ldp"

    def __init__(self, ctx: FogContext):
        self.ctx = ctx
        self.graphs = {r: rc.graph() for r, rc in ctx.cfg.regions.items()}
        self.params = ctx.cfg.shuffler.params()
        self._rows: list[tuple[str, int, str, float, float, int, str]] = []
        self._dups: list[tuple[str, int]] = []

    # -- ingest -----------------------------------------------------------------------------
    def claims(self, topic: str, payload: bytes) -> bool:
        return topic.startswith(topics.REPORTS_PREFIX)

    def take(self, msg: Any, now_t: int) -> Outcome:
        ctx = self.ctx
        rep: Accepted = ctx.gate.validate(msg.topic, msg.payload, now_t)
        ctx.screen.screen(rep)
        ctx.budget.check(rep)
        outcome = ctx.windows.add(rep, now_t)
        if ctx.receipts is not None:      # the device hears of it once the batch is committed
            ctx.receipts.stage(rep.region, rep.device, rep.t, outcome is Outcome.LATE)
        if outcome is Outcome.ACCEPTED:
            ctx.budget.charge(rep)
            self._rows.append((rep.region, rep.t, rep.device, rep.y, rep.eps, 0, rep.mechanism))
            ctx.screen.observe(rep)
            if ctx.windows.complete(rep.region, rep.t):
                ctx.due.set()
        elif outcome is Outcome.DUPLICATE:
            self._dups.append((rep.region, rep.t))
        return outcome

    def write(self, db: Any) -> None:
        assert self.ctx.journal is not None
        self.ctx.journal.write_reports(self._rows, self._dups)

    def committed(self) -> None:
        self._rows, self._dups = [], []

    rolled_back = committed

    def open_reports(self) -> list[tuple[str, int, str, float, float, str]]:
        assert self.ctx.journal is not None
        return self.ctx.journal.open_reports()

    # -- closing ----------------------------------------------------------------------------
    async def close(self, cw: ClosedWindow) -> int:
        if cw.suppressed:
            self._suppress(cw)
            return 0
        await self._release(cw)
        await asyncio.sleep(0)      # ingest and a stop are not held up by a backlog of windows
        return 1

    def prune(self, t_min: int) -> None:
        assert self.ctx.journal is not None
        self.ctx.journal.prune(t_min)

    def _suppress(self, cw: ClosedWindow) -> None:
        ctx = self.ctx
        assert ctx.journal is not None
        ctx.journal.close_window(cw.region, cw.t, None, cw.revision)
        ctx.metrics.suppressed.inc()
        ctx.counters.suppressed[cw.region] += 1
        k_min = ctx.cfg.k_min
        total = len(cw.values) + cw.eps_level_dropped
        why = (f"< k_min {k_min}" if total < k_min else
               f"but fewer than k_min {k_min} at each eps level (levels are never mixed)")
        log.info("%s (%s, %d) suppressed: %d report%s %s; not forwarded (counted in "
                 "rase_fog_reports_eps_level_dropped)", "late batch" if cw.revision else "window", cw.region, cw.t,
                 total, "" if total == 1 else "s", why)

    async def _release(self, cw: ClosedWindow) -> None:
        ctx = self.ctx
        assert ctx.journal is not None
        counts = ctx.counters.window_counts(cw)
        release = functools.partial(release_window, cw, self.graphs[cw.region], self.params, counts,
                                    privacy_delta=ctx.cfg.privacy_delta, rng_factory=window_rng)
        t0 = time.perf_counter()
        msg = await asyncio.to_thread(release) if len(cw.values) > LARGE_WINDOW else release()
        ctx.metrics.shuffle_seconds.observe(time.perf_counter() - t0)
        ctx.journal.close_window(cw.region, cw.t, msg.model_dump_json(), cw.revision)
        if cw.revision:
            ctx.metrics.late_batches.inc()
        ctx.counters.forwarded(cw.region)
        ctx.outbox.added()
        ctx.metrics.window_size.observe(msg.n)
        # "mallows" or "buds" when every level got that shuffle, else "uniform".
        mechs = {b.mechanism for b in msg.batches}
        ctx.metrics.forwarded.labels(mechs.pop() if len(mechs) == 1 else "uniform").inc()
