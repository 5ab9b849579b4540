"""umqtt.simple for board bundles through the package index's standard API
(PEP 691 JSON and PEP 503 HTML), served here by a real HTTP server on
loopback with the real pinned sdist that `make umqtt` cached."""

import hashlib
import http.server
import json
import socket
import threading

import pytest

from edge_agent import board_deps
from rase.cli import main as rase_main
from tests.unit.edge_agent.test_flash import CONFIG

PIN = board_deps.UMQTT_SIMPLE


class _Index(http.server.BaseHTTPRequestHandler):
    sdist = b""
    serve_json = True
    requests: list[str] = []

    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_GET(self):
        self.requests.append(self.path)
        if self.path == f"/simple/{PIN.normalized}/":
            wants_json = "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
            if self.serve_json and wants_json:
                body = json.dumps({"meta": {"api-version": "1.0"}, "name": PIN.normalized, "files": [
                    {"filename": PIN.filename, "url": f"../../files/{PIN.filename}",
                     "hashes": {"sha256": PIN.sdist_sha256}}]}).encode()
                ctype = "application/vnd.pypi.simple.v1+json"
            else:
                body = (f'<html><body><a href="/files/{PIN.filename}#sha256={PIN.sdist_sha256}">'
                        f"{PIN.filename}</a></body></html>").encode()
                ctype = "text/html"
        elif self.path == f"/files/{PIN.filename}":
            body, ctype = self.sdist, "application/octet-stream"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def local_index(umqtt_simple_py, tmp_path, monkeypatch):
    handler = type("Index", (_Index,), {"sdist": (umqtt_simple_py.parent / PIN.filename).read_bytes(),
                                        "requests": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_port}/simple")
    monkeypatch.setenv("RASE_CACHE_DIR", str(tmp_path / "cache"))
    yield handler
    server.shutdown()


def test_pep691_json_route_fetches_and_verifies_the_pinned_release(local_index):
    assert board_deps.cached() is None
    path = board_deps.download()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == PIN.module_sha256
    assert board_deps.cached() == path
    assert local_index.requests == [f"/simple/{PIN.normalized}/", f"/files/{PIN.filename}"]


def test_pep503_html_route_when_the_index_serves_no_json(local_index):
    local_index.serve_json = False
    assert hashlib.sha256(board_deps.download().read_bytes()).hexdigest() == PIN.module_sha256


def test_a_tampered_sdist_is_refused_and_nothing_is_cached(local_index):
    local_index.sdist = local_index.sdist[:-1] + bytes([local_index.sdist[-1] ^ 1])
    with pytest.raises(board_deps.BoardDepsError, match="does not match its pinned sha256"):
        board_deps.download()
    assert board_deps.cached() is None


def test_a_tampered_cache_is_not_used(local_index):
    path = board_deps.download()
    path.write_text("class MQTTClient: pass\n")
    assert board_deps.cached() is None


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_offline_bundle_without_umqtt_fails_with_one_line_that_says_what_to_do(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{_closed_port()}/simple")
    monkeypatch.setenv("RASE_CACHE_DIR", str(tmp_path / "empty-cache"))
    assert rase_main(["flash", "--config", str(CONFIG), "--bundle-only", str(tmp_path / "b")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "could not reach the package index" in err
    assert "--umqtt PATH" in err and "rase flash --download-umqtt" in err


def test_offline_bundle_with_an_explicit_umqtt_file(tmp_path, monkeypatch, umqtt_simple_py):
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{_closed_port()}/simple")
    monkeypatch.setenv("RASE_CACHE_DIR", str(tmp_path / "empty-cache"))
    out = tmp_path / "b"
    assert rase_main(["flash", "--config", str(CONFIG), "--bundle-only", str(out), "--umqtt", str(umqtt_simple_py)]) == 0
    assert (out / "lib" / "umqtt" / "simple.mpy").stat().st_size > 0


def test_index_url_follows_pip_configuration(tmp_path, monkeypatch):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example/simple/\n")
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    assert board_deps.index_url() == "https://mirror.example/simple"
    monkeypatch.setenv("PIP_INDEX_URL", "https://other.example/pypi/simple")
    assert board_deps.index_url() == "https://other.example/pypi/simple"
