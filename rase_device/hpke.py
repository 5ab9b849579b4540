# HPKE (RFC 9180) base mode for one suite: DHKEM(X25519, HKDF-SHA256),
# HKDF-SHA256, ChaCha20-Poly1305. MicroPython-compatible; needs hashlib.sha256,
# which the ESP32, RP2, unix and WebAssembly ports all build in.
#
# ChaCha20-Poly1305 rather than AES-128-GCM: in pure Python it is 32-bit
# add/rotate/xor with no lookup tables (AES needs S-box tables whose access
# pattern depends on the key, and GHASH is a 128-bit carry-less multiply),
# and MicroPython exposes no AES-GCM on any port.

import hashlib

from rase_device import chacha20poly1305 as aead
from rase_device import x25519

KEM_ID = 0x0020
KDF_ID = 0x0001
AEAD_ID = 0x0003
MODE_BASE = 0
N_SECRET = 32
N_ENC = 32
N_SK = 32
N_H = 32
_KEM_SUITE = b"KEM" + KEM_ID.to_bytes(2, "big")
_HPKE_SUITE = b"HPKE" + KEM_ID.to_bytes(2, "big") + KDF_ID.to_bytes(2, "big") + AEAD_ID.to_bytes(2, "big")


class OpenError(ValueError):
    """A sealed message could not be opened: wrong key, info, aad, or altered bytes."""


def hmac_sha256(key, msg):
    if len(key) > 64:
        key = hashlib.sha256(key).digest()
    key = key + bytes(64 - len(key))
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
    inner.update(msg)
    outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))
    outer.update(inner.digest())
    return outer.digest()


def extract(salt, ikm):
    return hmac_sha256(salt if salt else bytes(N_H), ikm)


def expand(prk, info, length):
    if length > 255 * N_H:
        raise ValueError("HKDF-Expand length %d is too large" % length)
    out = b""
    t = b""
    i = 1
    while len(out) < length:
        t = hmac_sha256(prk, t + info + bytes((i,)))
        out += t
        i += 1
    return out[:length]


def labeled_extract(suite, salt, label, ikm):
    return extract(salt, b"HPKE-v1" + suite + label + ikm)


def labeled_expand(suite, prk, label, info, length):
    return expand(prk, length.to_bytes(2, "big") + b"HPKE-v1" + suite + label + info, length)


def derive_key_pair(ikm):
    """(skRm, pkRm) from input keying material, as DHKEM(X25519) specifies."""
    prk = labeled_extract(_KEM_SUITE, b"", b"dkp_prk", ikm)
    sk = labeled_expand(_KEM_SUITE, prk, b"sk", b"", N_SK)
    return sk, x25519.public_key(sk)


def _extract_and_expand(dh, kem_context):
    prk = labeled_extract(_KEM_SUITE, b"", b"eae_prk", dh)
    return labeled_expand(_KEM_SUITE, prk, b"shared_secret", kem_context, N_SECRET)


def encap(pk_r, ikm_e):
    """(shared_secret, enc); the ephemeral key pair comes from ikm_e (N_SK CSPRNG bytes)."""
    if len(pk_r) != N_ENC:
        raise ValueError("an X25519 public key is %d bytes, got %d" % (N_ENC, len(pk_r)))
    sk_e, enc = derive_key_pair(ikm_e)
    dh = x25519.shared_secret(sk_e, pk_r)
    return _extract_and_expand(dh, enc + pk_r), enc


def decap(enc, sk_r):
    if len(enc) != N_ENC:
        raise OpenError("enc must be %d bytes, got %d" % (N_ENC, len(enc)))
    try:
        dh = x25519.shared_secret(sk_r, enc)
    except ValueError as exc:
        raise OpenError(str(exc)) from None
    return _extract_and_expand(dh, enc + x25519.public_key(sk_r))


class Context:
    """An HPKE encryption context: sequence-numbered seal/open and export."""

    def __init__(self, shared_secret, info):
        psk_id_hash = labeled_extract(_HPKE_SUITE, b"", b"psk_id_hash", b"")
        info_hash = labeled_extract(_HPKE_SUITE, b"", b"info_hash", info)
        ksc = bytes((MODE_BASE,)) + psk_id_hash + info_hash
        secret = labeled_extract(_HPKE_SUITE, shared_secret, b"secret", b"")
        self.key = labeled_expand(_HPKE_SUITE, secret, b"key", ksc, aead.KEY_SIZE)
        self.base_nonce = labeled_expand(_HPKE_SUITE, secret, b"base_nonce", ksc, aead.NONCE_SIZE)
        self.exporter_secret = labeled_expand(_HPKE_SUITE, secret, b"exp", ksc, N_H)
        self.seq = 0

    def _nonce(self):
        if self.seq >= (1 << (8 * aead.NONCE_SIZE)) - 1:
            raise ValueError("HPKE message limit reached")
        seq = self.seq.to_bytes(aead.NONCE_SIZE, "big")
        return bytes(a ^ b for a, b in zip(self.base_nonce, seq))

    def seal(self, aad, pt):
        ct = aead.seal(self.key, self._nonce(), aad, pt)
        self.seq += 1
        return ct

    def open(self, aad, ct):
        try:
            pt = aead.open_(self.key, self._nonce(), aad, ct)
        except aead.AuthenticationError as exc:
            raise OpenError(str(exc)) from None
        self.seq += 1
        return pt

    def export(self, exporter_context, length):
        return labeled_expand(_HPKE_SUITE, self.exporter_secret, b"sec", exporter_context, length)


def setup_base_s(pk_r, info, ikm_e):
    shared, enc = encap(pk_r, ikm_e)
    return enc, Context(shared, info)


def setup_base_r(enc, sk_r, info):
    return Context(decap(enc, sk_r), info)


def seal(pk_r, info, aad, pt, read):
    """Single-shot base-mode seal: enc || ciphertext. read(n) gives CSPRNG bytes."""
    enc, ctx = setup_base_s(pk_r, info, bytes(read(N_SK)))
    return enc + ctx.seal(aad, pt)


def open_(sk_r, info, aad, sealed):
    """The plaintext of a single-shot seal, or OpenError."""
    if len(sealed) < N_ENC + aead.TAG_SIZE:
        raise OpenError("sealed message of %d bytes is too short" % len(sealed))
    return setup_base_r(sealed[:N_ENC], sk_r, info).open(aad, sealed[N_ENC:])
