# The agent's logic without I/O: reading -> budget check -> BR -> report.
# Transports (paho on CPython, umqtt on boards) drain `outbox` and publish
# `status` whenever `status_changed` is set.

from edge_agent import wire
from edge_agent.outbox import Outbox
from edge_agent.randomizer import BudgetRandomizer, Calibration


class AgentCore:
    """One device. Keyword-only use is intended: AgentCore(device=..., ...)."""

    def __init__(self, device, region, eps, ledger, calibration, period_s=8,
                 epoch0=0, bits=None, outbox_capacity=256):
        self.device = wire.check_name("device", device)
        self.region = wire.check_name("region", region)
        if not (eps > 0):
            raise ValueError("eps must be > 0, got %r" % (eps,))
        if not (period_s > 0):
            raise ValueError("period_s must be > 0, got %r" % (period_s,))
        self.eps_max = eps
        self.eps_levels = [eps]
        self.ledger = ledger
        self.period_s = period_s
        self.epoch0 = epoch0
        self.randomizer = BudgetRandomizer(calibration, bits)
        self.outbox = Outbox(outbox_capacity)
        self.topic = wire.report_topic(region, device)
        self.seq = 0
        self.last_t = None
        self.status = "online"
        self.status_changed = True
        self.sent = 0
        self.skipped_budget = 0

    def logical_t(self, now):
        return int((now - self.epoch0) // self.period_s)

    def eps(self):
        """The menu level used: the largest one not above this device's eps."""
        best = None
        for e in self.eps_levels:
            if e <= self.eps_max:
                best = e
        return best

    def _set_status(self, state):
        if state != self.status:
            self.status = state
            self.status_changed = True

    def step(self, x, now):
        """Randomize reading x taken at unix time `now`; queue and return the
        report payload, or None (already reported this t, no eps level, or the
        budget is spent)."""
        t = self.logical_t(now)
        if self.last_t is not None and t <= self.last_t:
            return None
        eps = self.eps()
        if eps is None:
            self._set_status("no_eps_level")
            return None
        # Validate before spending so a sensor fault costs no budget.
        self.randomizer.quantize(x)
        if not self.ledger.try_spend(eps, now):
            self.skipped_budget += 1
            self._set_status("budget_exhausted")
            return None
        y, _ = self.randomizer.randomize(x, eps)
        self.last_t = t
        self.seq += 1
        payload = wire.encode_report(t, y, eps, self.seq)
        self.outbox.put((self.topic, payload))
        self.sent += 1
        self._set_status("online")
        return payload

    def apply_control(self, payload):
        """Recalibrate from a control message; raises ValueError if it is bad
        (the running calibration is then kept)."""
        msg = wire.parse_control(payload)
        cal = Calibration(beta=msg["beta"], rho=msg["rho"], x_min=msg["x_min"],
                          x_max=msg["x_max"], gamma=msg["gamma"])
        if not (msg["period_s"] > 0):
            raise ValueError("control field period_s must be > 0, got %r" % (msg["period_s"],))
        self.randomizer = BudgetRandomizer(cal, self.randomizer.bits)
        self.period_s = msg["period_s"]
        if "epoch0" in msg:
            self.epoch0 = msg["epoch0"]
        self.eps_levels = msg["eps_levels"]
        if self.eps() is not None and self.status == "no_eps_level":
            self._set_status("online")
        return cal
