"""Many simulated devices over one MQTT connection, for `rase replay --fast`.

Each device is a real AgentCore (budget ledger, BR from os.urandom, its own
report topic and sequence numbers); only the connection is shared, so the
fog sees exactly the reports it would see from separate agents. One
connection instead of one per device removes a paho thread and a socket per
device, which is what bounded the replay speed.

With `statuses` (the local fleet of `rase agent --fleet`), each device also
publishes its retained status on rase/v1/status/{device} as a real agent
does (rase_device.wire.encode_status: state, privacy, counts of made,
delivered and rejected_by_fog reports), at connect, on every change and at
stop (offline). A connection has one last will: a transport of one device
(the fleet's per-device logins) leaves `offline` as that device's will; a
shared one can leave none, so a fleet killed without stopping leaves its
devices' last status standing. The fast replay publishes none (the fog does
not read them).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

import numpy as np
import paho.mqtt.client as mqtt

from rase_device import wire
from rase_device.core import AgentCore
from rase_common.mqtt import BrokerConfig, connect_in_background, paho_client

log = logging.getLogger(__name__)


class FleetTransport:
    """feedback: a FeedbackWatch (edge_agent.diagnostics) to subscribe to every
    device's feedback topic and hear why the fog rejects reports; None for
    the fast replay, whose devices the fog always knows."""

    def __init__(self, cores: list[AgentCore], broker: BrokerConfig, client_id: str, *, max_inflight: int = 4000,
                 feedback=None, statuses: bool = False):  # noqa: ANN001
        self.cores = cores
        self.broker = broker
        self.max_inflight = max_inflight
        self.lock = threading.Lock()         # cores are touched by paho's thread (control) and the driver
        self.connected = threading.Event()
        self.control_applied = threading.Event()
        self.subscribed_at: float | None = None   # time.monotonic() of the first SUBACK
        self.published = 0
        self.acked = 0                       # without statuses only reports are published: acked = delivered
        self.control_errors = 0
        self.feedback = feedback
        self._feedback_of = {wire.feedback_topic(c.region, c.device): c.device for c in cores} if feedback else {}
        self.statuses = statuses
        self.delivered = [0] * len(cores)    # with statuses: reports the broker acknowledged, per device
        self._mids_lock = threading.Lock()
        self._sender: dict[int, int] = {}    # packet id -> index of the device whose report it is, -1 a status
        self._acked_early: set[int] = set()  # PUBACKs that came before publish() returned
        c = self.client = paho_client(broker, client_id)
        if statuses and len(cores) == 1:
            c.will_set(wire.status_topic(cores[0].device), wire.encode_status("offline"), qos=1, retain=True)
        # pump() keeps at most max_inflight reports unacknowledged. paho's own cap stays off (0): with
        # one, paho rescans every unacknowledged message on each PUBACK (a sixth of a replay fleet's CPU).
        c.max_inflight_messages_set(0)
        c.max_queued_messages_set(0)
        c.on_connect = self._on_connect
        c.on_disconnect = lambda *a: self.connected.clear()
        c.on_publish = self._on_publish
        c.on_message = self._on_message
        c.on_subscribe = self._on_subscribe

    def _on_connect(self, client, userdata, flags, reason_code, properties):  # noqa: ANN001
        if reason_code.is_failure:
            log.warning("fleet connect refused: %s", reason_code)
            return
        client.subscribe([(wire.CONTROL_TOPIC, 1)] + [(topic, 1) for topic in self._feedback_of])
        if self.statuses:
            with self.lock:
                for core in self.cores:
                    core.status_changed = True     # each device says it is online again
        self.connected.set()

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties):  # noqa: ANN001
        if self.subscribed_at is None:
            self.subscribed_at = time.monotonic()

    def _on_publish(self, client, userdata, mid, reason_code, properties):  # noqa: ANN001
        self.acked += 1
        if self.statuses:
            with self._mids_lock:
                sender = self._sender.pop(mid, None)
                if sender is None:
                    self._acked_early.add(mid)
                elif sender >= 0:
                    self.delivered[sender] += 1

    def _on_message(self, client, userdata, msg):  # noqa: ANN001
        device = self._feedback_of.get(msg.topic)
        if device is not None:
            self.feedback.on_feedback(device, msg.payload)
            if self.statuses:
                with self.lock:
                    for core in self.cores:
                        if core.device == device:
                            core.status_changed = True    # its status carries rejected_by_fog at once
            return
        if msg.topic != wire.CONTROL_TOPIC or not msg.payload:
            return
        with self.lock:
            try:
                for core in self.cores:
                    core.apply_control(msg.payload)
                    if getattr(core.randomizer, "mechanism", None) == "prio3":
                        # the same reports, made faster; imported only here (it costs the
                        # fleet a second of start-up through scipy)
                        from simulators.secagg import accelerate
                        accelerate(core)
                self.control_applied.set()
            except ValueError as err:
                self.control_errors += 1
                log.warning("fleet ignored bad control message: %s", err)

    def start(self) -> None:
        connect_in_background(self.client, self.broker)

    @property
    def inflight(self) -> int:
        return self.published - self.acked

    def counts(self, i: int) -> dict[str, int]:
        """What became of device i's reports (its status carries them)."""
        core = self.cores[i]
        return {"made": core.sent, "delivered": self.delivered[i],
                "rejected_by_fog": self.feedback.count(core.device) if self.feedback else 0}

    def _publish_tracked(self, topic: str, payload: str, sender: int, retain: bool = False) -> bool:
        info = self.client.publish(topic, payload, qos=1, retain=retain)
        if info.rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN):
            return False
        with self._mids_lock:
            if info.mid in self._acked_early:        # the PUBACK came before publish() returned
                self._acked_early.discard(info.mid)
                if sender >= 0:
                    self.delivered[sender] += 1
            else:
                self._sender[info.mid] = sender
        self.published += 1
        return True

    def _pump_with_statuses(self) -> int:
        sent = 0
        with self.lock:
            for i, core in enumerate(self.cores):
                if core.status_changed and self._publish_tracked(wire.status_topic(core.device),
                                                                 core.status_payload(self.counts(i)), -1, True):
                    core.status_changed = False
                box = core.outbox
                while len(box) and self.inflight < self.max_inflight:
                    item = box.pop()       # (topic, payload, t); a simulated fleet awaits no receipts
                    if not self._publish_tracked(item[0], item[1], i):
                        box.push_front(item)
                        return sent
                    sent += 1
        return sent

    def pump(self) -> int:
        """Hand queued reports of every device to paho, within max_inflight
        (and, with statuses, each changed status first)."""
        if not self.connected.is_set():
            return 0
        if self.statuses:
            return self._pump_with_statuses()
        sent = 0
        with self.lock:
            for core in self.cores:
                box = core.outbox
                while len(box) and self.inflight < self.max_inflight:
                    item = box.pop()       # (topic, payload, t); a simulated fleet awaits no receipts
                    info = self.client.publish(item[0], item[1], qos=1)
                    if info.rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN):
                        box.push_front(item)
                        return sent
                    self.published += 1
                    sent += 1
        return sent

    def stop(self, timeout_s: float = 5.0) -> None:
        """With statuses: every device says offline (retained), acknowledged
        within timeout_s if the broker is there; then disconnect."""
        if self.statuses and self.connected.is_set():
            with self.lock:
                infos = [self.client.publish(wire.status_topic(c.device), wire.encode_status("offline"), qos=1,
                                             retain=True) for c in self.cores]
            deadline = time.monotonic() + timeout_s
            for info in infos:
                try:
                    info.wait_for_publish(timeout=max(0.0, deadline - time.monotonic()))
                except (RuntimeError, ValueError):
                    break       # not connected any more
        self.client.disconnect()
        self.client.loop_stop()


