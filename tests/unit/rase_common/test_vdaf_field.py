"""The batch fields against Python's big-int arithmetic, element by element:
the values next to 0, the modulus and the 32-bit limb boundaries (2**32,
2**64, 2**96, 2**128), random values, Hypothesis-drawn batches, and long
chains of operations that would leave a lazily reduced representation out of
its bounds if a carry were missing."""

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rase_device.vdaf_field import FIELD64, FIELD128
from rase_common.vdaf import flp
from rase_common.vdaf.field import LIMB_BOUND, vector_field

FIELDS = pytest.mark.parametrize("field", [FIELD64, FIELD128], ids=str)


def edges(field):
    """Values at the edges of the modulus and of every 32-bit limb, reduced mod p."""
    p = field.MODULUS
    near = [0, 1, 2, p - 1, p - 2, p - 3, p >> 1, (p >> 1) + 1, p - (1 << 64), p - (1 << 64) - 1]
    for k in (31, 32, 63, 64, 95, 96, 127, 128):
        near += [(1 << k) - 1, 1 << k, (1 << k) + 1]
    near += [(1 << 128) - (28 << 64), (1 << 128) - (28 << 64) + 2, (1 << 64) - (1 << 32), 0xFFFFFFFF << 64]
    return sorted({v % p for v in near})


def pairs(field, n_random, seed):
    """Every pair of edge values, then random pairs."""
    e = edges(field)
    rng = random.Random(seed)
    a = [x for x in e for _ in e] + [rng.randrange(field.MODULUS) for _ in range(n_random)]
    b = [y for _ in e for y in e] + [rng.randrange(field.MODULUS) for _ in range(n_random)]
    return a, b


def check_bounds(F, element):
    """Field128's limbs stay within the bound that keeps a limb product inside int64."""
    if F.scalar is FIELD128:
        assert np.abs(element).max() <= LIMB_BOUND


def check_ops(field, a, b):
    F = vector_field(field)
    p = field.MODULUS
    A, B = F.from_ints(a), F.from_ints(b)
    assert F.to_ints(A) == a
    want = {"add": [(x + y) % p for x, y in zip(a, b)], "sub": [(x - y) % p for x, y in zip(a, b)],
            "mul": [x * y % p for x, y in zip(a, b)]}
    with np.errstate(over="ignore"):
        for op, values in want.items():
            got = getattr(F, op)(A, B)
            check_bounds(F, got)
            assert F.to_ints(got) == values, op
        assert F.to_ints(F.neg(A)) == [(-x) % p for x in a]
        assert list(F.equal(A, B)) == [x == y for x, y in zip(a, b)]
        assert list(F.equal(F.add(A, F.sub(B, A)), B)) == [True] * len(a)


@FIELDS
def test_ops_match_big_ints_on_edge_and_random_values(field):
    check_ops(field, *pairs(field, 2000, 1))


@FIELDS
def test_constants_broadcast_against_a_batch(field):
    F = vector_field(field)
    p = field.MODULUS
    a = edges(field)
    A = F.from_ints(a)
    with np.errstate(over="ignore"):
        for c in (0, 1, p - 1, 0xDEADBEEF12345, (1 << 96) + 12345, -5):
            assert F.to_ints(F.mul(F.const(c), A)) == [c * x % p for x in a]
            assert F.to_ints(F.add(A, F.const(c))) == [(x + c) % p for x in a]
            assert F.to_ints(F.sub(F.const(c), A)) == [(c - x) % p for x in a]


@FIELDS
def test_long_chains_stay_exact(field):
    """Products of sums of products, 200 rounds deep: any carry that leaves a
    limb out of bounds shows up as a wrong value."""
    F = vector_field(field)
    p = field.MODULUS
    a, b = pairs(field, 500, 2)
    A, B = F.from_ints(a), F.from_ints(b)
    x, X = list(a), A
    with np.errstate(over="ignore"):
        for r in range(200):
            X = F.mul(F.sub(X, B) if r % 2 else F.add(X, B), X)
            x = [(u - v if r % 2 else u + v) * u % p for u, v in zip(x, b)]
        check_bounds(F, X)
    assert F.to_ints(X) == x


