"""The board loop under the real MicroPython (WebAssembly port) with the real
umqtt.simple, against a scripted broker behind a fake `usocket` (the port has
no sockets), a fake `network` and a fake `ntptime` (no radio, no UDP): the
fakes are in tests/micropython/ and the test names say so. The loop must
survive refused CONNACKs (umqtt's MQTTException), a socket that breaks
mid-publish (OSError), a sensor raising OSError, a Wi-Fi join that times out
and NTP that does not answer, and lose no report from its outbox."""

import json
from pathlib import Path

import pytest

from simulators.wasm_board import WASM_URANDOM
from tests.seeded_bytes import SOURCE as XORSHIFT

pytestmark = pytest.mark.micropython
FAKES = Path(__file__).resolve().parents[2] / "micropython"

LOOP = XORSHIFT + """
import json
import usocket, network, ntptime
from rase_device import board
from rase_device.entropy import RandomBits

usocket.BROKER = usocket.ScriptedBroker(refuse_connects=3, refuse_code=5, break_on_publish=(6, 13))
clock = [1700000000.0]
step = [0]
SENSOR_FAILS = (5, 9, 10)

def read():
    step[0] += 1
    if step[0] in SENSOR_FAILS:
        raise OSError(5)  # EIO from a sensor bus
    return 37.0 * step[0]

def sleep(s):
    clock[0] += s

lines = []
cfg = {"device": "b1", "region": "r1", "eps": 1.0, "budget_eps": 1000.0, "budget_period_s": 86400,
       "period_s": 8, "epoch0": 0, "ledger_path": "/ledger.json", "outbox_capacity": 64,
       "confirm_timeout_s": 0,   # no fog behind this broker: a PUBACK is the end of it
       "calibration": {"beta": 0.5, "rho": 0.9, "x_min": 0.0, "x_max": 4000.0, "gamma": 1.0},
       "broker": {"host": "broker.local", "port": 1883, "user": "b1", "password": "pw", "keepalive_s": 60},
       "board": {"wifi_ssid": "lab", "wifi_password": "pw", "wifi_timeout_s": 2, "ntp": True,
                 "ntp_retry_s": 8, "status_every_reports": 10}}
loop = board.run(read, cfg, clock=lambda: clock[0], sleep=sleep, bits=RandomBits(read=XorShiftBytes(7)),
                 max_steps=60, log=lines.append)
for _ in range(40):  # let the backoff run out and the outbox drain
    if not len(loop.core.outbox) and loop.transport.client is not None:
        break
    clock[0] += 60
    loop.transport.poll(clock[0])
br = usocket.BROKER
seqs = [json.loads(p)["seq"] for t, p in br.received if t == "rase/v1/reports/r1/b1"]
print(json.dumps({"seq": loop.core.seq, "sent": loop.core.sent, "queued": len(loop.core.outbox),
                  "dropped": loop.core.outbox.dropped, "seqs": seqs, "refused": br.refused,
                  "broken": br.broken, "connects": br.connects, "sensor_errors": loop.sensor_errors,
                  "remaining": loop.core.ledger.remaining(clock[0]), "joins": len(network.JOINS),
                  "ntp_calls": len(ntptime.CALLS), "lines": lines}))
"""


def test_board_loop_under_micropython_with_scripted_broker_socket_and_fake_radio_survives_faults(
        micropython, umqtt_simple_py):
    files = {"/lib/" + name: (FAKES / name).read_text() for name in ("usocket.py", "network.py", "ntptime.py")}
    files["/lib/umqtt/__init__.py"] = ""
    files["/lib/umqtt/simple.py"] = umqtt_simple_py.read_text()
    out = json.loads(micropython([LOOP], files=files)[0].strip().splitlines()[-1])
    # NTP failed twice (no reports meanwhile: the clock is not trusted), then
    # every period reported except the three sensor faults.
    assert out["ntp_calls"] >= 3
    assert out["sensor_errors"] == 3
    assert out["seq"] == out["sent"] and out["seq"] >= 40
    # Three refused CONNACKs (MQTTException in umqtt), two sockets broken mid-publish.
    assert out["refused"] == 3 and out["broken"] == 2 and out["connects"] >= 6
    # The first Wi-Fi join timed out, the second worked.
    assert out["joins"] == 2
    # Nothing lost from the outbox: every report reached the broker exactly once.
    assert out["queued"] == 0 and out["dropped"] == 0
    assert sorted(out["seqs"]) == list(range(1, out["seq"] + 1))
    # Budget: one eps per report sent, none for the sensor faults.
    assert out["remaining"] == pytest.approx(1000.0 - out["seq"])
    assert any(line.startswith("rase: sent=") for line in out["lines"])


