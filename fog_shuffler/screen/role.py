"""Attacker detection as one of the fog's roles (`[detection]`): the report
roles ask it to screen each report (a quarantined device's are refused) and
to score each accepted local-DP report; it writes its alarms (and, when due,
its statistics) in the batch's transaction, and between batches applies
releases and checkpoints (fog_shuffler.screen.screening holds the rules).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from fog_shuffler.context import FogContext, Screen
from fog_shuffler.ingest import Accepted
from fog_shuffler.screen.screening import QUARANTINED, DeviceScreen
from rase_common.role import Role

log = logging.getLogger("fog_shuffler.service")


class ScreenRole(Role, Screen):
    name = "screen"
    reasons = (QUARANTINED,)

    def __init__(self, ctx: FogContext, own: Any):
        d = ctx.cfg.detection
        self.ctx = ctx
        self.device_screen = DeviceScreen(own, d.false_alarm_per_device_day, ctx.metrics.devices_quarantined,
                                    checkpoint_s=d.checkpoint_s)
        ctx.protocol_listeners.append(lambda: self.device_screen.follow(ctx.gate.current))
        # The report roles call these once a report: the detector's own methods, one call each.
        self.screen = self.device_screen.screen  # type: ignore[method-assign]
        follower = ctx.gate.follower
        observe = self.device_screen.observe
        self.observe = lambda rep: observe(rep, follower)  # type: ignore[method-assign]

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        journal = self.ctx.journal
        assert journal is not None
        self.device_screen.restore(journal)
        stack.callback(self.device_screen.checkpoint_at_stop, journal)   # before the journal closes

    # -- what the report roles ask -------------------------------------------------------------
    def screen(self, rep: Accepted) -> None:
        self.device_screen.screen(rep)

    def observe(self, rep: Accepted) -> None:
        self.device_screen.observe(rep, self.ctx.gate.follower)

    # -- the batch's transaction ------------------------------------------------------------------
    def write(self, db: Any) -> None:
        assert self.ctx.journal is not None
        self.ctx.journal.write_detection(self.device_screen.write(self.ctx.now()))

    def committed(self) -> None:
        self.device_screen.commit(self.ctx.windows.drop_device)

    def rolled_back(self) -> None:
        self.device_screen.rollback()

    async def close_due(self, now_t: int) -> int:
        assert self.ctx.journal is not None
        self.device_screen.between_batches(self.ctx.journal)   # releases; a checkpoint when due
        return 0
