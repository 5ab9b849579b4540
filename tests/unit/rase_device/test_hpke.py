"""The device's pure-Python X25519, ChaCha20-Poly1305 and HPKE against the
published vectors (RFC 7748, RFC 8439, RFC 9180: tests/fixtures/hpke, README
there) and against `cryptography` on random inputs, both directions."""

import json
import random
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from rase_device import chacha20poly1305 as aead
from rase_device import hpke, x25519
from rase_device.prio3 import prio3_histogram, prio3_sum
from rase_device.prio3_report import helper_share_info, make_report
from rase_common.vdaf import hpke as server_hpke

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hpke"
RFC9180 = json.loads((FIXTURES / "rfc9180_base_x25519_sha256_chacha20poly1305.json").read_text())
PRIMITIVES = json.loads((FIXTURES / "rfc7748_rfc8439.json").read_text())
H = bytes.fromhex


def test_rfc9180_key_derivation_and_context():
    sk_r, pk_r = hpke.derive_key_pair(H(RFC9180["ikmR"]))
    assert (sk_r.hex(), pk_r.hex()) == (RFC9180["skRm"], RFC9180["pkRm"])
    sk_e, pk_e = hpke.derive_key_pair(H(RFC9180["ikmE"]))
    assert (sk_e.hex(), pk_e.hex()) == (RFC9180["skEm"], RFC9180["pkEm"])
    shared, enc = hpke.encap(pk_r, H(RFC9180["ikmE"]))
    assert (shared.hex(), enc.hex()) == (RFC9180["shared_secret"], RFC9180["enc"])
    assert hpke.decap(enc, sk_r).hex() == RFC9180["shared_secret"]
    ctx = hpke.Context(shared, H(RFC9180["info"]))
    assert (ctx.key.hex(), ctx.base_nonce.hex(), ctx.exporter_secret.hex()) == (
        RFC9180["key"], RFC9180["base_nonce"], RFC9180["exporter_secret"])


def test_rfc9180_all_257_encryptions_and_exports():
    sk_r = H(RFC9180["skRm"])
    enc, sender = hpke.setup_base_s(H(RFC9180["pkRm"]), H(RFC9180["info"]), H(RFC9180["ikmE"]))
    receiver = hpke.setup_base_r(enc, sk_r, H(RFC9180["info"]))
    assert len(RFC9180["encryptions"]) == 257
    for i, e in enumerate(RFC9180["encryptions"]):
        assert sender._nonce().hex() == e["nonce"], i
        assert sender.seal(H(e["aad"]), H(e["pt"])).hex() == e["ct"], i
        assert receiver.open(H(e["aad"]), H(e["ct"])).hex() == e["pt"], i
    for e in RFC9180["exports"]:
        assert sender.export(H(e["exporter_context"]), e["L"]).hex() == e["exported_value"]


def test_rfc7748_x25519():
    for v in PRIMITIVES["x25519"]:
        assert x25519.x25519(H(v["scalar"]), H(v["u"])).hex() == v["out"]


def test_rfc8439_chacha20_poly1305_and_aead():
    for v in PRIMITIVES["chacha20"]:
        assert aead.chacha20(H(v["key"]), v["counter"], H(v["nonce"]), H(v["pt"])).hex() == v["ct"]
    for v in PRIMITIVES["poly1305"]:
        assert aead.poly1305(H(v["key"]), H(v["msg"])).hex() == v["tag"]
    for v in PRIMITIVES["chacha20poly1305"]:
        sealed = H(v["ct"] + v["tag"])
        if v["valid"]:
            assert aead.seal(H(v["key"]), H(v["nonce"]), H(v["aad"]), H(v["pt"])) == sealed
            assert aead.open_(H(v["key"]), H(v["nonce"]), H(v["aad"]), sealed).hex() == v["pt"]
        else:
            with pytest.raises(aead.AuthenticationError):
                aead.open_(H(v["key"]), H(v["nonce"]), H(v["aad"]), sealed)


