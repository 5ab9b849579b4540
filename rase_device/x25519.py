# X25519 (RFC 7748), pure Python for the device. MicroPython-compatible.
#
# Field elements are kept loosely reduced and folded with 2**255 = 19 (mod p),
# which costs shifts, masks and a small multiply instead of a big-integer
# division per operation (division is slow on MicroPython). A ladder step's
# outputs are folded twice (below 2**256); values used only inside the step
# once (below 2**266), with offsets K = P << 11 > 2**265 keeping differences
# positive. Only the final inversion uses pow(). Python's big integers are not
# constant-time; see docs/api.md (Prio3 section) on what that means.

P = (1 << 255) - 19
_M255 = (1 << 255) - 1
_M256 = (1 << 256) - 1
_FOUR_P = 4 * P  # added before subtracting a value below 2**256
_K = P << 11  # added before subtracting a value below 2**265
A24 = 121665
BASE_POINT = (9).to_bytes(32, "little")


def _fold(x):
    # 0 <= x < 2**1000 in -> < 2**256 out, congruent mod p.
    x = (x & _M255) + 19 * (x >> 255)
    return (x & _M255) + 19 * (x >> 255)


def _fold1(x):
    # x < 2**540 in -> < 2**255 + 19 * 2**285 out; only for values inside a step.
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
        # Bounds (x2, z2, x3, z3 < 2**256 on entry): a, c < 2**257; b, dd < 2**258;
        # aa < 2**263.3; bb < 2**265.3; da, cb < 2**264.3; e, s < 2**266.7.
        a = x2 + z2
        aa = _fold1(a * a)
        b = x2 - z2 + _FOUR_P
        bb = _fold1(b * b)
        e = aa - bb + _K
        c = x3 + z3
        dd = x3 - z3 + _FOUR_P
        da = _fold1(dd * a)
        cb = _fold1(c * b)
        s = da + cb
        x3 = _fold(s * s)
        s = da - cb + _K
        z3 = _fold(x1 * _fold1(s * s))
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
