"""The fog's role in the secure mode: Prio3's leader (fog_shuffler.prio3.leader
holds its state, its journal and its exchange with the helper; this module
is how the fog hosts it). Named by the registry's prio3 entry
(rase_common.mechanisms.prio3), configured by the fog's `[prio3]` table.

It claims the Prio3 reports on the report topics (by their kind: a nonce
among the first fields), the helper's answers and the published per-t
aggregates and the retained latest one (compared with the leader's own statements, issue 26); its
reports live in the fog's windows like any others, and at close it gets the
window's Prio3 part. It hears every control message's outcome: one refused
for other prio3 params is an alarm.
"""

from __future__ import annotations

import contextlib
from typing import Any

from fog_shuffler.context import FogContext
from fog_shuffler.ingest import Accepted, IngestRules
from fog_shuffler.prio3.leader import Prio3FogConfig, Prio3Leader
from fog_shuffler.prio3.leader_rules import LEADER_REASONS, PRIO3, Prio3Accepted
from fog_shuffler.protocol import Protocol
from fog_shuffler.reports import ReportRole
from fog_shuffler.windows import ClosedWindow, Outcome
from rase_common.privacy import stated_or
from rase_common.protocol import topics
from rase_device import prio3_binary
from rase_device.secagg import product_period_s

# Rejections under the current parameters that the previous ones may still accept (just after a change).
RETRY_UNDER_PREVIOUS = ("eps_not_on_menu", "impossible_y", "malformed_share")


