"""What the fusion center's roles share (rase_common.role): the config and
clock, the current control message (which the control role owns and the
others read), the aggregate store and its quarantine, the estimate history
(windowed averages over every kind of aggregate), the metrics, the broker
link and the host's wake-ups.

Roles reach each other only through this: an estimation role stores an
aggregate with `stored()`, and the publisher sends whatever is stored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fusion_center.history import EstimateHistory
from fusion_center.metrics import FusionMetrics
from fusion_center.store import AggregateStore
from rase_common.channels import Source
from rase_common.errors import Outage
from rase_common.loop import Wakeup
from rase_common.protocol.control import ControlMessage
from rase_common.quarantine import Quarantine

if TYPE_CHECKING:
    from fusion_center.config import FusionConfig
    from rase_common.mqtt import MqttLink

log = logging.getLogger("fusion_center.service")


@dataclass
class FusionContext:
    cfg: FusionConfig
    clock: Any                           # now(); a simulated one in replays (speedup)
    metrics: FusionMetrics
    history: EstimateHistory
    precision: ControlMessage            # what the control message says now (the control role changes it)
    storage: Outage
    arrived: Wakeup                      # intake's: input came
    due: Wakeup                          # the closer's: a timestamp may be due
    outbox_wakeup: Wakeup                # the publisher's: an aggregate was stored
    control_wakeup: Wakeup               # the control role's: the link (re)connected
    source: Source | None = None         # a test's own (else MQTT or Kafka)
    store: AggregateStore | None = None  # set by the host's open()
    quarantine: Quarantine | None = None
    link: MqttLink | None = None

    def role_table(self, key: str) -> Any:
        """The fusion config's table of a role ([prio3] for the secure mode's helper), or None."""
        return getattr(self.cfg, key, None)

    @property
    def speedup(self) -> float:
        return getattr(self.clock, "speedup", 1.0)

    def stored(self, agg: Any, est: dict, lag_s: float) -> None:
        """An aggregate of any role is in the store: its metrics, and the publisher looks."""
        m = self.metrics
        m.closed.inc()
        m.show_aggregate(agg, est)
        if not agg.complete:
            m.incomplete.inc()
        m.lag.observe(max(0.0, lag_s))
        self.outbox_wakeup.set()

    def late_hook(self) -> Callable[[int], bool]:
        """Whether t is published already (a leader message for it comes too late)."""
        store = self.store
        assert store is not None
        return lambda t: store.has_aggregate("all", t)
