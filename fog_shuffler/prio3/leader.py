"""The fog as Prio3's leader (secure aggregation, issue 20; docs/privacy.md).

Per window (region, t) of Prio3 reports:
1. ingest: a report is validated (sizes of its shares for the deployment's
   Prio3, a nonce not seen before) and journaled with the device, like any
   report; only then is it acknowledged;
2. close: fewer than k_min reports -> suppressed. Otherwise the reports are
   put in a uniformly random order (OS-seeded) and lose their devices, the
   leader runs verify_init on its shares, and the batch (nonce, public share,
   sealed helper share, the leader's verifier share) is queued for the helper,
   all in one transaction;
3. the helper's verifier shares arrive (journaled, then acknowledged); once
   they cover the batch the leader checks each proof, intersects what it
   accepted with what the helper accepted, and, if at least k_min reports
   remain, queues its aggregate share over them with its discrete Laplace
   noise added, in the transaction that forgets the shares; else it queues
   `dropped: under_k_min`;
4. a batch the helper does not answer within verify_timeout_s is sent again
   (the helper answers a repeat from its store); after verify_deadline_s the
   window is dropped with the reason verification_timeout, and the helper told.
Every step's output is journaled before it is sent, and a restart resends the
same bytes; verify_init is deterministic, so the leader recomputes it.

The rules are pure functions (fog_shuffler.prio3.leader_rules: validate_report,
close_batch, finish_window); Prio3Leader holds the journal tables, the
outbox task and the reply intake.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter as PromCounter
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rase_device.secagg import report_ctx
from fog_shuffler.ingest import IngestRules, Rejected
from fog_shuffler.prio3.leader_journal import SHARE_SEQ, LeaderJournal
from fog_shuffler.prio3.leader_rules import (PRIO3, Prio3Accepted, close_batch, dropped_share, finish_window,
                                       helper_columns, split_prio3, validate_report)
from fog_shuffler.shuffle.randomness import window_rng
from fog_shuffler.windows import ClosedWindow
from rase_common.errors import Outage
from rase_common.failpoints import crash_point
from rase_common.kafka import KafkaConfig, KafkaSink, KafkaSource
from rase_common.loop import Wakeup
from rase_common.mqtt import MqttSink
from rase_common.outbox import OutboxSender
from rase_common.protocol import topics
from rase_common.protocol.prio3 import Prio3Params, Prio3Verify
from rase_common.secagg import compute, read_key, work_loop
from rase_common.vdaf import Prio3Aggregator

log = logging.getLogger(__name__)
LARGE = 2000          # verify in a worker thread above this many reports


class Prio3FogConfig(BaseModel):
    """The fog's `[prio3]` table: it is Prio3's leader."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    # 64 hex digits shared with the fusion center only (Prio3's verify_key).
    verify_key_file: Path
    # The deployment's params until the control message says otherwise (it owns them).
    params: Prio3Params | None = None
    verify_timeout_s: float = Field(30.0, gt=0)     # no answer from the helper: send the batch again
    verify_deadline_s: float = Field(600.0, gt=0)   # then drop the window (reason verification_timeout)
    kafka_group_id: str | None = None               # Kafka: the group reading the helper's answers
    # Tests only: the leader adds no noise to its aggregate share (the exactness test).
    unsafe_no_noise_for_tests: bool = False


class LeaderMetrics:
    def __init__(self, registry: CollectorRegistry):
        r = registry
        self.windows = PromCounter("rase_fog_prio3_windows", "Prio3 windows, by outcome (forwarded, aggregated, "
                                   "dropped_<reason>)", ["outcome"], registry=r)
        self.rejected = PromCounter("rase_fog_prio3_reports_rejected", "Prio3 reports the leader's verification "
                                    "rejected, by reason", ["reason"], registry=r)
        self.resent = PromCounter("rase_fog_prio3_batches_resent", "Batches sent again: the helper had not "
                                  "answered within verify_timeout_s", registry=r)


