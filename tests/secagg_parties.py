"""Two real aggregators of the secure mode without a broker, for the
malicious-party matrices (issue 26): the fog's Prio3Leader and the fusion
center's Prio3Helper, the role classes their services host, each on its own
real SQLite journal or store, exchanging their real messages by hand so that
a test can stand between them and lie for one party.

Reports are real: the device's bytes (rase_common.vdaf.fast_client, tested
byte for byte against the device core), Prio3 shards with their proof, the
helper's share sealed with HPKE to the helper's key. Noise is real: each
aggregator draws from os.urandom, unless a test hands the helper explicit
bits (`helper.noise_bits`) to make a statistic reproducible."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry

from fog_shuffler.ingest import Rejected
from fog_shuffler.journal import Journal
from fog_shuffler.prio3.leader import Prio3FogConfig, Prio3Leader
from fog_shuffler.prio3.leader_journal import SHARE_SEQ, STATEMENT_SEQ
from fog_shuffler.prio3.leader_rules import Prio3Accepted
from fog_shuffler.windows import ClosedWindow
from fusion_center.prio3.helper import Prio3FusionConfig, Prio3Helper
from fusion_center.store import AggregateStore
from rase_common.errors import Outage
from rase_common.mechanisms.prio3 import noise_law
from rase_common.protocol.aggregate import Aggregate
from rase_common.protocol.control import ControlMessage
from rase_common.protocol.prio3 import Prio3Params, Prio3Statement
from rase_common.secagg import write_keys
from rase_common.vdaf.fast_client import FastPrio3, fast_make_report

GRID = 4000          # Prio3Sum of readings on the 0..4,000 W grid, 1 W steps: the deployment of docs/deployment.md
PERIOD_S = 8.0


class TwoParties:
    """A leader and a helper of one deployment (Prio3Sum, eps dp_eps), with
    their own configs: both honest as built; a test lies by changing what
    passes between them."""

    def __init__(self, work: Path, *, devices: int = 45, k_min: int = 10, dp_eps: float = 1.0,
                 regions: tuple[str, ...] = ("r1",), leader_noise: bool = True, helper_noise: bool = True,
                 epoch0: float = 1_000_000.0, leader_k_min: int | None = None,
                 leader_regions: tuple[str, ...] | None = None, parts: int = 1):
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.keys = write_keys(self.work / "keys")
        self.devices = [f"dev{i:03d}" for i in range(devices)]
        self.regions = list(regions)
        self.params = Prio3Params.for_deployment("sum", key_id=self.keys["key_id"], dp_eps=dp_eps, grid_steps=GRID,
                                                 bands=[10.0])
        # The fusion center's own config: its control message (it publishes it) and its [prio3] table.
        self.precision = ControlMessage(mechanism="prio3", eps_levels=[dp_eps], bands=[10.0], period_s=PERIOD_S,
                                        epoch0=epoch0, x_max=float(GRID), prio3=self.params)
        self.parts = parts
        self.fusion_store = AggregateStore(self.work / "fusion.sqlite")
        self.helper = self._helper(k_min, helper_noise)
        # The fog's own config: the same deployment, agreed between the two operators. With parts > 1, one
        # leader worker per part (issue 30), each on its own journal, sharing the parts key (never the helper).
        self.parts_key = self.work / "keys" / "parts.key"
        self.parts_key.write_text(os.urandom(32).hex())
        self._leader_args = dict(noise=leader_noise, regions=list(leader_regions or regions), k_min=leader_k_min or k_min)
        self.leaders = [self._leader(k) for k in range(parts)]
        self.leader = self.leaders[0]
        self.fog_journal = self.leader_journals[0]
        self.public_key = bytes.fromhex(self.keys["public_key"])
        self._vdafs: dict = {}

    def _leader(self, part: int) -> Prio3Leader:
        """Leader worker `part` (the one leader when parts is 1) on its own journal, as a restart reopens it."""
        a = self._leader_args
        leader = Prio3Leader(Prio3FogConfig(verify_key_file=self.keys["verify_key_file"], params=self.params,
                                            unsafe_no_noise_for_tests=not a["noise"], part=part, parts=self.parts,
                                            parts_key_file=self.parts_key if self.parts > 1 else None),
                             name=f"fog{part}", regions=a["regions"], k_min=a["k_min"], registry=CollectorRegistry(),
                             storage=Outage("fog journal", None), sink_name="memory")
        journal = Journal(self.work / ("fog.sqlite" if part == 0 else f"fog{part}.sqlite"))
        if not hasattr(self, "leader_journals"):
            self.leader_journals: dict[int, Journal] = {}
        self.leader_journals[part] = journal
        leader.open(journal.db)
        return leader

    def restart_leader(self, part: int = 0) -> Prio3Leader:
        """A leader worker restarts: a new leader on its journal."""
        self.leader_journals[part].close()
        self.leaders[part] = self._leader(part)
        if part == 0:
            self.leader, self.fog_journal = self.leaders[0], self.leader_journals[0]
        return self.leaders[part]

    def _helper(self, k_min: int, noise: bool) -> Prio3Helper:
        cfg = Prio3FusionConfig(private_key_file=self.keys["private_key_file"], key_id=self.keys["key_id"],
                                verify_key_file=self.keys["verify_key_file"], k_min=k_min, decrypt_workers=1,
                                unsafe_no_noise_for_tests=not noise, leader_parts=self.parts)
        helper = Prio3Helper(cfg, regions=self.regions, merge_deadline_s=5.0, registry=CollectorRegistry(),
                             storage=Outage("fusion store", None))
        helper.open(self.fusion_store.db)
        helper.follow(self.precision, time.time())
        return helper

    def restart_helper(self) -> Prio3Helper:
        """The fusion center restarts: a new helper on the same store (its journal)."""
        self.helper = self._helper(self.helper.cfg.k_min, not self.helper.cfg.unsafe_no_noise_for_tests)
        return self.helper

    # -- devices ----------------------------------------------------------------------------------------
    def reports(self, region: str, t: int, measurements: list[int], params: Prio3Params | None = None,
                read=None) -> list[tuple[bytes, bytes, bytes, bytes]]:  # noqa: ANN001
        """Devices' reports of (region, t) under `params` (the deployment's by default)."""
        p = params or self.params
        vdaf = self._vdafs.setdefault(p.params_id, FastPrio3(p.vdaf()))
        ctx = p.ctx(region, t)
        return [fast_make_report(vdaf, ctx, m, self.public_key, read or os.urandom) for m in measurements]

    # -- the leader's steps -------------------------------------------------------------------------------
    def leader_close(self, region: str, t: int, reports: list[tuple], ingest_rejected: int = 0,
                     params: Prio3Params | None = None, part: int = 0) -> list[str]:
        """Ingest the reports (each as from its device), close the window, and
        return the batch parts the leader sends. params: reports made under
        other params than the leader's own, which its ingest would refuse
        (their sizes differ): a lying leader closes them under those params."""
        if params is not None and params.report_sizes() != self.params.report_sizes():
            from fog_shuffler.prio3.leader_rules import close_batch

            return close_batch(params, self.leader.verify_key, region, t, reports, np.random.default_rng(t)).messages
        leader = self.leaders[part]
        devices = self.devices_of(part)
        for device, shares in zip(devices, reports):
            leader.accepted(Prio3Accepted(region, device, t, 0.0, self.params.dp_eps, "prio3", shares))
        leader.commit([])
        n = len(reports)
        cw = ClosedWindow(region, t, devices[:n], [0.0] * n, [self.params.dp_eps] * n, 0, 0, False,
                          ["prio3"] * n)
        closed = asyncio.run(leader.close(cw, [], ingest_rejected))
        return self._leader_sent(region, t, lambda seq: seq < SHARE_SEQ, part) if closed else []

    def devices_of(self, part: int) -> list[str]:
        """The devices of leader worker `part` (every parts-th device, from the part-th)."""
        return self.devices[part::self.parts]

    def leader_answer(self, payloads: list[str], part: int = 0) -> list[str]:
        """Hand the helper's answers to the leader as its ingest does; returns
        the reasons of those it refused."""
        leader = self.leaders[part]
        rows, refused = [], []
        for p in payloads:
            try:
                row = leader.reply(p.encode())
            except Rejected as err:
                refused.append(err.reason)
                continue
            if row is not None:
                rows.append(row)
        leader.commit(rows)
        return refused

    def leader_finish(self, region: str, t: int, part: int = 0) -> tuple[str | None, Prio3Statement | None]:
        """The leader's step: (its share message or None, its statement)."""
        leader = self.leaders[part]
        asyncio.run(leader.step(time.time()))
        shares = self._leader_sent(region, t, lambda seq: seq == SHARE_SEQ, part)
        text = leader.journal.statement(region, t)
        return (shares[0] if shares else None), (Prio3Statement.model_validate_json(text) if text else None)

    def published_statements(self, region: str) -> list[Prio3Statement]:
        """What the fog publishes on rase/v1/prio3/statements/{region} (its own topic)."""
        return [Prio3Statement.model_validate_json(r[3]) for r in self.leader.journal.unsent_statements()
                if r[0] == region]

    def _leader_sent(self, region: str, t: int, which, part: int = 0) -> list[str]:  # noqa: ANN001
        journal = self.leaders[part].journal
        rows = [r for r in journal.unsent() if (r[0], r[1]) == (region, t) and which(r[2])]
        for r in rows:
            journal.mark_sent(r[0], r[1], r[2])
        return [r[3] for r in rows]

    # -- the helper's steps -------------------------------------------------------------------------------
    def to_helper(self, payloads: list[str]) -> list[tuple[str, str] | None]:
        """The leader's messages reach the helper's intake; (reason, detail) of each one refused."""
        return self.helper.take([p.encode() for p in payloads], time.time(),
                                lambda t: self.fusion_store.has_aggregate("all", t))

    def helper_step(self) -> list[str]:
        """The helper works until idle; returns the answers it sends (and marks them sent)."""
        return [p for _, p in self.helper_step_to()]

    def helper_step_to(self) -> list[tuple[str, str]]:
        """helper_step() with each answer's key (its topic's tail: the region, or region/part)."""
        while asyncio.run(self.helper.step(time.time())):
            pass
        rows = self.helper.store.unsent()
        for r in rows:
            self.helper.store.mark_sent(r[0], r[1], r[2])
        return [(r[0], r[3]) for r in rows]

    def publish(self) -> list[Aggregate]:
        """Every t the helper has ready, aggregated and stored once (the fusion service's closer)."""
        out = []
        for t, ready, _ in self.helper.due(time.time() + 1e6):
            made = self.helper.aggregate(t, ready, self.precision, level=0.95, history={}, windows_w=())
            if made is not None and self.fusion_store.store_aggregate("all", t, made[0].model_dump_json(), 0.0):
                out.append(made[0])
            self.helper.aggregated(t, stored=made is not None)
        return out

    # -- a whole window, both honest unless a test lies in between -----------------------------------------
    def window(self, region: str, t: int, measurements: list[int], *, batch=None, answer=None, share=None
               ) -> Aggregate | None:  # noqa: ANN001
        """One window through both parties. batch/answer/share: a lying party's
        rewrite of the messages in transit (a list of payloads -> a list)."""
        return self.window_from(self.reports(region, t, measurements), region, t, batch=batch, answer=answer,
                                share=share)

    def window_from(self, reports: list[tuple], region: str, t: int, *, batch=None, answer=None, share=None
                    ) -> Aggregate | None:  # noqa: ANN001
        """window() with these reports."""
        sent = self.leader_close(region, t, reports)
        self.to_helper(batch(sent) if batch else sent)
        answers = self.helper_step()
        self.leader_answer(answer(answers) if answer else answers)
        mine, _ = self.leader_finish(region, t)
        if mine is not None:
            self.to_helper(share([mine]) if share else [mine])
        self.helper_step()
        published = [a for a in self.publish() if a.t == t]
        return published[0] if published else None

    def window_parts(self, region: str, t: int, measurements: list[list[int]], *, share=None, answer=None
                     ) -> Aggregate | None:  # noqa: ANN001
        """One window of a region partitioned over the leader workers (issue 30):
        measurements[k] are part k's devices' readings. Every part's batch goes
        to the helper, each answer to its part's leader (by the answer's topic
        key), each part's share back; then the helper publishes t once.
        share / answer: a rewrite of part k's messages in transit, (k, payloads) -> payloads."""
        for k, ms in enumerate(measurements):
            self.to_helper(self.leader_close(region, t, self.reports(region, t, ms), part=k))
        for key, payload in self.helper_step_to():
            k = int(key.split("/")[1]) if "/" in key else 0
            self.leader_answer(answer(k, [payload]) if answer else [payload], part=k)
        for k in range(len(measurements)):
            mine, _ = self.leader_finish(region, t, part=k)
            if mine is not None:
                self.to_helper(share(k, [mine]) if share else [mine])
        self.helper_step()
        published = [a for a in self.publish() if a.t == t]
        return published[0] if published else None

    def helper_noise_sd(self) -> float:
        """The standard deviation of one aggregator's noise at the deployment's eps (grid steps of the sum)."""
        return noise_law(self.params.sensitivity, self.params.dp_eps, 1).variance() ** 0.5

    def metric(self, counter, **labels) -> float:  # noqa: ANN001
        return counter.labels(**labels)._value.get() if labels else counter._value.get()


__all__ = ["TwoParties", "GRID", "PERIOD_S", "STATEMENT_SEQ"]
