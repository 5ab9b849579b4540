"""Agents, the fog and the fusion center end to end over mqtts:// against
Mosquitto's TLS listener, with a CA from `rase certs` (tests/tls.py); a
service given another CA is refused before it sends anything."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from edge_agent.config import AgentConfig
from edge_agent.service import AgentService
from fog_shuffler.config import FogConfig
from fog_shuffler.service import FogService
from fusion_center.config import FusionConfig
from fusion_center.service import FusionService
from rase_common.clock import WallClock
from rase_common.mqtt import BrokerConfig, MqttLink
from rase_common.protocol.aggregate import Aggregate
from simulators.brokers import Mosquitto, free_port
from tests.mqtt_helpers import Recorder, ServiceThread
from tests.tls import make_test_pki, tls_listener

pytestmark = pytest.mark.integration
DEVICES = [f"tls{i}" for i in range(3)]


class Steady:
    def read(self, now: float) -> float:
        return 120.0


@pytest.fixture
def tls_broker(tmp_path):
    plain = free_port()
    pki, conf, port = tls_listener(tmp_path / "pki")
    # The recorder reads over a plain listener on loopback; every service uses TLS.
    broker = Mosquitto(tmp_path / "mq", port=plain, extra_conf=conf).start()
    yield broker, pki, port
    broker.stop()


def test_agents_fog_and_fusion_over_tls(tls_broker, tmp_path):
    broker, pki, tls_port = tls_broker
    tls = {"host": "localhost", "port": tls_port, "tls": True, "ca_file": str(pki.ca_cert)}
    rec = Recorder(broker.port, ["rase/v1/aggregates/t/#"], persistent=False)
    fusion = ServiceThread(FusionService(FusionConfig.load(
        None, name="tls", regions=["r1"], merge_deadline_s=3, bootstrap_b=50, store_path=tmp_path / "f.sqlite",
        precision={"period_s": 1.0, "eps_levels": [1.0]}, broker=tls), clock=WallClock()))
    fog_svc = FogService(FogConfig.load(None, name="tls", regions={"r1": {"devices": DEVICES}}, period_s=1.0,
                                        k_min=3, lateness_periods=1, journal_path=tmp_path / "fog.sqlite",
                                        broker=tls), clock=WallClock())
    fog = ServiceThread(fog_svc)
    agents = []
    try:
        deadline = time.monotonic() + 20
        while not fog_svc.subscribed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fog_svc.subscribed, "the fog did not connect over TLS"
        for d in DEVICES:
            cfg = AgentConfig.load(None, device=d, region="r1", period_s=1.0, ledger_path=tmp_path / f"{d}.json",
                                   policy={"period_min_s": 1.0}, broker=tls)
            agents.append(ServiceThread(AgentService(cfg, source=Steady(), clock=WallClock())))
        assert rec.wait_for(lambda: len(rec.on("rase/v1/aggregates/t/")) >= 2, timeout_s=30)
    finally:
        for a in agents:
            a.stop()
        fog.stop()
        fusion.stop()
        rec.close()
    agg = Aggregate.model_validate_json(rec.on("rase/v1/aggregates/t/")[-1].payload)
    assert agg.n == len(DEVICES)
    log = broker.log()
    assert all(f"as agent-{d}" in log for d in DEVICES) and "as fog-tls" in log and "as fusion-tls" in log


def test_a_service_with_another_ca_is_refused(tls_broker, tmp_path, caplog):
    broker, _, tls_port = tls_broker
    other = make_test_pki(tmp_path / "other")

    async def try_link() -> bool:
        link = MqttLink(BrokerConfig(host="localhost", port=tls_port, tls=True, ca_file=other.ca_cert),
                        "fog-wrong-ca", subscriptions=[("rase/v1/reports/r1/+", 1)], name="fog")
        link.start()
        try:
            await asyncio.sleep(3.0)
            return link.connected.is_set()
        finally:
            link.stop()

    with caplog.at_level(logging.WARNING):
        assert asyncio.run(try_link()) is False
    assert "certificate verify failed" in caplog.text
    assert "as fog-wrong-ca" not in broker.log()      # no CONNECT (and no credentials) reached the broker
