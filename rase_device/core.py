# The agent's logic without I/O: reading -> budget check -> randomizer (BR or
# the deployment's mechanism, rase_device.mechanisms: a mean mechanism, or the
# binary / categorical report kinds) -> report.
# Transports (paho on CPython, umqtt on boards) drain `outbox` and publish
# `status` whenever `status_changed` is set.
# With mechanism "prio3" (secure aggregation) the randomizer is a Prio3 client
# (rase_device.secagg) built from the control message and the helper key the
# device's policy pinned; until such a control message arrives it reports nothing.
#
# The privacy unit (issue 28): the device belongs to a unit (itself, or a
# household of devices) whose daily eps the ledger enforces, this device's
# share of it; every report of every mode and product is charged before it
# is made, and a report that would overspend is not made (status
# budget_exhausted, with when the budget renews). An interval product
# (the control message's interval_s) samples every period and reports once
# per interval the clipped mean (rase_device.interval), in every mode.

from rase_device import wire
from rase_device.interval import IntervalMean
from rase_device.ledger import utc_text
from rase_device.outbox import Outbox
from rase_device.mechanisms import DEFAULT_MECHANISM, make_randomizer
from rase_device.report_kind import DEFAULT_ON_ABOVE
from rase_device.policy import LocalPolicy
from rase_device.randomizer import EPS_UNITS, Calibration, check_finite
from rase_device.schedule import Schedule, from_control

PRIO3 = wire.PRIO3


def check_sampler(randomizer, eps):
    """Raise ValueError if the randomizer cannot draw at eps (BR's noise(),
    the other mechanisms' params())."""
    prepare = getattr(randomizer, "noise", None) or randomizer.params
    prepare(eps)


