"""The fog service as Prio3's leader, without a broker (in-memory source and
sink, a manual clock): a window under k_min is suppressed and forgotten
whole, a full one goes out as a batch without devices, a repeated nonce is
refused, the helper's answer (made by the helper's own rules) brings the
leader's share, and closed windows' nonces are pruned."""

import asyncio
import json

import pytest

from fog_shuffler.config import FogConfig
from fog_shuffler.service import FogService
from fusion_center.prio3.helper_rules import answer_batch
from rase_common.channels import MemorySink, MemorySource
from rase_common.clock import ManualClock
from rase_common.protocol import topics
from rase_common.protocol.prio3 import Prio3Batch, Prio3Share, parse_leader_message
from rase_common.secagg import ShareOpener, read_key
from tests.integration.secagg_support import Deployment

DEVICES = [f"sa-dev-{i}" for i in range(5)]


async def settle(seconds: float = 0.3) -> None:
    await asyncio.sleep(seconds)


def test_the_leader_inside_the_fog_service(tmp_path):
    dep = Deployment(tmp_path, devices=DEVICES, k_min=3, period_s=8.0)
    cfg = FogConfig.load(None, **{**dep.fog_settings(1), "lateness_periods": 1, "allowed_lateness_s": 0})
    clock = ManualClock(8.0 * 10 + 1)
    source, sink = MemorySource(), MemorySink()
    fog = FogService(cfg, clock=clock, source=source, sink=sink)
    cores = dep.cores()

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(fog.run(stop))
        await settle()
        for core in cores[:2]:                                   # t = 10: two reports, k_min 3
            core.step(50.0, clock.now())
            source.put(*core.outbox.pop()[:2])
        await settle()
        assert fog.roles.get("prio3").leader.journal.has_reports("r1", 10)
        clock.set(8.0 * 20 + 1)                                  # t = 20: four reports, one nonce repeated
        fog.wakeup.set()
        reports = []
        for core, x in zip(cores[:4], (10.0, 20.0, 30.0, 40.0)):
            core.step(x, clock.now())
            reports.append(core.outbox.pop()[:2])
            source.put(*reports[-1])
        source.put(topics.report_topic("r1", DEVICES[4]), reports[0][1])     # another device, the same report
        await settle()
        assert not fog.roles.get("prio3").leader.journal.has_reports("r1", 10)     # suppressed at t = 20 > 10 + 1 + lateness
        assert fog.metrics.value("windows_suppressed") == 1
        assert fog.metrics.value("reports_rejected", reason="nonce_repeated") == 1
        clock.set(8.0 * 22 + 1)
        fog.wakeup.set()
        await settle(1.0)
        batch = [parse_leader_message(p.encode()) for k, p in sink.sent]
        assert [type(m) for m in batch] == [Prio3Batch] and batch[0].total == 4
        assert not any(d in p for _, p in sink.sent for d in DEVICES)
        # The helper answers, by its own rules, over the "transport": the fog's source.
        answer = answer_batch(batch[0].params, read_key(dep.keys["verify_key_file"], "v"),
                              ShareOpener(read_key(dep.keys["private_key_file"], "h"), 1), "r1", 20, batch)
        for m in answer.messages:
            source.put(topics.prio3_verify_topic("r1"), m)
        await settle(1.0)
        share = Prio3Share.model_validate_json(sink.sent[-1][1])
        assert share.accepted == 4 and share.agg_share and share.noise_draws == 0
        assert fog.roles.get("prio3").leader.journal.state("r1", 20) == "done" and fog.roles.get("prio3").leader.journal.batch("r1", 20) == b""
        assert all(t >= 20 - 3 for _, t, _ in fog.roles.get("prio3").leader.nonces.values())        # older ones pruned
        # A prio3 aggregate of (r1, 20) without its summary, on the retained latest topic (what Home Assistant
        # reads): compared like a per-t one; the same bytes redelivered (a new subscribe) are counted once.
        leader = fog.roles.get("prio3").leader
        lie = json.dumps({"t": 20, "n": 4, "regions": ["r1"], "complete": True, "level": 0.95, "estimates": {},
                          "mechanism": "prio3", "clamped": False, "share_at_bound": 0.0}).encode()
        for topic in (topics.AGGREGATE_LATEST_TOPIC, topics.AGGREGATE_LATEST_TOPIC, topics.aggregate_topic(20)):
            source.put(topic, lie)
        await settle()
        assert leader.metrics.discrepancies.labels("published_summary_missing")._value.get() == 2
        stop.set()
        await task

    asyncio.run(run())
    assert not source.unacked                                     # every message journaled, then acknowledged