class ReadingTable:
    """A device's readings for t0 .. t0 + n_t - 1 under the documented REFIT
    mapping (simulators.refit.grid_readings), looked up by t."""

    def __init__(self, readings: np.ndarray, t0: int):
        self.readings = readings
        self.t0 = t0

    def at(self, t: int) -> float | None:
        i = t - self.t0
        if not 0 <= i < len(self.readings):
            return None
        v = self.readings[i]
        return None if v != v else float(v)


class FleetGate:
    """What the replay driver and its fleet process share (shared memory,
    no messages): how far the fleet may go, and how far it has gone.

    allowed: the fleet may produce timestamp index i while i < allowed.
    done: timestamp indexes 0 .. done - 1 have been produced (randomized and
    handed to the outbox), and produced[i] is the running total of reports
    up to and including index i."""

    def __init__(self, ctx, n_t: int):  # noqa: ANN001 - a multiprocessing context
        self.allowed = ctx.Value("q", 0, lock=False)
        self.done = ctx.Value("q", 0, lock=False)
        self.produced = ctx.Array("q", max(1, n_t), lock=False)
        self.control = ctx.Event()      # the devices applied the retained precision broadcast
        self.stop = ctx.Event()         # the driver gave up: leave without draining


class FleetProcess:
    """The replay driver's view of its fleet process: waits that fail as soon
    as the fleet (or, through `check`, the fusion center) has died, the count
    of delivered reports once it exits, and its stop."""

    def __init__(self, proc, gate: FleetGate, check: Callable[[], None], poll_s: float):  # noqa: ANN001
        self.proc, self.gate, self.check, self.poll_s = proc, gate, check, poll_s

    async def until(self, pred: Callable[[], bool], what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not pred():
            if not self.proc.is_alive() and not pred():
                raise RuntimeError(f"the replay's device fleet stopped (exit code {self.proc.exitcode}) {what}")
            self.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"replay stalled: {what} not reached after {timeout_s:.0f} s")
            await asyncio.sleep(self.poll_s)

    async def delivered(self, n_t: int, timeout_s: float) -> int:
        """Once the fleet has exited (every report acked by the broker): how many it made."""
        await self.until(lambda: not self.proc.is_alive(), "every report delivered", timeout_s)
        if self.proc.exitcode != 0:
            raise RuntimeError(f"the replay's device fleet failed (exit code {self.proc.exitcode})")
        return self.gate.produced[n_t - 1] if n_t else 0

    async def stop(self) -> None:
        if self.proc.is_alive():
            self.gate.stop.set()
            await asyncio.to_thread(self.proc.join, 10)
            if self.proc.is_alive():
                self.proc.terminate()
                await asyncio.to_thread(self.proc.join, 5)


