"""The shipped Mosquitto persistence settings against SIGKILLs of a real
Mosquitto under 3,000 reports/s: the fog's persistent session and what is
queued for it survive; nothing the broker acknowledged is lost.
benchmarks/broker_persistence.py measures the other settings beside these."""

from __future__ import annotations

import re

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


def test_four_sigkills_under_3000_reports_per_s_lose_nothing_outside_the_snapshot_window(shipped_persistence):
    """The broker's window of exposure (docs/reliability.md, "Broker"): a
    report it acknowledged can be lost only if it was acknowledged in the
    last snapshot interval (about 2 s) before the crash and had not yet
    reached the fog. Everything older, and everything acknowledged after a
    restart (the fog's session is restored before the fog reconnects), arrives.
    With Mosquitto's default (1800 s) the session itself is lost and reports
    acknowledged after the restart go to nobody."""
    acc = connected_kills(shipped_persistence, rate=3000, kills=4, every_s=3.0)
    assert acc.acked > 20_000, acc          # the load really ran through the kills (45,000 offered)
    assert acc.lost_outside(WINDOW_S) == [], acc
    print(f"lost {acc.lost} of {acc.acked} acknowledged over {len(acc.crashes)} SIGKILLs (all inside the window)")


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
