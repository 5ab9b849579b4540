# Board adapter: the main loop of a flashed sensor. MicroPython only needs
# this file, the device core, umqtt.simple and /rase_config.json.
#
# read_sensor: a function () -> float, named in the config as "module:function".

import json
import time

from edge_agent.core import AgentCore
from edge_agent.entropy import RandomBits
from edge_agent.ledger import BudgetLedger
from edge_agent.randomizer import Calibration
from edge_agent.umqtt_transport import UmqttTransport

# Ports whose epoch is 2000-01-01 need this added to time.time().
EPOCH_2000_OFFSET_S = 946684800


def unix_clock():
    offset = EPOCH_2000_OFFSET_S if time.gmtime(0)[0] == 2000 else 0
    return lambda: time.time() + offset


def sync_time():
    """Set the RTC by NTP when the board has network; keep going if not."""
    try:
        import ntptime
        ntptime.settime()
        return True
    except Exception:  # no network module or no answer: run on the RTC
        return False


def load_config(path="/rase_config.json"):
    with open(path) as f:
        return json.load(f)


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
                     outbox_capacity=cfg.get("outbox_capacity", 64))


def make_umqtt_factory(cfg):
    from umqtt.simple import MQTTClient
    b = cfg["broker"]

    def make():
        return MQTTClient(cfg["device"], b["host"], port=b.get("port", 1883),
                          user=b.get("user"), password=b.get("password"),
                          keepalive=b.get("keepalive_s", 60), ssl=b.get("tls", False))
    return make


def run(read_sensor, cfg, clock=None, sleep=time.sleep, make_client=None, bits=None, max_steps=None):
    clock = clock or unix_clock()
    core = build_core(cfg, bits=RandomBits() if bits is None else bits)
    transport = UmqttTransport(core, make_client or make_umqtt_factory(cfg))
    steps = 0
    while max_steps is None or steps < max_steps:
        now = clock()
        try:
            core.step(read_sensor(), now)
        except ValueError:
            pass  # a sensor fault: no report this period, no budget spent
        transport.poll(now)
        steps += 1
        # Wake shortly after the next period boundary.
        t_next = core.epoch0 + (core.logical_t(now) + 1) * core.period_s
        sleep(max(0.05, min(core.period_s, t_next - clock() + 0.05)))
    return core, transport


def main():
    cfg = load_config()
    sync_time()
    run(import_callable(cfg.get("sensor", "sensor:read")), cfg)
