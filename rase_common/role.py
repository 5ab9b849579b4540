"""The one interface a service hosts: a role.

A service (the fog, the fusion center) is a thin host: it owns the broker
link, the store, the metrics server, the stop and the retry policy; what is
done with each message is a role's. The mode of a deployment (local DP, the
secure mode) is never an `if` in a host: each mechanism's registry entry
(rase_common.mechanisms) names the roles that serve it, and the host runs
whichever roles its config enables.

Per batch of input the host
1. routes each message to the first role that `claims` it (by topic, and for
   a shared topic by the payload's kind);
2. calls `take(msg, now_t)`: validate and stage in memory, returning what
   became of it (the host counts that), or raise ProtocolError(reason) to
   refuse it (the host counts, quarantines and acknowledges it);
3. opens ONE transaction on its store and lets every role `write` what it
   staged, so one fsync covers the batch, whatever roles took part;
4. after the commit calls `committed()` (or `rolled_back()` when the store
   failed: the batch is taken again later), then acknowledges the batch.
Between batches the host calls `close_due(now_t)` on every role; a role may
own tasks of its own (`tasks()`: its outbox, its exchange with a peer),
which run beside the host's and end the service if they fail.

Roles are found by name: `load_role("package.module:Class")`, the names the
registry holds, so a host imports no role of a mode it does not name.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Coroutine
from typing import Any, ClassVar

from pydantic import BaseModel


class Role:
    """Base: claims nothing, stages nothing, closes nothing. Subclasses set
    `name` and override what they do; `config_key` names the service config's
    table that configures the role (None: it needs none) and `Config` its model."""

    name: ClassVar[str] = "role"
    config_key: ClassVar[str | None] = None
    Config: ClassVar[type[BaseModel] | None] = None
    # Rejection reasons this role may count (metric labels are made up front).
    reasons: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """Raise ValueError when the service's config cannot run this role (called by the config's validation)."""

    @classmethod
    def own_window_s(cls, table: dict, period_s: float) -> float | None:
        """What one release covers by the role's own (raw) table, its product; None: the host's."""
        return None

    @classmethod
    def per_report(cls, table: dict) -> dict:
        """The role's raw table for the event-level stream (one report per period): no interval product."""
        return table

    @classmethod
    def with_eps_per_report(cls, table: dict, eps: float) -> dict:
        """The role's raw table with its own eps per report set from the privacy unit's day (issue 28):
        the host computes eps from its own [privacy] (rase_common.privacy.eps_from_day)."""
        return table

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx        # what the host's roles share (the service's context)

    def subscriptions(self) -> list[tuple[str, int]]:
        """(topic filter, QoS) this role needs beyond the host's own."""
        return []

    def claims(self, topic: str, payload: bytes) -> bool:
        return False

    def take(self, msg: Any, now_t: int) -> Any:
        raise NotImplementedError(f"role {self.name} claims messages but takes none")

    def write(self, db: Any) -> None:
        """Write what was staged, inside the host's open transaction."""

    def committed(self) -> None:
        """The host's transaction is on disk."""

    def rolled_back(self) -> None:
        """The host's transaction failed: forget what was staged (the batch comes again)."""

    def attach(self, db: Any) -> None:
        """Open its tables in the host's store (before anything is restored)."""

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        """Open what the role needs beyond its tables (links, workers); register closes on `stack`."""

    async def close_due(self, now_t: int) -> int:
        """Close what is due at logical time now_t; returns how many closed."""
        return 0

    def tasks(self) -> list[Coroutine[Any, Any, None]]:
        return []

    def next_deadline_s(self) -> float | None:
        """Seconds (on the service's clock) until something of this role comes due; None: nothing waits."""
        return None

    def pending(self) -> bool:
        """Whether input waits to be closed into an output (a replay's end waits for none)."""
        return False


def load_role(path: str) -> type[Role]:
    """The role class a registry names as "package.module:Class"."""
    module, _, cls = path.partition(":")
    if not module or not cls:
        raise ValueError(f"a role is named as package.module:Class, got {path!r}")
    found = getattr(importlib.import_module(module), cls)
    if not (isinstance(found, type) and issubclass(found, Role)):
        raise TypeError(f"{path} is not a Role")
    return found


def role_classes(service: str) -> list[type[Role]]:
    """The roles serving the registry's mechanisms in a service ("fog" or
    "fusion"), specific ones first (rase_common.mechanisms.registry.role_paths)."""
    from rase_common.mechanisms.registry import role_paths

    return [load_role(path) for path in role_paths(service)]


def enabled(cls: type[Role], cfg: Any) -> bool:
    """A role with a config table runs when its table is set; one without, always."""
    return cls.config_key is None or getattr(cfg, cls.config_key, None) is not None


def route(roles: list[Role], topic: str, payload: bytes) -> Role | None:
    """The first role that claims a message (None: no role of this host does)."""
    for role in roles:
        if role.claims(topic, payload):
            return role
    return None


__all__ = ["Role", "enabled", "load_role", "role_classes", "route"]
