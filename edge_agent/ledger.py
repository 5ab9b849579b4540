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

import json
import os

from edge_agent.randomizer import EPS_UNITS, eps_units_ceil, eps_units_floor


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
        self.writes = 0
        self._load()

    def _load(self):
        for p in (self.path, self.path + ".tmp"):
            if _exists(p):
                try:
                    with open(p) as f:
                        state = json.load(f)
                    self.period = int(state["period"])
                    # Whatever was reserved before the restart is spent.
                    self.spent_units = self.reserved_units = int(state["spent_units"])
                    return
                except (ValueError, KeyError, TypeError):
                    # A torn write is only possible for the .tmp file; the
                    # main file is replaced atomically. Try the next candidate.
                    continue

    def _save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps({"v": 1, "period": self.period, "spent_units": self.reserved_units}))
        try:
            os.rename(tmp, self.path)
        except OSError:
            # Some VFS (FAT) refuse to rename onto an existing file; _load
            # falls back to the .tmp copy if we stop between these two calls.
            os.remove(self.path)
            os.rename(tmp, self.path)
        self.writes += 1

    def _roll(self, now):
        p = int(now // self.period_s)
        if p > self.period:
            self.period = p
            self.spent_units = 0
            self.reserved_units = 0

    def remaining(self, now):
        """eps left in the period containing `now`."""
        self._roll(now)
        return (self.budget_units - self.spent_units) / EPS_UNITS

    def try_spend(self, eps, now):
        """Charge eps (persisting a new reservation first when the current
        one is used up); False, nothing charged, if it would overspend."""
        self._roll(now)
        cost = eps_units_ceil(eps)
        if self.spent_units + cost > self.budget_units:
            return False
        if self.spent_units + cost > self.reserved_units:
            self.reserved_units = min(self.budget_units, self.spent_units + cost * self.reserve_reports)
            self._save()
        self.spent_units += cost
        return True
