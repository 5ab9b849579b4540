# X25519 (RFC 7748), pure Python for the device. MicroPython-compatible.
#
# Field elements are kept loosely reduced below 2**256 and folded with
# 2**255 = 19 (mod p), which costs shifts, masks and a small multiply instead
# of a big-integer division per operation (division is slow on MicroPython).
# Only the final inversion uses pow(). Python's big integers are not
# constant-time; see docs/privacy.md on what that means for a device.

P = (1 << 255) - 19
_M255 = (1 << 255) - 1
_M256 = (1 << 256) - 1
_FOUR_P = 4 * P  # added before a subtraction so the result stays positive
A24 = 121665
BASE_POINT = (9).to_bytes(32, "little")


def _fold(x):
    # x < 2**540 in -> < 2**256 out, congruent mod p.
    x = (x & _M255) + 19 * (x >> 255)
    return (x & _M255) + 19 * (x >> 255)


def decode_scalar(k):
    if len(k) != 32:
        raise ValueError("an X25519 scalar is 32 bytes, got %d" % len(k))
    b = bytearray(k)
    b[0] &= 248
    b[31] &= 127
    b[31] |= 64
    return int.from_bytes(bytes(b), "little")


def decode_u(u):
    if len(u) != 32:
        raise ValueError("an X25519 u-coordinate is 32 bytes, got %d" % len(u))
    b = bytearray(u)
    b[31] &= 127
    return int.from_bytes(bytes(b), "little")


def _ladder(k, u):
    x1 = u % P
    x2, z2, x3, z3 = 1, 0, x1, 1
    swap = 0
    for t in range(254, -1, -1):
        bit = (k >> t) & 1
        mask = _M256 * (swap ^ bit)
        d = mask & (x2 ^ x3)
        x2 ^= d
        x3 ^= d
        d = mask & (z2 ^ z3)
        z2 ^= d
        z3 ^= d
        swap = bit
        a = x2 + z2
        aa = _fold(a * a)
        b = x2 - z2 + _FOUR_P
        bb = _fold(b * b)
        e = aa - bb + _FOUR_P
        c = x3 + z3
        dd = x3 - z3 + _FOUR_P
        da = _fold(dd * a)
        cb = _fold(c * b)
        s = da + cb
        x3 = _fold(s * s)
        s = da - cb + _FOUR_P
        z3 = _fold(x1 * _fold(s * s))
        x2 = _fold(aa * bb)
        z2 = _fold(e * (aa + A24 * e))
    mask = _M256 * swap
    d = mask & (x2 ^ x3)
    x2 ^= d
    d = mask & (z2 ^ z3)
    z2 ^= d
    return x2 * pow(z2, P - 2, P) % P


def x25519(k, u):
    """X25519(k, u): 32-byte scalar and u-coordinate in, 32-byte u-coordinate out."""
    return _ladder(decode_scalar(k), decode_u(u)).to_bytes(32, "little")


def public_key(sk):
    return x25519(sk, BASE_POINT)


def shared_secret(sk, pk):
    """The Diffie-Hellman value; refuses the all-zero output (RFC 7748 section 6.1)."""
    out = x25519(sk, pk)
    if out == bytes(32):
        raise ValueError("X25519 produced the all-zero value: the peer's public key is of small order")
    return out