def test_x25519_matches_cryptography_on_random_keys():
    rng = random.Random(25519)
    for _ in range(20):
        a, b = rng.randbytes(32), rng.randbytes(32)
        ref_a = X25519PrivateKey.from_private_bytes(a)
        pub_b = X25519PrivateKey.from_private_bytes(b).public_key().public_bytes_raw()
        assert x25519.public_key(a) == ref_a.public_key().public_bytes_raw()
        assert x25519.shared_secret(a, pub_b) == ref_a.exchange(X25519PublicKey.from_public_bytes(pub_b))


def test_x25519_at_the_edges_of_the_field_matches_cryptography():
    # u-coordinates at and above p (non-canonical), the top bit set, all ones:
    # the loose reduction inside the ladder must not overflow its bounds.
    p = (1 << 255) - 19
    edges = [p - 1, p, p + 1, (1 << 255) - 1, (1 << 256) - 1, 2, 3, 1 << 254]
    for i, u in enumerate(edges):
        k = bytes([0xFF] * 32) if i % 2 else bytes(range(32))
        try:
            ref = X25519PrivateKey.from_private_bytes(k).exchange(
                X25519PublicKey.from_public_bytes(u.to_bytes(32, "little")))
        except ValueError:  # cryptography refuses the all-zero result of a small-order point
            ref = bytes(32)
        assert x25519.x25519(k, u.to_bytes(32, "little")) == ref, hex(u)


def test_x25519_refuses_a_small_order_point():
    with pytest.raises(ValueError, match="all-zero"):
        x25519.shared_secret(bytes(range(32)), bytes(32))


def test_chacha20poly1305_matches_cryptography():
    rng = random.Random(8439)
    for n in (0, 1, 63, 64, 65, 200):
        key, nonce, aad, pt = rng.randbytes(32), rng.randbytes(12), rng.randbytes(n % 17), rng.randbytes(n)
        assert aead.seal(key, nonce, aad, pt) == ChaCha20Poly1305(key).encrypt(nonce, pt, aad)


def test_device_seal_opens_with_cryptography_and_back():
    sk, pk = server_hpke.generate_keypair()
    rng = random.Random(9180)
    for n in (0, 32, 64, 300):
        pt, info = rng.randbytes(n), rng.randbytes(n % 40)
        sealed = hpke.seal(pk, info, b"", pt, rng.randbytes)
        assert server_hpke.open_sealed(sk, info, sealed) == pt
        assert hpke.open_(sk, info, b"", server_hpke.seal(pk, info, pt)) == pt


def test_a_share_altered_after_sealing_does_not_open():
    sk, pk = server_hpke.generate_keypair()
    v = prio3_sum(4095)
    rng = random.Random(3)
    nonce, public, _, sealed = make_report(v, b"ctx", 100, pk, rng.randbytes)
    info = helper_share_info(b"ctx", nonce, public)
    assert server_hpke.open_sealed(sk, info, sealed) is not None
    for pos in (0, 31, 32, len(sealed) - 17, len(sealed) - 1):  # enc, ciphertext, tag
        altered = bytearray(sealed)
        altered[pos] ^= 0x01
        assert server_hpke.open_sealed(sk, info, bytes(altered)) is None
        with pytest.raises(hpke.OpenError):
            hpke.open_(sk, info, b"", bytes(altered))
    # Moved to another report (other nonce) or another context: does not open either.
    assert server_hpke.open_sealed(sk, helper_share_info(b"ctx", bytes(16), public), sealed) is None
    assert server_hpke.open_sealed(sk, helper_share_info(b"other", nonce, public), sealed) is None


def test_make_report_seals_the_helper_share_of_the_same_shard():
    sk, pk = server_hpke.generate_keypair()
    v = prio3_histogram(5, 2)
    stream = random.Random(11).randbytes(16 + v.RAND_SIZE + 32)
    pos = [0]

    def read(n):
        pos[0] += n
        return stream[pos[0] - n:pos[0]]
    nonce, public, leader, sealed = make_report(v, b"ctx", 3, pk, read)
    want_public, want_inputs = v.shard(b"ctx", 3, stream[:16], stream[16:16 + v.RAND_SIZE])
    assert nonce == stream[:16] and public == want_public and leader == want_inputs[0]
    assert server_hpke.open_sealed(sk, helper_share_info(b"ctx", nonce, public), sealed) == want_inputs[1]