RECEIPTS = XORSHIFT + """
import json
import usocket, network, ntptime
from rase_device import board
from rase_device.entropy import RandomBits

# The 3rd, 4th and 11th reports are acknowledged by the broker and lost before the fog has them.
usocket.BROKER = usocket.ScriptedBroker(receipts=True, lose_acked=(3, 4, 11), break_on_publish=(15,))
clock = [1700000000.0]

def sleep(s):
    clock[0] += s

cfg = {"device": "b1", "region": "r1", "eps": 1.0, "budget_eps": 1000.0, "budget_period_s": 86400,
       "period_s": 8, "epoch0": 0, "ledger_path": "/ledger.json", "outbox_capacity": 64, "confirm_timeout_s": 20,
       "calibration": {"beta": 0.5, "rho": 0.9, "x_min": 0.0, "x_max": 4000.0, "gamma": 1.0},
       "broker": {"host": "broker.local", "port": 1883, "user": "b1", "password": "pw", "keepalive_s": 60},
       "board": {"wifi_ssid": "lab", "wifi_password": "pw", "ntp": False, "status_every_reports": 0}}
loop = board.run(lambda: 100.0, cfg, clock=lambda: clock[0], sleep=sleep, bits=RandomBits(read=XorShiftBytes(7)),
                 max_steps=40, log=lambda line: None)
br = usocket.BROKER
made = [json.loads(p)["t"] for t, p in br.received if t == "rase/v1/reports/r1/b1"]
print(json.dumps({"seq": loop.core.seq, "kept": br.kept, "made": made, "awaiting": loop.core.outbox.awaiting,
                  "resent": loop.core.outbox.resent, "remaining": loop.core.ledger.remaining(clock[0])}))
"""


def test_board_keeps_each_report_until_the_fogs_receipt_and_sends_it_again(micropython, umqtt_simple_py):
    """Issue 29, item 3, on the board: three reports the broker acknowledged and lost, and one in flight when
    the socket broke, reach the fog in the end; every t once in the aggregate (the fog drops repeats by t),
    and the budget charged once per report made."""
    files = {"/lib/" + name: (FAKES / name).read_text() for name in ("usocket.py", "network.py", "ntptime.py")}
    files["/lib/umqtt/__init__.py"] = ""
    files["/lib/umqtt/simple.py"] = umqtt_simple_py.read_text()
    out = json.loads(micropython([RECEIPTS], files=files)[0].strip().splitlines()[-1])
    ts = sorted(set(out["made"]))
    assert len(ts) == out["seq"] >= 30
    assert sorted(set(out["kept"])) == ts                 # the fog has every report made ...
    assert out["resent"] >= 3 and len(out["made"]) > out["seq"]   # ... because the lost ones went out again
    # Only the last reports may still await their receipt when the run stops; none is lost.
    assert out["awaiting"] <= 1
    assert out["remaining"] == pytest.approx(1000.0 - out["seq"])      # one eps per report, resends free


SAFETY_NETS = """
import json
import usocket
from rase_device import board
from rase_device.entropy import RandomBits
WASM_URANDOM = """ + WASM_URANDOM + """

usocket.BROKER = None   # no broker reachable: every connect fails with OSError

class Rebooted(Exception):
    pass

class FakeMachine:  # the port has no machine.WDT / machine.reset
    feeds = 0
    resets = 0
    class WDT:
        def __init__(self, timeout):
            FakeMachine.timeout = timeout
        def feed(self):
            FakeMachine.feeds += 1
    @staticmethod
    def reset():
        FakeMachine.resets += 1
        raise Rebooted()

clock = [1700000000.0]
def sleep(s):
    clock[0] += s
cfg = {"device": "b3", "region": "r1", "eps": 1.0, "budget_eps": 1000.0, "budget_period_s": 86400,
       "period_s": 8, "epoch0": 0, "ledger_path": "/ledger3.json",
       "calibration": {"beta": 0.5, "rho": 0.9, "x_min": 0.0, "x_max": 4000.0, "gamma": 1.0},
       "broker": {"host": "broker.local"},
       "board": {"ntp": False, "watchdog_s": 30, "reset_after_failures": 5, "status_every_reports": 0}}
steps = 0
try:
    loop = board.BoardLoop(lambda: 1.0, cfg, machine=FakeMachine, sleep=sleep, log=lambda s: None,
                           bits=RandomBits(read=WASM_URANDOM), clock=lambda: clock[0])
    while steps < 500:
        loop.tick(clock[0])
        steps += 1
        loop.nap(loop.wait_s(clock[0]))
except Rebooted:
    pass
print(json.dumps({"steps": steps, "resets": FakeMachine.resets, "feeds": FakeMachine.feeds,
                  "timeout": FakeMachine.timeout, "failures": loop.transport.failures,
                  "queued": len(loop.core.outbox)}))
"""


def test_board_watchdog_and_reset_after_failures_under_micropython_with_fake_machine(micropython):
    files = {"/lib/usocket.py": (FAKES / "usocket.py").read_text(), "/lib/umqtt/__init__.py": "",
             "/lib/umqtt/simple.py": "class MQTTClient:\n def __init__(self, *a, **k):\n  import usocket\n"
                                     "  self.s = usocket.socket()\n def set_last_will(self, *a, **k): pass\n"
                                     " def set_callback(self, f): pass\n"
                                     " def connect(self):\n  self.s.connect(('x', 1))\n"}
    out = json.loads(micropython([SAFETY_NETS], files=files)[0].strip().splitlines()[-1])
    assert out["timeout"] == 30000
    assert out["resets"] == 1 and out["failures"] == 5
    # Fed at least once per tick and within every nap of a quarter of the timeout.
    assert out["feeds"] >= out["steps"] * 2
    # Reports kept while the link is down; the reset came inside the tick after its reading.
    assert out["queued"] == out["steps"] + 1
