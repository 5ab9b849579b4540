from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings


from simulators.brokers import Mosquitto, Tansu

ROOT = Path(__file__).resolve().parent.parent
# Property-based tests: a few hundred examples while developing (`make unit`),
# 10,000 in `make test` and CI (HYPOTHESIS_PROFILE=ci).
settings.register_profile("dev", max_examples=300)
settings.register_profile("ci", max_examples=2_500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
# Board dependencies come from the checkout's own cache, filled by `make umqtt`
# (part of `make test`), never from the user's home.
os.environ["RASE_CACHE_DIR"] = str(ROOT / ".tools" / "cache")


@pytest.fixture(scope="session")
def shared_mosquitto(tmp_path_factory):
    """A Mosquitto shared by the session's integration tests."""
    broker = Mosquitto(tmp_path_factory.mktemp("mosquitto")).start()
    yield broker
    broker.stop()


@pytest.fixture
def mosquitto(shared_mosquitto):
    """The session's Mosquitto, cleared of retained RASE state (mqtt_helpers.clear_retained)."""
    from tests.mqtt_helpers import clear_retained

    return clear_retained(shared_mosquitto)


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


# Fixtures whose parts `make test` downloads into .tools (make umqtt, micropython, stubs):
# their tests are marked `downloads`, so `make unit` on a fresh clone runs without them.
DOWNLOADED_FIXTURES = {"umqtt_simple_py", "micropython", "micropython_unix"}


def pytest_collection_modifyitems(config, items):  # noqa: ANN001
    for item in items:
        if DOWNLOADED_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.downloads)


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


@pytest.fixture(scope="session")
def micropython_unix():
    """Run code under the real MicroPython unix port (sockets, TLS, big ints)."""
    from simulators.unix_board import micropython_unix as executable, run_unix

    executable()  # fail loudly, not skip, when the port is missing
    return run_unix


@pytest.fixture(scope="session")
def umqtt_simple_py():
    """micropython-lib's umqtt/simple.py as `make umqtt` cached it (pinned sha256)."""
    from edge_agent import board_deps

    path = board_deps.cached()
    if path is None:
        pytest.fail(f"umqtt.simple is not cached at {board_deps.cached_path()}; run `make umqtt`")
    return path


@pytest.fixture
def tansu(tmp_path, request):
    """A real Kafka-protocol broker (Tansu, memory storage) for one test; its
    log is printed when the test fails."""
    broker = Tansu(tmp_path / "tansu").start()
    yield broker
    broker.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print("---- tansu log ----\n" + broker.log())


@pytest.fixture
def tansu_s3(tmp_path, request):
    """Tansu storing to S3 (a real moto S3 server on loopback), so its topics
    and committed offsets survive a restart of the broker."""
    import subprocess
    import sys
    import urllib.request

    from simulators.brokers import free_port, wait_port

    s3_port = free_port()
    s3 = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(s3_port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_port(s3_port, 30, s3), "moto S3 server did not start"
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{s3_port}/tansu", method="PUT"), timeout=10)
        env = {"AWS_ENDPOINT": f"http://127.0.0.1:{s3_port}", "AWS_ALLOW_HTTP": "true",
               "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
        broker = Tansu(tmp_path / "tansu", storage="s3://tansu/", env=env).start()
        yield broker
        broker.stop()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print("---- tansu log ----\n" + broker.log())
    finally:
        s3.terminate()
        s3.wait(10)
