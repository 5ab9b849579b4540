"""HPKE on the server, from `cryptography` (its hpke module, RFC 9180 single
shot): DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305, base mode,
the suite the device seals with (rase_device.hpke). A sealed message is
enc (32 bytes) || ciphertext, the same layout on both sides; the AAD is empty
and the binding to the report travels in `info`
(rase_device.prio3_report.helper_share_info).
"""

from __future__ import annotations

from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.hpke import AEAD, KDF, KEM, Suite

from rase_device.prio3_report import helper_share_info

SUITE = Suite(KEM.X25519, KDF.HKDF_SHA256, AEAD.CHACHA20_POLY1305)
_RAW = (serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def generate_keypair() -> tuple[bytes, bytes]:
    """(private key, public key), 32 raw bytes each, from the OS CSPRNG."""
    sk = X25519PrivateKey.generate()
    return (sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption()),
            sk.public_key().public_bytes(*_RAW))


def public_key(private_key: bytes) -> bytes:
    return X25519PrivateKey.from_private_bytes(private_key).public_key().public_bytes(*_RAW)


def seal(public_key_raw: bytes, info: bytes, plaintext: bytes) -> bytes:
    return SUITE.encrypt(plaintext, X25519PublicKey.from_public_bytes(public_key_raw), info=info)


def open_sealed(private_key: bytes, info: bytes, sealed: bytes) -> bytes | None:
    """The plaintext, or None when it does not open (altered, wrong key or info)."""
    try:
        return SUITE.decrypt(sealed, X25519PrivateKey.from_private_bytes(private_key), info=info)
    except (InvalidTag, ValueError):
        return None


def open_helper_shares(private_key: bytes, ctx: bytes, nonces: Sequence[bytes], public_shares: Sequence[bytes],
                       sealed: Sequence[bytes]) -> list[bytes | None]:
    """Decrypt every report's sealed helper input share; None where it fails
    (verify_init then rejects that report as decrypt_failed)."""
    sk = X25519PrivateKey.from_private_bytes(private_key)
    out: list[bytes | None] = []
    for nonce, pub, ct in zip(nonces, public_shares, sealed):
        try:
            out.append(SUITE.decrypt(bytes(ct), sk, info=helper_share_info(ctx, bytes(nonce), bytes(pub))))
        except (InvalidTag, ValueError):
            out.append(None)
    return out