def as_replay_child() -> Callable[[], bool]:
    """Set up a process the replay driver spawned (the fleet, the fusion
    center): Ctrl-C is the driver's to handle (it stops its children), and the
    returned check says whether the driver has died without saying stop
    (SIGKILL, SIGTERM), so the child can exit instead of running on."""
    import multiprocessing
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    return lambda: parent is not None and not parent.is_alive()


def run_fleet(cfgs: list, readings: list[np.ndarray], t0: int, n_t: int, epoch0: float, period_s: float,
              broker: BrokerConfig, client_id: str, gate: FleetGate) -> None:
    """The fleet's side of a fast replay, in a process of its own so that the
    devices' samplers and their MQTT traffic use the second core: every
    device (a real AgentCore from its AgentConfig) reads and randomizes each
    timestamp just before its end, as `_drive_fleet` did in the driver's
    process, when the driver allows that timestamp; then every report is
    delivered (acked by the broker) before it returns."""
    import time

    from edge_agent.service import build_core

    driver_gone = as_replay_child()

    def abandoned() -> bool:
        return gate.stop.is_set() or driver_gone()

    transport = FleetTransport([build_core(c) for c in cfgs], broker, client_id)
    tables = [ReadingTable(r, t0) for r in readings]
    transport.start()
    try:
        deadline = time.monotonic() + 60
        while not transport.control_applied.wait(0.1):       # watching the driver meanwhile
            if abandoned():
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the simulated devices did not receive the precision broadcast within 60 s")
        gate.control.set()
        reports = 0
        for i in range(n_t):
            while gate.allowed.value <= i:
                if abandoned():
                    return
                transport.pump()
                time.sleep(0.0005)
            t = t0 + i
            now = epoch0 + (t + 1) * period_s - 1e-3
            with transport.lock:
                for core, table in zip(transport.cores, tables):
                    x = table.at(t)
                    if x is not None and core.step(x, now) is not None:
                        reports += 1
            gate.produced[i] = reports
            gate.done.value = i + 1
            transport.pump()
        while not abandoned() and (transport.pump() or any(len(c.outbox) for c in transport.cores)
                                          or transport.inflight > 0):
            time.sleep(0.001)
    finally:
        transport.stop()


