# Privacy budget ledger: basic sequential composition per budget period.
#
# Spending is counted in integer units of 1/EPS_UNITS (a report's eps rounded
# up), so long runs accumulate no float error. What is written to the file is
# the amount *reserved*, before any report that uses it leaves; after a
# reboot everything reserved counts as spent, so a reboot never refills the
# budget. Reserving `reserve_reports` reports' worth at a time lets a board
# write its flash once per block instead of once per report, at the price of
# losing at most one unused block on a reboot. A clock that goes backwards
# never reopens an earlier period.
#
# Fail closed, both ways:
# - a missing ledger is a new device, but a ledger that exists and cannot be
#   read (corrupt, empty, torn) counts the current period as spent; the device
#   resumes at the next period;
# - a reservation counts only once it is on flash: when the write fails
#   (full, worn or read-only flash, any OSError) nothing is charged, the
#   report is not made, `unwritable` says so, and the next report tries the
#   write again. No report ever uses budget that a reboot could refund.
# Writes are atomic (write a .tmp, fsync where the port has it, rename).
#
# The file also reserves the device's report sequence numbers, in the same
# blocks and the same writes: `seq` is the highest number a report may carry
# before the next write, so after a reboot the device continues above it
# (a few numbers may be skipped, none is used twice). A file without it (an
# older one) starts at 0; so does a device whose ledger was unreadable.
#
# Periods are counted from Unix time 0, so a budget per day (period_s 86400)
# renews at each midnight UTC: `renews_at` says when, `utc_text` in words.

import json
import os

from rase_device.randomizer import EPS_UNITS, eps_units_ceil, eps_units_floor


def _exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


class BudgetLedger:
    def __init__(self, path, budget_eps, period_s, reserve_reports=1):
        if not (budget_eps > 0):
            raise ValueError("budget_eps must be > 0, got %r" % (budget_eps,))
        if not (period_s > 0):
            raise ValueError("budget period_s must be > 0, got %r" % (period_s,))
        if reserve_reports < 1:
            raise ValueError("reserve_reports must be >= 1, got %r" % (reserve_reports,))
        self.path = path
        self.budget_units = eps_units_floor(budget_eps)
        self.period_s = period_s
        self.reserve_reports = reserve_reports
        self.period = -1
        self.spent_units = 0
        self.reserved_units = 0
        self.seq_reserved = 0       # report sequence numbers up to this are reserved on flash
        self.writes = 0
        self.unreadable = False     # the file existed and could not be read: this period is spent
        self.unwritable = False     # the last reservation could not be written: nothing may be spent
        self.write_errors = 0
        self.last_write_error = None
        self._load()

    @staticmethod
    def _read(p):
        with open(p) as f:
            state = json.load(f)
        period, spent, seq = int(state["period"]), int(state["spent_units"]), int(state.get("seq", 0))
        if spent < 0 or seq < 0:
            raise ValueError("negative spend or sequence number")
        return period, spent, seq

    def _load(self):
        main, tmp = self.path, self.path + ".tmp"
        for p in (main, tmp):
            if not _exists(p):
                continue
            try:
                # Whatever was reserved before the restart is spent.
                self.period, self.spent_units, self.seq_reserved = self._read(p)
                self.reserved_units = self.spent_units
                return
            except (ValueError, KeyError, TypeError, OSError):
                # The .tmp is the copy left by a stop between remove and
                # rename on file systems that cannot rename over a file; a
                # main file that exists but does not parse is not trusted.
                if p == main:
                    break
        if _exists(main) or _exists(tmp):
            self.unreadable = True

    def locked(self, now):
        """True while the period in which an unreadable ledger was found lasts."""
        self._roll(now)
        return self.unreadable

    def _save(self, reserved_units, seq_reserved):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps({"v": 1, "period": self.period, "spent_units": reserved_units, "seq": seq_reserved}))
            f.flush()
            if hasattr(os, "fsync") and hasattr(f, "fileno"):
                os.fsync(f.fileno())
        try:
            os.rename(tmp, self.path)
        except OSError:
            # Some VFS (FAT) refuse to rename onto an existing file; _load
            # falls back to the .tmp copy if we stop between these two calls.
            os.remove(self.path)
            os.rename(tmp, self.path)
        self.writes += 1

    def _reserve(self, reserved_units, seq_reserved=None):
        """Write the reservation, then (only then) hold it in memory. Any
        storage error leaves the old reservation and says so; True if written."""
        if seq_reserved is None:
            seq_reserved = self.seq_reserved
        try:
            self._save(reserved_units, seq_reserved)
        except OSError as err:  # full, worn or read-only flash: fail closed
            self.unwritable = True
            self.write_errors += 1
            self.last_write_error = "%s: %s" % (type(err).__name__, err)
            return False
        self.reserved_units = reserved_units
        self.seq_reserved = seq_reserved
        self.unwritable = False
        return True

    def _roll(self, now):
        p = int(now // self.period_s)
        if self.unreadable and self.period == -1:
            # Fail closed: the period in which the bad ledger was found is spent.
            self.period = p
            self.spent_units = self.budget_units
            self._reserve(self.budget_units)   # unwritten, it is still spent in memory
        elif p > self.period:
            self.period = p
            self.spent_units = 0
            self.reserved_units = 0
            self.unreadable = False

    def renews_at(self, now):
        """Unix time at which the period containing `now` ends and the budget renews
        (midnight UTC for a daily budget)."""
        self._roll(now)
        return (self.period + 1) * self.period_s

    def remaining(self, now):
        """eps left in the period containing `now`."""
        self._roll(now)
        return (self.budget_units - self.spent_units) / EPS_UNITS

    def try_spend(self, eps, now, seq=0):
        """Charge eps for the report numbered `seq` (persisting a new
        reservation first when the budget's or the numbers' is used up);
        False, nothing charged, if it would overspend or the reservation could
        not be written (then `unwritable` is True)."""
        self._roll(now)
        cost = eps_units_ceil(eps)
        if self.spent_units + cost > self.budget_units:
            return False
        if self.spent_units + cost > self.reserved_units or seq > self.seq_reserved:
            units = self.reserved_units
            if self.spent_units + cost > units:
                units = min(self.budget_units, self.spent_units + cost * self.reserve_reports)
            numbers = max(self.seq_reserved, seq + self.reserve_reports - 1) if seq else self.seq_reserved
            if not self._reserve(units, numbers):
                return False
        self.spent_units += cost
        return True


def utc_text(unix):
    """Unix seconds as "YYYY-MM-DDTHH:MM:SSZ" (UTC), by integer arithmetic
    only: board ports count time from 2000 or have no gmtime for 1970."""
    secs = int(unix)
    days, rest = secs // 86400, secs % 86400
    # Civil date from days since 1970-01-01 (H. Hinnant's days_from_civil, inverted).
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    return "%04d-%02d-%02dT%02d:%02d:%02dZ" % (year, month, day, rest // 3600, rest % 3600 // 60, rest % 60)