@pytest.mark.parametrize("bad", [b'{"type":"prio3_verify","v":1}', b"{}"])
def test_a_malformed_answer_is_refused_and_counted(tmp_path, bad):
    dep = Deployment(tmp_path, devices=DEVICES)
    fog = FogService(FogConfig.load(None, **dep.fog_settings(1)), clock=ManualClock(81.0), source=MemorySource(),
                     sink=MemorySink())

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(fog.run(stop))
        await settle()
        fog.ctx.source.put(topics.prio3_verify_topic("r1"), bad)
        await settle()
        stop.set()
        await task
    asyncio.run(run())
    assert fog.metrics.value("reports_rejected", reason="prio3_reply_invalid") == 1


@pytest.mark.parametrize("change", [{"prio3": {"dp_eps": 100.0}, "eps_levels": [100.0]},
                                    {"prio3": {"max_measurement": 4095}}, {"prio3": {"product": "hourly"}},
                                    {"period_s": 16.0}, {"epoch0": 5.0}, {"mechanism": "duchi"}])
def test_a_control_message_with_other_prio3_params_or_schedule_changes_nothing_at_the_leader(tmp_path, change):
    """Issue 26: the leader's params are its own. A control message that says
    otherwise is refused whole (quarantined as control_params_mismatch), the
    fog keeps its params and its schedule, and the alarm gauge is 1 until a
    control message that agrees with the fog's own comes."""
    dep = Deployment(tmp_path, devices=DEVICES, period_s=8.0)
    fog = FogService(FogConfig.load(None, **dep.fog_settings(1)), clock=ManualClock(81.0), source=MemorySource(),
                     sink=MemorySink())
    other = json.loads(dep.control.model_dump_json(exclude_none=True))
    for key, value in change.items():
        if key == "prio3":
            other["prio3"].update(value)
            if "max_measurement" in value:
                other["x_max"] = float(value["max_measurement"])
        else:
            other[key] = value
    if other.get("mechanism") != "prio3":
        other.pop("prio3", None)
    own = fog.ctx.gate.current
    leader = fog.roles.get("prio3").leader

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(fog.run(stop))
        await settle()
        fog.ctx.source.put(topics.CONTROL_TOPIC, json.dumps(other))
        await settle()
        assert fog.ctx.gate.current == own and leader.metrics.params_mismatch._value.get() == 1
        fog.ctx.source.put(topics.CONTROL_TOPIC, dep.control.model_dump_json(exclude_none=True))    # agrees again
        await settle()
        assert leader.metrics.params_mismatch._value.get() == 0
        stop.set()
        await task
    asyncio.run(run())
    assert fog.metrics.value("reports_rejected", reason="control_params_mismatch") == 1
    assert leader.metrics.refused.labels("control_params_mismatch")._value.get() == 1


def test_a_report_redelivered_after_a_restart_is_a_duplicate_of_its_closed_window(tmp_path):
    # The broker redelivers what a killed fog did not acknowledge. After a restart, a report of a window the
    # leader already closed must count as a duplicate: before, the restored windows knew only the local-DP
    # journal's devices, so it opened a late batch of the same window, a second batch the helper could not
    # match (seen in tests/integration/test_secagg_crash.py with two leader workers).
    dep = Deployment(tmp_path, devices=DEVICES, k_min=3, period_s=8.0)
    cfg = FogConfig.load(None, **{**dep.fog_settings(1), "lateness_periods": 1, "allowed_lateness_s": 80.0})
    clock = ManualClock(8.0 * 20 + 1)
    reports = []
    for core, x in zip(dep.cores(), (10.0, 20.0, 30.0, 40.0, 50.0)):
        core.step(x, clock.now())
        reports.append(core.outbox.pop()[:2])
    seen: dict = {}

    async def run(fog: FogService, source: MemorySource, put: list, advance_to: float | None) -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(fog.run(stop))
        await settle()
        for r in put:
            source.put(*r)
        await settle()
        if advance_to is not None:
            clock.set(advance_to)
            fog.wakeup.set()
            await settle(1.0)
        leader = fog.roles.get("prio3").leader
        seen.update(open=leader.journal.has_reports("r1", 20), state=leader.journal.state("r1", 20),
                    duplicates=fog.metrics.duplicates._value.get(), late_open=("r1", 20) in fog.ctx.windows.open)
        stop.set()
        await task

    def batches(sink: MemorySink) -> list[int]:
        return [m.total for m in (parse_leader_message(p.encode()) for _, p in sink.sent) if isinstance(m, Prio3Batch)]

    first, sink = MemorySource(), MemorySink()
    asyncio.run(run(FogService(cfg, clock=clock, source=first, sink=sink), first, reports, None))
    assert batches(sink) == [5] and not seen["open"]       # all five: complete, closed at once
    again, sink2 = MemorySource(), MemorySink()
    asyncio.run(run(FogService(cfg, clock=clock, source=again, sink=sink2), again, reports[:2], None))
    assert seen == {"open": False, "state": "forwarded", "duplicates": 2, "late_open": False}
    assert batches(sink2) == []                             # no second batch of the window
    assert not again.unacked