def interval_cores(devices: list[str], *, region: str, work: str, eps_day: float, unit: str, calibration: dict,
                   period_s: float, epoch0: float, mechanism: str, policy: dict) -> list[AgentCore]:
    """One real device core per household meter (its own ledger file of eps_day a UTC day, its unit and
    household stated), built without an AgentConfig each (10,000 pydantic configs cost a minute)."""
    import os

    from rase_device.ledger import BudgetLedger
    from rase_device.policy import LocalPolicy
    from rase_device.randomizer import Calibration

    os.makedirs(work, exist_ok=True)
    cal = Calibration(**calibration)
    pol = LocalPolicy.from_dict(policy, period_s)
    cores = []
    for d in devices:
        path = os.path.join(work, f"{d}.json")
        for stale in (path, path + ".tmp"):
            if os.path.exists(stale):
                os.remove(stale)
        # A day's reports are one ledger block: one write per device and day, not one per report.
        ledger = BudgetLedger(path, eps_day, 86400, reserve_reports=1000)
        cores.append(AgentCore(device=d, region=region, eps=1.0, ledger=ledger, calibration=cal, period_s=period_s,
                               epoch0=epoch0, outbox_capacity=1_000_000, policy=pol, mechanism=mechanism,
                               privacy={"unit": unit, "household": d, "eps_day": eps_day, "share": 1.0}))
    return cores


def faster_prio3_clients() -> None:
    """In a simulator process only: the device core's params digest (pure-Python TurboSHAKE128, 2 ms) from
    CPython's cached one, the same 32 hex digits, so 10,000 simulated devices take a control message in
    seconds, not a minute; and its base64 (pure Python, 40 us a field) from the standard library's, the
    same text (tests/unit/rase_device/test_secagg.py holds the two equal)."""
    import base64

    from rase_common.protocol.prio3 import _params_id_of
    from rase_device import secagg

    secagg.params_id = lambda params: _params_id_of(secagg.params_text(params))
    secagg.b64encode = lambda data: base64.b64encode(data).decode()


def run_interval_fleet(core_args: dict, means, t0: int, epoch0: float, interval_s: float, broker: BrokerConfig,
                       client_id: str, gate: FleetGate) -> None:
    """The fleet of an interval replay (simulators.household_replay), in a process of its own: every
    household's device core makes one report per interval, of its interval's clipped mean (the
    vectorised IntervalMean of simulators.households: means[i, j] for device i, interval t0 + j, NaN: no
    samples), charged to its ledger at the interval's start, when the driver allows that interval; then
    every report is delivered before it returns."""
    import time

    import numpy as np

    driver_gone = as_replay_child()
    faster_prio3_clients()

    def abandoned() -> bool:
        return gate.stop.is_set() or driver_gone()

    cores = interval_cores(**core_args)
    transport = FleetTransport(cores, broker, client_id)
    transport.start()
    try:
        deadline = time.monotonic() + 120
        while not transport.control_applied.wait(0.1):
            if abandoned():
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the simulated devices did not receive the precision broadcast within 120 s")
        gate.control.set()
        from simulators.fast_sum import fast_sum_make_report

        for core in cores:
            client = core.randomizer
            if getattr(client, "mechanism", None) == "prio3" and client.kind == "sum":
                client.make_report = fast_sum_make_report    # the device's shares, from tables (simulators.fast_sum)
        means = np.asarray(means)
        pending: deque = deque()      # (topic, payload) made and not yet handed to paho

        def pump() -> None:
            while pending and transport.connected.is_set() and transport.inflight < transport.max_inflight:
                topic, payload = pending[0]
                info = transport.client.publish(topic, payload, qos=1)
                if info.rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN):
                    return
                pending.popleft()
                transport.published += 1

        reports = 0
        for j in range(means.shape[1]):
            while gate.allowed.value <= j:
                if abandoned():
                    return
                pump()
                time.sleep(0.002)
            t = t0 + j
            start = epoch0 + t * interval_s
            for k, (core, x) in enumerate(zip(cores, means[:, j])):
                if x == x and core.report_mean(t, float(x), start) is not None:
                    pending.append(core.outbox.pop()[:2])
                    reports += 1
                if k % 200 == 199:
                    pump()
            gate.produced[j] = reports
            gate.done.value = j + 1
            pump()
        while not abandoned() and (pending or transport.inflight > 0):
            pump()
            time.sleep(0.001)
    finally:
        transport.stop()
