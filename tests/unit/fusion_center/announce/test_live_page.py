"""`rase dashboard`'s server: where the page is told the broker is, what it
may load (its own files only), and a clear error without its libraries.
tests/integration/test_live_page.py runs the page in Chromium."""

import json
import re
import shutil
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from pydantic import ValidationError

from fusion_center.announce.live_page import PAGE_DIR, VENDOR_FILES, PageConfig, make_server

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize("url", ["http://127.0.0.1:9001", "127.0.0.1:9001", "ws://", "mqtt://broker:1883"])
def test_page_config_takes_only_websocket_urls(url):
    with pytest.raises(ValidationError, match="ws://host:port"):
        PageConfig(ws_url=url)


def test_serves_the_page_its_config_and_a_strict_policy():
    assert not [f for f in VENDOR_FILES if not (PAGE_DIR / "vendor" / f).is_file()], "run `make dashboard`"
    server = make_server(PageConfig(ws_url="wss://broker.example:8081", username="dashboard"), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(base + "/config.json", timeout=5) as r:
            cfg = json.loads(r.read())
        with urllib.request.urlopen(base + "/", timeout=5) as r:
            csp, html = r.headers["Content-Security-Policy"], r.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert cfg == {"ws_url": "wss://broker.example:8081", "topic": "rase/v1/aggregates/#", "username": "dashboard",
                   "max_points": 500}
    assert "password" not in cfg
    assert "default-src 'self'" in csp and "script-src 'self'" in csp and "connect-src 'self' ws: wss:" in csp
    # Every file the page loads is one of its own (served here), never a URL elsewhere.
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert refs and all(not re.match(r"[a-z]+://", ref) for ref in refs)
    for ref in refs:
        if not ref.startswith("data:"):
            assert (PAGE_DIR / ref).is_file(), ref


def test_missing_libraries_name_the_make_target(tmp_path):
    page = tmp_path / "page"
    shutil.copytree(PAGE_DIR, page, ignore=shutil.ignore_patterns("vendor"))
    with pytest.raises(FileNotFoundError, match="make dashboard"):
        make_server(PageConfig(ws_url="ws://127.0.0.1:9001"), port=0, page_dir=page)


def test_cli_refuses_a_url_that_is_not_websockets():
    proc = subprocess.run([sys.executable, "-m", "rase.cli", "dashboard", "--mqtt-ws", "http://127.0.0.1:9001"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("rase dashboard: --mqtt-ws: must look like ws://host:port or wss://host:port, "
                                   "got 'http://127.0.0.1:9001'")


def test_the_libraries_in_git_are_the_pinned_versions_the_docs_name():
    """docs/observability.md says the page's two libraries are in git at the
    versions `make dashboard` pins; the files in the checkout carry those versions."""
    makefile = (ROOT / "Makefile").read_text()
    doc = " ".join((ROOT / "docs/observability.md").read_text().split())
    pins = {name: re.search(rf"^{var} := {pkg}@(\S+)$", makefile, re.M).group(1)
            for name, var, pkg in (("mqtt.js", "MQTT_JS", "mqtt"), ("uPlot", "UPLOT_JS", "uplot"))}
    for name, version in pins.items():
        assert re.search(rf"\[{re.escape(name)}\]\([^)]*\) {re.escape(version)}", doc), (name, version)
    assert "in git beside the page" in doc and "not in git" not in doc
    assert pins["mqtt.js"] in (PAGE_DIR / "vendor" / "mqtt.min.js").read_text()
    assert f"(v{pins['uPlot']})" in (PAGE_DIR / "vendor" / "uPlot.iife.min.js").read_text()[:200]
    tracked = subprocess.run(["git", "ls-files", "fusion_center/dashboard/vendor"], cwd=ROOT, capture_output=True,
                             text=True)
    if tracked.returncode == 0 and tracked.stdout:      # a checkout (the image and an sdist have no .git)
        assert set(VENDOR_FILES) <= {Path(p).name for p in tracked.stdout.split()}
