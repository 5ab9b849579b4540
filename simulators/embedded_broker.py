"""An in-process MQTT broker (amqtt) for the zero-setup demo. Tests and
deployments use Mosquitto."""

from __future__ import annotations

import logging
import socket
import warnings

from amqtt.broker import Broker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedBroker:
    """async with EmbeddedBroker() as b: ... b.port"""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host = host
        self.port = port or free_port()
        self._broker: Broker | None = None

    async def __aenter__(self) -> "EmbeddedBroker":
        cfg = {"listeners": {"default": {"type": "tcp", "bind": f"{self.host}:{self.port}",
                                         "max_connections": 10000}},
               "sys_interval": 0, "auth": {"allow-anonymous": True, "plugins": ["auth_anonymous"]},
               "topic-check": {"enabled": False}}
        for name in ("amqtt", "transitions"):
            # amqtt logs a client's normal disconnect as an error with a traceback.
            logging.getLogger(name).setLevel(logging.CRITICAL)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            self._broker = Broker(cfg)
            await self._broker.start()
        return self

    async def __aexit__(self, *exc) -> None:
        if self._broker is not None:
            await self._broker.shutdown()

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"
