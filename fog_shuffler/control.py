"""Following the retained control message: one of the fog's roles.

The control message owns the protocol parameters (SPEC 3); the fog follows
it within its own control policy (fog_shuffler.protocol.ProtocolGate). A
change applies from the fog's current t; the other roles hear of it through
the context's protocol listeners, and the closer looks again (the schedule
may have moved). Where the fog's own config disagrees with what it follows,
a gauge per field says so, with one warning.
"""

from __future__ import annotations

import logging
from typing import Any

from fog_shuffler.context import FogContext
from fog_shuffler.protocol import PROTOCOL_FIELDS
from rase_common.errors import ProtocolError
from rase_common.protocol import topics
from rase_common.role import Role

log = logging.getLogger("fog_shuffler.service")


class ControlFollower(Role):
    name = "control"
    reasons = ("control_invalid", "control_refused", "control_params_mismatch")

    def __init__(self, ctx: FogContext):
        self.ctx = ctx

    def claims(self, topic: str, payload: bytes) -> bool:
        return topic == topics.CONTROL_TOPIC

    def take(self, msg: Any, now_t: int) -> None:
        """Follow it from the fog's t now; ProtocolError (control_invalid / control_refused) keeps the parameters."""
        ctx = self.ctx
        try:
            changed = ctx.gate.follow(msg.payload, ctx.now_t())
        except ProtocolError as err:
            for heard in ctx.control_listeners:
                heard(err)
            raise
        for heard in ctx.control_listeners:
            heard(None)
        if not changed:
            return
        for listener in ctx.protocol_listeners:
            listener()
        log.info("fog follows the control message from t=%d: %s", ctx.now_t(),
                 ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items()))
        drift = ctx.gate.follower.drift()
        for field in PROTOCOL_FIELDS:
            ctx.metrics.config_drift.labels(field).set(1 if field in drift else 0)
        if drift:
            log.warning("the fog's config disagrees with the control message (%s); following the control "
                        "message: update the fog's config", ", ".join(f"{k}: config {a}, control {b}"
                                                                       for k, (a, b) in drift.items()))
        ctx.due.set()
