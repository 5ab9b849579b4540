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

Each party trusts only itself (issue 26): the leader's params are its own
config's `[prio3.params]` (a control message with other ones is refused by
fog_shuffler.protocol.ProtocolGate, counted and alarmed), k_min is its own;
the helper's answer is checked against what the leader verified itself
(leader_rules.check_helper), an answer for a batch the leader never sent is
refused, and a published aggregate is compared with the leader's own
statement of the window (leader_rules.compare_published). Every finished
window's statement goes out on rase/v1/prio3/statements/{region}, which only
the fog may write: subscribers get the leader's account by a path the helper
cannot forge.

The rules are pure functions (fog_shuffler.prio3.leader_rules: validate_report,
close_batch, finish_window); Prio3Leader holds the journal tables, the
outbox task and the reply intake.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter as PromCounter, Gauge
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fog_shuffler.ingest import IngestRules, Rejected
from fog_shuffler.prio3.leader_journal import SHARE_SEQ, LeaderJournal
from fog_shuffler.prio3.leader_rules import (PRIO3, PartOf, Prio3Accepted, close_batch, compare_published,
                                             dropped_share,
                                             finish_window, helper_columns, leader_verify, published_totals,
                                             record_columns, record_of, records_matrix, split_prio3, statement_of,
                                             validate_report)
from fog_shuffler.shuffle.randomness import window_rng
from fog_shuffler.windows import ClosedWindow
from rase_common import deadletter
from rase_common.errors import Outage, ProtocolError
from rase_common.failpoints import crash_point
from rase_common.kafka import KafkaConfig, KafkaSink, KafkaSource
from rase_common.loop import Wakeup
from rase_common.mqtt import MqttSink
from rase_common.outbox import OutboxSender
from rase_common.protocol import topics
from rase_common.protocol.aggregate import Aggregate
from rase_common.protocol.prio3 import MAX_PARTS, Prio3Params, Prio3Statement, Prio3Verify, slot
from rase_common.secagg import Alarm, compute, read_key, work_loop
from rase_common.vdaf import Prio3Aggregator
from rase_common.vdaf.workers import VerifyPool
from rase_device import prio3_binary

log = logging.getLogger(__name__)
LARGE = 2000          # verify in a worker thread above this many reports
COMPARED_KEPT = 64    # digests of compared aggregates kept (the retained latest one repeats one of them)


