"""The privacy ledger fails closed when its file cannot be written: on the
flashed bundle under the MicroPython unix port, and in the CPython agent.

The failing write is a real one: the ledger's `.tmp` name is taken by a
directory, so the file system refuses it (EISDIR; as root, a read-only file
would not stop the write). No report may leave on budget that is not on
disk, the status topic says `ledger_unwritable`, and reporting resumes once
the write works again."""

import json
import time

import pytest

from edge_agent.config import AgentConfig
from edge_agent.service import AgentService
from rase_common.clock import ScaledClock
from tests.integration.test_board_unix_port import UnixBoard, board_toml, reports, seqs
from tests.mqtt_helpers import Recorder, ServiceThread

pytestmark = pytest.mark.integration
EPS_UNITS = 65536


def statuses(rec, device):
    return [json.loads(m.payload)["state"] for m in rec.on(f"rase/v1/status/{device}") if m.payload]


def block_writes(ledger_path):
    """Take the .tmp name with a directory (retried: the board may be writing it now)."""
    tmp = ledger_path.parent / (ledger_path.name + ".tmp")
    for _ in range(100):
        try:
            tmp.mkdir()
            return
        except FileExistsError:
            time.sleep(0.01)
    raise AssertionError(f"{tmp} stayed a file")


@pytest.mark.micropython
def test_bundle_stops_at_the_reserved_budget_when_the_flash_write_fails(own_mosquitto, tmp_path):
    rec = Recorder(own_mosquitto.port, ["rase/v1/reports/#", "rase/v1/status/#"], client_id="ledger-rec")
    toml = board_toml(own_mosquitto.port).replace("budget_eps = 100000.0\n",
                                                  "budget_eps = 100000.0\nboard_ledger_reserve_reports = 4\n")
    board = UnixBoard(tmp_path, toml).start()
    ledger = board.dir / "rase_ledger.json"
    try:
        board.wait_for(lambda: len(seqs(rec)) >= 3, what="3 reports")
        block_writes(ledger)
        reserved = json.loads(ledger.read_text())["spent_units"] // EPS_UNITS   # all that may ever be used
        assert rec.wait_for(lambda: "ledger_unwritable" in statuses(rec, "b1"), 20), board.dump("no status")
        time.sleep(3)            # three more periods: nothing may leave
        during = set(seqs(rec))
        console = board.status()
        (ledger.parent / (ledger.name + ".tmp")).rmdir()
        assert rec.wait_for(lambda: max(seqs(rec)) > reserved and statuses(rec, "b1")[-1] == "online", 20), \
            board.dump("reporting did not resume")
    finally:
        board.stop()
        rec.close()
    assert max(during) == reserved and during == set(range(1, reserved + 1)), board.dump(f"{sorted(during)}")
    assert console["state"] == "ledger_unwritable" and console["sensor_errors"] == "0"
    assert "state=ledger_unwritable ledger_error=OSError: [Errno 21] EISDIR" in " ".join(board.lines()), board.dump("no ledger error on the console")
    # The budget reserved before the failure is exactly what the reports used (a reboot refunds nothing).
    assert json.loads(ledger.read_text())["spent_units"] >= max(r["seq"] for r in reports(rec)) * EPS_UNITS


class SteadySource:
    def read(self, now):
        return 512.0


def test_cpython_agent_stays_up_and_stops_reporting_while_its_ledger_cannot_be_written(mosquitto, tmp_path):
    ledger = tmp_path / "ledger.json"
    rec = Recorder(mosquitto.port, ["rase/v1/reports/#", "rase/v1/status/#"], persistent=False)
    clock = ScaledClock(1_700_000_000.0, 40.0)     # one 8 s period per 200 ms
    cfg = AgentConfig.load(None, device="cpy1", region="r1", ledger_path=ledger, broker={"port": mosquitto.port})
    agent = ServiceThread(AgentService(cfg, source=SteadySource(), clock=clock))
    try:
        assert rec.wait_for(lambda: len(rec.on("rase/v1/reports/r1/cpy1")) >= 3)
        block_writes(ledger)
        reserved = json.loads(ledger.read_text())["spent_units"] // EPS_UNITS
        assert rec.wait_for(lambda: "ledger_unwritable" in statuses(rec, "cpy1"))
        time.sleep(1.0)          # five more periods: nothing may leave
        during = {json.loads(m.payload)["seq"] for m in rec.on("rase/v1/reports/r1/cpy1")}
        assert agent.thread.is_alive() and agent.error is None
        (ledger.parent / (ledger.name + ".tmp")).rmdir()
        assert rec.wait_for(lambda: len(rec.on("rase/v1/reports/r1/cpy1")) > len(during)
                            and statuses(rec, "cpy1")[-1] == "online")
    finally:
        agent.stop()
        rec.close()
    assert during == set(range(1, reserved + 1))
