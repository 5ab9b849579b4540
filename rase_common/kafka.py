"""Kafka settings shared by the fog's sink and the fusion center's source.

The topic `rase.windows` carries one window per record, key = region, so the
windows of one region keep their order on one partition.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

WINDOWS_TOPIC = "rase.windows"


class KafkaConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = WINDOWS_TOPIC
    group_id: str = "rase-fusion"       # the fusion centers' consumer group
    # Idempotent producer (no duplicate on a producer retry). Kafka supports
    # it; Tansu 0.6 does not answer InitProducerId, so switch it off there.
    # The fusion store is idempotent on (region, t) either way.
    idempotent: bool = True
    request_timeout_s: float = Field(10.0, gt=0)
    client_id: str | None = None
