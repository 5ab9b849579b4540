"""The privacy unit's daily budget at the fog (issue 28): the reports of a
unit's devices together (a household's, or one device's) may spend at most
its eps_day per UTC day; the report that would take them past it is refused
(`unit_budget_exceeded`, counted like every rejection) and goes into no window.

Each device's own ledger already refuses to overspend its share; this is the
check where the unit is: a household whose devices' shares were configured
to add up to more than the household's budget, a device flashed twice, or a
device that lies about its ledger, cannot make the unit spend more.

A report is charged to the UTC day of its window's start (the day its
readings belong to, as the device's ledger charges it), in the units of the
device's ledger (1/EPS_UNITS, a report's eps rounded up), so a household
whose devices' ledgers stay within their shares never meets this refusal.

UnitBudget is the pure rule; BudgetRole hosts it in the fog's batches: it
stages each accepted report's charge, writes it in the batch's transaction
(table unit_budget) and holds it once committed, so a restart or a crash
forgets no spending.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from fog_shuffler.context import Budget, FogContext
from fog_shuffler.ingest import Accepted, Rejected, add_reasons
from rase_common.role import Role
from rase_device.ledger import utc_text
from rase_device.randomizer import EPS_UNITS, eps_units_ceil, eps_units_floor

REASON = "unit_budget_exceeded"
DAY_S = 86400
add_reasons((REASON,))
SCHEMA = ("CREATE TABLE IF NOT EXISTS unit_budget (unit TEXT, day INTEGER, spent_units INTEGER, "
          "PRIMARY KEY (unit, day))")


class UnitBudget:
    """Each unit's spending per UTC day, committed and staged. Pure."""

    def __init__(self, eps_day: float, unit_of: Callable[[str], str]):
        if not eps_day > 0:
            raise ValueError(f"eps_day must be > 0, got {eps_day!r}")
        self.budget_units = eps_units_floor(eps_day)
        self.unit_of = unit_of
        self.spent: dict[tuple[str, int], int] = defaultdict(int)     # committed
        self.staged: dict[tuple[str, int], int] = defaultdict(int)
        self.refused = 0

    def left_units(self, unit: str, day: int) -> int:
        key = (unit, day)
        return self.budget_units - self.spent.get(key, 0) - self.staged.get(key, 0)

    def check(self, device: str, day: int, eps: float) -> None:
        """Raise Rejected(unit_budget_exceeded) if a report of eps by `device` would overspend its unit's day."""
        unit = self.unit_of(device)
        cost = eps_units_ceil(eps)
        left = self.left_units(unit, day)
        if cost > left:
            self.refused += 1
            raise Rejected(REASON, f"unit {unit} has eps {max(left, 0) / EPS_UNITS:.6g} left on "
                                   f"{utc_text(day * DAY_S)[:10]} (UTC), this report costs {eps:.6g}; it renews at "
                                   f"{utc_text((day + 1) * DAY_S)}")

    def charge(self, device: str, day: int, eps: float) -> None:
        self.staged[(self.unit_of(device), day)] += eps_units_ceil(eps)

    def rows(self) -> list[tuple[str, int, int]]:
        """(unit, day, spent_units) to write: the committed amount plus what is staged."""
        return [(u, d, self.spent.get((u, d), 0) + n) for (u, d), n in self.staged.items()]

    def commit(self) -> None:
        for key, n in self.staged.items():
            self.spent[key] += n
        self.staged.clear()

    def rollback(self) -> None:
        self.staged.clear()

    def restore(self, rows: list[tuple[str, int, int]]) -> None:
        for unit, day, units in rows:
            self.spent[(unit, int(day))] = int(units)

    def forget_before(self, day: int) -> None:
        for key in [k for k in self.spent if k[1] < day]:
            del self.spent[key]


def unit_map(cfg: Any) -> Callable[[str], str]:
    """device -> its unit under the fog's [privacy]: the device itself, or its
    household (RegionConfig.households; a device in none is its own)."""
    if cfg.privacy.unit == "device":
        return lambda device: device
    of: dict[str, str] = {}
    for rc in cfg.regions.values():
        of.update(rc.household_of())
    return lambda device: of.get(device, device)


class BudgetRole(Role, Budget):
    """The unit budget as one of the fog's roles (its [privacy] eps_day set, not event-level)."""

    name = "budget"
    reasons = (REASON,)

    def __init__(self, ctx: FogContext):
        self.ctx = ctx
        eps_day = ctx.cfg.privacy.eps_day
        assert eps_day is not None
        self.rule = UnitBudget(eps_day, unit_map(ctx.cfg))

    def day_of(self, rep: Accepted) -> int:
        """The UTC day of the report's window start (the day its readings belong to)."""
        return int(self.ctx.gate.current.schedule.start_of(rep.t) // DAY_S)

    # -- what the report roles ask -------------------------------------------------------------
    def check(self, rep: Accepted) -> None:
        self.rule.check(rep.device, self.day_of(rep), rep.eps)

    def charge(self, rep: Accepted) -> None:
        self.rule.charge(rep.device, self.day_of(rep), rep.eps)

    # -- the batch's transaction ------------------------------------------------------------------
    def attach(self, db: Any) -> None:
        db.execute(SCHEMA)
        self.rule.restore([tuple(r) for r in db.execute("SELECT unit, day, spent_units FROM unit_budget")])

    def write(self, db: Any) -> None:
        rows = self.rule.rows()
        if rows:
            db.executemany("INSERT OR REPLACE INTO unit_budget (unit, day, spent_units) VALUES (?, ?, ?)", rows)

    def committed(self) -> None:
        self.rule.commit()

    def rolled_back(self) -> None:
        self.rule.rollback()

    async def close_due(self, now_t: int) -> int:
        """Forget days no report can still be charged to (two days back)."""
        today = int(self.ctx.now() // DAY_S)
        if any(k[1] < today - 2 for k in self.rule.spent):
            self.rule.forget_before(today - 2)
            journal = self.ctx.journal
            if journal is not None:
                with journal.transaction() as db:
                    db.execute("DELETE FROM unit_budget WHERE day < ?", (today - 2,))
        return 0
