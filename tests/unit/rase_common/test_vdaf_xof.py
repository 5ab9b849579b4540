"""The aggregators' batch XOF against the device core's XofTurboShake128
(itself checked against the draft's vectors), including the rejection of an
element at or above the modulus."""

import os

import numpy as np
import pytest

from rase_device.turboshake import derive_seed, expand_into_vec
from rase_device.vdaf_field import FIELD64, FIELD128
from rase_common.vdaf import xof
from rase_common.vdaf.field import vector_field

DST = b"\x0c\x00\x00\x00\x00\x00\x04\x00\x05rase test"


@pytest.mark.parametrize("field", [FIELD64, FIELD128], ids=str)
def test_expand_encoded_matches_the_device_xof(field):
    F = vector_field(field)
    seeds = [bytes([i]) * 32 for i in range(5)] + [os.urandom(32)]
    binders = [b"", b"\x01", b"\x01\x00", os.urandom(17), os.urandom(49), b"b" * 300]
    for length in (1, 3, 23):
        got = xof.expand_encoded(F, seeds, DST, binders, length)
        want = [field.encode_vec(expand_into_vec(field, s, DST, b, length)) for s, b in zip(seeds, binders)]
        assert [row.tobytes() for row in got] == want


def test_derive_seeds_matches_the_device_xof():
    seeds = [os.urandom(32) for _ in range(4)] + [b"", b"short seed"]  # mixed lengths take the general path
    binders = [os.urandom(k) for k in (0, 1, 33, 100, 5, 6)]
    assert xof.derive_seeds(seeds, DST, binders) == [derive_seed(s, DST, b) for s, b in zip(seeds, binders)]
    assert xof.derive_seeds(seeds[:4], DST, binders[:4]) == [derive_seed(s, DST, b) for s, b in
                                                             zip(seeds[:4], binders[:4])]


class _ForcedSponge:
    """A stand-in for TurboSHAKE128's output (the real one yields an element
    >= p with probability 2**-32 or less, too rare to find): 0xFF bytes, then
    the real stream, so the first element of the vector must be redrawn."""

    def __init__(self, real, size):
        self.real, self.pending = real, b"\xff" * size

    def read(self, n):
        head, self.pending = self.pending[:n], self.pending[n:]
        return head + self.real.read(n - len(head))


@pytest.mark.parametrize("field", [FIELD64, FIELD128], ids=str)
def test_an_element_at_or_above_p_is_redrawn_forced_stream(field, monkeypatch):
    F = vector_field(field)
    size = field.ENCODED_SIZE
    real = xof.turbo_shake128
    seeds, binders = [os.urandom(32) for _ in range(3)], [b"a", b"b", b"c"]
    honest = xof.expand_encoded(F, seeds, DST, binders, 4)
    forced_seed = seeds[1]

    def sponge(domain, message):
        stream = real(domain, message)
        return _ForcedSponge(stream, size) if forced_seed in message else stream

    monkeypatch.setattr(xof, "turbo_shake128", sponge)
    got = xof.expand_encoded(F, seeds, DST, binders, 4)
    # Report 1 skips the 0xFF element and takes the next four of its real stream.
    real_stream = real(1, xof.xof_message(forced_seed, DST, b"b")).read(5 * size)
    want = [v for v in (int.from_bytes(real_stream[k:k + size], "little") for k in range(0, 5 * size, size))
            if v < field.MODULUS][:4]
    assert got[1].tobytes() == field.encode_vec(want)
    assert np.array_equal(got[[0, 2]], honest[[0, 2]])
