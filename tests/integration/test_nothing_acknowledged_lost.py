"""Issue 29: nothing acknowledged is lost, whatever else connects. Real
`rase fog` and `rase fusion` processes, a real Mosquitto with the shipped
config's durability settings, and the load generator playing the devices'
outbox (simulators.faults.load with receipts: a report is kept until the
fog's receipt says it is journaled, and sent again after a reconnect or
confirm_s without one).

- Four Mosquitto SIGKILLs under load (item 3): the broker acknowledges
  reports it then loses (its snapshot is up to 2 s old); the devices send
  them again and the fog drops the repeats.
- Four clean-session connections with the fog's client id, and one with the
  fusion center's (item 2): under the shipped `use_username_as_clientid`, a
  connection with a service's user name gets the service's client id, and
  Mosquitto discards the service's persistent session. What the broker
  routes before the service subscribes again reaches nobody; the devices
  (for reports) and the fog (for windows, fog_shuffler.window_receipts) send
  it again.

Each asserts 0 lost and 0 counted twice against the fusion center's store.
"""

from __future__ import annotations

import signal
import time

import paho.mqtt.client as mqtt
import pytest

from simulators.brokers import Mosquitto
from simulators.faults.load import AckedLoad, LoadResult, LoadSpec
from simulators.faults.rig import Account, Pipeline, PipelineSpec
from tests.integration.test_broker_persistence import shipped_durability_lines

pytestmark = pytest.mark.integration
RATE = 1500            # reports/s (the chaos benchmark runs 3,000)


@pytest.fixture
def durable_broker(tmp_path):
    broker = Mosquitto(tmp_path / "mq", extra_conf=shipped_durability_lines()).start()
    yield broker
    broker.stop()


@pytest.fixture
def rig(durable_broker, tmp_path, request):
    # Windows close 2 periods after their t, so they are forwarded while the faults happen.
    made = Pipeline(tmp_path / "rig", durable_broker.port, PipelineSpec(devices=RATE, lateness_periods=2)).start()
    yield made
    made.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for svc in (made.fog, made.fusion):
            print(f"---- {svc.kind} log (end) ----\n{svc.log_text()[-6000:]}")


def receipted_load(rig: Pipeline, seconds: float) -> tuple[LoadSpec, AckedLoad]:
    base = rig.load_spec(seconds)
    spec = LoadSpec(**{**base.__dict__, "receipts": True, "confirm_s": 3.0})
    return spec, AckedLoad(spec).start()


def settled_account(rig: Pipeline, result: LoadResult, spec: LoadSpec, timeout_s: float = 120.0) -> Account:
    """The account once every receipted report is in an aggregate, or once the
    stored aggregates stop changing (revisions for late batches included)."""
    rig.wait_aggregated(spec, timeout_s)        # a missing t shows in the account
    deadline = time.monotonic() + timeout_s
    last, changed = None, time.monotonic()
    while True:
        account = rig.account(result, spec)
        if (account.lost == 0 and not account.missing_t) or time.monotonic() > deadline:
            return account
        now = (account.aggregated, account.twice)
        if now != last:
            last, changed = now, time.monotonic()
        elif time.monotonic() - changed > rig.spec.merge_deadline_s + 10.0:
            return account
        time.sleep(0.25)


def assert_none_lost(rig: Pipeline, result: LoadResult, account: Account) -> None:
    assert result.finished, f"the fog never receipted every report: {result.scheduled - result.total_acked} left"
    assert account.acked == result.scheduled, account.line()
    assert account.lost == 0 and account.twice == 0 and not account.missing_t, \
        f"{account.line()}; per t (receipted, aggregated): {account.short_t}"
    assert account.windows_reshuffled == 0 and account.aggregates_differing == 0, account.line()
    assert not rig.unexpected_exits() and rig.fog.alive() and rig.fusion.alive()


def probe(port: int, client_id: str, hold_s: float = 1.0, every_s: float | None = None) -> int:
    """What an operator's `mosquitto_sub -u <service's user>` is under use_username_as_clientid: a
    clean-session client with the service's client id, for hold_s; with every_s, one such connection
    after another (a second instance started by mistake, fighting the service for its id). How many."""
    deadline, n = time.monotonic() + hold_s, 0
    while True:
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True)
        connected: list[int] = []
        c.on_connect = lambda *a, seen=connected: seen.append(1)
        c.connect("127.0.0.1", port)
        c.loop_start()
        wait_until = time.monotonic() + 10
        while not connected and time.monotonic() < wait_until:
            time.sleep(0.01)
        assert connected, f"the probe as {client_id} could not connect"
        n += 1
        time.sleep(min(every_s or hold_s, max(0.0, deadline - time.monotonic())))
        c.disconnect()
        c.loop_stop()
        if time.monotonic() >= deadline:
            return n


def test_four_broker_sigkills_under_load_lose_no_report_the_fog_receipted(rig, durable_broker):
    """Each kill comes while the fog is a second behind (stopped, as a loaded fog is): the broker has
    acknowledged a second of reports it holds only in memory, and the SIGKILL loses them."""
    spec, load = receipted_load(rig, 20.0)
    time.sleep(max(0.0, spec.due_at(spec.t_first, 0) - time.time()) + 3.0)
    for _ in range(4):
        rig.fog.proc.send_signal(signal.SIGSTOP)
        time.sleep(1.0)
        durable_broker.stop(signal.SIGKILL)
        rig.fog.proc.send_signal(signal.SIGCONT)
        time.sleep(0.5)
        durable_broker.start()
        time.sleep(3.0)
    result = load.result(timeout_s=240)
    account = settled_account(rig, result, spec)
    print(f"4 SIGKILLs: {result.pubacked:,} acknowledged by the broker, {result.total_acked:,} receipted by the "
          f"fog, {result.resent_unconfirmed:,} sent again for want of a receipt; {account.line()}")
    assert_none_lost(rig, result, account)


def test_clean_sessions_with_the_fogs_and_the_fusion_centers_client_ids_lose_nothing(rig, durable_broker):
    spec, load = receipted_load(rig, 16.0)
    time.sleep(max(0.0, spec.due_at(spec.t_first, 0) - time.time()) + 2.0)
    wiped_before = rig.fog.count("session present: False")
    for _ in range(4):                       # the four probes as the fog: 4,967 reports lost before
        probe(durable_broker.port, f"fog-{rig.name}")
        time.sleep(1.5)
    # As the fusion center, while the fusion center is reconnecting (its link refused for 3 s): its
    # session, with what was queued in it, is discarded, and what is forwarded meanwhile reaches nobody.
    rig.fusion_proxy.refuse()
    probe(durable_broker.port, f"fusion-{rig.name}", hold_s=2.0)
    time.sleep(1.0)
    rig.fusion_proxy.forward()
    result = load.result(timeout_s=240)
    account = settled_account(rig, result, spec)
    print(f"5 probes: {result.resent_unconfirmed:,} reports sent again, fog resent "
          f"{rig.fog.count('fog sends')} batches of windows; {account.line()}")
    # The probes really did wipe the fog's session (it came back to none, 4 times).
    assert rig.fog.count("session present: False") - wiped_before >= 4
    assert_none_lost(rig, result, account)
