"""The control message, one of the fusion center's roles: it owns what the
context's `precision` says, publishes it (retained) at every connect and
whenever the config file's [precision] table changes, and keeps the schedule
it broadcast in the store, so a restart continues t instead of jumping.

A new period or epoch0 is not applied as is (t would jump, and devices never
report a t they have passed): it becomes a schedule change at a stated t,
announced `schedule_lead_periods` periods ahead (rase_device.schedule).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from pathlib import Path

from fusion_center.context import FusionContext
from rase_common.errors import ConfigError, StorageError, TransportError
from rase_common.protocol import topics
from rase_common.protocol.control import ControlMessage
from rase_common.role import Role

log = logging.getLogger("fusion_center.service")


class ControlAnnouncer(Role):
    name = "control"

    def __init__(self, ctx: FusionContext, config_path: Path | None):
        self.ctx = ctx
        self.config_path = config_path
        self._mtime: float | None = None
        self._sent: tuple | None = None     # (control message, connection) last published

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        if self.config_path is not None:
            self._mtime = self.config_path.stat().st_mtime
        assert self.ctx.store is not None
        stored = self.ctx.store.load_control()
        if stored is not None:
            self.ctx.precision = ControlMessage.model_validate_json(stored)
            self.adopt(self.ctx.cfg.precision)

    def tasks(self) -> list:
        return [self._run()]

    async def _run(self) -> None:
        ctx = self.ctx
        assert ctx.link is not None and ctx.store is not None
        while True:
            self._check_config_change()
            ctx.metrics.period.set(ctx.precision.period_s)
            key = (ctx.precision, ctx.link.connects)
            if ctx.link.connected.is_set() and self._sent != key:
                try:
                    payload = ctx.precision.model_dump_json(exclude_none=True)
                    ctx.store.save_control(payload)
                    await ctx.link.publish(topics.CONTROL_TOPIC, payload, retain=True)
                    self._sent = key
                    log.info("control message broadcast: %s", json.dumps(ctx.precision.model_dump()))
                except TransportError as err:
                    log.debug("control message not published yet: %s", err)
                except StorageError as err:
                    ctx.storage.failed(err)
            await ctx.control_wakeup.wait(None, 1.0)

    def _check_config_change(self) -> None:
        if self.config_path is None:
            return
        try:
            mtime = self.config_path.stat().st_mtime
        except OSError:
            return
        if mtime == self._mtime:
            return
        self._mtime = mtime
        try:
            new = type(self.ctx.cfg).load(self.config_path)
        except ConfigError as err:
            log.error("config change ignored: %s", err)
            return
        self.adopt(new.precision)

    def adopt(self, configured: ControlMessage) -> None:
        """Follow the config's [precision], a new schedule as a change at a stated t."""
        ctx = self.ctx
        cur = ctx.precision
        if cur.same_schedule_as(configured.period_s, configured.epoch0):
            keep = {k: getattr(cur, k) for k in ("epoch0", "since_t", "previous_period_s", "previous_epoch0")}
            new = ControlMessage(**{**configured.model_dump(), **keep})
        else:
            lead = ctx.cfg.schedule_lead_periods * max(cur.period_s, configured.period_s)
            base = ControlMessage(**{**configured.model_dump(), **{k: getattr(cur, k) for k in (
                "period_s", "epoch0", "since_t", "previous_period_s", "previous_epoch0")}})
            new = base.rescheduled(configured.period_s, configured.epoch0, ctx.clock.now(), lead)
            log.info("schedule change: period %g s -> %g s from t=%d (%s UTC), t continues", cur.period_s,
                     new.period_s, new.since_t, time.strftime("%Y-%m-%d %H:%M:%S",
                                                              time.gmtime(new.schedule().switch_unix())))
        if new != cur:
            ctx.precision = new
            log.info("precision changed%s", f" in {self.config_path}" if self.config_path else "")
