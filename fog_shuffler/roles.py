"""The fog's roles, built from its config and the mechanism registry, and
what the host does with all of them at once: route and take a batch, commit
it in one transaction, count what became of each message, restore the
windows after a restart, close what is due.

Routing is by role, never by mode: the control follower claims the control
topic, each report role its reports (the specific ones first, by their kind),
and the local-DP role what remains on the report topics. A message no role
claims is refused as `bad_topic`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from fog_shuffler.budget import BudgetRole
from fog_shuffler.config import FogConfig
from fog_shuffler.context import FogContext
from fog_shuffler.control import ControlFollower
from fog_shuffler.feedback import RejectionFeedback
from fog_shuffler.receipts import Receipts
from fog_shuffler.window_receipts import WindowReceiptsRole
from fog_shuffler.ingest import IngestRules, Rejected
from fog_shuffler.journal import Journal
from fog_shuffler.protocol import Protocol, ProtocolGate
from fog_shuffler.reports import ReportRole, WindowCloser
from fog_shuffler.screen.role import ScreenRole
from fog_shuffler.intake import OutboxCount
from fog_shuffler.metrics import FogMetrics
from fog_shuffler.windows import Outcome, RegionCounters, WindowManager
from rase_common.channels import Sink, Source
from rase_common.loop import Wakeup
from rase_common.errors import Backoff, Outage, ProtocolError
from rase_common.protocol import topics
from rase_common.quarantine import Quarantine
from rase_common.role import Role, enabled, role_classes, route

log = logging.getLogger("fog_shuffler.service")


def own_protocol(cfg: FogConfig) -> Protocol:
    """The fog's own protocol parameters (its config), until a control message says otherwise."""
    extra: dict[str, Any] = {"interval_s": cfg.interval_s}
    for cls in role_classes("fog"):
        if issubclass(cls, ReportRole):
            extra.update(cls.own_params(cfg))
    return Protocol(cfg.period_s, cfg.epoch0, tuple(cfg.eps_levels), cfg.x_min, cfg.x_max,
                    mechanism=cfg.device_mechanism, on_above=cfg.on_above, bands=tuple(cfg.bands), **extra)


def make_gate(cfg: FogConfig) -> ProtocolGate:
    own = own_protocol(cfg)
    devices = {d: r for r, rc in cfg.regions.items() for d in rc.all_devices()}
    return ProtocolGate(own, IngestRules(devices=devices, eps_levels=own.eps_levels, x_min=own.x_min,
                                         x_max=own.x_max, lateness_periods=None),
                        grace_periods=cfg.lateness_periods + 2, policy=cfg.control_policy.build(cfg.period_s))


def make_windows(cfg: FogConfig) -> WindowManager:
    return WindowManager(registered={r: rc.all_devices() for r, rc in cfg.regions.items()}, k_min=cfg.k_min,
                         lateness_periods=cfg.lateness_periods, late_periods=cfg.late_periods())


def new_context(cfg: FogConfig, clock: Any, metrics: FogMetrics, *, source: Source | None, sink: Sink | None,
                now_t: Callable[[], int]) -> FogContext:
    """The context a fog's roles share, before anything is opened."""
    due, outbox_wakeup = Wakeup(), Wakeup()
    return FogContext(cfg=cfg, now=clock.now, now_t=now_t, metrics=metrics, windows=make_windows(cfg),
                      counters=RegionCounters(), gate=make_gate(cfg),
                      outbox=OutboxCount(cfg.outbox_max_windows, metrics.outbox_windows, outbox_wakeup.set),
                      storage=Outage("fog journal", log, gauge=metrics.storage_ok, backoff=Backoff(cap_s=1.0)),
                      due=due, outbox_wakeup=outbox_wakeup, source=source, sink=sink)


