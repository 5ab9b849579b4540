# TurboSHAKE128 (RFC 9861) and the VDAF draft's XofTurboShake128, pure Python.
# MicroPython-compatible. Each 64-bit Keccak lane is kept as two 32-bit
# halves so that every intermediate stays a small int on 64-bit ports (no
# big-int allocation per operation); the permutation is Keccak-p[1600, 12].

from rase_device.vdaf_field import next_power_of_2

RATE = 168  # bytes: TurboSHAKE128's capacity is 256 bits
_M32 = 0xFFFFFFFF

# Round constants of Keccak-f[1600] rounds 12..23 (the 12 rounds of
# Keccak-p[1600, 12]) as (high, low) 32-bit halves; checked against FIPS 202's
# LFSR in tests/unit/rase_device/test_prio3.py.
_RC = (
    (0x00000000, 0x8000808B), (0x80000000, 0x0000008B), (0x80000000, 0x00008089), (0x80000000, 0x00008003),
    (0x80000000, 0x00008002), (0x80000000, 0x00000080), (0x00000000, 0x0000800A), (0x80000000, 0x8000000A),
    (0x80000000, 0x80008081), (0x80000000, 0x00008080), (0x00000000, 0x80000001), (0x80000000, 0x80008008),
)

# rho offsets by lane index x + 5*y, and pi's destination of each lane.
_ROT = (0, 1, 62, 28, 27, 36, 44, 6, 55, 20, 3, 10, 43, 25, 39, 41, 45, 15, 21, 8, 18, 2, 61, 56, 14)
# pi maps lane (x, y) to (y, 2x + 3y): destination index y + 5 * ((2x + 3y) % 5).
_DEST = tuple(y + 5 * ((2 * x + 3 * y) % 5) for y in range(5) for x in range(5))


def _rot(hi, lo, r):
    """Rotate the 64-bit lane (hi, lo) left by r; returns (hi, lo)."""
    if r >= 32:
        hi, lo = lo, hi
        r -= 32
    if r == 0:
        return hi, lo
    s = 32 - r
    return ((hi << r) | (lo >> s)) & _M32, ((lo << r) | (hi >> s)) & _M32


def keccak_p12(hi, lo):
    """Keccak-p[1600, 12] in place on 25 lanes split into hi[] and lo[]."""
    bh = [0] * 25
    bl = [0] * 25
    for rch, rcl in _RC:
        # theta
        ch = [hi[x] ^ hi[x + 5] ^ hi[x + 10] ^ hi[x + 15] ^ hi[x + 20] for x in range(5)]
        cl = [lo[x] ^ lo[x + 5] ^ lo[x + 10] ^ lo[x + 15] ^ lo[x + 20] for x in range(5)]
        for x in range(5):
            h1 = ch[(x + 1) % 5]
            l1 = cl[(x + 1) % 5]
            dh = ch[(x - 1) % 5] ^ (((h1 << 1) | (l1 >> 31)) & _M32)
            dl = cl[(x - 1) % 5] ^ (((l1 << 1) | (h1 >> 31)) & _M32)
            for i in range(x, 25, 5):
                hi[i] ^= dh
                lo[i] ^= dl
        # rho and pi
        for i in range(25):
            d = _DEST[i]
            bh[d], bl[d] = _rot(hi[i], lo[i], _ROT[i])
        # chi
        for y in range(0, 25, 5):
            for x in range(5):
                i1 = y + (x + 1) % 5
                i2 = y + (x + 2) % 5
                hi[y + x] = bh[y + x] ^ ((bh[i1] ^ _M32) & bh[i2])
                lo[y + x] = bl[y + x] ^ ((bl[i1] ^ _M32) & bl[i2])
        # iota
        hi[0] ^= rch
        lo[0] ^= rcl


class TurboShake128:
    """TurboSHAKE128(M, D, L) as a sponge: update(M) any number of times, then read(n) repeatedly."""

    def __init__(self, domain):
        if not 1 <= domain <= 0x7F:
            raise ValueError("TurboSHAKE domain byte must be in [0x01, 0x7F], got %r" % (domain,))
        self._domain = domain
        self._hi = [0] * 25
        self._lo = [0] * 25
        self._buf = bytearray()
        self._out = b""
        self._squeezing = False

    def _absorb_block(self, block):
        hi = self._hi
        lo = self._lo
        for i in range(RATE // 8):
            lo[i] ^= int.from_bytes(block[8 * i:8 * i + 4], "little")
            hi[i] ^= int.from_bytes(block[8 * i + 4:8 * i + 8], "little")
        keccak_p12(hi, lo)

    def update(self, data):
        if self._squeezing:
            raise ValueError("TurboSHAKE128: update after read")
        self._buf += data
        while len(self._buf) >= RATE:
            self._absorb_block(self._buf[:RATE])
            self._buf = self._buf[RATE:]
        return self

    def _squeeze_block(self):
        out = bytearray(RATE)
        for i in range(RATE // 8):
            out[8 * i:8 * i + 4] = self._lo[i].to_bytes(4, "little")
            out[8 * i + 4:8 * i + 8] = self._hi[i].to_bytes(4, "little")
        return bytes(out)

    def read(self, n):
        if not self._squeezing:
            last = bytearray(RATE)
            last[:len(self._buf)] = self._buf
            last[len(self._buf)] ^= self._domain
            last[RATE - 1] ^= 0x80
            self._absorb_block(last)
            self._buf = bytearray()
            self._squeezing = True
            self._out = self._squeeze_block()
        parts = []
        while n > 0:
            if not self._out:
                keccak_p12(self._hi, self._lo)
                self._out = self._squeeze_block()
            take = self._out[:n]
            self._out = self._out[n:]
            parts.append(take)
            n -= len(take)
        return b"".join(parts)


def xof_message(seed, dst, binder):
    """XofTurboShake128's input to TurboSHAKE128: len(dst) (2 bytes LE) || dst ||
    len(seed) (1 byte) || seed || binder."""
    if len(seed) > 255:
        raise ValueError("XofTurboShake128 seed is at most 255 bytes, got %d" % len(seed))
    if len(dst) > 65535:
        raise ValueError("XofTurboShake128 dst is at most 65535 bytes, got %d" % len(dst))
    return len(dst).to_bytes(2, "little") + dst + bytes((len(seed),)) + seed + binder


class XofTurboShake128:
    """The draft's XofTurboShake128: TurboSHAKE128 with domain byte 1."""

    SEED_SIZE = 32

    def __init__(self, seed, dst, binder):
        self._sponge = TurboShake128(1).update(xof_message(seed, dst, binder))

    def next(self, n):
        return self._sponge.read(n)

    def next_vec(self, field, length):
        """length field elements by rejection sampling (mask to the modulus' bit length)."""
        size = field.ENCODED_SIZE
        mask = next_power_of_2(field.MODULUS) - 1
        out = []  # type: list
        while len(out) < length:
            x = int.from_bytes(self.next(size), "little") & mask
            if x < field.MODULUS:
                out.append(x)
        return out


def derive_seed(seed, dst, binder):
    return XofTurboShake128(seed, dst, binder).next(XofTurboShake128.SEED_SIZE)


def expand_into_vec(field, seed, dst, binder, length):
    return XofTurboShake128(seed, dst, binder).next_vec(field, length)
