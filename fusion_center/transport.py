"""The fusion center's broker link: MQTT 5 (aggregates carry a message
expiry, a content type and the schema version), a persistent session with
manual acknowledgements (after the store's commit), and its status topic
saying online / offline (its will) for Home Assistant."""

from __future__ import annotations

import logging

from fusion_center.context import FusionContext
from rase_common.loop import Wakeups
from rase_common.mqtt import MqttLink
from rase_common.protocol import topics

log = logging.getLogger("fusion_center.service")


def fusion_link(ctx: FusionContext, *, subscribe: bool) -> MqttLink:
    """The link (not started); subscribe: to the fogs' windows (else a test's or Kafka's source brings them)."""
    cfg = ctx.cfg
    status = topics.fusion_status_topic(cfg.name)
    link = MqttLink(cfg.broker, f"fusion-{cfg.name}", subscriptions=[(topics.WINDOWS_FILTER, 1)] if subscribe else [],
                    clean_session=False, manual_ack=True, name="fusion", mqtt5=True, will=(status, "offline", True),
                    birth=(status, "online", True),
                    wakeup=Wakeups(ctx.arrived, ctx.outbox_wakeup, ctx.control_wakeup).set)
    link.on_subscribed = lambda refused: None if refused else log.info("fusion subscribed to %s",
                                                                      topics.WINDOWS_FILTER)
    return link
