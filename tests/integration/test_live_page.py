"""The live page (`rase dashboard`) in Debian's headless Chromium, driven by
playwright with executable_path /usr/bin/chromium (no browser download):
the aggregates a real fusion center publishes arrive over MQTT-over-WebSockets
from a real Mosquitto and show up as new points, checked from the DOM against
the fusion center's store, and in a screenshot."""

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from simulators.brokers import free_port, wait_port
from tests.mqtt_helpers import listening_addresses
from tests.observe_stack import ROOT, running_stack, wait_until

pytestmark = pytest.mark.integration
CHROMIUM = "/usr/bin/chromium"
# As the machine notes say: no background connections (this machine has no internet), no GPU, no sandbox as root.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with running_stack(tmp_path_factory.mktemp("live") / "stack") as s:
        yield s


@contextlib.contextmanager
def live_page(stack, work: Path, topic: str = "rase/v1/aggregates/#"):
    """`rase dashboard` for this stack's WebSockets listener; yields its URL."""
    port = free_port()
    log_path = work / f"dashboard-{port}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "rase.cli", "dashboard", "--mqtt-ws",
                                 f"ws://127.0.0.1:{stack.ws_port}", "--topic", topic, "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        assert wait_port(port, 15, proc), log_path.read_text()
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def browser_page(work: Path):
    """A page in a fresh headless Chromium (playwright gives each launch an empty
    user-data-dir); every URL it asks for and every error it reports are kept."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.urls, page.errors = [], []
            page.on("request", lambda r: page.urls.append(r.url))
            page.on("websocket", lambda ws: page.urls.append(ws.url))
            page.on("pageerror", lambda e: page.errors.append(str(e)))
            page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
            yield page
        finally:
            browser.close()


def points(page) -> int:
    return int(page.eval_on_selector("#chart", "e => e.dataset.points"))


def table(page) -> list[list[str]]:
    return page.eval_on_selector_all("#latest tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")


def stored(db: Path, t: int) -> dict:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (payload,) = con.execute("SELECT payload FROM aggregates WHERE scope='all' AND t=?", (t,)).fetchone()
    finally:
        con.close()
    return json.loads(payload)


def test_new_aggregates_appear_as_points(stack, tmp_path):
    with live_page(stack, tmp_path) as url, browser_page(tmp_path) as page:
        page.goto(url)
        page.wait_for_function("() => Number(document.querySelector('#chart').dataset.points) >= 1", timeout=60_000)
        first = points(page)
        page.wait_for_function(f"() => Number(document.querySelector('#chart').dataset.points) >= {first + 3}",
                               timeout=60_000)
        rows = table(page)
        axis = page.eval_on_selector("#chart", "e => e.dataset.axis")
        state = page.eval_on_selector("#status", "e => e.dataset.state")
        canvas = page.eval_on_selector("#chart canvas", "c => [c.width, c.height]")
        shot = tmp_path / "live-page.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        urls, errors = list(page.urls), list(page.errors)
    assert state == "live" and canvas[0] > 400 and canvas[1] > 200
    assert shot.stat().st_size > 10_000
    # What the page shows is what the fusion center stored: t, n and the mean of each row.
    assert len(rows) >= 4
    ts = [int(r[1]) for r in rows]
    assert ts == sorted(ts, reverse=True)
    for when, t, n, mean, interval in rows:
        agg = stored(stack.work / "fusion.sqlite", int(t))
        assert int(n) == agg["n"]
        assert float(mean) == pytest.approx(agg["estimates"]["mean"]["value"], abs=0.51, rel=5e-3)
        lo, hi = (float(x) for x in interval.strip("[]").split(","))
        assert lo == pytest.approx(agg["estimates"]["mean"]["ci"][0], abs=0.51, rel=5e-3)
        assert hi == pytest.approx(agg["estimates"]["mean"]["ci"][1], abs=0.51, rel=5e-3)
        # Wall-clock time where the aggregate carries it (t_start/t_end), the logical t otherwise.
        assert axis == ("time" if "t_end" in agg else "t") and (when == "-") == (axis == "t")
    # Nothing but this page's server and the broker's WebSockets listener.
    # (mqtt.js runs its keepalive timer in a worker made from a blob of this page.)
    allowed = (url, f"ws://127.0.0.1:{stack.ws_port}", f"blob:{url.rstrip('/')}/")
    assert urls and [u for u in urls if not u.startswith(allowed)] == []
    assert not errors, errors


def aggregate_with_wall_clock(template: dict, t: int, period_s: float, mean: float) -> dict:
    """A stored aggregate as the fusion center will publish it with wall-clock
    fields (t_start/t_end in Unix seconds, period_s)."""
    est = {"value": mean, "ci": [mean - 300.0, mean + 300.0], "n": template["n"]}
    return {**template, "t": t, "estimates": {**template["estimates"], "mean": est},
            "t_start": t * period_s, "t_end": (t + 1) * period_s, "period_s": period_s}


def test_wall_clock_times_and_a_stale_feed(stack, tmp_path):
    wait_until(lambda: (stack.work / "fusion.sqlite").exists(), 30, stack, "the fusion store")
    wait_until(lambda: sqlite3.connect(stack.work / "fusion.sqlite").execute(
        "SELECT count(*) FROM aggregates").fetchone()[0] > 0, 60, stack, "an aggregate to copy")
    con = sqlite3.connect(stack.work / "fusion.sqlite")
    template = json.loads(con.execute("SELECT payload FROM aggregates LIMIT 1").fetchone()[0])
    con.close()
    period_s, t0 = 1.0, int(time.time()) - 10
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="live-page-test")
    pub.connect("127.0.0.1", stack.mosquitto.port)
    pub.loop_start()
    try:
        with live_page(stack, tmp_path, topic="test/walltime/#") as url, browser_page(tmp_path) as page:
            page.goto(url)
            page.wait_for_function("() => document.querySelector('#status').dataset.state === 'subscribed'", timeout=30_000)
            for i in range(4):
                agg = aggregate_with_wall_clock(template, t0 + i, period_s, 200.0 + 10 * i)
                pub.publish(f"test/walltime/t/{t0 + i}", json.dumps(agg), qos=1).wait_for_publish(10)
            page.wait_for_function("() => Number(document.querySelector('#chart').dataset.points) >= 4", timeout=30_000)
            axis = page.eval_on_selector("#chart", "e => e.dataset.axis")
            rows = table(page)
            # Three periods (3 s) without a new aggregate: the page says the feed is stale.
            page.wait_for_function("() => document.querySelector('#status').dataset.state === 'stale'", timeout=30_000)
            stale = page.inner_text("#status")
    finally:
        pub.disconnect()
        pub.loop_stop()
    assert axis == "time"
    newest = t0 + 3
    mid = datetime.fromtimestamp((newest + 0.5) * period_s, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert rows[0][:2] == [mid, str(newest)] and rows[0][3] == "230"
    assert "no new aggregate" in stale and f"newest t {newest}" in stale


# Debian's /etc/mosquitto/mosquitto.conf (the mosquitto package the walkthrough installs), its paths in a
# test folder; its conf.d gets the live page's snippet.
DEBIAN_MOSQUITTO_CONF = """# Place your local configuration in /etc/mosquitto/conf.d/
pid_file {dir}/mosquitto.pid

