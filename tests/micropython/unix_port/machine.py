# Stand-in for `machine` under the MicroPython unix port. WDT does what the
# hardware would: if the gap between two feeds exceeds its timeout, the board
# is reset (here: the process exits with code 3 after saying so). It also
# keeps the longest gap seen in the file `wdt_max_gap_ms` for the test.
import sys
import time

RESET_EXIT = 3


class WDT:
    def __init__(self, timeout=5000):
        self.timeout_ms = timeout
        self.last = time.ticks_ms()
        self.max_gap_ms = 0

    def feed(self):
        now = time.ticks_ms()
        gap = time.ticks_diff(now, self.last)
        self.last = now
        if gap > self.max_gap_ms:
            self.max_gap_ms = gap
            with open("wdt_max_gap_ms", "w") as f:
                f.write(str(gap))
        if gap > self.timeout_ms:
            print("machine stand-in: WATCHDOG RESET: not fed for %d ms (timeout %d ms)" % (gap, self.timeout_ms))
            sys.exit(RESET_EXIT)


def reset():
    print("machine stand-in: machine.reset()")
    sys.exit(4)


class Pin:
    def __init__(self, n, *args):
        self.n = n


class ADC:
    """Reads mid-scale, as a clamp biased to mid-rail does with no current."""
    ATTN_11DB = 3
    opened = []

    def __init__(self, pin, *args, **kw):
        ADC.opened.append(pin.n if isinstance(pin, Pin) else pin)

    def atten(self, a):
        pass

    def read_u16(self):
        return 32768
