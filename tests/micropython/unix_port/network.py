# Stand-in for `network` under the MicroPython unix port, which has no
# radio: the access point is "in range" while the file `wifi_state` in the
# board's folder does not say "down". The test writes that file.
STA_IF = 0
STATE_FILE = "wifi_state"


def _in_range():
    try:
        with open(STATE_FILE) as f:
            return f.read().strip() != "down"
    except OSError:
        return True


class WLAN:
    def __init__(self, iface):
        self._active = False
        self._joined = False

    def active(self, flag=None):
        if flag is not None:
            self._active = bool(flag)
        return self._active

    def connect(self, ssid, password):
        self._joined = True       # a real radio keeps trying in the background, as this does

    def isconnected(self):
        return self._active and self._joined and _in_range()

    def ifconfig(self):
        # No DHCP here: DNS "0.0.0.0" means none, and the port's getaddrinfo
        # resolves (a test names a DNS server with board.dns_server instead).
        return ("127.0.0.1", "255.0.0.0", "127.0.0.1", "0.0.0.0")

    def status(self):
        return "connected (stand-in)" if self.isconnected() else "no AP in range (stand-in)"
