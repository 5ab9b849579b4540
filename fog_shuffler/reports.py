"""Roles that keep reports in the fog's windows, and closing those windows.

The fog's windows (fog_shuffler.windows) hold every kind of report by
(region, t): around a change of mechanism one window can hold two kinds.
When a window is due, the closer takes it from the windows and gives each
report role its part: a role that names its `mechanisms` (the secure mode's
leader: prio3) gets the reports of those, and the one role that names none
(the local-DP role) gets the rest, or the whole window when no other role
had a part. Journal writes raise StorageError; the host treats that as an
outage.
"""

from __future__ import annotations

from typing import Any, ClassVar

from fog_shuffler.context import FogContext
from fog_shuffler.windows import ClosedWindow
from rase_common.role import Role


class ReportRole(Role):
    """A role whose reports live in the fog's windows."""

    # The device mechanisms whose reports this role keeps; None: every other.
    mechanisms: ClassVar[frozenset[str] | None] = None

    @classmethod
    def own_params(cls, cfg: Any) -> dict[str, Any]:
        """What the fog's own protocol parameters (fog_shuffler.protocol.Protocol) take from the role's config."""
        return {}

    def report_t(self, payload: bytes) -> int | None:
        """The t of one of its reports in an encoding of its own that is not JSON (None: not one; the host reads
        a JSON report's t itself): what the receipts say the fog has."""
        return None

    def report_filters(self) -> list[tuple[str, int]] | None:
        """The report topics this fog subscribes to instead of its regions' wildcards (None: the wildcards):
        a worker that takes only its part of a region's devices (issue 30) subscribes to theirs."""
        return None

    def idle(self) -> bool:
        """Nothing waits on another party and nothing is left to send."""
        return True

    @property
    def released(self) -> int:
        """Windows released other than through the fog's forwarder (0 for most roles)."""
        return 0

    def open_reports(self) -> list[tuple[str, int, str, float, float, str]]:
        """Its journal's open reports (region, t, device, y, eps, mechanism), restored into the windows."""
        return []

    def seen_devices(self) -> dict[tuple[str, int], set[str]]:
        """The devices of the closed windows its own journal keeps (the fog
        journal's are restored beside), so that a report redelivered after a
        restart is a duplicate, not a late report."""
        return {}

    def holds(self, region: str, t: int) -> bool:
        """Whether its journal holds reports of (region, t) (a suppressed window's are its to forget)."""
        return False

    async def close(self, cw: ClosedWindow) -> int:
        """Its part of a closed window (suppressed, or to release); how many it released."""
        raise NotImplementedError

    def prune(self, t_min: int) -> None:
        """Forget what no report still accepted can need."""


def split(cw: ClosedWindow, mechanisms: frozenset[str]) -> tuple[ClosedWindow, ClosedWindow | None]:
    """A closed window's reports of `mechanisms`, and the rest (None: none)."""
    mechs = cw.mechanisms or ["br"] * len(cw.devices)
    mine = [i for i, m in enumerate(mechs) if m in mechanisms]
    other = [i for i, m in enumerate(mechs) if m not in mechanisms]

    def part(ix: list[int], dropped: int) -> ClosedWindow:
        return ClosedWindow(cw.region, cw.t, [cw.devices[i] for i in ix], [cw.values[i] for i in ix],
                            [cw.eps[i] for i in ix], cw.duplicates, dropped, suppressed=not ix or cw.suppressed,
                            mechanisms=[mechs[i] for i in ix])
    return part(mine, cw.eps_level_dropped), (part(other, 0) if other else None)


class WindowCloser:
    """Closes the fog's due windows and hands each report role its part."""

    def __init__(self, ctx: FogContext, roles: list[ReportRole]):
        specific = [r for r in roles if r.mechanisms is not None]
        rest = [r for r in roles if r.mechanisms is None]
        if len(rest) != 1:
            raise ValueError(f"exactly one report role takes what the others leave, got {[r.name for r in rest]}")
        self.ctx = ctx
        self.specific = specific
        self.rest = rest[0]
        self.roles = specific + rest

    async def close_due(self, now_t: int) -> int:
        """Close every due window; forget and prune what is past the horizon."""
        ctx, windows, closed = self.ctx, self.ctx.windows, 0
        for region, t in windows.due(now_t):
            cw: ClosedWindow | None = windows.close(region, t)
            assert cw is not None
            ctx.metrics.eps_dropped.inc(cw.eps_level_dropped)
            if cw.revision == 0:
                # Behind schedule (a storage outage held it): how many periods late it closes.
                ctx.metrics.close_delay.observe(max(0, now_t - (t + 1 + ctx.cfg.lateness_periods)))
            for role in self.specific:
                assert role.mechanisms is not None
                if cw is not None and (set(role.mechanisms) & set(cw.mechanisms or ()) or role.holds(region, t)):
                    mine, cw = split(cw, role.mechanisms)
                    await role.close(mine)
                    closed += 1                  # queued or suppressed, its journal rows changed
            if cw is not None:
                closed += await self.rest.close(cw)
        t_min = windows.horizon_t(now_t) - 1
        windows.forget_before(t_min)
        if closed:
            # Reports older than t_min are rejected as out of range, so their
            # windows' closed markers and sent messages are no longer needed.
            for role in self.roles:
                role.prune(t_min)
        return closed
