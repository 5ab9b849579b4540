"""`rase dashboard`: a page that plots the published aggregates live.

The page (fusion_center/dashboard/) connects from the browser to the broker's
MQTT-over-WebSockets listener, subscribes to rase/v1/aggregates/#, and draws
the recommended `mean` with its 95% interval band over time (uPlot). This
module only serves the page, its vendored libraries (`make dashboard` copies
them from npm) and /config.json (where the broker is): it never sees the data,
and a Content-Security-Policy keeps the browser from loading anything that
is not served here.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator

log = logging.getLogger(__name__)
PAGE_DIR = Path(__file__).parent.parent / "dashboard"
VENDOR_FILES = ("mqtt.min.js", "uPlot.iife.min.js", "uPlot.min.css")
# Only this server and the MQTT WebSockets listener: nothing from the internet.
CSP = ("default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; "
       "style-src 'self' 'unsafe-inline'; script-src 'self'; worker-src 'self' blob:; object-src 'none'; "
       "base-uri 'none'")     # mqtt.js runs its keepalive timer in a worker made from a blob


class PageConfig(BaseModel):
    """What the page is told in /config.json (no password: the person types it)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    ws_url: str                                   # the broker's MQTT-over-WebSockets listener, as the browser sees it
    topic: str = "rase/v1/aggregates/#"
    username: str | None = None                   # set: the page asks for this user's password
    max_points: int = Field(500, ge=3, le=100_000)

    @field_validator("ws_url")
    @classmethod
    def _ws(cls, v: str) -> str:
        u = urlparse(v)
        if u.scheme not in ("ws", "wss") or not u.hostname:
            raise ValueError(f"must look like ws://host:port or wss://host:port, got {v!r}")
        return v


def missing_vendor_files(page_dir: Path = PAGE_DIR) -> list[str]:
    return [f for f in VENDOR_FILES if not (page_dir / "vendor" / f).is_file()]


class _Handler(SimpleHTTPRequestHandler):
    page_config: PageConfig

    def __init__(self, *args, page_config: PageConfig, **kwargs):  # noqa: ANN002, ANN003
        self.page_config = page_config
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if urlparse(self.path).path == "/config.json":
            body = json.dumps(self.page_config.model_dump()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def end_headers(self) -> None:
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args) -> None:  # noqa: A002, ANN002 - http.server's signature
        log.debug("%s " + format, self.address_string(), *args)


def make_server(page_config: PageConfig, host: str = "127.0.0.1", port: int = 8080,
                page_dir: Path = PAGE_DIR) -> ThreadingHTTPServer:
    """An HTTP server for the page (serve_forever() runs it). Raises
    FileNotFoundError, naming `make dashboard`, when the libraries are missing."""
    missing = missing_vendor_files(page_dir)
    if missing:
        raise FileNotFoundError(f"the page's libraries are missing from {page_dir / 'vendor'} ({', '.join(missing)}): "
                                "run `make dashboard` (npm, pinned versions)")
    handler = partial(_Handler, page_config=page_config, directory=str(page_dir))
    return ThreadingHTTPServer((host, port), handler)
