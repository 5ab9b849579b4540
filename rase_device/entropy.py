# Random bits from the OS CSPRNG, buffered.
# MicroPython-compatible: no typing, no f-strings, small ints where possible.
#
# Why buffered: one os.urandom call per random bit would be dominated by the
# system call. The buffer holds CSPRNG output only; nothing is derived from a
# seed. Tests inject `read` (a function n -> bytes) to make draws repeatable.


def system_read():
    """Return the OS CSPRNG as a function n -> bytes, or raise OSError."""
    import os
    urandom = getattr(os, "urandom", None)
    if urandom is None:
        raise OSError("no os.urandom on this platform: pass read= explicitly")
    return urandom


def bit_length(n):
    """Number of bits of a non-negative int (MicroPython lacks int.bit_length)."""
    k = 0
    while n:
        n >>= 1
        k += 1
    return k


class RandomBits:
    """Uniform random bits and integers drawn from a byte source.

    read: function n -> bytes-like of n CSPRNG bytes (default os.urandom).
    chunk: bytes fetched per call to read.
    """

    def __init__(self, read=None, chunk=64):
        if chunk < 1:
            raise ValueError("chunk must be >= 1, got %r" % (chunk,))
        self._read = read if read is not None else system_read()
        self._chunk = chunk
        self._buf = b""
        self._pos = 0
        self._cur = 0
        self._nbits = 0

    def byte(self):
        if self._pos >= len(self._buf):
            buf = bytes(self._read(self._chunk))
            if len(buf) != self._chunk:
                raise OSError("entropy source returned %d bytes, wanted %d" % (len(buf), self._chunk))
            self._buf = buf
            self._pos = 0
        b = self._buf[self._pos]
        self._pos += 1
        return b

    def bit(self):
        if self._nbits == 0:
            self._cur = self.byte()
            self._nbits = 8
        self._nbits -= 1
        return (self._cur >> self._nbits) & 1

    def below(self, n, nbits):
        """Uniform integer in [0, n); nbits = bit_length(n - 1), precomputed by the caller."""
        nbytes = (nbits + 7) >> 3
        mask = (1 << nbits) - 1
        while True:
            r = 0
            for _ in range(nbytes):
                r = (r << 8) | self.byte()
            r &= mask
            if r < n:
                return r

    def bernoulli(self, num, den):
        """True with probability num/den exactly (0 <= num <= den).

        Compares a uniform U = 0.b1b2... with p = num/den bit by bit; expected
        two random bits, integers never exceed 2*den.
        """
        while True:
            num += num
            if num >= den:
                pbit = 1
                num -= den
            else:
                pbit = 0
            if self.bit() != pbit:
                return pbit == 1
