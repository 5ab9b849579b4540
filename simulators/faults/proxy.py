"""A TCP proxy on loopback, between a service and its MQTT broker, that a
test controls: forward, drop every connection at an instant, refuse new
ones, go silent (stop forwarding without closing), or cut the connection
when a given MQTT packet passes (before or after delivering it).

It reads each direction as MQTT packets (fixed header and remaining
length), so a cut lands exactly where a test wants it: "the fog's PUBACK
after its journal commit", "the fusion center's PUBLISH of an aggregate".
The proxy runs its own asyncio loop in a thread; every method may be called
from any thread.

    with TcpProxy(broker.port) as proxy:       # the service connects to proxy.port
        cut = proxy.cut_on("up", publish_to("rase/v1/windows/"))
        ...                                    # the next window published is swallowed and the link cut
        assert cut.wait(10)
        proxy.drop(); proxy.refuse(); proxy.silence(); proxy.forward()
"""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass
from typing import Callable, Literal

Direction = Literal["up", "down"]     # up: client -> broker; down: broker -> client
PUBLISH, PUBACK = 3, 4


@dataclass(frozen=True)
class MqttPacket:
    kind: int              # the MQTT control packet type (3 PUBLISH, 4 PUBACK, ...)
    flags: int
    raw: bytes

    @property
    def topic(self) -> str | None:
        """A PUBLISH's topic name (None for other packets)."""
        if self.kind != PUBLISH:
            return None
        body = self.raw[_header_len(self.raw):]
        n = int.from_bytes(body[:2], "big")
        return body[2:2 + n].decode("utf-8", "replace")


def publish_to(prefix: str) -> Callable[[MqttPacket], bool]:
    """Matches a PUBLISH whose topic starts with prefix."""
    return lambda p: p.kind == PUBLISH and (p.topic or "").startswith(prefix)


def puback(p: MqttPacket) -> bool:
    return p.kind == PUBACK


def _header_len(raw: bytes) -> int:
    i = 1
    while raw[i] & 0x80:
        i += 1
    return i + 1


