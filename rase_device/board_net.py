# The sockets umqtt.simple uses on a board, with every blocking step bounded.
#
# umqtt.simple sets no timeout before its CONNACK read (1.3.4, 1.4.0), and
# its wait_msg() calls setblocking(True), which on the ESP32 and RP2 ports
# clears any timeout: a silent broker would hold the loop past the watchdog.
# So umqtt is handed this module's `Sockets` in place of its `socket` module
# (the one name every release imports it as). Each socket it opens:
# - has a timeout of timeout_s on connect, the TLS handshake, every read and
#   write, and gets it back whenever umqtt asks for a blocking socket;
# - calls `between()` before each blocking step, so the board loop feeds
#   its watchdog and takes a reading that falls due while the link is slow;
# - with TLS, verifies the broker: an ssl.SSLContext with CERT_REQUIRED, the
#   deployment's CA and the broker's host name. umqtt >= 1.4 takes it as
#   ssl= (Tls below stands for the context); for 1.3.4, which would import
#   `ussl` (gone in MicroPython 1.23), the socket wraps itself.
# Host names are resolved once (rase_device.dns: bounded, through the DNS
# server Wi-Fi's DHCP gave, or board.dns_server) and kept until connects
# keep failing. Without a known DNS server (wired ports, the unix port) the
# port's own getaddrinfo resolves them.
#
# Network joins Wi-Fi (network.WLAN) and sets the clock (ntptime); neither
# blocks longer than its own timeout, fed by the loop's between() hook.

import time

from rase_device import dns


def link_timeout_s(cfg, board):
    """The bound on one blocking socket step: the configured one, at most a
    third of the watchdog and half a period (so a period's reading is taken
    between two steps), never below 0.2 s."""
    t = board["link_timeout_s"]
    if board["watchdog_s"]:
        t = min(t, board["watchdog_s"] / 3.0)
    return max(0.2, min(t, cfg["period_s"] / 2.0))


class Network:
    """Wi-Fi (network.WLAN) and NTP (ntptime) for the board loop. Each call
    returns True or False; none raises."""

    def __init__(self, board, sleep=time.sleep, feed=None, resolve=None):
        self.board = board
        self.sleep = sleep
        self.feed = feed or (lambda: None)
        self.resolve = resolve or (lambda host: host)   # the NTP server's name, bounded (Sockets.resolve)
        self.wlan = None
        self.last_error = None
        self.dns_server = None    # from DHCP, once joined

    def up(self):
        ssid = self.board["wifi_ssid"]
        if not ssid:
            return True  # wired, or the firmware brings the network up itself
        try:
            import network
            if self.wlan is None:
                self.wlan = network.WLAN(network.STA_IF)
                self.wlan.active(True)
            if self.wlan.isconnected():
                self.dns_server = self._wlan_dns()
                return True
            self.wlan.connect(ssid, self.board["wifi_password"] or "")
            waited = 0.0
            while not self.wlan.isconnected() and waited < self.board["wifi_timeout_s"]:
                self.feed()
                self.sleep(0.25)
                waited += 0.25
            if self.wlan.isconnected():
                self.dns_server = self._wlan_dns()
                return True
            self.last_error = "wifi: not connected to %r after %g s (status %r)" % (
                ssid, self.board["wifi_timeout_s"], self._wlan_status())
        except Exception as exc:  # no network module, radio error: retried on the next failure
            self.last_error = "wifi: %s: %s" % (type(exc).__name__, exc)
        return False

    def _wlan_dns(self):
        wlan = self.wlan
        if wlan is None:
            return None
        try:
            return wlan.ifconfig()[3]   # (ip, netmask, gateway, dns)
        except Exception:  # a port without ifconfig(): getaddrinfo resolves
            return None

    def _wlan_status(self):
        wlan = self.wlan
        if wlan is None:
            return None
        try:
            return wlan.status()
        except Exception:  # not every port has status()
            return None

    def sync_time(self):
        try:
            import ntptime
            ntptime.host = self.resolve(self.board["ntp_host"])
            ntptime.settime()    # ntptime waits at most ntptime.timeout (1 s) for the answer
            return True
        except Exception:  # no answer: retried after ntp_retry_s
            return False