@FIELDS
def test_dot_is_the_reduced_sum_of_products(field):
    F = vector_field(field)
    p = field.MODULUS
    rng = random.Random(3)
    n = 300
    ws = [[p - 1] * n] * 40 + [[rng.randrange(p) for _ in range(n)] for _ in range(10)]
    vs = [[p - 1] * n] * 40 + [[rng.randrange(p) for _ in range(n)] for _ in range(10)]
    with np.errstate(over="ignore"):
        got = F.to_ints(F.dot([F.from_ints(w) for w in ws], [F.from_ints(v) for v in vs]))
    assert got == [sum(w[i] * v[i] for w, v in zip(ws, vs)) % p for i in range(n)]


def test_field128_dot_folds_past_the_lazy_limit(monkeypatch):
    """More products than one fold takes (LAZY_TERMS, made small here) still sum exactly."""
    from rase_common.vdaf import field as field_mod
    monkeypatch.setattr(field_mod, "LAZY_TERMS", 3)
    F = vector_field(FIELD128)
    p = FIELD128.MODULUS
    ws = [[p - 1, 1 << 127, 5]] * 10
    got = F.to_ints(F.dot([F.from_ints(w) for w in ws], [F.from_ints(w) for w in ws]))
    assert got == [10 * x * x % p for x in ws[0]]


@FIELDS
@settings(max_examples=max(50, settings().max_examples // 25), deadline=None)
@given(data=st.data())
def test_ops_match_big_ints_hypothesis(field, data):
    p = field.MODULUS
    element = st.one_of(st.integers(0, p - 1), st.sampled_from(edges(field)))
    n = data.draw(st.integers(1, 24))
    a = data.draw(st.lists(element, min_size=n, max_size=n))
    b = data.draw(st.lists(element, min_size=n, max_size=n))
    check_ops(field, a, b)


@FIELDS
def test_decode_encode_round_trip_flags_non_canonical(field):
    F = vector_field(field)
    vals = (edges(field) * 4)[:40]
    data = np.frombuffer(field.encode_vec(vals), dtype=np.uint8).reshape(10, -1)
    rows, ok = F.decode(data)
    assert ok.all() and [F.to_ints(np.moveaxis(rows[..., i], 0, -1)) for i in range(10)] == \
        [vals[4 * i:4 * i + 4] for i in range(10)]
    assert F.encode(rows).tobytes() == data.tobytes()
    assert F.encode(F.rows_from_ints([vals[0::4], vals[1::4], vals[2::4], vals[3::4]])).tobytes() == data.tobytes()
    bad = data.copy()
    size = field.ENCODED_SIZE
    bad[3, :size] = 0xFF                                                  # 2**(8*size) - 1 >= p
    bad[5, size:2 * size] = np.frombuffer(field.MODULUS.to_bytes(size, "little"), dtype=np.uint8)  # p itself
    assert list(F.decode(bad)[1]) == [i not in (3, 5) for i in range(10)]


@FIELDS
def test_sum_rows_is_the_exact_sum_mod_p(field):
    F = vector_field(field)
    vals = [field.MODULUS - 1] * 5000 + edges(field) * 20
    rows = F.as_rows([F.from_ints(vals), F.const(field.MODULUS - 2)], len(vals))
    mask = np.array([i % 3 != 0 for i in range(len(vals))])
    chosen = int(mask.sum())
    assert F.sum_rows(rows, mask) == [sum(v for v, m in zip(vals, mask) if m) % field.MODULUS,
                                      chosen * (field.MODULUS - 2) % field.MODULUS]


@FIELDS
@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32])
def test_lagrange_weights_interpolate(field, n):
    """sum_i v_i L_i(t) is the polynomial through (w_i, v_i) at t: checked
    against the scalar field's inverse NTT and Horner's rule, at random t
    and at the nodes themselves."""
    F = vector_field(field)
    rng = random.Random(n)
    nodes = field.nth_root_powers(n)
    ts = [rng.randrange(field.MODULUS) for _ in range(20)] + nodes
    values = [rng.randrange(field.MODULUS) for _ in range(n)]
    coeffs = field.inv_ntt(values, n)
    T = F.from_ints(ts)
    k = max(n.bit_length() - 2, 0)
    with np.errstate(over="ignore"):
        powers = [T]
        for _ in range(k):
            powers.append(F.mul(powers[-1], powers[-1]))
        (got,) = flp.lagrange_eval(F, [[F.const(v) for v in values]], powers)
    want = []
    for t in ts:
        acc = 0
        for c in reversed(coeffs):
            acc = (acc * t + c) % field.MODULUS
        want.append(acc)
    assert F.to_ints(np.broadcast_to(got, np.shape(T))) == want  # n = 1: a constant
