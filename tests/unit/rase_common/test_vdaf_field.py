"""The batch fields against the scalar field, element by element, including
the values next to the modulus and to the 32-bit limb boundaries."""

import random

import numpy as np
import pytest

from edge_agent.vdaf_field import FIELD64, FIELD128
from rase_common.vdaf.field import vector_field


def samples(field, n, seed):
    p = field.MODULUS
    edges = [0, 1, 2, p - 1, p - 2, (1 << 32) - 1, 1 << 32, (1 << 32) + 1, p >> 1, (1 << 63) % p,
             (1 << 64) - (1 << 32), (1 << 96) % p]
    rng = random.Random(seed)
    return edges + [rng.randrange(p) for _ in range(n - len(edges))]


@pytest.mark.parametrize("field", [FIELD64, FIELD128], ids=str)
def test_ops_match_the_scalar_field(field):
    F = vector_field(field)
    a_list, b_list = samples(field, 3000, 1), samples(field, 3000, 2)[::-1]
    a, b = F.as_rows([np.array(a_list, dtype=F.dtype)], 3000)[0], F.as_rows([np.array(b_list, dtype=F.dtype)], 3000)[0]
    with np.errstate(over="ignore"):
        for op in ("add", "sub", "mul"):
            got = [int(x) for x in getattr(F, op)(a, b)]
            want = [getattr(field, op)(x, y) for x, y in zip(a_list, b_list)]
            assert got == want, op
        c = 0xDEADBEEF12345
        assert [int(x) for x in F.mul(F.const(c), a)] == [field.mul(c, x) for x in a_list]
        assert [int(x) for x in F.sub(F.const(0), a)] == [field.neg(x) for x in a_list]


@pytest.mark.parametrize("field", [FIELD64, FIELD128], ids=str)
def test_decode_encode_round_trip_flags_non_canonical(field):
    F = vector_field(field)
    vals = samples(field, 40, 3)
    data = np.frombuffer(field.encode_vec(vals), dtype=np.uint8).reshape(10, -1)
    rows, ok = F.decode(data)
    assert ok.all() and [int(x) for x in rows.T.reshape(-1)] == vals
    assert F.encode(rows).tobytes() == data.tobytes()
    bad = data.copy()
    bad[3, :field.ENCODED_SIZE] = 0xFF  # 2**(8*size) - 1 >= p
    assert list(F.decode(bad)[1]) == [i != 3 for i in range(10)]


@pytest.mark.parametrize("field", [FIELD64, FIELD128], ids=str)
def test_sum_rows_is_the_exact_sum_mod_p(field):
    F = vector_field(field)
    vals = [field.MODULUS - 1] * 5000 + samples(field, 1000, 4)
    rows = F.as_rows([np.array(vals, dtype=F.dtype)], len(vals))
    mask = np.array([i % 3 != 0 for i in range(len(vals))])
    assert F.sum_rows(rows, mask) == [sum(v for v, m in zip(vals, mask) if m) % field.MODULUS]
