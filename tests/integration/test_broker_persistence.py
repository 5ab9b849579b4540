"""The shipped Mosquitto persistence settings against SIGKILLs of a real
Mosquitto under 3,000 reports/s: the fog's persistent session and what is
queued for it survive; nothing the broker acknowledged is lost.
benchmarks/broker_persistence.py measures the other settings beside these."""

from __future__ import annotations

import re
import time

import pytest

from simulators.brokers import Mosquitto
from simulators.broker_load import connected_kills, queued_then_kill
from tests.integration.shipped import ROOT

pytestmark = pytest.mark.integration
WINDOW_S = 2.5          # autosave_interval 1 snapshots every 2 whole seconds, plus a loop pass
DURABILITY = ("persistence", "autosave_interval", "autosave_on_changes", "max_queued_messages",
              "max_inflight_messages")


def shipped_durability_lines() -> str:
    conf = (ROOT / "configs/mosquitto/mosquitto.conf").read_text()
    lines = [ln for ln in conf.splitlines() if ln.split(" ", 1)[0] in DURABILITY]
    assert any(ln.startswith("autosave_interval") for ln in lines)
    return "\n".join(lines) + "\n"


@pytest.fixture
def shipped_persistence(tmp_path, request):
    # tests.brokers.Mosquitto writes its own persistence location; the shipped lines follow and win.
    broker = Mosquitto(tmp_path / "mq", extra_conf=shipped_durability_lines()).start()
    yield broker
    broker.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print("---- mosquitto log ----\n" + broker.log()[-5000:])


def snapshot_windows(broker: Mosquitto, crashes: list[tuple[float, float]], mono_to_unix: float) -> list[float]:
    """For each crash, how long before it the broker's last completed snapshot began, as its log says
    ("Saving in-memory database", whole seconds). The snapshot being written at the kill may not have
    completed, so the one before it counts: on a loaded machine the snapshots drift apart, and the window
    follows what the broker really did instead of a fixed 2.5 s."""
    saves = [int(m) for m in re.findall(r"^(\d+): Saving in-memory database", broker.log(), re.M)]
    out = []
    for killed, _ in crashes:
        at = killed + mono_to_unix
        before = [s for s in saves if s <= at]
        out.append(at - before[-2] if len(before) >= 2 else float("inf"))
    return out


def test_four_sigkills_under_3000_reports_per_s_lose_nothing_outside_the_snapshot_window(shipped_persistence):
    """The broker's window of exposure (docs/reliability.md, "Broker"): a
    report it acknowledged can be lost only if it was acknowledged after the
    last snapshot that completed before the crash (about 2 s with the shipped
    autosave_interval 1) and had not yet reached the fog. Everything older,
    and everything acknowledged after a restart (the fog's session is restored
    before the fog reconnects), arrives. With Mosquitto's default (1800 s) the
    session itself is lost and reports acknowledged after the restart go to
    nobody. (What the devices do about the window: they keep each report until
    the fog's receipt, tests/integration/test_nothing_acknowledged_lost.py.)"""
    mono_to_unix = time.time() - time.monotonic()        # CLOCK_MONOTONIC is one clock for every process
    acc = connected_kills(shipped_persistence, rate=3000, kills=4, every_s=3.0)
    assert acc.acked > 20_000, acc          # the load really ran through the kills (45,000 offered)
    windows = snapshot_windows(shipped_persistence, acc.crashes, mono_to_unix)
    assert all(w < 30 for w in windows), windows         # the broker did snapshot while loaded
    outside = [t for t in acc.lost_acked_at
               if not any(k - max(w, WINDOW_S) <= t <= r for (k, r), w in zip(acc.crashes, windows))]
    assert outside == [], (acc, windows)
    print(f"lost {acc.lost} of {acc.acked} acknowledged over {len(acc.crashes)} SIGKILLs (all inside the window; "
          f"measured windows {[round(w, 1) for w in windows]} s)")


def test_reports_queued_for_the_absent_fog_survive_a_sigkill(shipped_persistence):
    """What waited in the fog's session longer than the snapshot interval is
    in the snapshot: all of it reaches the fog after the restart."""
    acc = queued_then_kill(shipped_persistence, count=5000, queued_for_s=WINDOW_S)
    assert acc.acked == 5000 and acc.lost == 0, acc


def test_the_shipped_file_sets_the_durability_the_tests_measure():
    lines = shipped_durability_lines()
    assert re.search(r"^persistence true$", lines, re.M)
    assert re.search(r"^autosave_interval 1$", lines, re.M)
    assert re.search(r"^max_queued_messages 0$", lines, re.M)
