"""The fusion center's role in the secure mode: Prio3's helper and collector
(fusion_center.prio3.helper holds its state, its store and its exchange with
the leader; this module is how the fusion center hosts it). Named by the
registry's prio3 entry (rase_common.mechanisms.prio3), configured by the
fusion center's `[prio3]` table.

It claims the leader's messages on the windows channel (by their type, which
comes first), stages them in the host's batch transaction, and closes each t
whose regions are ready: one aggregate, the helper's own noise added once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from fusion_center.context import FusionContext
from fusion_center.prio3.helper import REFUSALS, Prio3FusionConfig, Prio3Helper, Refused
from rase_common.errors import ProtocolError
from rase_common.protocol.prio3 import is_prio3_message
from rase_common.protocol.topics import WINDOWS_PREFIX
from rase_common.role import Role

log = logging.getLogger("fusion_center.service")
PRIO3 = "prio3"


def region_of_topic(topic: str) -> str | None:
    """The region of an MQTT windows topic (rase/v1/windows/{region}); None for a channel without one (Kafka's
    rase.windows carries every region: there the broker's ACL cannot bind a fog to its regions)."""
    return topic[len(WINDOWS_PREFIX):] if topic.startswith(WINDOWS_PREFIX) else None


class HelperRole(Role):
    name = PRIO3
    config_key = PRIO3
    Config = Prio3FusionConfig
    reasons = ("prio3_invalid", *REFUSALS)

    def __init__(self, ctx: FusionContext):
        cfg = ctx.cfg
        self.ctx = ctx
        self.helper = Prio3Helper(ctx.role_table(PRIO3), regions=cfg.regions, merge_deadline_s=cfg.merge_deadline_s,
                                  registry=ctx.metrics.registry, storage=ctx.storage)
        self._now = 0.0

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        p, table = cfg.precision.prio3, getattr(cfg, PRIO3, None)
        if p is None:
            return
        if table is None:
            raise ValueError("precision.mechanism = \"prio3\" needs a [prio3] table (private_key_file, key_id, "
                             "verify_key_file)")
        if p.key_id != table.key_id:
            raise ValueError(f"precision.prio3.key_id {p.key_id!r} is not this fusion center's key "
                             f"([prio3] key_id {table.key_id!r}): devices would refuse it")

    # -- start -------------------------------------------------------------------------------
    def attach(self, db: Any) -> None:
        self.helper.open(db)

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        await self.helper.connect(stack, self.ctx.cfg.source, self.ctx.cfg.kafka, link=self.ctx.link)

    def tasks(self) -> list:
        return self.helper.tasks()

    # -- intake -------------------------------------------------------------------------------
    def claims(self, topic: str, payload: bytes) -> bool:
        return is_prio3_message(payload)

    def take(self, msg: Any, now_t: int) -> str:
        self.helper.follow(self.ctx.precision, self.ctx.clock.now())   # issue 26: the helper's own params, by t
        try:
            self.helper.stage(msg.payload, self.ctx.late_hook(), now=self.ctx.clock.now(),
                              topic_region=region_of_topic(getattr(msg, "topic", "")))
        except Refused as err:               # refused by the helper's own rules (counted once committed)
            raise ProtocolError(err.reason, str(err)) from None
        except ValueError as err:
            raise ProtocolError("prio3_invalid", str(err).replace("\n", " ")[:300]) from None
        return "taken"

    def write(self, db: Any) -> None:
        self.helper.write(time.time())

    def committed(self) -> None:
        self.helper.committed()

    def rolled_back(self) -> None:
        self.helper.rolled_back()

    # -- closing: every t whose regions are ready (or whose merge deadline passed) -----------------
    async def close_due(self, now_t: int) -> int:
        ctx, helper, store = self.ctx, self.helper, self.ctx.store
        assert store is not None
        now, closed = time.time(), 0
        for t, ready, first in helper.due(now):
            made = helper.aggregate(t, ready, ctx.precision, level=ctx.cfg.level, history=ctx.history.series,
                                    windows_w=tuple(ctx.cfg.windows_w),
                                    clip_bias_bound=ctx.cfg.clipping.bias_bound_w if ctx.cfg.clipping else None,
                                    unit=ctx.cfg.privacy)
            if made is not None and store.store_aggregate("all", t, made[0].model_dump_json(), ctx.clock.now()):
                ctx.history.add(made[0].mechanism, t, made[1])
                ctx.stored(made[0], made[1], now - first)
                closed += 1
            helper.aggregated(t, stored=made is not None)
        return closed
