"""The device core's Prio3 pieces on CPython: fields, TurboSHAKE128, the
draft's XofTurboShake128 vector, sharding against every shard vector, the
encodings' input checks. (The aggregators' steps of the same vectors:
tests/unit/rase_common/test_vdaf_conformance.py.)"""

import json
import random
from pathlib import Path

import pytest
from xoflib import turbo_shake128

from rase_device import flp
from rase_device.prio3 import prio3_count, prio3_histogram, prio3_sum
from rase_device.turboshake import TurboShake128, XofTurboShake128, _RC, derive_seed, expand_into_vec
from rase_device.vdaf_field import FIELD64, FIELD128, next_power_of_2

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vdaf"
SHARD_VECTORS = sorted(p.name for p in FIXTURES.glob("Prio3*.json") if "_bad_" not in p.name)


def vdaf_for(name, vec):
    if name.startswith("Prio3Count"):
        return prio3_count(vec["shares"])
    if name.startswith("Prio3Sum"):
        return prio3_sum(vec["max_measurement"], vec["shares"])
    return prio3_histogram(vec["length"], vec["chunk_length"], vec["shares"])


@pytest.mark.parametrize("name", SHARD_VECTORS)
def test_shard_vectors(name):
    vec = json.loads((FIXTURES / name).read_text())
    vdaf = vdaf_for(name, vec)
    ctx = bytes.fromhex(vec["ctx"])
    for r in vec["reports"]:
        public, inputs = vdaf.shard(ctx, r["measurement"], bytes.fromhex(r["nonce"]), bytes.fromhex(r["rand"]))
        assert public.hex() == r["public_share"]
        assert [s.hex() for s in inputs] == r["input_shares"]


def test_xof_turboshake128_vector():
    vec = json.loads((FIXTURES / "XofTurboShake128.json").read_text())
    seed, dst, binder = (bytes.fromhex(vec[k]) for k in ("seed", "dst", "binder"))
    assert derive_seed(seed, dst, binder).hex() == vec["derived_seed"]
    expanded = expand_into_vec(FIELD128, seed, dst, binder, vec["length"])
    assert FIELD128.encode_vec(expanded).hex() == vec["expanded_vec_field128"]


def _fips202_round_constants():
    # FIPS 202 Algorithm 5 (rc: an LFSR over R[0..7], R[0] the low bit here)
    # and Algorithm 6 (bit 2**j - 1 of round i's constant is rc(j + 7i)).
    def rc(t):
        r = 1
        for _ in range(t % 255):
            r <<= 1
            if r & 0x100:
                r ^= 0x171
        return r & 1
    return [sum(rc(j + 7 * i) << ((1 << j) - 1) for j in range(7)) for i in range(24)]


def test_round_constants_are_keccak_f_rounds_12_to_23():
    want = _fips202_round_constants()[12:]
    assert [(hi << 32) | lo for hi, lo in _RC] == want


@pytest.mark.parametrize("domain", [0x01, 0x06, 0x0B, 0x7F])
def test_turboshake128_matches_xoflib(domain):
    rng = random.Random(domain)
    for length in (0, 1, 167, 168, 169, 336, 1000):
        msg = rng.randbytes(length)
        ours = TurboShake128(domain).update(msg[:length // 2]).update(msg[length // 2:])
        assert ours.read(10) + ours.read(400) == turbo_shake128(domain, msg).read(410)


def test_turboshake_rejects_bad_domain_and_update_after_read():
    with pytest.raises(ValueError, match="domain"):
        TurboShake128(0x80)
    s = TurboShake128(1)
    s.read(1)
    with pytest.raises(ValueError, match="update after read"):
        s.update(b"x")


@pytest.mark.parametrize("field", [FIELD64, FIELD128], ids=str)
def test_ntt_matches_direct_evaluation(field):
    rng = random.Random(7)
    p = field.MODULUS
    for n in (1, 2, 8, 32):
        coeffs = [rng.randrange(p) for _ in range(n)]
        for set_s in (False, True):
            s = field.nth_root(2 * n) if set_s else 1
            w = field.nth_root(n)
            direct = [sum(c * pow(s * pow(w, i, p), k, p) for k, c in enumerate(coeffs)) % p for i in range(n)]
            assert field.ntt(coeffs, n, set_s) == direct
        assert field.inv_ntt(field.ntt(coeffs, n), n) == coeffs
    assert pow(field.nth_root(1 << field.LOG2_GEN_ORDER), 1 << (field.LOG2_GEN_ORDER - 1), p) == p - 1


@pytest.mark.parametrize("field", [FIELD64, FIELD128], ids=str)
def test_field_encoding_round_trip_and_rejects_non_canonical(field):
    vec = [0, 1, field.MODULUS - 1, 12345]
    assert field.decode_vec(field.encode_vec(vec)) == vec
    with pytest.raises(ValueError, match="not below the modulus"):
        field.decode_vec(field.MODULUS.to_bytes(field.ENCODED_SIZE, "little"))
    with pytest.raises(ValueError, match="whole number"):
        field.decode_vec(bytes(field.ENCODED_SIZE + 1))


def test_sum_encoding_covers_exactly_zero_to_max():
    for max_measurement in (1, 2, 3, 255, 1337, 4095):
        valid = flp.Sum(FIELD64, max_measurement)
        for m in range(max_measurement + 1):
            bits = valid.encode(m)
            assert set(bits) <= {0, 1} and valid.truncate(FIELD64, bits) == [m]
        with pytest.raises(ValueError, match="Sum measurement"):
            valid.encode(max_measurement + 1)


@pytest.mark.parametrize("bad", [
    lambda: prio3_count().shard(b"", 2, bytes(16), bytes(64)),
    lambda: prio3_sum(10).shard(b"", -1, bytes(16), bytes(64)),
    lambda: prio3_histogram(4, 2).shard(b"", 4, bytes(16), bytes(128)),
    lambda: prio3_count().shard(b"", 1, bytes(15), bytes(64)),
    lambda: prio3_count().shard(b"", 1, bytes(16), bytes(63)),
    lambda: prio3_histogram(4, 5),
    lambda: prio3_sum(0),
    lambda: prio3_count(shares=1),
])
def test_bad_input_is_one_clear_value_error(bad):
    with pytest.raises(ValueError):
        bad()


def test_rand_size_and_message_sizes():
    assert prio3_count().RAND_SIZE == 64 and prio3_histogram(4, 2).RAND_SIZE == 128
    v = prio3_sum(4095)
    public, inputs = v.shard(b"ctx", 4095, bytes(16), bytes(range(64)))
    assert len(public) == v.public_share_size() == 0
    assert [len(s) for s in inputs] == [v.input_share_size(0), v.input_share_size(1)]
    h = prio3_histogram(20, 4)
    public, inputs = h.shard(b"ctx", 19, bytes(16), bytes(range(128)))
    assert len(public) == h.public_share_size() == 64
    assert [len(s) for s in inputs] == [h.input_share_size(0), h.input_share_size(1)]
    assert next_power_of_2(5) == 8 and XofTurboShake128.SEED_SIZE == 32