@dataclass
class _Pending:
    reports: list = field(default_factory=list)
    nonces: dict = field(default_factory=dict)


class Prio3Leader:
    """The leader's state and tasks inside a FogService (wiring: the fog's
    ingest calls validate/accepted/reply/commit, its closer calls close)."""

    # open() and connect() make these; nothing reads them before.
    journal: LeaderJournal
    sink: Any
    sender: OutboxSender

    def __init__(self, cfg: Prio3FogConfig, *, name: str, regions: list[str], k_min: int,
                 registry: CollectorRegistry, storage: Outage, sink_name: str):
        self.cfg = cfg
        self.name = name
        self.regions = set(regions)
        self.k_min = k_min
        self.metrics = LeaderMetrics(registry)
        self.storage = storage
        self.forwarding = Outage(f"fog prio3 exchange via {sink_name}", log)
        self.outbox_wakeup = Wakeup()
        self.work_wakeup = Wakeup()
        self.verify_key = b""
        self.nonces: dict[bytes, tuple[str, int, str]] = {}
        self.pending = _Pending()
        self.states: dict[tuple[str, int], Prio3Aggregator] = {}
        self.reply_source: Any = None     # Kafka: the helper's answers (MQTT: they come with the reports)
        self.finished = 0                 # windows whose noisy share was queued (each makes one aggregate)

    # -- start -----------------------------------------------------------------------------
    def open(self, db) -> None:  # noqa: ANN001 - the fog journal's connection
        self.verify_key = read_key(self.cfg.verify_key_file, "fog [prio3] verify_key_file")
        self.journal = LeaderJournal(db)
        self.nonces = self.journal.nonces()
        if self.cfg.unsafe_no_noise_for_tests:
            log.warning("fog [prio3] unsafe_no_noise_for_tests: the leader adds NO noise (tests only)")

    async def connect(self, stack: contextlib.AsyncExitStack, transport: str, kafka: KafkaConfig, *, link,
                      sink=None, replies_from_kafka: bool = True) -> None:  # noqa: ANN001
        """The exchange's transport: the leader's messages go where the fog's
        windows go (a sink of its own: MQTT on the fog's link, or a Kafka
        producer), the helper's answers come back the same way (MQTT: with the
        reports; Kafka: a consumer of their topic). `sink`: a test's own."""
        if sink is None and transport == "kafka":
            sink = KafkaSink(kafka)
            stack.push_async_callback(sink.stop)
        self.sink = sink or MqttSink(link, topics.windows_topic)
        if transport == "kafka" and replies_from_kafka:
            cfg = kafka.model_copy(update={"topic": topics.KAFKA_PRIO3_VERIFY_TOPIC,
                                           "group_id": self.cfg.kafka_group_id or f"rase-fog-{self.name}"})
            self.reply_source = KafkaSource(cfg)
            await self.reply_source.start()
            stack.push_async_callback(self.reply_source.stop)
        self.sender = OutboxSender("fog prio3 exchange", unsent=self.journal.unsent,
                                   send=lambda row: self.sink.send(row[0], row[3]),
                                   mark_sent=self._sent, outage=self.forwarding, storage=self.storage,
                                   wakeup=self.outbox_wakeup)

    def _sent(self, row: tuple[str, int, int, str]) -> None:
        self.journal.mark_sent(row[0], row[1], row[2])
        crash_point("leader_after_forward" if row[2] < SHARE_SEQ else "leader_after_share")

    def subscriptions(self) -> list[tuple[str, int]]:
        return [(topics.prio3_verify_topic(r), 1) for r in sorted(self.regions)]

    def tasks(self) -> list:
        out = [self.sender.run(), self._work()]
        if self.reply_source is not None:
            out.append(self._reply_intake())
        return out

    # -- ingest -------------------------------------------------------------------------------
    @staticmethod
    def is_report(payload: bytes) -> bool:
        return b'"nonce":' in payload[:96]

    def validate(self, topic: str, payload: bytes, now_t: int, rules: IngestRules, params: Prio3Params | None
                 ) -> Prio3Accepted:
        rep = validate_report(topic, payload, now_t, rules, params)
        nonce = rep.shares[0]
        seen = self.pending.nonces.get(nonce) or self.nonces.get(nonce)
        if seen is not None and seen != (rep.region, rep.t, rep.device):   # the same report again is a duplicate
            raise Rejected("nonce_repeated", nonce.hex())
        return rep

    def accepted(self, rep: Prio3Accepted) -> None:
        self.pending.reports.append((rep.region, rep.t, rep.device, *rep.shares, rep.eps))
        self.pending.nonces[rep.shares[0]] = (rep.region, rep.t, rep.device)

    def is_reply(self, topic: str) -> bool:
        return topic.startswith(topics.PRIO3_VERIFY_PREFIX)

    def reply(self, payload: bytes) -> tuple[str, int, int, str]:
        """A helper answer (part) as a journal row, or Rejected."""
        try:
            r = Prio3Verify.model_validate_json(payload)
        except ValidationError as err:
            raise Rejected("prio3_reply_invalid", str(err).replace("\n", " ")[:200]) from None
        if r.region not in self.regions:
            raise Rejected("prio3_reply_invalid", f"region {r.region} is not this fog's")
        return (r.region, r.t, r.first, payload.decode())

    def commit(self, replies: list[tuple[str, int, int, str]]) -> None:
        """Journal the batch's accepted reports and answers in a transaction of their own."""
        self.journal.add(self.pending.reports, replies)
        self.committed(replies)

    def write(self, replies: list[tuple[str, int, int, str]]) -> None:
        """The batch's accepted reports and answers, inside the fog's open transaction (its role's write)."""
        self.journal.write(self.pending.reports, replies)

    def committed(self, replies: list[tuple[str, int, int, str]]) -> None:
        """The batch is on disk: its nonces count as seen, the exchange looks at the answers."""
        if self.pending.reports:
            crash_point("leader_after_journal")
        if replies:
            crash_point("leader_after_verify")
        self.nonces.update(self.pending.nonces)
        self.pending = _Pending()
        if replies:
            self.work_wakeup.set()

    def reset(self) -> None:
        """After a storage failure: what was not committed is forgotten (it is redelivered)."""
        self.pending = _Pending()

    def open_reports(self) -> list:
        return self.journal.open_reports()

    # -- closing ---------------------------------------------------------------------------------
    def owns(self, cw: ClosedWindow) -> bool:
        """A window with Prio3 reports, kept or not (a suppressed one's rows are the leader's to forget)."""
        return PRIO3 in (cw.mechanisms or ()) or self.journal.has_reports(cw.region, cw.t)

    async def close(self, cw: ClosedWindow, protocols: list, ingest_rejected: int) -> bool:
        """Close a window of Prio3 reports under the newest of `protocols` (the
        fog's parameters for its t) that has prio3 params; True if its batch
        was queued, False if suppressed."""
        params = next((p.prio3 for p in protocols if p.prio3 is not None), None)
        if cw.suppressed or len(cw.devices) < self.k_min or params is None:
            self.journal.close(cw.region, cw.t, None, "", [], time.time())
            return False
        reports = self.journal.reports_of(cw.region, cw.t, cw.devices)
        started = time.perf_counter()
        closed = await compute(close_batch, params, self.verify_key, cw.region, cw.t, reports, window_rng(),
                               ingest_rejected, in_thread=len(reports) > LARGE)
        batch = [reports[i] for i in closed.order]
        self.journal.close(cw.region, cw.t, batch, params.model_dump_json(), closed.messages, time.time())
        self.states[(cw.region, cw.t)] = closed.aggregator
        self.metrics.windows.labels("forwarded").inc()
        log.info("fog prio3 (%s, %d): closed, %d reports, batch queued in %.3f s", cw.region, cw.t, len(reports),
                 time.perf_counter() - started)
        self.outbox_wakeup.set()
        return True

    def prune(self, t_min: int) -> None:
        self.journal.prune(t_min)
        self.nonces = {n: v for n, v in self.nonces.items() if v[1] >= t_min}

    # -- the exchange -------------------------------------------------------------------------------
    async def _work(self) -> None:
        await work_loop("fog prio3", self.step, self.work_wakeup, self.storage, min(5.0, self.cfg.verify_timeout_s / 2))

    async def step(self, now: float) -> int:
        """Finish every window whose answer is complete; resend or drop the late ones."""
        finished = 0
        for region, t, params_json, total, forwarded_at, sent_at in self.journal.waiting():
            params = Prio3Params.model_validate_json(params_json)
            replies = [Prio3Verify.model_validate_json(p) for p in self.journal.replies(region, t)]
            try:
                helper = helper_columns(params, replies, total)
            except ValueError as err:       # parts that do not fit the batch: ask again
                log.warning("fog prio3 (%s, %d): the helper's answer does not fit the batch (%s)", region, t, err)
                helper = None
            if helper is not None:
                await self._finish(params, region, t, total, *helper)
                finished += 1
            elif now - forwarded_at > self.cfg.verify_deadline_s:
                self._drop(region, t, total, "verification_timeout")
            elif now - sent_at > self.cfg.verify_timeout_s:
                self.journal.resend(region, t, now)
                self.metrics.resent.inc()
                self.outbox_wakeup.set()
        return finished

    async def _finish(self, params, region, t, total, helper_shares, helper_accepted) -> None:  # noqa: ANN001
        agg = self.states.pop((region, t), None)
        batch = self.journal.batch(region, t)
        if agg is None:             # after a restart: verify_init again (deterministic) from the fixed batch
            agg = Prio3Aggregator(params.vdaf(), self.verify_key, report_ctx(region, params.product, t), 0)
            agg.start([r[0] for r in batch], [r[1] for r in batch], [r[2] for r in batch])
        share, n = await compute(finish_window, params, agg, region, t, [r[0] for r in batch], helper_shares,
                                 helper_accepted, self.k_min, noise=not self.cfg.unsafe_no_noise_for_tests,
                                 in_thread=total > LARGE)
        state = "done" if share.dropped is None else "dropped"
        self.journal.finish(region, t, share.model_dump_json(), state, share.dropped)
        self.finished += share.dropped is None
        for reason, k in Counter(r.value for r in agg.reasons if r is not None).items():
            self.metrics.rejected.labels(reason).inc(k)
        self.metrics.windows.labels("aggregated" if share.dropped is None else f"dropped_{share.dropped}").inc()
        log.debug("fog prio3 (%s, %d): verified with the helper's shares, share queued", region, t)
        if share.dropped:
            log.info("fog prio3 (%s, %d): dropped, %s (%d of %d accepted by both, k_min %d)", region, t,
                     share.dropped, n, total, self.k_min)
        self.outbox_wakeup.set()

    def _drop(self, region: str, t: int, total: int, reason: str) -> None:
        log.warning("fog prio3 (%s, %d): dropped, %s: no answer from the helper", region, t, reason)
        self.states.pop((region, t), None)
        self.journal.finish(region, t, dropped_share(region, t, total, reason).model_dump_json(), "dropped", reason)
        self.metrics.windows.labels(f"dropped_{reason}").inc()
        self.outbox_wakeup.set()

    async def _reply_intake(self) -> None:
        """Kafka: the helper's answers from their own topic, journaled, then acknowledged."""
        wake = Wakeup()
        wake.bind()
        self.reply_source.wakeup = wake.set
        while True:
            got = self.reply_source.take(1000)
            if not got:
                await wake.wait(None, 0.5)
                continue
            rows = []
            for rec in got:
                try:
                    rows.append(self.reply(rec.payload))
                except Rejected as err:
                    log.warning("fog prio3: helper answer refused: %s", err)
            self.journal.add([], rows)
            self.reply_source.ack(got)
            self.work_wakeup.set()




__all__ = ["Prio3FogConfig", "Prio3Leader", "Prio3Accepted", "split_prio3"]