class LeaderRole(ReportRole):
    name = "prio3"
    config_key = "prio3"
    Config = Prio3FogConfig
    mechanisms = frozenset({PRIO3})
    reasons = LEADER_REASONS

    def __init__(self, ctx: FogContext):
        cfg = ctx.cfg
        self.ctx = ctx
        self.table: Prio3FogConfig = ctx.role_table(self.config_key)
        self.leader = Prio3Leader(self.table, name=cfg.name, regions=list(cfg.regions), k_min=cfg.k_min,
                                  registry=ctx.metrics.registry, storage=ctx.storage, sink_name=cfg.sink)
        self._replies: list[tuple[str, int, int, str]] = []
        ctx.control_listeners.append(self.leader.control_checked)

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        table = getattr(cfg, cls.config_key or "", None)
        if cfg.device_mechanism == PRIO3 and (table is None or table.params is None):
            raise ValueError("device_mechanism = \"prio3\" needs a [prio3] table with its params "
                             "(kind, dp_eps, key_id, ...) and verify_key_file")
        if table is not None and table.params is None:
            # Issue 26: a Prio3 leader's params are its own, never the control message's.
            raise ValueError("[prio3] needs its own params ([prio3.params]: kind, dp_eps, key_id, ...)")
        if cfg.device_mechanism == PRIO3 and table is not None and cfg.eps_levels != [table.params.dp_eps]:
            raise ValueError(f"device_mechanism = \"prio3\": eps_levels must be [prio3.params.dp_eps] = "
                             f"[{table.params.dp_eps}], got {cfg.eps_levels}")
        if table is not None and cfg.interval_s is not None and cfg.interval_s != table.params.interval_s:
            raise ValueError(f"interval_s {cfg.interval_s} differs from [prio3.params] interval_s "
                             f"{table.params.interval_s} (the leader's product is its params')")

    @classmethod
    def own_window_s(cls, table: dict, period_s: float) -> float | None:
        params = table.get("params")
        if params is None:
            return None
        params = params.model_dump() if hasattr(params, "model_dump") else params
        return float(product_period_s(params.get("product", "per-t"), period_s, params.get("interval_s")))

    @classmethod
    def per_report(cls, table: dict) -> dict:
        params = table.get("params")
        if params is None:
            return table
        params = dict(params.model_dump() if hasattr(params, "model_dump") else params)
        if params.get("product") == "interval":
            params.update(product="per-t", interval_s=None)
        return {**table, "params": params}

    @classmethod
    def with_eps_per_report(cls, table: dict, eps: float) -> dict:
        params = table.get("params")
        if params is None:
            return table
        params = dict(params.model_dump() if hasattr(params, "model_dump") else params)
        params["dp_eps"] = stated_or("prio3.params.dp_eps", params.get("dp_eps"), eps)
        return {**table, "params": params}

    @classmethod
    def own_params(cls, cfg: Any) -> dict:
        """What the fog's own protocol parameters get from the role's table."""
        table = getattr(cfg, cls.config_key or "", None)
        if table is None:
            return {"mode_params": None}
        return {"mode_params": table.params, "interval_s": table.params.interval_s}

    # -- start -------------------------------------------------------------------------------
    def attach(self, db: Any) -> None:
        self.leader.open(db)

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        ctx = self.ctx
        await self.leader.connect(stack, ctx.cfg.sink, ctx.cfg.kafka, link=ctx.link, sink=ctx.sink,
                                  replies_from_kafka=ctx.source is None)

    def report_t(self, payload: bytes) -> int | None:
        """A binary Prio3 report's t, from its header (issue 30)."""
        return prio3_binary.report_t(payload)

    def report_filters(self) -> list[tuple[str, int]] | None:
        """As one of several leader workers (issue 30), the topics of its own devices: its part of each region."""
        if self.table.parts <= 1:
            return None
        return [(topics.report_topic(r, d), 1) for r, rc in sorted(self.ctx.cfg.regions.items())
                for d in sorted(rc.all_devices())]

    def subscriptions(self) -> list[tuple[str, int]]:
        # Over MQTT the helper answers on topics of its own; over Kafka its answers have their own topic.
        # The per-t aggregates and the retained latest one always come over MQTT (compared with the statements).
        return self.leader.subscriptions(replies_over_mqtt=self.ctx.cfg.sink == "mqtt")

    def tasks(self) -> list:
        return self.leader.tasks()

    # -- ingest -------------------------------------------------------------------------------
    def claims(self, topic: str, payload: bytes) -> bool:
        return self.leader.is_reply(topic) or self.leader.is_aggregate(topic) or (
            topic.startswith(topics.REPORTS_PREFIX) and self.leader.is_report(payload))

    def take(self, msg: Any, now_t: int) -> Outcome | None:
        if self.leader.is_reply(msg.topic):
            row = self.leader.reply(msg.payload)      # None: a late repeat, nothing to journal
            if row is not None:
                self._replies.append(row)
            return None
        if self.leader.is_aggregate(msg.topic):
            # A discrepancy is counted and alarmed there; the retained latest one repeats a per-t one.
            self.leader.check_aggregate(msg.payload, retained=msg.topic == topics.AGGREGATE_LATEST_TOPIC)
            return None
        ctx = self.ctx
        rep = ctx.gate.validate_with(msg.topic, msg.payload, now_t, self._check, RETRY_UNDER_PREVIOUS)
        ctx.screen.screen(rep)
        ctx.budget.check(rep)
        outcome = ctx.windows.add(rep, now_t)
        if ctx.receipts is not None:      # the device hears of it once the batch is committed
            ctx.receipts.stage(rep.region, rep.device, rep.t, outcome is Outcome.LATE)
        if outcome is Outcome.ACCEPTED:
            ctx.budget.charge(rep)
            assert isinstance(rep, Prio3Accepted)
            self.leader.accepted(rep)
            if ctx.windows.complete(rep.region, rep.t):
                ctx.due.set()
        return outcome

    def _check(self, topic: str, payload: bytes, now_t: int, rules: IngestRules, p: Protocol) -> Accepted:
        return self.leader.validate(topic, payload, now_t, rules, p.mode_params)

    def write(self, db: Any) -> None:
        self.leader.write(self._replies)

    def committed(self) -> None:
        self.leader.committed(self._replies)
        self._replies = []

    def rolled_back(self) -> None:
        self.leader.reset()
        self._replies = []

    # -- windows -------------------------------------------------------------------------------
    def open_reports(self) -> list[tuple[str, int, str, float, float, str]]:
        return self.leader.open_reports()

    def seen_devices(self) -> dict[tuple[str, int], set[str]]:
        assert self.leader.journal is not None
        return self.leader.journal.seen_devices()

    def holds(self, region: str, t: int) -> bool:
        assert self.leader.journal is not None
        return self.leader.journal.has_reports(region, t)

    async def close(self, cw: ClosedWindow) -> int:
        ctx = self.ctx
        if await self.leader.close(cw, ctx.gate.candidates(cw.t), ctx.counters.rejected[cw.region],
                                   dict(ctx.counters.rejected_by.get(cw.region, {}))):
            ctx.counters.forwarded(cw.region)
            return 1
        ctx.metrics.suppressed.inc()
        ctx.counters.suppressed[cw.region] += 1
        return 0

    def prune(self, t_min: int) -> None:
        self.leader.prune(t_min)

    def idle(self) -> bool:
        j = self.leader.journal
        return j is None or not (j.waiting() or j.unsent())

    @property
    def released(self) -> int:
        return self.leader.finished
