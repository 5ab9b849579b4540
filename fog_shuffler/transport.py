"""The fog's broker link, and forwarding its closed windows.

- The link: a fixed client id and a persistent session (the broker keeps
  reports while the fog is away), manual acknowledgements (after the commit).
- Forwarding: the journal's outbox through the sink (rase/v1/windows/{region}
  on the link, or Kafka), in order, in a task of its own (rase_common.outbox),
  so a slow or failing sink never delays ingest. A window the sink refuses
  for good is a dead letter."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from fog_shuffler.context import FogContext
from rase_common.channels import Sink
from rase_common.errors import Outage
from rase_common.kafka import KafkaSink
from rase_common.loop import Wakeup, Wakeups
from rase_common.mqtt import MqttLink, MqttSink
from rase_common.outbox import OutboxSender
from rase_common.protocol import topics

log = logging.getLogger("fog_shuffler.service")


def fog_link(ctx: FogContext, subscriptions: list[tuple[str, int]], arrived: Wakeup,
             on_subscribed: Callable[[list[str]], None]) -> MqttLink:
    """The fog's broker link (not started)."""
    link = MqttLink(ctx.cfg.broker, f"fog-{ctx.cfg.name}", subscriptions=subscriptions, clean_session=False,
                    manual_ack=True, name="fog", wakeup=Wakeups(arrived, ctx.outbox_wakeup).set)
    link.on_subscribed = on_subscribed
    return link


def subscribed(ctx: FogContext) -> bool:
    """The broker confirmed the report subscriptions (a custom source: always)."""
    link = ctx.link
    if link is None:
        return ctx.source is not None
    return link.subscribed.is_set() and not any(t.startswith(topics.REPORTS_PREFIX) for t in link.refused)


def forwarder(ctx: FogContext, stack: contextlib.AsyncExitStack) -> OutboxSender:
    """The forwarding task's sender, over the test's sink or the configured one (closed on `stack`)."""
    cfg, journal = ctx.cfg, ctx.journal
    assert journal is not None
    sink: Sink
    if ctx.sink is not None:
        sink = ctx.sink
    elif cfg.sink == "kafka":
        sink = KafkaSink(cfg.kafka)
    else:
        assert ctx.link is not None
        sink = MqttSink(ctx.link, topics.windows_topic)
    ctx.forward_sink = sink
    if hasattr(sink, "stop"):
        stack.push_async_callback(sink.stop)

    def sent(row: tuple[str, int, str, int]) -> None:
        journal.mark_sent(row[0], row[1], row[3])
        ctx.outbox.sent()
        if ctx.unconfirmed is not None:      # kept until the fusion center's receipt (fog_shuffler.window_receipts)
            ctx.unconfirmed.sent((row[0], row[1], row[3]), time.monotonic())

    def dead(row: tuple[str, int, str, int], reason: str) -> None:
        journal.dead_letter(row, reason)
        ctx.outbox.sent()

    m = ctx.metrics
    return OutboxSender(f"fog {cfg.name} forwarding", unsent=journal.unsent, send=lambda row: sink.send(row[0], row[2]),
                        mark_sent=sent, outage=Outage(f"fog forwarding to {cfg.sink}", log, gauge=m.forwarding_ok,
                                                      failures=m.forward_failures),
                        storage=ctx.storage, wakeup=ctx.outbox_wakeup, dead_letter=dead, dead_letters=m.dead_letters)