class Prio3FogConfig(BaseModel):
    """The fog's `[prio3]` table: it is Prio3's leader."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    # 64 hex digits shared with the fusion center only (Prio3's verify_key).
    verify_key_file: Path
    # The leader's own params (issue 26: never the control message's or the helper's). A control
    # message with other prio3 params is refused; the helper refuses a batch under other params.
    params: Prio3Params | None = None
    verify_timeout_s: float = Field(30.0, gt=0)     # no answer from the helper: send the batch again
    verify_deadline_s: float = Field(600.0, gt=0)   # then drop the window (reason verification_timeout)
    kafka_group_id: str | None = None               # Kafka: the group reading the helper's answers
    # Processes verifying a large window (issue 30: rase_common.vdaf.workers), one per core this host gives the fog.
    verify_workers: int = Field(2, ge=1, le=64)
    workers_min_reports: int = Field(2000, ge=1)     # smaller windows verify in the fog's own process
    # Issue 30: this fog is leader worker `part` of `parts` of its regions: its config's devices are its
    # part of each region's (the operator partitions the devices; the worker subscribes to its own
    # devices' topics). Its aggregate shares carry a zero-sum mask derived from parts_key_file (64 hex
    # digits that the leader workers share and the helper never holds), and only part 0 adds the
    # leader's noise: summed, the parts are the region's share with the leader's noise once.
    part: int = Field(0, ge=0, lt=MAX_PARTS)
    parts: int = Field(1, ge=1, le=MAX_PARTS)
    parts_key_file: Path | None = None

    @model_validator(mode="after")
    def _parts(self) -> "Prio3FogConfig":
        if self.part >= self.parts:
            raise ValueError(f"[prio3] part {self.part} is not one of the {self.parts} parts (0 .. parts - 1)")
        if self.parts > 1 and self.parts_key_file is None:
            raise ValueError("[prio3] parts > 1 needs parts_key_file (the leader workers' shared mask key)")
        return self
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
        self.refused = PromCounter("rase_fog_prio3_refused", "Secure-aggregation messages the leader refused or "
                                   "that refused it, by reason (control_params_mismatch, reply_unsolicited, "
                                   "reply_mismatch, helper_refused_<reason>)", ["reason"], registry=r)
        self.discrepancies = PromCounter("rase_fog_prio3_helper_discrepancies", "Where the helper's answer or "
                                         "a published aggregate contradicts the leader's own checks, by kind",
                                         ["kind"], registry=r)
        self.params_mismatch = Gauge("rase_fog_prio3_params_mismatch", "1 while the control message's prio3 "
                                     "params differ from the fog's own (the fog keeps its own)", registry=r)


@dataclass
class _Pending:
    reports: list = field(default_factory=list)
    nonces: dict = field(default_factory=dict)


def _warmed(f: asyncio.Future) -> None:
    if not f.cancelled() and f.exception() is not None:
        log.warning("fog prio3: the verification workers did not start (%r); windows verify in this process",
                    f.exception())


class Prio3Leader:
    """The leader's state and tasks inside a FogService (wiring: the fog's
    ingest calls validate/accepted/reply/commit, its closer calls close)."""

    # open() and connect() make these; nothing reads them before.
    journal: LeaderJournal
    pool: VerifyPool
    part: PartOf
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
        self.statement_wakeup = Wakeup()   # its own: one Wakeup wakes one waiting sender
        self.work_wakeup = Wakeup()
        self.verify_key = b""
        self.nonces: dict[bytes, tuple[str, int, str]] = {}
        self.pending = _Pending()
        self.states: dict[tuple[str, int], Prio3Aggregator] = {}
        self.reply_source: Any = None     # Kafka: the helper's answers (MQTT: they come with the reports)
        self.statement_sink: Any = None   # the fog's own statements (MQTT; None: not published, e.g. in memory)
        self.statement_sender: OutboxSender | None = None
        self.finished = 0                 # windows whose noisy share was queued (each makes one aggregate)
        self.checked = 0                  # published secure aggregates compared with the statements
        self.compared: OrderedDict[bytes, None] = OrderedDict()   # sha256 of the newest ones compared
        self.alarm = Alarm("fog prio3", log)       # refusals and discrepancies: WARNING once per episode

    # -- start -----------------------------------------------------------------------------
    @property
    def params(self) -> Prio3Params:
        """The leader's own params (FogConfig requires them with a [prio3] table)."""
        if self.cfg.params is None:
            raise ValueError("fog [prio3] needs its own params ([prio3.params])")
        return self.cfg.params

    def open(self, db) -> None:  # noqa: ANN001 - the fog journal's connection
        self.verify_key = read_key(self.cfg.verify_key_file, "fog [prio3] verify_key_file")
        self.pool = VerifyPool(self.cfg.verify_workers, self.cfg.workers_min_reports,
                               preload=(Prio3Params.__module__,))
        key = b""
        if self.cfg.parts > 1:
            assert self.cfg.parts_key_file is not None     # the config's validation requires it
            key = read_key(self.cfg.parts_key_file, "fog [prio3] parts_key_file")
        self.part = PartOf(self.cfg.part, self.cfg.parts, key)
        self.journal = LeaderJournal(db)
        self.nonces = self.journal.nonces()
        if self.cfg.unsafe_no_noise_for_tests:
            log.warning("fog [prio3] unsafe_no_noise_for_tests: the leader adds NO noise (tests only)")

    async def connect(self, stack: contextlib.AsyncExitStack, transport: str, kafka: KafkaConfig, *, link,
                      sink=None, replies_from_kafka: bool = True, statement_sink=None) -> None:  # noqa: ANN001
        """The exchange's transport: the leader's messages go where the fog's
        windows go (a sink of its own: MQTT on the fog's link, or a Kafka
        producer), the helper's answers come back the same way (MQTT: with the
        reports; Kafka: a consumer of their topic). `sink`: a test's own. The
        leader's statements go on its own MQTT topic (`statement_sink`: a test's own)."""
        stack.callback(self.pool.close)
        warming = asyncio.get_running_loop().run_in_executor(None, self.pool.warm)   # in the background
        warming.add_done_callback(_warmed)
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
                                   send=lambda row: self.sink.send(row[0], row[3]),      # rase/v1/windows/{region}
                                   mark_sent=self._sent, outage=self.forwarding, storage=self.storage,
                                   wakeup=self.outbox_wakeup, dead_letter=self._dead_letter)
        self.statement_sink = statement_sink or (MqttSink(link, topics.prio3_statement_topic) if link else None)
        if self.statement_sink is not None:
            self.statement_sender = OutboxSender(
                "fog prio3 statements", unsent=self.journal.unsent_statements,
                send=lambda row: self.statement_sink.send(self.slot(row[0]), row[3]),
                mark_sent=lambda row: self.journal.mark_sent(row[0], row[1], row[2]),
                outage=Outage("fog prio3 statements", log), storage=self.storage, wakeup=self.statement_wakeup)

    def _dead_letter(self, row: tuple[str, int, int, str], reason: str) -> None:
        """A message the broker refused for good (its ACL): out of the outbox, kept for `rase deadletters`."""
        deadletter.put(self.journal.db, "prio3_outbox", "sent", "region=? AND t=? AND seq=?", (row[0], row[1], row[2]),
                       reason)

    def _sent(self, row: tuple[str, int, int, str]) -> None:
        self.journal.mark_sent(row[0], row[1], row[2])
        crash_point("leader_after_forward" if row[2] < SHARE_SEQ else "leader_after_share")

    def slot(self, region: str) -> str:
        """This worker's key of a region's window in the exchange and its topics (the region, or region/part)."""
        return slot(region, self.cfg.part, self.cfg.parts)

    def subscriptions(self, replies_over_mqtt: bool = True) -> list[tuple[str, int]]:
        """The helper's answers (when they come over MQTT; a part's on its own topic) and the published
        aggregates, per t and the retained latest one (compared with the leader's statements, whatever
        the transport)."""
        replies = [(topics.prio3_verify_topic(self.slot(r)), 1) for r in sorted(self.regions)] \
            if replies_over_mqtt else []
        return replies + [(topics.AGGREGATES_T_FILTER, 1), (topics.AGGREGATE_LATEST_TOPIC, 1)]

    def tasks(self) -> list:
        out = [self.sender.run(), self._work()]
        if self.statement_sender is not None:
            out.append(self.statement_sender.run())
        if self.reply_source is not None:
            out.append(self._reply_intake())
        return out

    # -- ingest -------------------------------------------------------------------------------
    @staticmethod
    def is_report(payload: bytes) -> bool:
        """A Prio3 report: binary (its magic), or JSON (a nonce among the first fields)."""
        # "nonce" follows v, t, eps, seq and p: within 160 bytes even for a 10-digit t and seq and an
        # eps of 17 significant digits (an interval product's eps_day / releases, issue 28).
        return payload[:2] == prio3_binary.MAGIC or b'"nonce":' in payload[:160]

    def validate(self, topic: str, payload: bytes, now_t: int, rules: IngestRules, params: Prio3Params | None
                 ) -> Prio3Accepted:
        rep = validate_report(topic, payload, now_t, rules, params)
        nonce = rep.shares[0]
        seen = self.pending.nonces.get(nonce) or self.nonces.get(nonce)
        if seen is not None and seen != (rep.region, rep.t, rep.device):   # the same report again is a duplicate
            raise Rejected("nonce_repeated", nonce.hex())
        return rep

    def accepted(self, rep: Prio3Accepted) -> None:
        self.pending.reports.append((rep.region, rep.t, rep.device, record_of(rep.shares), rep.eps))
        self.pending.nonces[rep.shares[0]] = (rep.region, rep.t, rep.device)

    def is_reply(self, topic: str) -> bool:
        return topic.startswith(topics.PRIO3_VERIFY_PREFIX)

    def reply(self, payload: bytes) -> tuple[str, int, int, str] | None:
        """A helper answer (part) as a journal row, or Rejected. An answer for a
        window the leader never sent a batch for is refused and alarmed
        (reply_unsolicited); one for a window already finished is a late
        repeat (the helper answering a resend after a restart): None, ignored."""
        try:
            r = Prio3Verify.model_validate_json(payload)
        except ValidationError as err:
            raise Rejected("prio3_reply_invalid", str(err).replace("\n", " ")[:200]) from None
        if r.region not in self.regions or r.part >= self.cfg.parts:
            raise Rejected("prio3_reply_invalid", f"region {r.region} part {r.part} is not this fog's")
        if r.part != self.cfg.part:
            return None            # another leader worker's part (Kafka: every worker reads every answer)
        state = self.journal.state(r.region, r.t)
        if state is None:
            self._refused("reply_unsolicited", f"an answer for ({r.region}, {r.t}), which this leader never sent")
            self.metrics.discrepancies.labels("reply_unsolicited").inc()
            raise Rejected("prio3_reply_unsolicited", f"no batch of ({r.region}, {r.t}) was sent")
        if state != "forwarded":
            return None
        return (r.region, r.t, r.first, payload.decode())

    def control_checked(self, refused: ProtocolError | None) -> None:
        """The fog followed (None) or refused a control message. One refused
        for other prio3 params (the registry entry's own_fields) is an
        alarm until a control message that agrees with the leader's own comes."""
        if refused is None:
            self.metrics.params_mismatch.set(0)
        elif refused.reason == "control_params_mismatch":
            self.metrics.params_mismatch.set(1)
            self._refused("control_params_mismatch", refused.detail)

    def _refused(self, reason: str, detail: str) -> None:
        self.metrics.refused.labels(reason).inc()
        self.alarm.raised(reason, detail)

    # -- the published aggregates, against the leader's own statements ----------------------------
    @staticmethod
    def is_aggregate(topic: str) -> bool:
        """A per-t aggregate, or the retained latest one (what Home Assistant reads): both are compared."""
        return topic.startswith(topics.AGGREGATES_PREFIX + "t/") or topic == topics.AGGREGATE_LATEST_TOPIC

    def check_aggregate(self, payload: bytes, retained: bool = False) -> dict[str, int]:
        """Compare a published secure aggregate with the leader's statements of
        its regions, and with itself (its n against its regions' views); each
        discrepancy is counted and alarmed. Returns them. An aggregate naming
        none of this leader's regions, or only windows before its journal's
        horizon, is not the leader's to judge. retained: the latest aggregate,
        which repeats a per-t one (and comes again on each subscribe): the same
        bytes already compared are not counted twice."""
        try:
            agg = Aggregate.model_validate_json(payload)
        except ValidationError:
            return {}                  # not ours to judge: the fusion center's own schema
        digest = hashlib.sha256(payload).digest()
        if retained and digest in self.compared:
            return {}
        views = agg.prio3.regions if agg.prio3 is not None else {}
        found: dict[str, int] = {}
        where: dict[str, str] = {}
        judged = False
        for region in sorted(self.regions):
            named = region in agg.regions
            if not named and self.slot(region) not in views:
                continue
            text = self.journal.statement(region, agg.t)
            stated = Prio3Statement.model_validate_json(text) if text else None
            if stated is None and not self.journal.knows(region, agg.t):
                continue               # before this journal's horizon: nothing to compare with
            judged = True
            if agg.prio3 is None:
                # A prio3 aggregate without its summary: no views to compare, its n unaccounted for.
                mine = {"published_summary_missing": 1} if agg.mechanism == PRIO3 else {}
            else:
                mine = compare_published(stated, self.slot(region), agg.prio3, named)
            for kind, k in mine.items():
                found[kind] = found.get(kind, 0) + k
                where.setdefault(kind, f"the leader's statement of ({region}, {agg.t})")
        if not judged:
            return {}
        self.checked += 1
        self.compared[digest] = None
        while len(self.compared) > COMPARED_KEPT:
            self.compared.popitem(last=False)
        for kind, k in published_totals(agg).items():
            found[kind] = found.get(kind, 0) + k
            where.setdefault(kind, "itself (its n, its estimates' n and prio3's totals against the sums of "
                                   "prio3.regions, which the leaders compare)")
        for kind, k in found.items():
            self.metrics.discrepancies.labels(kind).inc(k)
            self.alarm.raised(kind, f"the aggregate of t={agg.t} contradicts {where[kind]}: {kind}")
        return found

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

    async def close(self, cw: ClosedWindow, protocols: list, ingest_rejected: int,
                    ingest_reasons: dict[str, int] | None = None) -> bool:
        """Close a window of Prio3 reports under the leader's own params (never
        `protocols`' : issue 26; the argument stays for the closer's call);
        True if its batch was queued, False if suppressed. ingest_reasons: the
        region's reports refused at ingest since its previous window, by reason."""
        params = self.params
        under = cw.suppressed or len(cw.devices) < self.k_min
        if under and self.cfg.parts <= 1:
            self.journal.close(cw.region, cw.t, None, "", [], time.time())
            return False
        started = time.perf_counter()
        # As one of several leader workers, a part under k_min forwards none of its reports, but an empty
        # batch: its share (its mask only) still goes to the helper, which needs every part's (issue 30).
        devices = [] if under else cw.devices
        reports = records_matrix(params, self.journal.records_of(cw.region, cw.t, devices))
        n = reports.shape[0]
        read = time.perf_counter()
        closed = await compute(close_batch, params, self.verify_key, cw.region, cw.t, reports, window_rng(),
                               ingest_rejected, self.pool, self.cfg.part, in_thread=n > LARGE)
        assert closed.records is not None
        verified = time.perf_counter()
        self.journal.close(cw.region, cw.t, closed.records.tobytes(), params.model_dump_json(), closed.messages,
                           time.time(), ingest=ingest_reasons if ingest_reasons is not None else
                           ({"unknown": ingest_rejected} if ingest_rejected else {}), total=n)
        self.states[(cw.region, cw.t)] = closed.aggregator
        self.metrics.windows.labels("forwarded").inc()
        done = time.perf_counter()
        log.info("fog prio3 (%s, %d): closed, %d reports, batch queued in %.3f s (read %.3f, shuffle and "
                 "verify_init %.3f, journal %.3f)", cw.region, cw.t, n, done - started, read - started,
                 verified - read, done - verified)
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
            except ValueError as err:       # parts that do not fit the batch: counted, alarmed, asked again
                self._refused("reply_mismatch", f"({region}, {t}): the helper's answer does not fit the batch "
                                                f"the leader sent ({err})")
                self.metrics.discrepancies.labels("reply_mismatch").inc()
                self.journal.forget_replies(region, t)
                helper = None
            if helper is not None:
                await self._finish(params, region, t, total, helper)
                finished += 1
            elif now - forwarded_at > self.cfg.verify_deadline_s:
                self._drop(params, region, t, total, "verification_timeout")
            elif now - sent_at > self.cfg.verify_timeout_s:
                self.journal.resend(region, t, now)
                self.metrics.resent.inc()
                self.outbox_wakeup.set()
        return finished

    async def _finish(self, params, region, t, total, answer) -> None:  # noqa: ANN001
        agg = self.states.pop((region, t), None)
        batch = records_matrix(params, self.journal.batch(region, t))
        if agg is None and answer.refused is None:   # after a restart: verify_init again (deterministic)
            agg = await compute(leader_verify, params, self.verify_key, params.ctx(region, t), batch, self.pool,
                                in_thread=total > LARGE)
        share, n = await compute(finish_window, params, agg, region, t, record_columns(params, batch)[0], answer,
                                 self.k_min, noise=not self.cfg.unsafe_no_noise_for_tests,
                                 ingest_rejected=self.journal.ingest(region, t), pool=self.pool, part=self.part,
                                 in_thread=total > LARGE)
        state = "done" if share.dropped is None else "dropped"
        self.journal.finish(region, t, share.model_dump_json(), state, share.dropped,
                            statement=share.statement.model_dump_json() if share.statement else None)
        self.finished += share.dropped is None
        if answer.refused is not None:
            self._refused(f"helper_refused_{answer.refused}"[:40], f"the helper refused the batch of "
                                                                  f"({region}, {t}): {answer.refused}")
        else:
            reasons = agg.reasons if agg is not None else []
            for reason, k in Counter(r.value for r in reasons if r is not None).items():
                self.metrics.rejected.labels(reason).inc(k)
        found = share.statement.discrepancies if share.statement else {}
        for kind, k in found.items():
            self.metrics.discrepancies.labels(kind).inc(k)
            self.alarm.raised(kind, f"({region}, {t}): the helper's answer contradicts the leader's checks: "
                                    f"{kind} x {k}")
        if not found and answer.refused is None:
            self.alarm.cleared()
        self.metrics.windows.labels("aggregated" if share.dropped is None
                                    else f"dropped_{share.dropped.split(':')[0]}").inc()
        log.debug("fog prio3 (%s, %d): verified with the helper's shares, share queued", region, t)
        if share.dropped:
            log.info("fog prio3 (%s, %d): dropped, %s (%d of %d accepted by both, k_min %d)", region, t,
                     share.dropped, n, total, self.k_min)
        self.outbox_wakeup.set()
        self.statement_wakeup.set()

    def _drop(self, params: Prio3Params, region: str, t: int, total: int, reason: str) -> None:
        log.warning("fog prio3 (%s, %d): dropped, %s: no answer from the helper", region, t, reason)
        self.states.pop((region, t), None)
        share = dropped_share(region, t, total, reason, self.cfg.part)
        share = share.model_copy(update={"statement": statement_of(params, share, None, [],
                                                                   self.journal.ingest(region, t))})
        assert share.statement is not None
        self.journal.finish(region, t, share.model_dump_json(), "dropped", reason,
                            statement=share.statement.model_dump_json())
        self.metrics.windows.labels(f"dropped_{reason}").inc()
        self.outbox_wakeup.set()
        self.statement_wakeup.set()

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
                    row = self.reply(rec.payload)
                except Rejected as err:
                    log.warning("fog prio3: helper answer refused: %s", err)
                    continue
                if row is not None:
                    rows.append(row)
            self.journal.add([], rows)
            self.reply_source.ack(got)
            self.work_wakeup.set()




__all__ = ["Prio3FogConfig", "Prio3Leader", "Prio3Accepted", "split_prio3"]
