"""The fusion center as Prio3's helper and collector (secure aggregation,
issue 20; docs/privacy.md, "Secure aggregation").

Per window (region, t):
1. the leader's batch parts arrive with the windows (rase/v1/windows/{region}
   or Kafka) and are stored before they are acknowledged;
2. once they cover the batch, the helper opens every sealed share (HPKE, its
   private key), runs verify_init on them, combines its verifier shares with
   the leader's and checks each proof, and queues its answer (its verifier
   shares and the reports it accepted) for the leader;
3. the leader's share arrives: the two accepted masks are intersected, and
   the window goes on only if the leader summed the same reports (same count
   and the same digest of their nonces) and at least k_min of them; the
   helper's aggregate share over them is added to the leader's noisy one.
   That region total (exact sum + the leader's noise) is stored as ready, in
   the transaction that forgets the window's shares;
4. when every known region of t is ready (or the merge deadline passed), the
   helper adds its own discrete Laplace noise once to the sum of the regions'
   totals and publishes the aggregate with the accepted n, the rejected count
   by reason, the estimate and its exact interval under the known noise, the
   wall-clock time and the privacy unit. Stored once per t (idempotent).
A window the two cannot finish is dropped with a reason, never published
half-verified.

Each party trusts only itself (issue 26): a batch is verified and noised
under the helper's own params for its t (its config, or for
params_grace_periods timestamps after a change the previous ones it
published), never the batch's; one that declares other params, names a region
outside the helper's config or other than its MQTT topic's, has a t more
than FUTURE_PERIODS ahead of the helper's own clock, or reopens a window
already taken (another membership, a second share, a t below the pruning
horizon) is refused:
nothing is released for it, the refusal is counted by reason
(rase_fusion_prio3_refused), logged at WARNING once per episode, and answered
so the leader drops the window. A report's nonce is verified in one window
only. Where the leader's statement contradicts the helper's own view (or its
share its batch, or it rejects reports the helper verified), the aggregate
says so (prio3.discrepancies) and rase_fusion_prio3_discrepancies counts it.
The leader's free-text fields become labels and published keys only from
the helper's own fixed sets (helper_rules: anything else is "other").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter as PromCounter
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fusion_center.prio3.helper_rules import (LABEL_UNKNOWN, OTHER, Answer, answer_batch, build_aggregate, combine,
                                              drop_outcome, own_params_for, refusal)
from fusion_center.prio3.helper_store import HelperStore, digest
from rase_common import deadletter
from rase_common.errors import Outage
from rase_common.failpoints import crash_point
from rase_common.kafka import KafkaConfig, KafkaSink
from rase_common.loop import Wakeup
from rase_common.mqtt import MqttSink
from rase_common.outbox import OutboxSender
from rase_common.protocol import topics
from rase_common.protocol.aggregate import Aggregate
from rase_common.privacy import UnitPrivacy
from rase_common.protocol.control import ControlMessage
from rase_common.protocol.prio3 import (MAX_PARTS, Prio3Batch, Prio3Params, Prio3Share, parse_leader_message, slot,
                                        split_slot, unpack)
from rase_common.secagg import Alarm, ShareOpener, compute, read_key, tile, work_loop
from rase_common.sqlite import storage_errors
from rase_device.prio3 import NONCE_SIZE

log = logging.getLogger(__name__)
LARGE = 2000          # verify in a worker thread above this many reports
# A batch or share may be this many of the helper's own periods ahead of its clock (as the fusion center's
# windows, fusion_center.ldp.role): a fog's clock a little ahead is fine, a t beyond would move the pruning
# horizon (aggregated) past every real window.
FUTURE_PERIODS = 2
# Why the helper refuses a leader message (issue 26): metric labels and the quarantine's reasons.
REFUSALS = ("unknown_region", "params_mismatch", "batch_conflict", "batch_after_release", "share_conflict", "too_old",
            "unknown_part", "future_t", "region_topic_mismatch")
# Windows combine() drops because the leader's share contradicts the batch it sent (counted as discrepancies).
LEADER_LIES = {"accepted_mismatch": "the leader's share does not sum the reports its mask and digest name",
               "batch_mismatch": "the leader's share declares another batch size than the batch it sent"}


class Refused(ValueError):
    """A leader message the helper refuses; `reason` is one of REFUSALS."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


