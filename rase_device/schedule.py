# The reporting schedule: which logical timestamp t a moment belongs to, and
# when t starts. MicroPython-compatible.
#
# t = floor((unix - epoch0) / period_s). A change of period or epoch0 would
# make t jump (backwards with a slower period or a later epoch0), and a device
# never reports a t it has already passed: it would fall silent. So a change
# takes effect from a stated t of the new schedule, `since_t`, announced in
# the control message with the previous schedule: before the new schedule's
# start of since_t the previous one applies, and t runs on without a gap (the
# last previous period may be cut short). The fusion center chooses since_t
# and the new epoch0 (rase_common.protocol.control.reschedule).


class Schedule:
    def __init__(self, period_s, epoch0=0.0, since_t=None, previous=None):
        if not (period_s > 0):
            raise ValueError("period_s must be > 0, got %r" % (period_s,))
        if (since_t is None) != (previous is None):
            raise ValueError("since_t and the previous schedule come together")
        self.period_s = period_s
        self.epoch0 = epoch0
        self.since_t = since_t
        self.previous = previous
        if previous is not None:
            before = previous.t_before(self.start_of(since_t))
            if before != since_t - 1:
                raise ValueError("the schedule change at t=%r does not continue the previous schedule (its t "
                                 "there is %r)" % (since_t, before))

    def switch_unix(self):
        """When this schedule took (or takes) over; None without a previous one."""
        return None if self.previous is None else self.epoch0 + self.since_t * self.period_s

    def t_of(self, unix):
        switch = self.switch_unix()
        if switch is not None and unix < switch:
            return self.previous.t_of(unix)
        return int((unix - self.epoch0) // self.period_s)

    def t_before(self, unix):
        """The t of the moment just before `unix` (a boundary belongs to the next t)."""
        switch = self.switch_unix()
        if switch is not None and unix <= switch:
            return self.previous.t_before(unix)
        k = (unix - self.epoch0) / self.period_s
        t = int(k // 1)
        return t - 1 if t == k else t

    def start_of(self, t):
        if self.previous is not None and t < self.since_t:
            return self.previous.start_of(t)
        return self.epoch0 + t * self.period_s

    def end_of(self, t):
        return self.start_of(t + 1)

    def period_at(self, t):
        return self.end_of(t) - self.start_of(t)

    def same(self, other):
        return (other is not None and self.period_s == other.period_s and self.epoch0 == other.epoch0
                and self.since_t == other.since_t)


def check_stated(msg, current):
    """A control message without since_t may not change the schedule: a
    slower period or a later epoch0 would move t back, and a receiver that
    never reports (or closes) a t it has passed falls silent. Raise ValueError
    unless it keeps `current`'s period and epoch0 (the device and the fog
    apply the same rule)."""
    if msg.get("since_t") is not None or current is None:
        return
    epoch0 = msg.get("epoch0", current.epoch0)
    if msg["period_s"] != current.period_s or epoch0 != current.epoch0:
        raise ValueError("schedule change without since_t (period_s %r -> %r, epoch0 %r -> %r): a change of "
                         "schedule must state the t it takes effect from" % (current.period_s, msg["period_s"],
                                                                             current.epoch0, epoch0))


def from_control(msg, current=None):
    """The schedule a parsed control message (rase_device.wire) states;
    ValueError for a change of schedule that does not state its since_t."""
    check_stated(msg, current)
    epoch0 = msg.get("epoch0", current.epoch0 if current is not None else 0.0)
    since = msg.get("since_t")
    if since is None:
        return Schedule(msg["period_s"], epoch0)
    return Schedule(msg["period_s"], epoch0, since, Schedule(msg["previous_period_s"], msg["previous_epoch0"]))