class Framer:
    """Splits a byte stream into MQTT packets (incomplete tails are kept)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[MqttPacket]:
        self.buf += data
        out, pos, buf = [], 0, self.buf
        while len(buf) - pos >= 2:
            length, i = 0, pos + 1
            for shift in (0, 7, 14, 21):           # the remaining length: at most four bytes
                if i == len(buf):
                    break
                b = buf[i]
                i += 1
                length |= (b & 0x7F) << shift
                if not b & 0x80:
                    break
            else:
                raise ValueError("malformed MQTT remaining length")
            if buf[i - 1] & 0x80:
                break                                # the length itself is incomplete
            end = i + length
            if end > len(buf):
                break
            out.append(MqttPacket(buf[pos] >> 4, buf[pos] & 0x0F, bytes(buf[pos:end])))
            pos = end
        del buf[:pos]
        return out


class Cut:
    """A rule: when a matching packet passes in `direction`, cut the
    connection (delivering the packet first if `deliver`). Fires `times`
    times; `fired` counts, wait() blocks until it has fired at least once."""

    def __init__(self, direction: Direction, match: Callable[[MqttPacket], bool], deliver: bool, times: int):
        self.direction = direction
        self.match = match
        self.deliver = deliver
        self.left = times
        self.fired = 0
        self.event = threading.Event()
        self.packets: list[MqttPacket] = []    # the packets that triggered it

    def wait(self, timeout_s: float | None = None) -> bool:
        return self.event.wait(timeout_s)


class _Link:
    """One proxied connection: the client's side and the broker's side."""

    def __init__(self, client: asyncio.StreamWriter, broker: asyncio.StreamWriter):
        self.writers = {"up": broker, "down": client}   # where each direction's bytes go

    def abort(self) -> None:
        for w in self.writers.values():
            w.transport.abort()


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1", *, port: int | None = None):
        self.target = (target_host, target_port)
        self.port = port or _free_port()
        self.links: set[_Link] = set()
        self.cuts: list[Cut] = []
        self.connections = 0           # connections accepted so far
        self.dropped = 0               # connections this proxy cut
        self._generation = 0           # drops and refusals so far: a link accepted before one is cut too
        self.errors: list[str] = []    # why links ended other than by a close (resets, mostly)
        self._loop = asyncio.new_event_loop()
        # Its own listening socket and accept loop, not asyncio.start_server: a server closed while a
        # connection was being accepted leaves that connection open and never handled (Python 3.11).
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Future | None = None
        self._flowing: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"proxy:{self.port}", daemon=True)
        self._lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> "TcpProxy":
        self._thread.start()
        self._call(self._start())
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._call(self._shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def __enter__(self) -> "TcpProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- control -------------------------------------------------------------------
    def forward(self) -> None:
        """Normal service: listen, and move bytes both ways."""
        self._call(self._forward())

    def drop(self) -> int:
        """Cut every current connection now (a reset); new ones are accepted.
        Returns how many were cut."""
        return self._call(self._close(refuse=False))

    def refuse(self) -> None:
        """Cut every connection and stop listening: connects are refused
        until forward()."""
        self._call(self._close(refuse=True))

    def silence(self) -> None:
        """Stop moving bytes, closing nothing: both ends see a link that
        says nothing (their keepalives and timeouts decide). forward() moves
        what was held, in order."""
        self._call(self._silence())

    def cut_on(self, direction: Direction, match: Callable[[MqttPacket], bool], *, deliver: bool = False,
               times: int = 1) -> Cut:
        """Cut the connection when a packet matching `match` passes in
        `direction`: before it (it is lost with the link) or, with
        `deliver`, right after writing it."""
        cut = Cut(direction, match, deliver, times)
        with self._lock:
            self.cuts.append(cut)
        return cut

    # -- the loop's side -------------------------------------------------------------
    def _call(self, coro):  # noqa: ANN001, ANN202
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        await self._listen()

    async def _listen(self) -> None:
        if self._listener is None:
            lsock = socket.socket()
            lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            lsock.bind(("127.0.0.1", self.port))
            lsock.listen(128)
            lsock.setblocking(False)
            self._listener = lsock
            self._accepting = asyncio.ensure_future(self._accept(lsock))

    async def _accept(self, lsock: socket.socket) -> None:
        while True:
            conn, _ = await self._loop.sock_accept(lsock)
            if self._listener is not lsock:       # refused while this one was being accepted
                conn.close()
                return
            asyncio.ensure_future(self._serve(conn))

    async def _serve(self, conn: socket.socket) -> None:
        creader, cwriter = await asyncio.open_connection(sock=conn)
        await self._handle(creader, cwriter)

    async def _forward(self) -> None:
        await self._listen()
        self._flowing.set()

    async def _silence(self) -> None:
        self._flowing.clear()

    async def _shutdown(self) -> None:
        await self._close(refuse=True)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _close(self, refuse: bool) -> int:
        if refuse and self._listener is not None:
            self._accepting.cancel()
            self._listener.close()                # what waits in its backlog is reset
            self._listener = self._accepting = None
        self._generation += 1
        links = list(self.links)
        for link in links:
            link.abort()
        self.links.clear()
        self.dropped += len(links)
        return len(links)

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        if self._listener is None:            # accepted just before a refusal: refused too
            cwriter.transport.abort()
            return
        self.connections += 1
        generation = self._generation
        try:
            breader, bwriter = await asyncio.open_connection(*self.target)
        except OSError:
            cwriter.transport.abort()         # the broker is down: so is the proxied link
            return
        if generation != self._generation:    # dropped or refused while connecting to the broker
            cwriter.transport.abort()
            bwriter.transport.abort()
            return
        for w in (cwriter, bwriter):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = _Link(cwriter, bwriter)
        self.links.add(link)
        pumps = [asyncio.ensure_future(self._pump(link, creader, "up")),
                 asyncio.ensure_future(self._pump(link, breader, "down"))]
        # Either side ending (closed, reset, or an error) ends the link: never half of one.
        done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                self.errors.append(repr(task.exception()))
        self.links.discard(link)
        link.abort()
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)

    async def _pump(self, link: _Link, reader: asyncio.StreamReader, direction: Direction) -> None:
        framer = Framer()
        writer = link.writers[direction]
        while True:
            await self._flowing.wait()
            data = await reader.read(65536)
            if not data:
                link.abort()
                return
            await self._flowing.wait()         # silent: hold what was read until forward()
            packets = framer.feed(data)
            cut, out = self._check(direction, packets)
            if out:
                writer.write(out)
            if cut is not None:
                self.links.discard(link)
                self.dropped += 1
                if cut.deliver:
                    # The packet reaches the far end, then a FIN: it is read, but no reply gets back.
                    writer.close()
                    link.writers["down" if direction == "up" else "up"].transport.abort()
                else:
                    link.abort()
                cut.event.set()
                return
            await writer.drain()

    def _check(self, direction: Direction, packets: list[MqttPacket]) -> tuple[Cut | None, bytes]:
        """The bytes to write, and the rule that cuts after them (if any)."""
        with self._lock:
            rules = [c for c in self.cuts if c.direction == direction and c.left > 0]
            if rules:
                for i, p in enumerate(packets):
                    for c in rules:
                        if c.match(p):
                            c.left -= 1
                            c.fired += 1
                            c.packets.append(p)
                            upto = i + 1 if c.deliver else i
                            return c, b"".join(q.raw for q in packets[:upto])
        return None, b"".join(p.raw for p in packets)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
