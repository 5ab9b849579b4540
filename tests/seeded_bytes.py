"""A seedable byte source whose source text runs unchanged on CPython and
MicroPython, so both can be fed the same stream. Tests only: never noise."""

SOURCE = '''
class XorShiftBytes:
    def __init__(self, seed):
        self.s = (seed & 0xFFFFFFFF) or 1

    def __call__(self, n):
        out = bytearray(n)
        s = self.s
        for i in range(n):
            s ^= (s << 13) & 0xFFFFFFFF
            s ^= s >> 17
            s ^= (s << 5) & 0xFFFFFFFF
            out[i] = s >> 24
        self.s = s
        return bytes(out)
'''

_ns: dict = {}
exec(SOURCE, _ns)
XorShiftBytes = _ns["XorShiftBytes"]
