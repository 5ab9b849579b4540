"""What the fog's roles share (rase_common.role): the fog's config, its
logical clock, the windows of every kind of report, the protocol gate, the
journal, the metrics and the broker link, and the host's wake-ups.

The host (fog_shuffler.service.FogService) builds one and hands it to each
role; a role reads what it needs and never reaches into another role. The
roles themselves come from the mechanism registry (rase_common.mechanisms:
each entry names its fog role), so the fog names no mode.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fog_shuffler.ingest import Accepted
from fog_shuffler.intake import OutboxCount
from fog_shuffler.metrics import FogMetrics
from fog_shuffler.protocol import ProtocolGate
from fog_shuffler.windows import RegionCounters, WindowManager
from rase_common.channels import Sink, Source
from rase_common.errors import Outage
from rase_common.loop import Wakeup

if TYPE_CHECKING:
    from fog_shuffler.config import FogConfig
    from fog_shuffler.journal import Journal
    from rase_common.mqtt import MqttLink

log = logging.getLogger("fog_shuffler.service")


class Screen:
    """What report roles ask of attacker detection (fog_shuffler.screen):
    this one screens nothing (detection off)."""

    def screen(self, rep: Accepted) -> None:
        """Raise Rejected("quarantined_device") for a quarantined device's report."""

    def observe(self, rep: Accepted) -> None:
        """Score an accepted local-DP report."""


class Budget:
    """What report roles ask of the privacy unit's daily budget
    (fog_shuffler.budget): this one checks nothing (no [privacy] eps_day)."""

    def check(self, rep: Accepted) -> None:
        """Raise Rejected("unit_budget_exceeded") when the report would take its unit past its day's budget."""

    def charge(self, rep: Accepted) -> None:
        """Charge an accepted report to its unit's day (written with the batch)."""


@dataclass
class FogContext:
    cfg: FogConfig
    now: Callable[[], float]             # the fog's clock (unix seconds; simulated in replays)
    now_t: Callable[[], int]             # its logical t
    metrics: FogMetrics
    windows: WindowManager
    counters: RegionCounters
    gate: ProtocolGate
    outbox: OutboxCount
    storage: Outage
    due: Wakeup                          # the closer's: a window may close now
    outbox_wakeup: Wakeup                # the forwarder's
    source: Source | None = None         # a test's own (else the MQTT link's)
    sink: Sink | None = None             # a test's own (else the configured one)
    screen: Screen = field(default_factory=Screen)
    budget: Budget = field(default_factory=Budget)
    journal: Journal | None = None       # set by the host's open()
    link: MqttLink | None = None
    forward_sink: Sink | None = None     # where windows go, once open
    protocol_listeners: list[Callable[[], None]] = field(default_factory=list)   # a control change happened
    receipts: Any = None                 # fog_shuffler.receipts.Receipts (None: receipts off)
    unconfirmed: Any = None              # forwarded windows the fusion center has not confirmed (window_receipts)
    # Every control message's outcome: None (followed or unchanged) or the ProtocolError that refused it
    # (issue 26: the Prio3 leader alarms on a refusal for other prio3 params).
    control_listeners: list[Callable[[Any], None]] = field(default_factory=list)

    def role_table(self, key: str) -> Any:
        """The fog config's table of a role ([prio3] for the secure mode's leader), or None."""
        return getattr(self.cfg, key, None)
