# A fake `network` for the board loop under the MicroPython WebAssembly port
# (no radio there): the first join attempt times out, the second succeeds.
STA_IF = 0
JOINS = []


class WLAN:
    def __init__(self, iface):
        self._up = False
        self._joined = False

    def active(self, flag=None):
        if flag is not None:
            self._up = flag
        return self._up

    def connect(self, ssid, password):
        JOINS.append(ssid)
        self._joined = len(JOINS) >= 2

    def isconnected(self):
        return self._up and self._joined