class AgentCore:
    """One device. Keyword-only use is intended: AgentCore(device=..., ...)."""

    def __init__(self, device, region, eps, ledger, calibration, period_s=8,
                 epoch0=0, bits=None, outbox_capacity=256, policy=None, mechanism=DEFAULT_MECHANISM,
                 on_above=DEFAULT_ON_ABOVE, bands=None, read=None, confirm_s=0, privacy=None):
        self.device = wire.check_name("device", device)
        self.region = wire.check_name("region", region)
        if not (eps > 0):
            raise ValueError("eps must be > 0, got %r" % (eps,))
        if not (period_s > 0):
            raise ValueError("period_s must be > 0, got %r" % (period_s,))
        self.eps_max = eps
        self.eps_levels = [eps]
        self.ledger = ledger
        self.schedule = Schedule(period_s, epoch0)
        self.mechanism = mechanism
        self.read = read            # CSPRNG bytes for Prio3 reports (None: os.urandom)
        # prio3 waits for the control message that names its kind and parameters.
        self.randomizer = None if mechanism == PRIO3 else make_randomizer(mechanism, calibration, bits, on_above,
                                                                          bands)
        # confirm_s > 0: each report is kept until the fog's receipt (rase_device.outbox, fog_shuffler.receipts).
        self.outbox = Outbox(outbox_capacity, confirm_s)
        self.late_by_fog = 0        # reports the fog said came later than its allowed lateness
        self.topic = wire.report_topic(region, device)
        # Report numbers continue across reboots: the ledger reserves them on flash with the budget.
        self.seq = getattr(ledger, "seq_reserved", 0)
        self.last_t = None
        self.last_reported = None   # the last interval t reported (interval products)
        self.status = "online"
        self.status_changed = True
        self.sent = 0
        self.skipped_budget = 0
        self.policy = policy or LocalPolicy(period_min_s=period_s)
        self.control_rejected = 0
        self.last_rejection = None
        # The unit this device's budget protects: {"unit", "household", "eps_day", "share"}
        # (eps_day None: event-level, the ledger only a cap; edge_agent.config.PrivacyConfig).
        self.privacy = privacy or {"unit": "device", "household": device, "eps_day": None, "share": 1.0}
        self.interval = None        # IntervalMean of an interval product (the control message's interval_s)
        self.calibration = calibration
        self.renews_at = None       # when the spent budget renews (unix), while budget_exhausted

    def report_period_s(self):
        """Seconds between reports: the period, an interval product's interval, or a prio3 product's."""
        if self.interval is not None:
            return self.interval.interval_s
        per_product = getattr(self.randomizer, "report_period_s", None)
        return per_product(self.period_s) if per_product is not None else self.period_s

    def privacy_spent(self):
        """eps per report, per hour at this cadence, spent this budget period,
        and the unit it is charged to (with when a spent budget renews)."""
        eps = self.eps()
        led = self.ledger
        out = {"eps_per_report": eps, "eps_per_hour": None if eps is None else eps * 3600.0 / self.report_period_s(),
               "spent_this_period": led.spent_units / EPS_UNITS, "budget_per_period": led.budget_units / EPS_UNITS,
               "budget_period_s": led.period_s, "unit": self.privacy["unit"],
               "household": self.privacy.get("household"), "eps_day": self.privacy.get("eps_day"),
               "share": self.privacy.get("share", 1.0),
               "guarantee": "event-level" if self.privacy.get("eps_day") is None else "per unit per day"}
        if self.renews_at is not None:
            out["renews_at"] = self.renews_at
            out["renews_at_utc"] = utc_text(self.renews_at)
        return out

    def status_payload(self, counts=None):
        return wire.encode_status(self.status, self.privacy_spent(), counts)

    @property
    def period_s(self):
        return self.schedule.period_s

    @property
    def epoch0(self):
        return self.schedule.epoch0

    def logical_t(self, now):
        return self.schedule.t_of(now)

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
        if self.randomizer is None:
            self._set_status("awaiting_control")
            return None
        if eps is None:
            self._set_status("no_eps_level")
            return None
        if self.interval is not None:
            check_finite("reading", x)        # a sensor fault is not averaged in
            due = self.interval.add(x, now)
            self.last_t = t
            return None if due is None else self.report_mean(due[0], due[1], self.interval.start_of(due[0]))
        if self.mechanism == PRIO3:
            return self._step_prio3(self.randomizer, x, now, t, eps)
        # Validate the reading and the sampler before spending, so a sensor
        # fault or a refused calibration costs no budget.
        self.randomizer.quantize(x)
        check_sampler(self.randomizer, eps)
        if not self._spend(eps, now):
            return None
        y, _ = self.randomizer.randomize(x, eps)
        self.last_t = t
        return self._queue(wire.encode_report(t, y, eps, self.seq + 1), t)

    def report_mean(self, t, x, at):
        """One report of interval t, whose clipped mean reading is x (from the
        device's own IntervalMean, or a simulator's vectorised one), charged
        to the ledger at unix time `at` (the interval's start: the day its
        readings belong to); its payload, or None when it may not be made."""
        if self.last_reported is not None and t <= self.last_reported:
            return None
        eps = self.eps()
        if self.randomizer is None or eps is None:
            return None
        if self.mechanism == PRIO3:
            m = self.randomizer.quantize(x)
            if not self._spend(eps, at):
                return None
            self.last_reported = t
            return self._queue(self.randomizer.report(t, m, eps, self.seq + 1), t)
        self.randomizer.quantize(x)
        check_sampler(self.randomizer, eps)
        if not self._spend(eps, at):
            return None
        y, _ = self.randomizer.randomize(x, eps)
        self.last_reported = t
        return self._queue(wire.encode_report(t, y, eps, self.seq + 1), t)

    def _step_prio3(self, client, x, now, t, eps):
        """A Prio3 report when one is due (every period, or once per product
        period with that period's average); eps is what the deployment's
        accounting charges a report (prio3.dp_eps: each release is dp_eps-DP)."""
        due = client.observe(x, now, self.epoch0, self.period_s)
        self.last_t = t
        if due is None or not self._spend(eps, now):
            return None
        return self._queue(client.report(due[0], due[1], eps, self.seq + 1), due[0])

    def _spend(self, eps, now):
        """Charge eps to the ledger; False (status says why) when it cannot."""
        if self.ledger.locked(now):
            self._set_status("ledger_unreadable")
            return False
        if not self.ledger.try_spend(eps, now, self.seq + 1):
            if self.ledger.unwritable:  # the reservation is not on flash: no report may use it
                self._set_status("ledger_unwritable")
                return False
            self.skipped_budget += 1
            renews = self.ledger.renews_at(now)
            if renews != self.renews_at:
                self.renews_at = renews
                self.status_changed = True
            self._set_status("budget_exhausted")
            return False
        self.renews_at = None
        return True

    def _queue(self, payload, t):
        self.seq += 1
        self.outbox.put((self.topic, payload, t))
        self.sent += 1
        self._set_status("control_rejected" if self.last_rejection else "online")
        return payload

    def on_feedback(self, payload):
        """A message on this device's feedback topic. A receipt
        ({"kept": [t, ...], "late": n}, fog_shuffler.receipts) confirms those
        reports and is True; anything else (the fog's word on rejected
        reports) is for the transport's diagnostics: False."""
        try:
            msg = wire.parse_receipt(payload)
        except ValueError:
            return False
        if msg is None:
            return False
        self.outbox.confirm(msg[0])
        if msg[1]:
            self.late_by_fog += msg[1]
            self.status_changed = True       # the retained status counts them
        return True

    def apply_control(self, payload):
        """Recalibrate from a control message. A malformed one, or one outside
        this device's local policy, is ignored whole: the running calibration
        stays, the status says control_rejected, and ValueError says why."""
        try:
            msg = wire.parse_control(payload)
            self.policy.check(msg)
            schedule = from_control(msg, self.schedule)
            cal = Calibration(beta=msg["beta"], rho=msg["rho"], x_min=msg["x_min"],
                              x_max=msg["x_max"], gamma=msg["gamma"])
            levels = msg["eps_levels"]
            if msg["mechanism"] == PRIO3:
                randomizer = self._prio3_client(msg, cal)
            else:
                bits = self.randomizer.bits if self.randomizer is not None else None
                randomizer = make_randomizer(msg["mechanism"], cal, bits, msg["on_above"], msg["bands"])
                usable = [e for e in levels if e <= self.eps_max]
                if usable:
                    check_sampler(randomizer, usable[-1])  # the sampler must accept it before anything changes
        except ValueError as err:
            self.control_rejected += 1
            self.last_rejection = str(err)
            self._set_status("control_rejected")
            raise
        self.randomizer = randomizer
        self.mechanism = msg["mechanism"]
        # A new schedule continues t from since_t (rase_device.schedule): no t is skipped.
        self.schedule = schedule
        self.calibration = cal
        self._follow_interval(msg.get("interval_s"), schedule.epoch0, cal)
        self.eps_levels = levels
        self.last_rejection = None
        self._set_status("online" if self.eps() is not None else "no_eps_level")
        return cal

    def _follow_interval(self, interval_s, epoch0, cal):
        """An interval product's accumulator; the running one (and its samples)
        is kept while the interval, epoch0 and range stay."""
        if interval_s is None:
            self.interval = None
            return
        cur = self.interval
        if cur is not None and (cur.interval_s, cur.epoch0, cur.x_min, cur.x_max) == (interval_s, epoch0, cal.x_min,
                                                                                    cal.x_max):
            return
        self.interval = IntervalMean(interval_s, epoch0, cal.x_min, cal.x_max)

    def _prio3_client(self, msg, cal):
        """The Prio3 client for a control message (already checked against the
        policy, whose pinned key it seals to); keeps the running one's
        accumulation when the parameters are unchanged."""
        key = (msg["prio3"], cal.as_dict(), msg["on_above"], msg["bands"])
        if getattr(self.randomizer, "control_key", None) == key:
            return self.randomizer
        from rase_device.secagg import Prio3Client
        client = Prio3Client(msg["prio3"], cal, self.policy.prio3_public_key, self.region, msg["on_above"],
                             msg["bands"], self.read)
        client.control_key = key
        return client
