# ChaCha20, Poly1305 and the ChaCha20-Poly1305 AEAD (RFC 8439), pure Python
# for the device. MicroPython-compatible: 32-bit words, which stay small ints
# on 64-bit ports; no tables, so no data-dependent memory access.

_M32 = 0xFFFFFFFF
_SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)  # "expand 32-byte k"
_P1305 = (1 << 130) - 5
_CLAMP = 0x0FFFFFFC0FFFFFFC0FFFFFFC0FFFFFFF
KEY_SIZE = 32
NONCE_SIZE = 12
TAG_SIZE = 16


class AuthenticationError(ValueError):
    """The tag does not match: the ciphertext, the AAD or the key is wrong."""


def _words(data):
    return [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]


def _quarter(s, a, b, c, d):
    x = (s[a] + s[b]) & _M32
    y = s[d] ^ x
    y = ((y << 16) & _M32) | (y >> 16)
    z = (s[c] + y) & _M32
    w = s[b] ^ z
    w = ((w << 12) & _M32) | (w >> 20)
    x = (x + w) & _M32
    y ^= x
    y = ((y << 8) & _M32) | (y >> 24)
    z = (z + y) & _M32
    w ^= z
    s[a] = x
    s[b] = ((w << 7) & _M32) | (w >> 25)
    s[c] = z
    s[d] = y


def block(key, counter, nonce):
    """The 64-byte ChaCha20 block for (key, 32-bit counter, 12-byte nonce)."""
    init = list(_SIGMA) + _words(key) + [counter & _M32] + _words(nonce)
    s = list(init)
    for _ in range(10):
        _quarter(s, 0, 4, 8, 12)
        _quarter(s, 1, 5, 9, 13)
        _quarter(s, 2, 6, 10, 14)
        _quarter(s, 3, 7, 11, 15)
        _quarter(s, 0, 5, 10, 15)
        _quarter(s, 1, 6, 11, 12)
        _quarter(s, 2, 7, 8, 13)
        _quarter(s, 3, 4, 9, 14)
    out = bytearray(64)
    for i in range(16):
        out[4 * i:4 * i + 4] = ((s[i] + init[i]) & _M32).to_bytes(4, "little")
    return out


def chacha20(key, counter, nonce, data):
    """data XOR the keystream starting at block `counter`."""
    _check(key, nonce)
    out = bytearray(data)
    for off in range(0, len(out), 64):
        ks = block(key, counter + off // 64, nonce)
        for i in range(min(64, len(out) - off)):
            out[off + i] ^= ks[i]
    return bytes(out)


def poly1305(key, msg):
    """The one-time authenticator of msg under a 32-byte one-time key."""
    r = int.from_bytes(key[:16], "little") & _CLAMP
    s = int.from_bytes(key[16:32], "little")
    acc = 0
    for i in range(0, len(msg), 16):
        n = int.from_bytes(msg[i:i + 16] + b"\x01", "little")
        acc = (acc + n) * r % _P1305
    return ((acc + s) & ((1 << 128) - 1)).to_bytes(16, "little")


def _check(key, nonce):
    if len(key) != KEY_SIZE:
        raise ValueError("ChaCha20 key must be %d bytes, got %d" % (KEY_SIZE, len(key)))
    if len(nonce) != NONCE_SIZE:
        raise ValueError("ChaCha20 nonce must be %d bytes, got %d" % (NONCE_SIZE, len(nonce)))


def _mac_data(aad, ct):
    return (aad + bytes(-len(aad) % 16) + ct + bytes(-len(ct) % 16)
            + len(aad).to_bytes(8, "little") + len(ct).to_bytes(8, "little"))


def seal(key, nonce, aad, plaintext):
    """ciphertext || 16-byte tag."""
    _check(key, nonce)
    otk = bytes(block(key, 0, nonce)[:32])
    ct = chacha20(key, 1, nonce, plaintext)
    return ct + poly1305(otk, _mac_data(aad, ct))


def open_(key, nonce, aad, sealed):
    """The plaintext, or AuthenticationError if the tag does not match."""
    _check(key, nonce)
    if len(sealed) < TAG_SIZE:
        raise AuthenticationError("sealed data shorter than the tag")
    ct = sealed[:-TAG_SIZE]
    otk = bytes(block(key, 0, nonce)[:32])
    tag = poly1305(otk, _mac_data(aad, ct))
    diff = 0
    for a, b in zip(tag, sealed[-TAG_SIZE:]):
        diff |= a ^ b
    if diff:
        raise AuthenticationError("ChaCha20-Poly1305 tag mismatch")
    return chacha20(key, 1, nonce, ct)
