"""Getting micropython-lib's umqtt.simple for a board bundle (CPython only).

Resolution order, each step a documented protocol, never another tool's
human-readable output:
  1. a file the user names (`rase flash --umqtt PATH`);
  2. the cache (`RASE_CACHE_DIR`, else `$XDG_CACHE_HOME/rase`, else
     `~/.cache/rase`), accepted only if its sha256 is the pinned one;
  3. the package index pip is configured with, through the standard simple
     API (PEP 691 JSON, or PEP 503 HTML when that is all the index serves);
     the sdist is checked against a pinned sha256 before anything is read.

Why 1.3.4: it is the newest umqtt.simple on PyPI (2017). micropython-lib's
later releases are published only to MicroPython's own package index, which
`mpremote mip install umqtt.simple` reads; `rase flash --port` uses a board's
frozen umqtt first and falls back to mip when nothing else is to be had.
"""

from __future__ import annotations

import configparser
import hashlib
import io
import json
import os
import re
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

DEFAULT_INDEX = "https://pypi.org/simple"
PEP691_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.01"


class BoardDepsError(RuntimeError):
    """A board dependency could not be had; the message says what to do."""


@dataclass(frozen=True)
class PinnedSdist:
    project: str           # the name on the index
    version: str
    sdist_sha256: str      # of the .tar.gz as published
    member: str            # path of the module inside the archive (suffix)
    module_sha256: str     # of the extracted module, for the cache

    @property
    def filename(self) -> str:
        return f"{self.project}-{self.version}.tar.gz"

    @property
    def normalized(self) -> str:
        """PEP 503 name normalisation, as the simple API's URLs use it."""
        return re.sub(r"[-_.]+", "-", self.project).lower()


UMQTT_SIMPLE = PinnedSdist(
    project="micropython-umqtt.simple", version="1.3.4",
    sdist_sha256="b6a2520239e3992c63a7de9370ee9b3d9d27819a90359c521f1c0f7ccab8d12f",
    member="umqtt/simple.py",
    module_sha256="8555d2f654deb8eb0d724f79b0811a78cc94029d070f3d96bbd74288653d63a5")


def cache_dir() -> Path:
    if os.environ.get("RASE_CACHE_DIR"):
        return Path(os.environ["RASE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rase"


def cached_path(pin: PinnedSdist = UMQTT_SIMPLE) -> Path:
    return cache_dir() / f"{pin.normalized}-{pin.version}" / Path(pin.member).name


def _pip_config_files() -> list[Path]:
    """pip's configuration files, lowest priority first (pip's documented order)."""
    files = [Path("/etc/pip.conf")]
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files += [Path(d) / "pip" / "pip.conf" for d in reversed(xdg_dirs) if d]
    files += [Path.home() / ".pip" / "pip.conf",
              Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "pip" / "pip.conf"]
    if os.environ.get("VIRTUAL_ENV"):
        files.append(Path(os.environ["VIRTUAL_ENV"]) / "pip.conf")
    if os.environ.get("PIP_CONFIG_FILE") and os.environ["PIP_CONFIG_FILE"] != os.devnull:
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return files


def index_url() -> str:
    """The index pip would use: PIP_INDEX_URL, else pip's config files, else PyPI."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"].rstrip("/")
    url = DEFAULT_INDEX
    for path in _pip_config_files():
        parser = configparser.ConfigParser()
        try:
            parser.read(path)
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue  # pip itself would refuse it; the default stands
        for section in ("global", "download"):
            if parser.has_option(section, "index-url"):
                url = parser.get(section, "index-url")
    return url.rstrip("/")


class _Anchors(HTMLParser):
    """PEP 503: one <a href> per file."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data):
        if self._href is not None:
            self.links.append((data.strip(), self._href))
            self._href = None


def _project_files(index: str, pin: PinnedSdist, timeout_s: float) -> dict[str, str]:
    """filename -> absolute URL, from the index's project page."""
    page = f"{index}/{pin.normalized}/"
    req = urllib.request.Request(page, headers={"Accept": PEP691_ACCEPT})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        ctype = resp.headers.get("Content-Type", "")
        body = resp.read()
    if "json" in ctype:
        doc = json.loads(body)
        return {f["filename"]: urllib.parse.urljoin(page, f["url"]) for f in doc.get("files", [])}
    parser = _Anchors()
    parser.feed(body.decode("utf-8", "replace"))
    return {name: urllib.parse.urljoin(page, href) for name, href in parser.links}


def _extract_member(data: bytes, pin: PinnedSdist) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith("/" + pin.member):
                return tar.extractfile(member).read()  # type: ignore[union-attr]
    raise BoardDepsError(f"{pin.filename} has no {pin.member}")


def download(pin: PinnedSdist = UMQTT_SIMPLE, index: str | None = None, timeout_s: float = 60.0) -> Path:
    """Fetch the pinned sdist from the index, verify it, cache its module."""
    index = index or index_url()
    try:
        files = _project_files(index, pin, timeout_s)
        if pin.filename not in files:
            raise BoardDepsError(f"the package index {index} does not list {pin.filename}")
        with urllib.request.urlopen(files[pin.filename].split("#", 1)[0], timeout=timeout_s) as resp:
            data = resp.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise BoardDepsError(f"could not reach the package index {index} ({exc})") from None
    if hashlib.sha256(data).hexdigest() != pin.sdist_sha256:
        raise BoardDepsError(f"{pin.filename} from {index} does not match its pinned sha256; refusing it")
    text = _extract_member(data, pin)
    if hashlib.sha256(text).hexdigest() != pin.module_sha256:
        raise BoardDepsError(f"{pin.member} in {pin.filename} does not match its pinned sha256; refusing it")
    dst = cached_path(pin)
    dst.parent.mkdir(parents=True, exist_ok=True)
    # The verified sdist is kept beside the module: a local index can serve it.
    for path, blob in ((dst.parent / pin.filename, data), (dst, text)):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    return dst


def cached(pin: PinnedSdist = UMQTT_SIMPLE) -> Path | None:
    path = cached_path(pin)
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == pin.module_sha256:
        return path
    return None


def umqtt_simple(explicit: Path | None = None, *, offline: bool = False) -> Path:
    """The umqtt/simple.py to bundle (see the module docstring for the order)."""
    if explicit is not None:
        if not Path(explicit).is_file():
            raise BoardDepsError(f"--umqtt {explicit}: no such file")
        return Path(explicit)
    hit = cached()
    if hit is not None:
        return hit
    pin = UMQTT_SIMPLE
    advice = (f"pass --umqtt PATH/TO/umqtt/simple.py, or run `rase flash --download-umqtt` once while "
              f"online (it caches {pin.project} {pin.version} at {cached_path(pin)})")
    if offline:
        raise BoardDepsError(f"umqtt.simple is not cached at {cached_path(pin)}; {advice}")
    try:
        return download(pin)
    except BoardDepsError as exc:
        raise BoardDepsError(f"{exc}; {advice}") from None
