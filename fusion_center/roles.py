"""The fusion center's roles, built from its config and the mechanism
registry, and what the host does with all of them at once: route and take a
batch of windows, commit it in one transaction, quarantine what a role
refused, close what is due.

Routing is by role, never by mode: each estimation role the registry names
claims its messages (the specific ones first, by their kind), and the
local-DP role takes what remains on the windows channel.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from fusion_center.announce.publisher import AggregatePublisher
from fusion_center.context import FusionContext
from fusion_center.control import ControlAnnouncer
from rase_common.errors import ProtocolError
from rase_common.role import Role, enabled, role_classes, route
from rase_common.protocol import topics
from rase_common.protocol.window import WindowReceipt

log = logging.getLogger("fusion_center.service")


class FusionRoles:
    def __init__(self, ctx: FusionContext, config_path: Path | None):
        self.ctx = ctx
        self.estimation: list[Role] = [cls(ctx) for cls in role_classes("fusion") if enabled(cls, ctx.cfg)]
        self.control = ControlAnnouncer(ctx, config_path)
        self.all: list[Role] = [self.control, *self.estimation, AggregatePublisher(ctx)]
        for role in self.all:
            for reason in role.reasons:
                ctx.metrics.rejected.labels(reason)

    def get(self, name: str) -> Role | None:
        return next((r for r in self.all if r.name == name), None)

    def tasks(self) -> list:
        return [t for role in self.all for t in role.tasks()]

    def attach(self, db: Any) -> None:
        for role in self.all:
            role.attach(db)

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        for role in self.all:
            await role.open(stack)

    def started(self) -> None:
        ct = self.ctx.cfg.central_target
        if ct is not None:
            log.info("central target (%g, %g) over windows of %d uniformly shuffled reports: broadcasting eps %.4g "
                     "per report; devices whose own eps is lower report nothing (no_eps_level). It holds only for "
                     "fogs with shuffle_mode = \"uniform\": each aggregate's privacy_unit.central_target says "
                     "whether its windows met it", ct.eps, ct.delta, ct.devices, self.ctx.precision.eps_levels[0])

    # -- intake -----------------------------------------------------------------------------------
    def ingest(self, got: list[Any]) -> list[Any]:
        """Take, store (one commit) and quarantine a batch; returns it, to acknowledge.
        StorageError: nothing of it is kept (the caller holds it and retries)."""
        ctx = self.ctx
        store, q = ctx.store, ctx.quarantine
        assert store is not None and q is not None
        now = ctx.clock.now()
        refused: list[tuple[str, str, Any]] = []
        for msg in got:
            role = route(self.estimation, getattr(msg, "topic", ""), msg.payload)
            try:
                if role is None:
                    raise ProtocolError("schema", "no role of this fusion center takes it")
                role.take(msg, 0)
            except ProtocolError as err:
                refused.append((err.reason, err.detail, msg))
            except Exception as err:  # noqa: BLE001 - a bug this input triggers must not stop the service
                log.exception("window could not be processed; quarantined")
                refused.append(("internal", repr(err), msg))
        try:
            with store.transaction() as db:
                for role in self.estimation:
                    role.write(db)
        except BaseException:
            for role in self.estimation:
                role.rolled_back()
            raise
        for reason, detail, msg in refused:
            q.put("windows", reason, detail, msg.payload, now)
        for role in self.estimation:
            role.committed()
        self._confirm_windows()
        return got

    def _confirm_windows(self) -> None:
        """After the commit: tell each region's fog which of its windows are stored (or refused for good), so
        it stops keeping them unconfirmed (fog_shuffler.window_receipts; issue 29). Best effort: a receipt
        lost is a window the fog sends again, a duplicate here."""
        by_region: dict[str, list[tuple[int, int]]] = {}
        for role in self.estimation:
            for region, t, rev in getattr(role, "decided", ()):
                by_region.setdefault(region, []).append((t, rev))
            if hasattr(role, "decided"):
                role.decided = []
        link = self.ctx.link
        if link is None or self.ctx.cfg.source != "mqtt" or self.ctx.source is not None:
            return
        for region, kept in by_region.items():
            for i in range(0, len(kept), 1000):
                payload = WindowReceipt(kept=kept[i:i + 1000]).model_dump_json()
                try:
                    link.publish_nowait(topics.window_receipts_topic(region), payload).add_done_callback(
                        lambda f: f.cancelled() or f.exception())
                except Exception as err:  # noqa: BLE001 - the fog sends the window again; intake goes on
                    log.debug("window receipt to %s not sent: %s", region, err)

    # -- closing ----------------------------------------------------------------------------------
    async def close_due(self) -> int:
        closed = 0
        for role in self.estimation:
            closed += await role.close_due(0)
        return closed

    def next_deadline_s(self) -> float | None:
        """Seconds until the roles' earliest deadline (a merge deadline; None: nothing waits)."""
        due = [d for d in (r.next_deadline_s() for r in self.estimation) if d is not None]
        return min(due) if due else None

    def pending(self) -> bool:
        """Whether windows wait to be merged into an aggregate (a replay's end)."""
        return any(r.pending() for r in self.estimation)