def tls_context(ca_der):
    """A client context that accepts only certificates from this CA."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    # MicroPython's default is CERT_NONE. (The board stubs lack verify_mode;
    # MicroPython >= 1.23 has it.)
    ctx.verify_mode = ssl.CERT_REQUIRED  # type: ignore[attr-defined]
    ctx.load_verify_locations(cadata=ca_der)
    return ctx


def umqtt_takes_context(client_cls):
    """umqtt.simple >= 1.4 takes an SSLContext as ssl= (default None); 1.3.4
    takes ssl=True plus ssl_params for its `ussl` (default False)."""
    return client_cls("probe", "0.0.0.0").ssl is not False


class Tls:
    """What umqtt >= 1.4 calls as `ssl.wrap_socket(sock, server_hostname=...)`."""

    def __init__(self, ctx):
        self.ctx = ctx

    def wrap_socket(self, sock, server_hostname=None, **kw):
        sock.start_tls(self.ctx, server_hostname)
        return sock


class TimedSocket:
    def __init__(self, raw, timeout_s, between, tls=None):
        self.raw = raw
        self.s = raw
        self.timeout_s = timeout_s
        self.between = between
        self.tls = tls            # (ctx, host name) when this socket wraps itself
        raw.settimeout(timeout_s)

    def start_tls(self, ctx, host):
        self.between()
        self.s = ctx.wrap_socket(self.raw, server_hostname=host)

    def connect(self, addr):
        self.between()
        self.raw.connect(addr)
        if self.tls is not None:
            self.start_tls(self.tls[0], self.tls[1])

    def read(self, n):
        self.between()
        return self.s.read(n)

    def write(self, buf, n=None):
        self.between()
        return self.s.write(buf) if n is None else self.s.write(buf, n)

    def setblocking(self, flag):
        if flag:
            self.raw.settimeout(self.timeout_s)   # "blocking" means bounded here
        else:
            self.raw.setblocking(False)

    def settimeout(self, s):
        # umqtt >= 1.5 passes connect()'s timeout (None by default): never unbounded.
        if s is not None and 0 < s < self.timeout_s:
            self.timeout_s = s
        self.raw.settimeout(self.timeout_s)

    def close(self):
        for s in (self.s, self.raw):
            try:
                s.close()
            except Exception:  # already closed or broken; nothing more to release
                pass


class Sockets:
    """Stands for the `socket` module inside umqtt.simple (see the top)."""

    def __init__(self, timeout_s, between=None, base=None, tls=None):
        self.base = base          # the real socket module; install() finds it
        self.timeout_s = timeout_s
        self.between = between or (lambda: None)
        self.tls = tls            # (ctx, host name): sockets wrap themselves (umqtt 1.3.4)
        self.dns_server = None    # "a.b.c.d" or "a.b.c.d:port"
        self.addrs = {}

    def socket(self, *args):
        return TimedSocket(self.base.socket(*args), self.timeout_s, self.between, self.tls)

    def resolve(self, host):
        """host as an IPv4 address when a DNS server is known (bounded);
        otherwise host itself, for the port's own getaddrinfo."""
        server = self.dns_server
        if not server or server == "0.0.0.0" or dns.is_ipv4(host):
            return host
        if self.base is None:   # not installed into umqtt (yet): the port's own module
            import socket
            self.base = socket
        ip, _, dport = server.partition(":")
        return dns.lookup(self.base, host, ip, self.timeout_s, int(dport or 53), between=self.between)

    def getaddrinfo(self, host, port, *args):
        key = (host, port)
        if key not in self.addrs:
            self.between()
            self.addrs[key] = self.base.getaddrinfo(self.resolve(host), port, *args)   # numeric: no lookup
            self.between()
        return self.addrs[key]

    def forget(self):
        """Resolve again on the next connect (the broker may have moved)."""
        self.addrs = {}


def install(simple_module, sockets):
    """Make umqtt.simple open its sockets through `sockets`."""
    current = getattr(simple_module, "socket", None)
    if isinstance(current, Sockets):
        current = current.base
    if sockets.base is None:
        sockets.base = current   # whatever umqtt imported: usocket, socket, or a test's
    simple_module.socket = sockets
    return sockets
