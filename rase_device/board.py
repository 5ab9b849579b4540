# Board adapter: the main loop of a flashed sensor. MicroPython only needs
# this file, the device core, umqtt.simple and /rase_config.json.
#
# The loop never ends on an error from outside: Wi-Fi, NTP, the broker and the
# sensor each fail, are counted, and are retried. Optional safety nets: a
# hardware watchdog (machine.WDT) and machine.reset() after N consecutive
# link failures, both off unless the config's "board" section turns them on.
#
# Nothing blocks past the watchdog: every socket step (DNS, connect, TLS,
# CONNACK, PUBACK, ping) has link_timeout_s (rase_device.board_net), the
# Wi-Fi join waits in 0.25 s naps, and before each of those steps
# `between()` feeds the watchdog and takes the reading of a period that began
# meanwhile, so a slow link queues readings instead of skipping them.

import json
import time

from rase_device import board_net
from rase_device.board_net import Network
from rase_device.core import AgentCore
from rase_device.entropy import RandomBits
from rase_device.ledger import BudgetLedger
from rase_device.policy import LocalPolicy
from rase_device.randomizer import Calibration
from rase_device.umqtt_transport import UmqttTransport

# Ports whose epoch is 2000-01-01 need this added to time.time().
EPOCH_2000_OFFSET_S = 946684800

BOARD_DEFAULTS = {
    "wifi_ssid": None, "wifi_password": None, "wifi_timeout_s": 20,
    "ntp_host": "pool.ntp.org", "ntp": True, "ntp_retry_s": 300, "ntp_resync_s": 86400,
    "watchdog_s": 0, "reset_after_failures": 0, "status_every_reports": 100, "link_timeout_s": 5,
    "dns_server": None,
}
CONFIG_PATH = "rase_config.json"   # relative: a board starts main.py in its root folder


def unix_clock():
    offset = EPOCH_2000_OFFSET_S if time.gmtime(0)[0] == 2000 else 0
    return lambda: time.time() + offset


def load_config(path=CONFIG_PATH):
    with open(path) as f:
        return json.load(f)


def board_settings(cfg):
    out = dict(BOARD_DEFAULTS)
    out.update(cfg.get("board") or {})
    return out


def import_callable(spec):
    mod_name, _, attr = spec.partition(":")
    mod = __import__(mod_name)
    return getattr(mod, attr or "read")


def build_core(cfg, bits=None):
    cal = cfg["calibration"]
    ledger = BudgetLedger(cfg["ledger_path"], cfg["budget_eps"], cfg["budget_period_s"],
                          cfg.get("ledger_reserve_reports", 1))
    return AgentCore(device=cfg["device"], region=cfg["region"], eps=cfg["eps"], ledger=ledger,
                     calibration=Calibration(cal["beta"], cal["rho"], cal["x_min"], cal["x_max"], cal["gamma"]),
                     period_s=cfg["period_s"], epoch0=cfg["epoch0"], bits=bits,
                     outbox_capacity=cfg.get("outbox_capacity", 64),
                     policy=LocalPolicy.from_dict(cfg.get("policy"), cfg["period_s"]),
                     mechanism=cfg.get("mechanism", "br"), confirm_s=cfg.get("confirm_timeout_s", 30),
                     privacy=cfg.get("privacy"))


def make_umqtt_factory(cfg, sockets):
    """A function making umqtt.simple clients whose sockets are `sockets`
    (bounded; with TLS, verified against the deployment's CA)."""
    from umqtt import simple
    b = cfg["broker"]
    host = b["host"]
    board_net.install(simple, sockets)
    tls = b.get("tls", False)
    ssl_arg = None  # type: board_net.Tls | None

    def make():
        if tls:
            _use_tls()
        return simple.MQTTClient(cfg["device"], host, port=b.get("port") or (8883 if tls else 1883),
                                 user=b.get("user"), password=b.get("password"),
                                 keepalive=b.get("keepalive_s", 60), ssl=ssl_arg)

    def _use_tls():
        # Built on the first connect, so a missing CA shows as the link's error.
        nonlocal ssl_arg
        if ssl_arg or sockets.tls:
            return
        if not b.get("ca"):
            raise ValueError("broker.tls is on but the bundle has no CA: flash with `rase flash --ca FILE`")
        with open(b["ca"], "rb") as f:
            ctx = board_net.tls_context(f.read())
        if board_net.umqtt_takes_context(simple.MQTTClient):
            ssl_arg = board_net.Tls(ctx)      # umqtt >= 1.4 wraps with server_hostname=host
        else:
            sockets.tls = (ctx, host)         # umqtt 1.3.4: the socket wraps itself
    return make


