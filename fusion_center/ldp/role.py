"""The fusion center's local-DP role: the fogs' shuffled windows in, one
aggregate per timestamp out (fusion_center.ldp.merge: merging the regions'
windows, the estimators, windowed averages). It serves every local-DP
mechanism of the registry and takes whatever the more specific roles leave.

- intake: each window is validated as hostile input (schema, a known region,
  a plausible t), stored in the host's batch transaction before the batch is
  acknowledged, and merged; the same bytes again are a duplicate, a
  different window for a stored (region, t, revision) a conflict (the first
  stands);
- closing: a timestamp closes when every known region arrived or its merge
  deadline passed; its aggregate is estimated (large ones in a worker
  thread) and stored once, idempotent on (scope, t); a late batch revises it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from pydantic import ValidationError

from fusion_center.context import FusionContext
from fusion_center.ldp.merge import TimestampMerger, aggregate
from rase_common.errors import ProtocolError, StorageError
from rase_common.mechanisms import mechanism
from rase_common.protocol.window import WindowMessage
from rase_common.role import Role

log = logging.getLogger("fusion_center.service")
LARGE = 20_000  # estimate in a worker thread above this many reports
STORE_EVERY_S = 0.05   # a backlog of timestamps is stored in commits of this much estimating each
LATE = "late"          # a window whose t can no longer be revised: acknowledged and counted, not stored


class LdpEstimation(Role):
    name = "ldp"
    reasons = ("not_json", "schema", "unknown_region", "t_implausible", "conflicting_window", "estimate_failed")

    def __init__(self, ctx: FusionContext):
        self.ctx = ctx
        self.merger = TimestampMerger(set(ctx.cfg.regions), ctx.cfg.merge_deadline_s)
        self._staged: list[tuple[WindowMessage, bool]] = []     # (window, revises a stored aggregate)
        self._new: list[bool] = []
        self.decided: list[tuple[str, int, int]] = []   # (region, t, rev) of this batch, for the fog's receipt

    # -- start -------------------------------------------------------------------------------
    async def open(self, stack: Any) -> None:
        store = self.ctx.store
        assert store is not None
        n = 0
        for region, t, payload, received in store.pending_windows():
            self.merger.add(WindowMessage.model_validate_json(payload), received)
            n += 1
        wmax = max(self.ctx.cfg.windows_w, default=0)
        if wmax:
            self.ctx.history.restore(store.latest("all", wmax))
        if n:
            log.info("fusion restored %d stored windows of %d timestamps", n, len(self.merger.pending))
        await asyncio.to_thread(self._warm_up)

    def _warm_up(self) -> None:
        """Estimate one made-up timestamp before taking any window: the
        estimators' first call imports scipy and builds tables (seconds on a
        busy machine), which must not stall the first real timestamps."""
        p = self.ctx.precision
        value = p.x_min if mechanism(p.mechanism).output == "mean" else 0.0      # a possible report
        window = WindowMessage.uniform("warm-up", 0, [value] * 12, eps=p.eps_levels[0], kind=p.mechanism)
        try:
            aggregate(0, [window], p, {"warm-up"}, level=self.ctx.cfg.level, bootstrap_b=self.ctx.cfg.bootstrap_b)
        except Exception as err:  # noqa: BLE001 - best effort: the real timestamps report real errors
            log.debug("estimator warm-up: %r", err)

    # -- intake ------------------------------------------------------------------------------
    def claims(self, topic: str, payload: bytes) -> bool:
        return True           # the windows channel carries nothing else for this role's host to route

    def take(self, msg: Any, now_t: int) -> str:
        try:
            w = WindowMessage.model_validate_json(msg.payload)
        except ValidationError as err:
            reason = "not_json" if any(e["type"] == "json_invalid" for e in err.errors()) else "schema"
            raise ProtocolError(reason, str(err).replace("\n", " ")[:500]) from None
        if w.region not in self.merger.known:
            raise ProtocolError("unknown_region", f"region {w.region!r} is not one of {sorted(self.merger.known)}")
        self.decided.append((w.region, w.t, w.revision))   # stored or refused for good: the fog hears of it
        schedule = self.ctx.precision.window_schedule()
        now = self.ctx.clock.now()
        now_t, oldest_t = schedule.t_of(now), schedule.t_of(now - self.ctx.cfg.max_window_age_s)
        if not oldest_t <= w.t <= now_t + 2:
            raise ProtocolError("t_implausible", f"t={w.t} is not within [{oldest_t}, {now_t + 2}]")
        assert self.ctx.store is not None
        stored = self.ctx.store.revision("all", w.t)
        if stored is not None and w.t < self.revise_horizon_t():
            self.ctx.metrics.late.inc()       # its t can no longer be revised (its windows are pruned)
            return LATE
        self._staged.append((w, stored is not None))
        return "taken"

    def write(self, db: Any) -> None:
        store = self.ctx.store
        assert store is not None
        now = self.ctx.clock.now()
        self._new = store.write_windows([(w.region, w.t, w.revision, w.model_dump_json(), now)
                                         for w, _ in self._staged])

    def committed(self) -> None:
        ctx, now = self.ctx, self.ctx.clock.now()
        store, q = ctx.store, ctx.quarantine
        assert store is not None and q is not None
        for (w, revises), new in zip(self._staged, self._new):
            if new:
                self.merger.add(w, now, revises=revises)
                ctx.metrics.consumed.inc()
            elif store.window_payload(w.region, w.t, w.revision) != w.model_dump_json():
                # The fog re-sends the same bytes; a different window for a stored (region, t) is not its.
                ctx.metrics.conflicts.inc()
                q.put("windows", "conflicting_window", f"a second, different window for region {w.region}, "
                      f"t={w.t} (revision {w.revision}); the first one stands", w.model_dump_json().encode(), now)
            else:
                ctx.metrics.duplicates.inc()
        if self._staged:
            ctx.due.set()
        self._staged, self._new = [], []

    def rolled_back(self) -> None:
        self._staged, self._new = [], []
        self.decided = []

    def pending(self) -> bool:
        return bool(self.merger.pending)

    def revise_horizon_t(self) -> int:
        schedule = self.ctx.precision.window_schedule()
        now_t = schedule.t_of(self.ctx.clock.now())
        return now_t - int(self.ctx.cfg.revise_for_s // schedule.period_s) - 1

    # -- closing ------------------------------------------------------------------------------
    def next_deadline_s(self) -> float | None:
        """Seconds (on the service's clock) until the earliest merge deadline, or None."""
        if not self.merger.first_seen:
            return None
        return min(self.merger.first_seen.values()) + self.ctx.cfg.merge_deadline_s - self.ctx.clock.now()

    def _estimate(self, t: int, windows: list[WindowMessage]):  # noqa: ANN202
        cfg, t0 = self.ctx.cfg, time.perf_counter()
        agg, est = aggregate(t, windows, self.ctx.precision, self.merger.known, level=cfg.level,
                             bootstrap_b=cfg.bootstrap_b, history=self.ctx.history.series,
                             windows_w=tuple(cfg.windows_w), central_target=cfg.central_target,
                             clip_bias_bound=cfg.clipping.bias_bound_w if cfg.clipping else None, unit=cfg.privacy)
        return agg, est, time.perf_counter() - t0

    async def close_due(self, now_t: int) -> int:
        """Estimate every due timestamp, yielding between them (so intake and
        a stop are never held up), and store their aggregates a few at a time:
        one commit (one fsync) per STORE_EVERY_S of estimating, not per t."""
        ctx, store = self.ctx, self.ctx.store
        assert store is not None and ctx.quarantine is not None
        done, closed, since = [], 0, time.monotonic()
        for t in self.merger.due(ctx.clock.now()):
            first = self.merger.first_seen.get(t, ctx.clock.now())
            windows = self.merger.pop(t)
            before = store.revision("all", t)
            # A late batch revises t: its aggregate is estimated again over every window of t.
            everything = windows if before is None else \
                [WindowMessage.model_validate_json(p) for p in store.aggregated_windows(t)] + windows
            try:
                if sum(w.n for w in everything) > LARGE:
                    agg, est, secs = await asyncio.to_thread(self._estimate, t, everything)
                else:
                    agg, est, secs = self._estimate(t, everything)
                    await asyncio.sleep(0)
                if before is not None:
                    agg = agg.model_copy(update={"revision": before + 1})
            except Exception as err:  # noqa: BLE001 - windows that cannot be estimated must not stop the service
                # Valid windows whose values this deployment cannot estimate (e.g. a kind that does not
                # fit its settings): quarantined and dropped, or every restart would fail on them again.
                log.exception("timestamp %d could not be estimated; its %d windows are quarantined", t, len(windows))
                for w in windows:
                    ctx.quarantine.put(w.topic(), "estimate_failed", repr(err), w.model_dump_json())
                store.drop_windows(t)
                continue
            ctx.metrics.estimator_seconds.observe(secs)
            # At once, not after the commit: the next timestamp's windowed averages include this one.
            ctx.history.add(agg.mechanism, t, est)
            done.append((t, first, windows, agg, est))
            if time.monotonic() - since >= STORE_EVERY_S:
                closed += self._store(done)
                done, since = [], time.monotonic()
        return closed + (self._store(done) if done else 0)

    def _store(self, done: list) -> int:
        ctx, store = self.ctx, self.ctx.store
        assert store is not None
        try:
            # Each aggregate marks aggregated only the windows it was estimated from (issue 29).
            stored = store.store_aggregates("all", [(t, agg.model_dump_json(), agg.revision,
                                                     [(w.region, w.revision) for w in windows])
                                                    for t, _, windows, agg, _ in done], ctx.clock.now())
        except StorageError:
            for _, first, windows, _, _ in done:      # they stay pending, and on disk, until they can be stored
                for w in windows:
                    self.merger.add(w, first)
            raise
        for (t, first, _, agg, est), new in zip(done, stored):
            if new:
                ctx.stored(agg, est, (ctx.clock.now() - first) / ctx.speedup)
        store.prune_windows(self.revise_horizon_t())
        ctx.outbox_wakeup.set()
        return len(done)
