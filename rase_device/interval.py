# Interval products (issue 28): a device samples its reading every period and
# sends one report per interval, the mean of that interval's samples clipped
# to the range, instead of one report per period. A day is then
# 86400 / interval_s releases, and each release may spend the unit's daily
# eps divided by them. MicroPython-compatible.
#
# The intervals lie on epoch0's grid: interval t covers
# [epoch0 + t interval_s, epoch0 + (t + 1) interval_s). Its report is made
# when the first sample of a later interval comes, from the samples taken in
# it (a device that started mid-interval reports the mean of what it has).

from rase_device.randomizer import EPS_UNITS

DAY_S = 86400


def check_interval(interval_s, period_s):
    """interval_s, or ValueError: at least one period, at most a day, and a
    whole number of intervals a day (so a day has an exact number of releases)."""
    if not isinstance(interval_s, (int, float)) or isinstance(interval_s, bool) or interval_s != interval_s:
        raise ValueError("interval_s must be a number, got %r" % (interval_s,))
    if not (interval_s > 0 and period_s <= interval_s <= DAY_S):
        raise ValueError("interval_s must be between the period (%r s) and a day, got %r" % (period_s, interval_s))
    per_day = DAY_S / interval_s
    if per_day != int(per_day):
        raise ValueError("interval_s must divide a day (86400 s) into whole intervals, got %r" % (interval_s,))
    return interval_s


def releases_per_day(interval_s):
    return int(DAY_S // interval_s)


def eps_per_release(eps_day, releases, devices=1):
    """The eps each of a unit's `devices` may spend per release so that
    `releases` releases a day stay within eps_day: rounded down to a multiple
    of 1/EPS_UNITS, the ledger's unit, so that the ledger's charges (rounded
    up) add up to no more than the day's budget. Every party computes it from
    its own config with this one function."""
    if not (eps_day > 0) or releases < 1 or devices < 1:
        raise ValueError("eps_day, releases and devices must be positive")
    units = int(eps_day * EPS_UNITS) // (releases * devices)
    if units < 1:
        raise ValueError("eps %r a day over %d releases and %d devices is below 1/%d per report"
                         % (eps_day, releases, devices, EPS_UNITS))
    return units / EPS_UNITS


class IntervalMean:
    """Samples -> the mean of each interval's samples, clipped to [x_min, x_max]."""

    def __init__(self, interval_s, epoch0, x_min, x_max):
        if not (interval_s > 0):
            raise ValueError("interval_s must be > 0, got %r" % (interval_s,))
        self.interval_s = interval_s
        self.epoch0 = epoch0
        self.x_min = x_min
        self.x_max = x_max
        self.t = None          # the interval being accumulated
        self.total = 0.0
        self.count = 0

    def t_of(self, now):
        return int((now - self.epoch0) // self.interval_s)

    def start_of(self, t):
        return self.epoch0 + t * self.interval_s

    def clip(self, x):
        return self.x_min if x < self.x_min else (self.x_max if x > self.x_max else x)

    def add(self, x, now):
        """Take sample x at unix time now: (t, clipped mean) of an interval
        that ended, once a sample of a later interval comes, else None. A
        sample from an earlier interval (the clock went back) is ignored."""
        t = self.t_of(now)
        if self.t is not None and t < self.t:
            return None
        due = None
        if self.t is not None and t > self.t:
            if self.count:
                due = (self.t, self.clip(self.total / self.count))
            self.t = None
        if self.t is None:
            self.t, self.total, self.count = t, 0.0, 0
        self.total += x
        self.count += 1
        return due
