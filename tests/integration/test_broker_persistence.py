"""The shipped Mosquitto persistence settings against SIGKILLs of a real
Mosquitto under 3,000 reports/s: the fog's persistent session and what is
queued for it survive; nothing the broker acknowledged is lost.
benchmarks/broker_persistence.py measures the other settings beside these."""

from __future__ import annotations

import re

import pytest

from tests.brokers import Mosquitto
from tests.integration.broker_load import connected_kills, queued_then_kill
from tests.integration.shipped import ROOT

pytestmark = pytest.mark.integration
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


def test_four_sigkills_under_3000_reports_per_s_lose_nothing_acknowledged(shipped_persistence):
    acc = connected_kills(shipped_persistence, rate=3000, kills=4, every_s=1.5)
    assert acc.acked > 15_000, acc          # the load really ran through the kills
    assert acc.lost == 0, acc


def test_reports_queued_for_the_absent_fog_survive_a_sigkill(shipped_persistence):
    """What waited in the fog's session longer than the snapshot interval
    (2 s) is in the snapshot: all of it reaches the fog after the restart."""
    acc = queued_then_kill(shipped_persistence, count=5000, queued_for_s=2.5)
    assert acc.acked == 5000 and acc.lost == 0, acc


def test_the_shipped_file_sets_the_durability_the_tests_measure():
    lines = shipped_durability_lines()
    assert re.search(r"^persistence true$", lines, re.M)
    assert re.search(r"^autosave_interval 1$", lines, re.M)
    assert re.search(r"^max_queued_messages 0$", lines, re.M)