class FogRoles:
    def __init__(self, ctx: FogContext):
        self.ctx = ctx
        cfg = ctx.cfg
        self.reports: list[ReportRole] = [cls(ctx) for cls in role_classes("fog")
                                          if issubclass(cls, ReportRole) and enabled(cls, cfg)]
        screen = ScreenRole(ctx, ctx.gate.current) if cfg.detection.enabled else None
        if screen is not None:
            ctx.screen = screen
        # The privacy unit's day (issue 28): with [privacy] eps_day, a unit's devices together stay within it.
        budget = BudgetRole(ctx) if cfg.privacy.enforced else None
        if budget is not None:
            ctx.budget = budget
        # The screen writes last in a batch's transaction: its alarms delete the reports just written.
        # Windows stay unconfirmed until the fusion center's receipt (issue 29), with the MQTT sink.
        confirm = [WindowReceiptsRole(ctx)] if cfg.window_confirm_s > 0 and cfg.sink == "mqtt" else []
        self.all: list[Role] = [ControlFollower(ctx), *confirm, *self.reports, *([budget] if budget else []),
                                *([screen] if screen else [])]
        for role in self.all:
            ctx.metrics.add_reasons(role.reasons)
        self.closer = WindowCloser(ctx, self.reports)
        self.feedback = RejectionFeedback(set(cfg.regions))   # tells a device why its reports are rejected
        # End-to-end receipts (fog_shuffler.receipts): what each committed batch took, per device.
        self.receipts = Receipts({d: r for r, rc in cfg.regions.items() for d in rc.all_devices()},
                                 every_s=cfg.receipt_every_s, t_readers=[r.report_t for r in self.reports])
        self.receipts_due = Wakeup()
        ctx.receipts = self.receipts if cfg.receipt_every_s > 0 else None
        self.quarantine: Quarantine | None = None
        self.reports_taken = 0

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.all]

    def get(self, name: str) -> Role | None:
        return next((r for r in self.all if r.name == name), None)

    def idle(self) -> bool:
        """No role waits on another party or has anything left to send (a replay's end)."""
        return all(role.idle() for role in self.reports)

    @property
    def released(self) -> int:
        """Windows the roles released other than through the forwarder (the secure mode's noisy shares)."""
        return sum(role.released for role in self.reports)

    def subscriptions(self) -> list[tuple[str, int]]:
        narrowed = [f for role in self.reports for f in (role.report_filters() or [])]
        subs = (narrowed or [(topics.reports_filter(r), 1) for r in self.ctx.cfg.regions]) + [(topics.CONTROL_TOPIC, 1)]
        return subs + [s for role in self.all for s in role.subscriptions()]

    def tasks(self) -> list:
        receipts = [self._send_receipts()] if self.ctx.cfg.receipt_every_s > 0 else []
        return [t for role in self.all for t in role.tasks()] + receipts

    async def _send_receipts(self) -> None:
        """Publish the receipts every receipt_every_s (QoS 0, best effort: a receipt lost is a report the
        device sends again, which the fog drops as a repeat and receipts again)."""
        self.receipts_due.bind()
        while True:
            await self.receipts_due.wait(None, None)
            await asyncio.sleep(self.ctx.cfg.receipt_every_s)     # gather a few batches into one receipt each
            taken = self.receipts.take()
            if self.ctx.link is not None:
                self.ctx.link.publish_qos0(taken)

    # -- start ---------------------------------------------------------------------------------
    def attach(self, journal: Journal) -> None:
        """The roles' tables in the journal, then the windows and the outbox as it has them."""
        self.quarantine = Quarantine(journal.db, self.ctx.metrics.rejected, log)
        for role in self.all:
            role.attach(journal.db)
        self.restore()
        self.ctx.outbox.restored(len(journal.unsent()))

    def subscribed(self, refused: list[str]) -> None:
        """The broker's SUBACK: refused filters are counted; the report filters' say the fog is live."""
        self.ctx.metrics.subscription_refused.set(len(refused))
        if not any(t.startswith(topics.REPORTS_PREFIX) for t in refused):
            log.info("fog subscribed to the reports of %s", ", ".join(sorted(self.ctx.cfg.regions)))

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        for role in self.all:
            await role.open(stack)

    def restore(self) -> None:
        """Reopen journaled windows exactly as they were before a crash."""
        j, windows = self.ctx.journal, self.ctx.windows
        assert j is not None
        open_reports = [row for role in self.reports for row in role.open_reports()]
        seen = j.seen_devices()             # the local-DP windows'; each role adds those its own journal keeps
        for key, devices in (kv for role in self.reports for kv in role.seen_devices().items()):
            seen.setdefault(key, set()).update(devices)
        for role in self.reports:
            role.rolled_back()
        n = windows.restore(j.closed_windows(), open_reports, j.duplicate_counts(), seen, self.ctx.now_t())
        if n or windows.closed:
            log.info("fog restored %d open reports in %d windows; %d windows already closed",
                     n, len(windows.open), len(windows.closed))

    def rebuild(self) -> None:
        """After a storage failure: the windows as the journal has them."""
        self.ctx.windows = make_windows(self.ctx.cfg)
        self.restore()

    # -- ingest ----------------------------------------------------------------------------------
    def ingest(self, batch: list[tuple[Any, int]]) -> list[Any]:
        """Take, journal (one commit) and count a batch; returns its messages, to acknowledge.
        Counters and quarantine rows follow the commit, so a batch retried after a storage
        failure is counted once. StorageError: nothing of it is kept."""
        after: list[tuple[str | None, str, Outcome | None, Any]] = []   # (reason, detail, outcome, msg)
        for msg, now_t in batch:
            if getattr(msg, "retain", False) and msg.topic.startswith(topics.REPORTS_PREFIX):
                # A retained report, handed over at (re)subscribe: a report is never retained (issue 29); its
                # live copy was taken when it was published. Counted, not held, not receipted.
                after.append(("retained", f"{len(msg.payload)} bytes retained on {msg.topic[:80]}", None, msg))
                continue
            role = route(self.all, msg.topic, msg.payload)
            try:
                if role is None:
                    raise Rejected("bad_topic", msg.topic[:80])
                after.append((None, "", role.take(msg, now_t), msg))
            except ProtocolError as err:
                after.append((err.reason, err.detail, None, msg))
            except Exception as err:  # noqa: BLE001 - a bug one report triggers must not stop the fog
                log.exception("message on %s could not be processed; quarantined", msg.topic)
                after.append(("internal", repr(err), None, msg))
        assert self.ctx.journal is not None
        try:
            with self.ctx.journal.transaction() as db:
                for role in self.all:
                    role.write(db)
        except BaseException:
            for role in self.all:
                role.rolled_back()
            self.receipts.drop_staged()
            raise
        for role in self.all:
            role.committed()
        self.receipts.commit_staged()
        self._count(after)
        self._note_receipts(after)
        return [m for *_, m in after]

    def _note_receipts(self, after: list[tuple[str | None, str, Outcome | None, Any]]) -> None:
        """After the commit: each device will hear which of its reports the fog now has (taken, a repeat, too
        late, or rejected), so it keeps none of them any longer (fog_shuffler.receipts)."""
        if self.ctx.cfg.receipt_every_s <= 0:
            return
        for reason, _detail, _outcome, msg in after:
            # Taken reports were staged by their role (their t known); a rejected one's t is read here.
            if reason is not None and reason != "retained" and msg.topic.startswith(topics.REPORTS_PREFIX):
                self.receipts.note_payload(msg.topic, msg.payload)
        if len(self.receipts):
            self.receipts_due.set()

    def _count(self, after: list[tuple[str | None, str, Outcome | None, Any]]) -> None:
        """Metrics, quarantine rows and per-region counts of a committed batch."""
        taken = {Outcome.ACCEPTED: 0, Outcome.DUPLICATE: 0, Outcome.LATE: 0}
        ctx = self.ctx
        assert self.quarantine is not None
        with self.quarantine.batch():     # one commit for a flood of rejected reports, not one each
            for reason, detail, outcome, msg in after:
                if reason is not None:
                    self.quarantine.put(msg.topic, reason, detail, msg.payload)   # counts it by reason too
                    self._tell_device(msg.topic, reason, detail)
                    where = topics.parse_report_topic(msg.topic)
                    if where is not None:
                        self.reports_taken += 1
                        if where[0] in ctx.cfg.regions:
                            ctx.counters.reject(where[0], reason)     # by reason too: a Prio3 statement's
                elif outcome is not None:
                    taken[outcome] += 1
                    late_in = topics.parse_report_topic(msg.topic) if outcome is Outcome.LATE else None
                    if late_in is not None:
                        ctx.counters.late[late_in[0]] += 1
        self.reports_taken += sum(taken.values())
        m = ctx.metrics
        for outcome, counter in ((Outcome.ACCEPTED, m.accepted), (Outcome.DUPLICATE, m.duplicates),
                                 (Outcome.LATE, m.late)):
            if taken[outcome]:
                counter.inc(taken[outcome])

    def _tell_device(self, topic: str, reason: str, detail: str) -> None:
        """The device hears why its report was rejected, on its own topic (fog_shuffler.feedback)."""
        link = self.ctx.link
        note = self.feedback.note(topic, reason, detail, time.monotonic())
        if note is None or link is None or not link.connected.is_set():
            return
        try:
            link.publish_nowait(*note).add_done_callback(lambda f: f.cancelled() or f.exception())
        except Exception as err:  # noqa: BLE001 - feedback is best effort; ingest goes on
            log.debug("feedback to %s not sent: %s", note[0], err)

    # -- closing ---------------------------------------------------------------------------------
    async def close_due(self, now_t: int) -> int:
        closed = 0
        for role in self.all:
            if isinstance(role, ScreenRole):
                closed += await role.close_due(now_t)     # releases and checkpoints first, as before
        closed += await self.closer.close_due(now_t)
        for role in self.all:
            if not isinstance(role, ScreenRole):
                closed += await role.close_due(now_t)
        return closed