persistence true
persistence_location {dir}/

log_dest file {dir}/mosquitto.log

include_dir {dir}/conf.d
"""
SNIPPET_MARKER = "<!-- tested: the live page's listener -->"


def documented_listener_snippet() -> str:
    doc = (ROOT / "docs/observability.md").read_text()
    block = doc.split(SNIPPET_MARKER, 1)[1]
    return "\n".join(line.strip() for line in block.split("```", 2)[1].splitlines()[1:])


def test_the_documented_listener_keeps_the_walkthrough_working_and_the_page_on_loopback(tmp_path):
    """Mosquitto with Debian's configuration file plus the snippet, as written
    (only its two ports are this test's): both listeners listen on loopback
    only, the walkthrough's services are still admitted (README's block ends in
    an aggregate), and an anonymous MQTT-over-WebSockets client, as the page
    is, receives it."""
    from simulators.brokers import mosquitto_binary
    from tests.integration.test_readme_walkthrough import run_walkthrough

    snippet = documented_listener_snippet()
    assert "listener 1883 127.0.0.1" in snippet and "listener 9001 lo" in snippet
    tcp_port, ws_port = free_port(), free_port()
    broker_dir = tmp_path / "etc-mosquitto"
    (broker_dir / "conf.d").mkdir(parents=True)
    conf = broker_dir / "mosquitto.conf"
    conf.write_text(DEBIAN_MOSQUITTO_CONF.format(dir=broker_dir)
                    # As root, mosquitto drops to user `mosquitto`, which cannot write into the test's tmp dir.
                    + ("user root\n" if os.geteuid() == 0 else ""))
    (broker_dir / "conf.d" / "rase-live.conf").write_text(
        snippet.replace("listener 1883 ", f"listener {tcp_port} ").replace("listener 9001 ", f"listener {ws_port} "))
    proc = subprocess.Popen([mosquitto_binary(), "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    page = None
    try:
        assert wait_port(tcp_port, 10, proc) and wait_port(ws_port, 10, proc), (broker_dir / "mosquitto.log")
        loopback = {"127.0.0.1", "::1"}
        assert listening_addresses(tcp_port) and listening_addresses(tcp_port) <= loopback
        assert listening_addresses(ws_port) and listening_addresses(ws_port) <= loopback, \
            f"the websockets listener is open on {listening_addresses(ws_port)}"
        got = []
        page = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, transport="websockets", client_id="live-page-probe")
        page.on_message = lambda c, u, m: got.append(m)
        page.on_connect = lambda c, u, f, rc, p: c.subscribe("rase/v1/aggregates/#", qos=1)
        page.connect("127.0.0.1", ws_port, keepalive=30)
        page.loop_start()
        run = run_walkthrough(tcp_port, tmp_path)
        log = (broker_dir / "mosquitto.log").read_text()
        assert run.aggregates, f"no aggregate after {run.took:.0f} s:\n{run.log[-3000:]}\n{log[-3000:]}"
        assert "not authorised" not in log
        wait_until(lambda: any(m.topic.startswith("rase/v1/aggregates/t/") for m in got), 20,
                   what="the aggregate over WebSockets")
        over_ws = [json.loads(m.payload) for m in got if m.topic.startswith("rase/v1/aggregates/t/")]
        assert over_ws[0]["n"] >= 10
    finally:
        if page is not None:
            page.disconnect()
            page.loop_stop()
        proc.terminate()
        proc.wait(10)