class BoardLoop:
    """One sensor board: read, randomize, publish, forever. `tick(now)` is
    one period's work; `run` adds the sleeping."""

    def __init__(self, read_sensor, cfg, make_client=None, bits=None, net=None, machine=None,
                 sleep=time.sleep, log=print, clock=None):
        self.read_sensor = read_sensor
        self.board = board_settings(cfg)
        self.sleep = sleep
        self.log = log
        self.clock = clock or unix_clock()
        self.core = build_core(cfg, bits=RandomBits() if bits is None else bits)
        self.sockets = board_net.Sockets(board_net.link_timeout_s(cfg, self.board), self.between)
        keepalive_s = cfg["broker"].get("keepalive_s", 60) if "broker" in cfg else 60
        self.transport = UmqttTransport(self.core, make_client or make_umqtt_factory(cfg, self.sockets),
                                        keepalive_s=keepalive_s)
        self.wdt = None
        self.machine = machine
        if self.board["watchdog_s"]:
            self.wdt = self._machine().WDT(timeout=int(self.board["watchdog_s"] * 1000))
        self.net = net or Network(self.board, sleep=sleep, feed=self.between, resolve=self.sockets.resolve)
        self.time_ok = not self.board["ntp"]
        self.next_ntp = 0
        self.sensor_errors = 0
        self.last_status_at = 0
        self.read_t = None          # the period whose reading was last attempted
        self.shown_error = "not connected yet"  # type: str | None  # so the first link up is shown
        self.shown_state = "online"

    def _machine(self):
        if self.machine is None:
            import machine
            self.machine = machine
        return self.machine

    def feed(self):
        if self.wdt is not None:
            self.wdt.feed()

    def between(self):
        """Before each blocking step: feed the watchdog, and take the
        reading of a period that began while the link was slow."""
        self.feed()
        self._read(self.clock())

    def _keep_time(self, now):
        if self.board["ntp"] and now >= self.next_ntp:
            if self._net_up() and self.net.sync_time():
                self.time_ok = True
                self.next_ntp = now + self.board["ntp_resync_s"]
            else:
                self.next_ntp = now + self.board["ntp_retry_s"]

    def _net_up(self):
        """Wi-Fi joined (or not needed); the DNS server to ask is then known."""
        if not self.net.up():
            return False
        self.sockets.dns_server = self.board["dns_server"] or getattr(self.net, "dns_server", None)
        return True

    def _read(self, now):
        if not self.time_ok:
            return  # a clock at its power-on default would stamp every report wrong
        t = self.core.logical_t(now)
        if t == self.read_t:
            return  # one attempt per period, whatever its outcome
        self.read_t = t
        try:
            x = self.read_sensor()
            self.core.step(x, now)
        except Exception as exc:  # sensor fault or bad reading: skipped before any budget is spent
            self.sensor_errors += 1
            if self.sensor_errors == 1 or self.sensor_errors % 100 == 0:
                self.log("rase: sensor error %d: %r" % (self.sensor_errors, exc))

    def _link(self, now):
        t = self.transport
        if t.client is None and now >= t.next_try and not self._net_up():
            t.back_off(now, self.net.last_error)
        else:
            t.poll(now)
        if t.failures and t.failures % 5 == 0:
            self.sockets.forget()   # resolve the broker's name again: it may have moved
        self._show_link()
        limit = self.board["reset_after_failures"]
        if limit and t.failures >= limit:
            self.log("rase: %d consecutive link failures (%s); resetting" % (t.failures, t.last_error))
            self._machine().reset()

    def _show_link(self):
        """A console line whenever the link goes down for a new reason or comes back."""
        t = self.transport
        now_error = None if t.client is not None else t.last_error
        if now_error != self.shown_error:
            self.shown_error = now_error
            self.log("rase: link up" if now_error is None else "rase: link down: %s" % now_error)

    def status_line(self):
        c, t = self.core, self.transport
        line = ("rase: sent=%d delivered=%d queued=%d unconfirmed=%d dropped=%d sensor_errors=%d budget_skips=%d "
                "disconnects=%d link=%s state=%s" % (c.sent, t.delivered, len(c.outbox), c.outbox.awaiting,
                                                     c.outbox.dropped, self.sensor_errors, c.skipped_budget,
                                                     t.disconnects, "up" if t.client else "down", c.status))
        if t.client is None and t.last_error:
            line += " error=%s" % t.last_error
        if c.ledger.unwritable:
            line += " ledger_error=%s" % c.ledger.last_write_error
        return line

    def tick(self, now):
        self.feed()
        self._keep_time(now)
        self._read(now)
        self._link(now)
        self._read(self.clock())   # a period that began during the link's last step
        every = self.board["status_every_reports"]
        state_changed = self.core.status != self.shown_state
        if state_changed or (every and self.core.sent - self.last_status_at >= every):
            # Every status_every_reports reports, and at once when the state changes
            # (budget_exhausted, ledger_unwritable, ...: reporting may have stopped).
            self.last_status_at = self.core.sent
            self.shown_state = self.core.status
            self.log(self.status_line())

    def wait_s(self, now):
        """Until shortly after the next period boundary."""
        core = self.core
        t_next = core.schedule.end_of(core.logical_t(now))
        return max(0.05, min(core.period_s, t_next - now + 0.05))

    def nap(self, seconds):
        # Short naps so the watchdog is fed even through a long period.
        step = max(0.05, self.board["watchdog_s"] / 4) if self.wdt is not None else seconds
        while seconds > 0:
            self.feed()
            self.sleep(min(step, seconds))
            seconds -= step


def run(read_sensor, cfg, clock=None, sleep=time.sleep, make_client=None, bits=None, max_steps=None,
        net=None, machine=None, log=print):
    clock = clock or unix_clock()
    loop = BoardLoop(read_sensor, cfg, make_client=make_client, bits=bits, net=net, machine=machine,
                     sleep=sleep, log=log, clock=clock)
    steps = 0
    while max_steps is None or steps < max_steps:
        loop.tick(clock())
        steps += 1
        loop.nap(loop.wait_s(clock()))
    return loop


def main():
    cfg = load_config()
    run(import_callable(cfg.get("sensor", "sensor:read")), cfg)
