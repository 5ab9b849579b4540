from __future__ import annotations

import pytest

from tests.brokers import Mosquitto


@pytest.fixture(scope="session")
def shared_mosquitto(tmp_path_factory):
    """A Mosquitto shared by the session's integration tests."""
    broker = Mosquitto(tmp_path_factory.mktemp("mosquitto")).start()
    yield broker
    broker.stop()


RETAINED_TOPICS = ("rase/v1/control/precision", "rase/v1/aggregates/latest")


@pytest.fixture
def mosquitto(shared_mosquitto):
    """The session's Mosquitto with no retained RASE state left by an earlier
    test (a retained precision message would recalibrate this test's agents)."""
    from tests.mqtt_helpers import publish_retained

    for topic in RETAINED_TOPICS:
        publish_retained(shared_mosquitto.port, topic, b"")
    return shared_mosquitto


@pytest.fixture
def own_mosquitto(tmp_path, request):
    """A Mosquitto for one test (it may be stopped and restarted); its log is
    printed when the test fails."""
    broker = Mosquitto(tmp_path / "mosquitto").start()
    yield broker
    broker.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print("---- mosquitto log ----\n" + broker.log())


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture(scope="session")
def micropython():
    """Run snippets under the real MicroPython WebAssembly port (node + npm)."""
    from simulators.wasm_board import micropython_mjs, run_micropython

    micropython_mjs()  # fail loudly, not skip, when the port is missing
    return run_micropython
