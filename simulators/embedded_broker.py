"""The broker `rase demo` and `rase replay` start when given none: a private
Mosquitto subprocess on a free loopback port when Mosquitto is installed
(`make test` installs it; it moves reports about 5x faster than amqtt), else
amqtt in-process, so the demo needs nothing beyond pip."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mosquitto_binary() -> str | None:
    """The installed Mosquitto broker (Debian puts it in /usr/sbin), or None."""
    for cand in (shutil.which("mosquitto"), "/usr/sbin/mosquitto"):
        if cand and Path(cand).exists():
            return cand
    return None


def wait_port(port: int, timeout_s: float, proc: subprocess.Popen | None = None) -> bool:
    """True once something accepts connections on 127.0.0.1:port; False on
    timeout or when `proc` exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class EmbeddedBroker:
    """async with EmbeddedBroker() as b: ... b.port, b.kind ("mosquitto" or "amqtt")"""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, prefer_mosquitto: bool = True):
        self.host = host
        self.port = port or free_port()
        self.prefer_mosquitto = prefer_mosquitto
        self.kind = ""
        self._broker = None
        self._proc: subprocess.Popen | None = None
        self._dir: tempfile.TemporaryDirectory | None = None

    async def __aenter__(self) -> "EmbeddedBroker":
        binary = mosquitto_binary() if self.prefer_mosquitto else None
        if binary is not None and await asyncio.to_thread(self._start_mosquitto, binary):
            self.kind = "mosquitto"
            return self
        await self._start_amqtt()
        self.kind = "amqtt"
        return self

    def _start_mosquitto(self, binary: str) -> bool:
        self._dir = tempfile.TemporaryDirectory(prefix="rase-broker-")
        conf = Path(self._dir.name) / "mosquitto.conf"
        conf.write_text(f"listener {self.port} {self.host}\nallow_anonymous true\n"
                        # As root, mosquitto would drop to user `mosquitto`.
                        + ("user root\n" if hasattr(os, "geteuid") and os.geteuid() == 0 else "")
                        # The default of 1000 silently drops QoS 1 messages queued for a slow subscriber.
                        + "persistence false\nmax_queued_messages 0\nmax_inflight_messages 0\nlog_dest none\n"
                        # Nagle off: small reports are forwarded at once, not after a delayed ACK.
                        + "set_tcp_nodelay true\n")
        self._proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        if wait_port(self.port, 10.0, self._proc):
            return True
        self._stop_mosquitto()
        logging.getLogger(__name__).warning("mosquitto did not start; using the in-process amqtt broker")
        return False

    async def _start_amqtt(self) -> None:
        from amqtt.broker import Broker

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

    def _stop_mosquitto(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    async def __aexit__(self, *exc) -> None:
        if self._broker is not None:
            await self._broker.shutdown()
        await asyncio.to_thread(self._stop_mosquitto)

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"