class Prio3FusionConfig(BaseModel):
    """The fusion center's `[prio3]` table: it is Prio3's helper and collector."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    private_key_file: Path            # the helper's HPKE private key (64 hex digits): on this host only
    key_id: str = Field(min_length=1, max_length=64)   # the id devices pinned with its public key
    verify_key_file: Path             # 64 hex digits shared with the fogs only (Prio3's verify_key)
    k_min: int = Field(10, ge=1)      # fewest reports both accepted that a region's window may publish
    answer_deadline_s: float = Field(3600.0, gt=0)   # a batch whose leader share never comes is dropped
    # Processes opening and verifying a large window (issue 30: rase_common.vdaf.workers), one per core
    # this host gives the fusion center.
    decrypt_workers: int = Field(2, ge=1, le=64)
    workers_min_reports: int = Field(2000, ge=1)     # smaller windows open and verify in the fusion's own process
    # Issue 30: how many leader workers each region's reports are partitioned over (the helper's own
    # config, as the fogs' [prio3] parts): a region's window is published only with every part's share,
    # their zero-sum masks cancelling, and k_min applies to the region's parts together.
    leader_parts: int = Field(1, ge=1, le=MAX_PARTS)
    # After the helper's own params change, batches of this many more timestamps may still be made
    # under the previous ones (devices apply the control message when it reaches them).
    params_grace_periods: int = Field(3, ge=0)
    # Tests only: the helper adds no noise (with the fog's: the published sum is exact).
    unsafe_no_noise_for_tests: bool = False


# -- the helper inside a FusionService ------------------------------------------------------------

class HelperMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.windows = PromCounter("rase_fusion_prio3_windows", "Prio3 windows, by outcome (answered, ready, "
                                   "dropped_<reason>)", ["outcome"], registry=registry)
        self.rejected = PromCounter("rase_fusion_prio3_reports_rejected", "Prio3 reports rejected, by reason",
                                    ["reason"], registry=registry)
        self.refused = PromCounter("rase_fusion_prio3_refused", "Leader messages the helper refused, by reason "
                                   "(params_mismatch, unknown_region, batch_conflict, batch_after_release, "
                                   "share_conflict, too_old, unknown_part, future_t, "
                                   "region_topic_mismatch)", ["reason"], registry=registry)
        self.discrepancies = PromCounter("rase_fusion_prio3_discrepancies", "Where the leader's statement "
                                         "contradicts the helper's view, or reports its own checks failing, by "
                                         "kind", ["kind"], registry=registry)


def _warmed(f: asyncio.Future) -> None:
    if not f.cancelled() and f.exception() is not None:
        log.warning("fusion prio3: the decryption workers did not start (%r); large windows open in this process",
                    f.exception())


class Prio3Helper:
    # open() and connect() make these; nothing reads them before.
    store: HelperStore
    opener: ShareOpener
    sink: Any
    sender: OutboxSender

    def __init__(self, cfg: Prio3FusionConfig, *, regions: list[str], merge_deadline_s: float,
                 registry: CollectorRegistry, storage: Outage):
        self.cfg = cfg
        self.known = set(regions)
        self.merge_deadline_s = merge_deadline_s
        self.metrics = HelperMetrics(registry)
        self.storage = storage
        self.answering = Outage("fusion prio3 answers", log)
        self.outbox_wakeup, self.work_wakeup = Wakeup(), Wakeup()
        self.answers: dict[tuple[str, int], Answer] = {}
        self.verify_key = b""
        self.alarm = Alarm("fusion prio3", log)
        self._own: dict[str, Prio3Params] = {}      # params JSON -> model (the store's log, parsed once)
        self._precision: ControlMessage | None = None   # the helper's own control message (follow)
        self.noise_bits = None     # tests only: a RandomBits for the helper's noise (None: os.urandom)
        self._parts: list[tuple[str, int, int, str]] = []     # staged by the intake batch (stage/write/committed)
        self._shares: list[tuple[str, int, str]] = []
        self._late: list[tuple[str, int]] = []
        self._again: list[tuple[str, int]] = []
        self._refusals: list[tuple[str, int, str, str | None]] = []   # (region, t, answer, finish reason)
        self._refused: list[tuple[str, str]] = []                    # (reason, detail): counted once committed
        self._staged: dict[tuple, str] = {}                          # digests staged in this batch

    def open(self, db) -> None:  # noqa: ANN001 - the fusion store's connection
        self.opener = ShareOpener(read_key(self.cfg.private_key_file, "fusion [prio3] private_key_file"),
                                  self.cfg.decrypt_workers, self.cfg.workers_min_reports)
        self.verify_key = read_key(self.cfg.verify_key_file, "fusion [prio3] verify_key_file")
        self.store = HelperStore(db)
        if self.cfg.unsafe_no_noise_for_tests:
            log.warning("fusion [prio3] unsafe_no_noise_for_tests: the helper adds NO noise (tests only)")

    async def connect(self, stack: contextlib.AsyncExitStack, transport: str, kafka: KafkaConfig, *, link) -> None:
        """Answers go back over the transport the batches came by."""
        stack.callback(self.opener.close)
        warming = asyncio.get_running_loop().run_in_executor(None, self.opener.warm)   # in the background
        warming.add_done_callback(_warmed)
        if transport == "kafka":
            self.sink = KafkaSink(kafka.model_copy(update={"topic": topics.KAFKA_PRIO3_VERIFY_TOPIC}))
            stack.push_async_callback(self.sink.stop)
        else:
            self.sink = MqttSink(link, topics.prio3_verify_topic)
        self.sender = OutboxSender("fusion prio3 answers", unsent=self.store.unsent,
                                   send=lambda row: self.sink.send(row[0], row[3]),
                                   mark_sent=self._sent, outage=self.answering, storage=self.storage,
                                   wakeup=self.outbox_wakeup, dead_letter=self._dead_letter)

    def _dead_letter(self, row: tuple[str, int, int, str], reason: str) -> None:
        """A message the broker refused for good (its ACL): out of the outbox, kept for `rase deadletters`."""
        deadletter.put(self.store.db, "prio3_outbox", "sent", "region=? AND t=? AND seq=?", (row[0], row[1], row[2]),
                       reason)

    def _sent(self, row: tuple[str, int, int, str]) -> None:
        self.store.mark_sent(row[0], row[1], row[2])
        crash_point("helper_after_verify")

    def tasks(self) -> list:
        return [self.sender.run(), self._work()]

    # -- the helper's own params -------------------------------------------------------------------
    def follow(self, precision: ControlMessage, now: float) -> None:
        """The params the helper publishes are its own: recorded with the
        timestamp they start from (the fusion service calls this before each
        intake batch; nothing changes while they do not)."""
        p = precision.prio3
        if p is None:
            return
        self._precision = precision
        now_t = self.own_t(now)
        assert now_t is not None
        if self.store.follow_params(p.model_dump_json(), now_t):
            log.info("fusion prio3: the helper's own params from t=%d: %s (params id %s)", now_t, p.text, p.params_id)

    def own_t(self, now: float) -> int | None:
        """The timestamp of `now` on the helper's own schedule (its control message's period, epoch0 and
        product: hours or days for a product); None before follow() saw its params."""
        precision = self._precision
        p = precision.prio3 if precision is not None else None
        if precision is None or p is None:
            return None
        if p.product == "per-t":
            return int(precision.schedule().t_of(now))
        return int((now - precision.epoch0) // p.window_period_s(precision.period_s))

    def own_params(self, t: int) -> list[Prio3Params]:
        """The helper's own params a batch of timestamp t may be made under,
        newest first: the current ones, and the previous ones within
        params_grace_periods of the change."""
        log_ = self.store.params_log()
        out = []
        for i, (since_t, text) in enumerate(log_):
            if i == 0 or t < log_[0][0] + self.cfg.params_grace_periods:
                if text not in self._own:
                    self._own[text] = Prio3Params.model_validate_json(text)
                out.append(self._own[text])
        return out

    def slot(self, region: str, part: int) -> str:
        """The exchange's key of a region's part (rase_common.protocol.prio3.slot)."""
        return slot(region, part, self.cfg.leader_parts)

    def _refuse(self, reason: str, detail: str) -> "Refused":
        """A refusal: counted and alarmed once the batch is committed; raised for the host to quarantine."""
        self._refused.append((reason, detail))
        return Refused(reason, detail[:300])

    # -- intake ----------------------------------------------------------------------------------
    def take(self, payloads: list[bytes], now: float, has_aggregate) -> list[tuple[str, str] | None]:  # noqa: ANN001
        """Store the leader's messages of one intake batch (one commit); returns
        (reason, detail) of each invalid or refused one, for the quarantine
        (aligned with None for good ones)."""
        bad: list[tuple[str, str] | None] = []
        for payload in payloads:
            try:
                self.stage(payload, has_aggregate, now=now)
                bad.append(None)
            except Refused as err:
                bad.append((err.reason, str(err)))
            except ValueError as err:
                bad.append(("prio3_invalid", str(err).replace("\n", " ")[:300]))
        with storage_errors("fusion store"), self.store.db:
            self.store.db.execute("BEGIN")
            self.write(now)
        self.committed()
        return bad

    def stage(self, payload: bytes, has_aggregate, *, now: float | None = None,  # noqa: ANN001
              topic_region: str | None = None) -> None:
        """One leader message of an intake batch, judged and staged for
        write(); Refused (a ValueError with a reason) when the helper refuses
        it, ValueError when it is not a leader message at all. now: the
        helper's clock (a t more than FUTURE_PERIODS ahead of it is refused);
        topic_region: the region of the topic it came on (rase/v1/windows/{region},
        whose ACL lets only that region's fog write; None: a channel without one)."""
        try:
            m = parse_leader_message(payload)
        except ValidationError as err:
            raise ValueError(str(err)) from None
        if m.region not in self.known:             # the regions are the helper's own config's
            raise self._refuse("unknown_region", f"region {m.region!r} is not one of {sorted(self.known)}")
        if m.part >= self.cfg.leader_parts:        # so is the number of leader workers (issue 30)
            raise self._refuse("unknown_part", f"({m.region}, {m.t}) part {m.part}: the helper's leader_parts is "
                                               f"{self.cfg.leader_parts}")
        if topic_region is not None and m.region != topic_region:   # a fog writes only its own regions' topics
            raise self._refuse("region_topic_mismatch", f"({m.region}, {m.t}) came on the topic of region "
                                                        f"{topic_region[:64]!r}")
        now_t = self.own_t(now) if now is not None else None
        if now_t is not None and m.t > now_t + FUTURE_PERIODS:    # by the helper's own clock and schedule
            raise self._refuse("future_t", f"({m.region}, {m.t}): t is more than {FUTURE_PERIODS} periods ahead of "
                                           f"the helper's clock (t={now_t})")
        key = self.slot(m.region, m.part)          # the region, or region/part: the exchange's key
        if has_aggregate(m.t) and not self.store.finished(key, m.t):   # late: t is published already
            if isinstance(m, Prio3Share) and self.store.state(key, m.t) is not None:
                self._late.append((key, m.t))
            return
        text = payload.decode()
        d = digest(text)
        if isinstance(m, Prio3Batch):
            mine = self.own_params(m.t)
            if own_params_for(m.params, mine) is None:
                # Nothing is ever released for this window: refused, answered and finished at once.
                self._refusals.append((key, m.t, refusal(m.region, m.t, m.total, "params_mismatch", m.part),
                                       "params_mismatch"))
                raise self._refuse("params_mismatch", f"({m.region}, {m.t}): the batch's params {m.params.text} "
                                   f"are not the helper's own {' or '.join(p.text for p in mine) or '(none yet)'}")
            staged = ("part", key, m.t, m.first)
            verdict = self._staged_verdict(staged, d) or self.store.part_verdict(key, m.t, m.first, d)
            if verdict not in (None, "repeat"):
                if verdict != "too_old":
                    self._refusals.append((key, m.t, refusal(m.region, m.t, 0, verdict, m.part), None))
                raise self._refuse(verdict, f"a batch part of ({key}, {m.t}) that reopens a window already "
                                            f"taken ({verdict}): a batch is collected once")
            self._staged[staged] = d
            self._parts.append((key, m.t, m.first, text))
        else:
            staged = ("share", key, m.t, -1)      # -1: the share, beside the parts 0, 1, ...
            verdict = self._staged_verdict(staged, d) or self.store.share_verdict(key, m.t, d)
            if verdict in ("repeat", "late"):
                return
            if verdict is not None:
                raise self._refuse(verdict, f"a second leader share for ({key}, {m.t}) ({verdict})")
            self._staged[staged] = d
            self._shares.append((key, m.t, text))

    def _staged_verdict(self, key: tuple, d: str) -> str | None:
        """The same message twice in one intake batch is a repeat; another one for the same slot a conflict."""
        if key not in self._staged:
            return None
        return "repeat" if self._staged[key] == d else ("batch_conflict" if key[0] == "part" else "share_conflict")

    def write(self, now: float) -> None:
        """What was staged, inside the fusion store's open transaction (the batch's one commit)."""
        self._again = self.store.write(self._parts, self._shares, now, self._refusals)

    def committed(self) -> None:
        for region, t in self._late:
            self._drop(region, t, "late")
        for reason, detail in self._refused:
            self.metrics.refused.labels(reason).inc()
            self.alarm.raised(reason, detail)
        if any(finish for *_, finish in self._refusals):
            self.metrics.windows.labels("dropped_params_mismatch").inc(
                len({(r, t) for r, t, _, finish in self._refusals if finish}))
        if self._again or self._refusals:
            self.outbox_wakeup.set()
        if self._parts:
            crash_point("helper_after_journal")
        if self._shares:
            crash_point("helper_after_share")
        if self._parts or self._shares:
            self.work_wakeup.set()
        self.rolled_back()

    def rolled_back(self) -> None:
        self._parts, self._shares, self._late, self._again = [], [], [], []
        self._refusals, self._refused, self._staged = [], [], {}

    # -- answering and combining -------------------------------------------------------------------
    async def _work(self) -> None:
        await work_loop("fusion prio3", self.step, self.work_wakeup, self.storage, 5.0)

    async def step(self, now: float) -> int:
        """Combine every window whose leader share came (quick), then open and
        answer the oldest complete batch not answered yet (slow: one per call,
        so that shares arriving meanwhile wait for one batch at most, not for
        every batch in the queue); drop stale windows. Returns the work done."""
        done = 0
        waiting = []
        for region, t, state, received in self.store.windows():
            answer = self.answers.get((region, t))
            share = self.store.share(region, t) if answer is not None else None
            if share is not None and answer is not None:
                self._combine(region, t, answer, Prio3Share.model_validate_json(share), now)
                done += 1
            elif answer is None or state != "answered":
                waiting.append((region, t, state, received))
            elif now - received > self.cfg.answer_deadline_s:
                self._drop(region, t, "no_leader_share")
        for region, t, state, received in waiting:
            answer = self.answers.get((region, t)) or await self._answer(region, t, now - received)
            if answer is None:
                continue
            if state != "answered":
                self.store.answered(region, t, answer.messages, now,
                                    [x for x, ok in zip(answer.nonces, answer.accepted) if ok])
                self.metrics.windows.labels("answered").inc()
                self.outbox_wakeup.set()
            return done + 1          # more may wait: the loop calls again at once
        return done

    async def _answer(self, key: str, t: int, age_s: float) -> Answer | None:
        """Open and verify a window's batch (of a region, or of a leader
        worker's part of it: key) once its parts are all here, under the
        helper's own params for t (None: not yet, or dropped)."""
        region = key
        parts = [Prio3Batch.model_validate_json(p) for p in self.store.parts(key, t)]
        params = own_params_for(parts[0].params, self.own_params(t))
        if params is None:          # the helper's params changed since the batch was taken
            self._drop(region, t, "params_mismatch")
            return None
        try:
            ordered = tile(parts, parts[0].total)
            if ordered is not None and any(p.params != parts[0].params or p.total != parts[0].total
                                           for p in ordered):
                raise ValueError("the parts of one batch disagree")
            nonces = [x for p in ordered or [] for x in unpack(p.nonces, NONCE_SIZE, p.count, "nonces")]
        except ValueError as err:
            self._drop(region, t, f"batch_invalid: {err}"[:64])
            return None
        if ordered is None:
            if age_s > self.cfg.answer_deadline_s:
                self._drop(region, t, "batch_incomplete")
            return None
        started = time.perf_counter()
        seen = self.store.seen_nonces(key, t, nonces)     # verified in another window or part: never again
        real_region, part = split_slot(key)
        answer = await compute(answer_batch, params, self.verify_key, self.opener, real_region, t, ordered, seen,
                               part=part, in_thread=parts[0].total > LARGE)
        self.answers[(key, t)] = answer
        log.debug("fusion prio3 (%s, %d): %d reports opened and verified in %.3f s", region, t, parts[0].total,
                  time.perf_counter() - started)
        return answer

    def _combine(self, region: str, t: int, answer: Answer, share: Prio3Share, now: float) -> None:
        # With leader workers, k_min applies to a region's parts together (due, aggregate), not to each part.
        record, reason = combine(answer, share, self.cfg.k_min if self.cfg.leader_parts == 1 else 0)
        self.store.finish(region, t, record, now, reason)
        self.answers.pop((region, t), None)
        if record is None:
            outcome = drop_outcome(reason)         # the leader's free text never becomes a label
            self.metrics.windows.labels(f"dropped_{outcome}").inc()
            if outcome in LEADER_LIES:            # the leader's share contradicts what it sent: an alarm
                self.metrics.discrepancies.labels(outcome).inc()
                self.alarm.raised(outcome, f"({region}, {t}): {LEADER_LIES[outcome]}; not published")
            elif outcome == OTHER:
                self.metrics.discrepancies.labels(LABEL_UNKNOWN).inc()
                self.alarm.raised(LABEL_UNKNOWN, f"({region}, {t}): the leader dropped the window for a reason "
                                                 "the helper does not know")
            log.info("fusion prio3 (%s, %d): dropped, %s", region, t, reason)
            return
        for why, k in record["rejected"].items():
            self.metrics.rejected.labels(why).inc(k)
        for kind, k in record["discrepancies"].items():
            self.metrics.discrepancies.labels(kind).inc(k)
            self.alarm.raised(kind, f"({region}, {t}): the leader's statement and the helper's view disagree")
        if not record["discrepancies"]:
            self.alarm.cleared()
        self.metrics.windows.labels("ready").inc()
        log.debug("fusion prio3 (%s, %d): ready, %d reports both accepted", region, t, record["accepted"])

    def _drop(self, region: str, t: int, reason: str) -> None:
        self.store.finish(region, t, None, time.time(), reason)
        self.answers.pop((region, t), None)
        self.metrics.windows.labels(f"dropped_{reason.split(':')[0]}").inc()
        log.warning("fusion prio3 (%s, %d): dropped, %s", region, t, reason)

    # -- publishing -------------------------------------------------------------------------------
    def due(self, now: float) -> list[tuple[int, list[tuple[str, dict]], float]]:
        """Timestamps whose regions are all ready (with leader workers: every
        part of the region), or whose first ready region is merge_deadline_s
        old: (t, [(key, record)], first ready time)."""
        by_t: dict[int, list] = {}
        for key, t, record, at in self.store.ready():
            by_t.setdefault(t, []).append((key, record, at))
        out = []
        for t, rows in sorted(by_t.items()):
            first = min(at for *_, at in rows)
            if self.known <= self._complete({k for k, *_ in rows}) or now - first >= self.merge_deadline_s:
                out.append((t, [(k, rec) for k, rec, _ in rows], first))
        return out

    def _complete(self, keys: set[str]) -> set[str]:
        """The regions whose every part is among the ready keys."""
        parts = self.cfg.leader_parts
        return {r for r in {split_slot(k)[0] for k in keys} if all(slot(r, i, parts) in keys for i in range(parts))}

    def aggregated(self, t: int, stored: bool) -> None:
        """t is published (or had too few reports to publish): forget its records."""
        if not stored:
            log.info("fusion prio3 t=%d: fewer than k_min %d reports both accepted; not published", t,
                     self.cfg.k_min)
        crash_point("helper_after_aggregate")
        self.store.aggregated(t)
        self.store.prune(t - 100_000)

    def aggregate(self, t: int, ready: list[tuple[str, dict]], precision: ControlMessage, *, level: float,
                  history, windows_w: tuple[int, ...], clip_bias_bound: float | None = None,
                  unit: UnitPrivacy | None = None) -> tuple[Aggregate, dict] | None:  # noqa: ANN001
        """The aggregate of t (None: nothing publishable; its records are forgotten).
        Its params, noise and k_min are the helper's own (the records carry its params)."""
        current = precision.prio3
        mine = [(r, rec) for r, rec in ready if current is None or Prio3Params(**rec["params"]) == current]
        mine = mine or ready                      # around a change of params: the newest t still publishes
        dropped = {split_slot(r)[0]: "other_params" for r, _ in ready if r not in {m for m, _ in mine}}
        if self.cfg.leader_parts > 1:
            # A region's parts count only all together (their masks cancel in the sum), and k_min is the region's.
            complete = self._complete({k for k, _ in mine})
            n_of: dict[str, int] = {}
            for k, rec in mine:
                n_of[split_slot(k)[0]] = n_of.get(split_slot(k)[0], 0) + rec["accepted"]
            for region in {split_slot(k)[0] for k, _ in mine}:
                if region not in complete:
                    dropped[region] = "part_missing"
                elif n_of[region] < self.cfg.k_min:
                    dropped[region] = "under_k_min"
            mine = [(k, rec) for k, rec in mine if split_slot(k)[0] not in dropped]
        if not mine or sum(rec["accepted"] for _, rec in mine) < self.cfg.k_min:
            return None
        return build_aggregate(t, mine, precision, set(self.known), level=level,
                               noise=not self.cfg.unsafe_no_noise_for_tests, dropped=dropped, history=history,
                               windows_w=windows_w, bits=self.noise_bits, clip_bias_bound=clip_bias_bound,
                               unit=unit)



__all__ = ["Prio3FusionConfig", "Prio3Helper", "build_aggregate"]
