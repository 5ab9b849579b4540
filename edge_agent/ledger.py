# Privacy budget ledger: basic sequential composition per budget period.
#
# Spending is counted in integer units of 1/EPS_UNITS (a report's eps rounded
# up), so long runs accumulate no float error. The state is written to a file
# (atomic replace) before the report leaves, so a reboot never refills the
# budget. A clock that goes backwards never reopens an earlier period.

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
    def __init__(self, path, budget_eps, period_s):
        if not (budget_eps > 0):
            raise ValueError("budget_eps must be > 0, got %r" % (budget_eps,))
        if not (period_s > 0):
            raise ValueError("budget period_s must be > 0, got %r" % (period_s,))
        self.path = path
        self.budget_units = eps_units_floor(budget_eps)
        self.period_s = period_s
        self.period = -1
        self.spent_units = 0
        self._load()

    def _load(self):
        for p in (self.path, self.path + ".tmp"):
            if _exists(p):
                try:
                    with open(p) as f:
                        state = json.load(f)
                    self.period = int(state["period"])
                    self.spent_units = int(state["spent_units"])
                    return
                except (ValueError, KeyError, TypeError):
                    # A torn write is only possible for the .tmp file; the
                    # main file is replaced atomically. Try the next candidate.
                    continue

    def _save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps({"v": 1, "period": self.period, "spent_units": self.spent_units}))
        try:
            os.rename(tmp, self.path)
        except OSError:
            # Some VFS (FAT) refuse to rename onto an existing file; _load
            # falls back to the .tmp copy if we stop between these two calls.
            os.remove(self.path)
            os.rename(tmp, self.path)

    def _roll(self, now):
        p = int(now // self.period_s)
        if p > self.period:
            self.period = p
            self.spent_units = 0

    def remaining(self, now):
        """eps left in the period containing `now`."""
        self._roll(now)
        return (self.budget_units - self.spent_units) / EPS_UNITS

    def try_spend(self, eps, now):
        """Charge eps and persist; False (nothing charged) if it would overspend."""
        self._roll(now)
        cost = eps_units_ceil(eps)
        if self.spent_units + cost > self.budget_units:
            return False
        self.spent_units += cost
        self._save()
        return True
