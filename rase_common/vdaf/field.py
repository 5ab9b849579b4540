"""Field64 and Field128 over a whole batch of reports at once.

One field "element" here is an array holding that element for every report of
the batch (reports on the last axis); the op names match
rase_device.vdaf_field.Field (const, add, sub, mul), so the validity circuits
of rase_device.flp run unchanged over batches. A "rows" array stacks k
elements on a new first axis.

- Field64 (p = 2**64 - 2**32 + 1) lives in numpy uint64 arrays, canonical. A
  product is formed from 32-bit limbs (four 32x32 -> 64-bit products) and
  reduced with 2**64 = 2**32 - 1 and 2**96 = -1 (mod p).
- Field128 (p = 2**128 - 7 * 2**66 + 1) lives in int64 arrays of shape
  (4, N): four signed 32-bit limbs, value = sum(limb[i] * 2**(32 i)), each
  limb within +-LIMB_BOUND = 2**31 + 2**29 (not canonical: the value lies in
  (-p, p) and stands for its residue). Signed limbs keep subtraction free of
  borrows; the bound keeps a limb product (< 1.57 * 2**62) inside int64. A
  product sums its 16 limb products, split at bit 32, into 8 columns; the
  columns above 2**128 fold down with 2**128 = 28 * 2**64 - 1 (mod p); one
  parallel carry step restores the bound. A dot product folds once for up to
  LAZY_TERMS products. Measured about 6x faster than numpy object arrays of
  Python ints (docs/performance.md).
"""

from __future__ import annotations

import threading

import numpy as np

from rase_device.vdaf_field import FIELD64, FIELD128, Field

U64 = np.uint64
_M32 = U64(0xFFFFFFFF)
_EPS = U64(0xFFFFFFFF)  # 2**64 mod p for Field64
_S32 = U64(32)


class VecField64:
    """Field64 on uint64 arrays (values canonical in [0, p))."""

    scalar: Field = FIELD64
    ENCODED_SIZE = 8

    def __init__(self) -> None:
        self.MODULUS = FIELD64.MODULUS
        self._p = U64(FIELD64.MODULUS)

    def const(self, c: int) -> np.uint64:
        return U64(c % self.MODULUS)

    def from_ints(self, values) -> np.ndarray:
        return np.array([v % self.MODULUS for v in values], dtype=np.uint64)

    def to_ints(self, element) -> list[int]:
        return [int(x) for x in np.atleast_1d(element)]

    def rows_from_ints(self, rows) -> np.ndarray:
        """Rows (k, n) from k lists of n ints."""
        return np.array([[v % self.MODULUS for v in row] for row in rows], dtype=np.uint64).reshape(len(rows), -1)

    def add(self, a, b):
        s = a + b
        return np.where(s < a, s + _EPS, np.where(s >= self._p, s - self._p, s))

    def sub(self, a, b):
        d = a - b
        return np.where(a < b, d - _EPS, d)

    def neg(self, a):
        return self.sub(U64(0), a)

    def mul(self, a, b):
        a0, a1 = a & _M32, a >> _S32
        b0, b1 = b & _M32, b >> _S32
        ll = a0 * b0
        lh = a0 * b1
        mid = lh + a1 * b0
        carry_mid = (mid < lh).astype(np.uint64) << _S32  # 2**64 in mid is 2**96 overall
        lo = ll + (mid << _S32)
        hi = a1 * b1 + (mid >> _S32) + carry_mid + (lo < ll)
        # x = hi * 2**64 + lo = lo - h1 + h0 * (2**32 - 1)  (mod p)
        h0, h1 = hi & _M32, hi >> _S32
        t = lo - h1
        t = np.where(lo < h1, t - _EPS, t)
        u = (h0 << _S32) - h0
        r = t + u
        r = np.where(r < t, r + _EPS, r)
        return np.where(r >= self._p, r - self._p, r)

    def equal(self, a, b) -> np.ndarray:
        return np.asarray(a == b)

    def dot(self, ws, vs):
        """sum(w * v) over pairs, reduced."""
        acc = self.const(0)
        for w, v in zip(ws, vs):
            acc = self.add(acc, self.mul(w, v))
        return acc

    def below_modulus(self, data: np.ndarray) -> np.ndarray:
        """Per report of data (uint8, (N, k*8)): every encoded element is below p."""
        return np.asarray((np.ascontiguousarray(data).view("<u8").reshape(data.shape[0], -1) < self._p).all(axis=1))

    def decode(self, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, ok): data is uint8 of shape (N, k*8); rows is (k, N); ok marks
        the reports whose every element is below the modulus."""
        n = data.shape[0]
        vals = np.ascontiguousarray(data).view("<u8").reshape(n, -1).astype(np.uint64)
        return vals.T.copy(), np.asarray((vals < self._p).all(axis=1))

    def encode(self, rows: np.ndarray) -> np.ndarray:
        """uint8 (N, k*8) from rows (k, N)."""
        return np.ascontiguousarray(np.asarray(rows, dtype=np.uint64).T).astype("<u8").view(np.uint8)

    def as_rows(self, elements, n: int) -> np.ndarray:
        if len(elements) == 0:
            return np.zeros((0, n), dtype=np.uint64)
        return np.vstack([np.broadcast_to(np.asarray(e, dtype=np.uint64), (n,)) for e in elements])

    def rows_zeros(self, k: int, n: int) -> np.ndarray:
        return np.zeros((k, n), dtype=np.uint64)

    def sum_rows(self, rows: np.ndarray, mask: np.ndarray) -> list[int]:
        """Per row, the sum mod p over the reports in mask (exact for any N < 2**32)."""
        sel = rows[..., mask]
        lo = (sel & _M32).sum(axis=-1, dtype=np.uint64)
        hi = (sel >> _S32).sum(axis=-1, dtype=np.uint64)
        return [(int(h) * (1 << 32) + int(low)) % self.MODULUS for low, h in zip(lo, hi)]


I64 = np.int64
LIMB_BOUND = (1 << 31) + (1 << 29)
LAZY_TERMS = 1024  # products summed before one fold: |columns| < 2**44.2 * terms stays < 2**56 (see _carry)
_LOW32 = I64(0xFFFFFFFF)
_HALF = I64(1 << 31)
_P128_LIMBS = np.array([1, 0, (1 << 32) - 28, (1 << 32) - 1], dtype=I64)  # p = 2**128 - 28 * 2**64 + 1
_P128_HIGH_WORD = U64((1 << 64) - 28)
_SCRATCH = threading.local()
_SCRATCH_MAX_ELEMENTS = 1 << 18  # 2 MiB a work array; larger ones are allocated per call, not kept
_CODEC_BLOCK = 1024  # reports decoded or encoded at a time (a cache-sized transpose)


def _scratch(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """This thread's int64 work array `name` of `shape`, reused across calls:
    fresh temporaries of a few hundred KiB are page-faulted in again on every
    operation (glibc hands them back to the system when freed), which measured
    five to ten times slower than the arithmetic itself."""
    if np.prod(shape) > _SCRATCH_MAX_ELEMENTS:
        return np.empty(shape, I64)
    cache = getattr(_SCRATCH, "arrays", None)
    if cache is None:
        cache = _SCRATCH.arrays = {}
    key = (name, shape)
    buf = cache.get(key)
    if buf is None:
        if len(cache) > 32:
            cache.clear()
        buf = cache[key] = np.empty(shape, I64)
    return buf


def _carry(d: np.ndarray) -> np.ndarray:
    """In place, limbs on axis -2: each limb to [-2**31, 2**31) plus the carry
    from below, the carry out of the top limb folded back (2**128 = 28 * 2**64 - 1).
    With |input limbs| <= 2**56 the carries are <= 2**24 + 1 and the output
    limbs within LIMB_BOUND."""
    c = _scratch("carry", d.shape)
    d += _HALF
    np.right_shift(d, 32, out=c)
    d &= _LOW32
    d -= _HALF
    d[..., 1:, :] += c[..., :3, :]
    d[..., 0, :] -= c[..., 3, :]
    c[..., 3, :] *= 28
    d[..., 2, :] += c[..., 3, :]
    return d


def _columns_add(cols: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """cols[k] += the base-2**32 column k of a * b (16 limb products, each split into two 32-bit halves)."""
    shape = (4, 4, cols.shape[1])
    prod, low = _scratch("prod", shape), _scratch("low", shape)
    np.multiply(a[:, None, :], b[None, :, :], out=prod)
    np.bitwise_and(prod, _LOW32, out=low)
    np.right_shift(prod, 32, out=prod)
    low[:, 1:] += prod[:, :3]       # row i's columns i..i+3: low halves plus the high halves from below
    cols[4:8] += prod[:, 3]          # row i's column i+4: the top high half
    for i in range(4):
        cols[i:i + 4] += low[i]


def _fold(cols: np.ndarray) -> np.ndarray:
    """The element for sum(cols[k] * 2**(32 k)), k < 8: 2**128 = 28 * 2**64 - 1,
    2**160 = 28 * 2**96 - 2**32, 2**192 = 783 * 2**64 - 28, 2**224 = 783 * 2**96 - 28 * 2**32."""
    n = cols.shape[1]
    d = np.empty((4, n), dtype=I64)
    t = _scratch("fold", (2, n))
    np.subtract(cols[0:2], cols[4:6], out=d[0:2])
    np.multiply(cols[6:8], 28, out=t)
    d[0:2] -= t
    np.multiply(cols[4:6], 28, out=d[2:4])
    d[2:4] += cols[2:4]
    np.multiply(cols[6:8], 783, out=t)
    d[2:4] += t
    return _carry(d)


def _ripple(d: np.ndarray) -> None:
    """In place: limbs 0-2 to [0, 2**32), their carries rippled up into limb 3."""
    for i in range(3):
        c = d[..., i, :] >> 32
        d[..., i, :] &= _LOW32
        d[..., i + 1, :] += c


def _canonical(d: np.ndarray) -> np.ndarray:
    """Limbs in [0, 2**32) of the value in [0, p) (limbs on axis -2; |value| < p)."""
    d = np.array(d, dtype=I64)
    _ripple(d)
    d += (d[..., 3:, :] < 0) * _P128_LIMBS[:, None]  # negative exactly when the top limb is: add p
    _ripple(d)
    return d


class VecField128:
    """Field128 on (4, N) int64 arrays of signed 32-bit limbs (module docstring)."""

    scalar: Field = FIELD128
    ENCODED_SIZE = 16

    def __init__(self) -> None:
        self.MODULUS = FIELD128.MODULUS
        self._consts: dict[int, np.ndarray] = {}

    def from_ints(self, values) -> np.ndarray:
        limbs = [[((v % self.MODULUS) >> (32 * i)) & 0xFFFFFFFF for v in values] for i in range(4)]
        return _carry(np.array(limbs, dtype=I64).reshape(4, len(values)))

    def to_ints(self, element) -> list[int]:
        limbs = _canonical(np.asarray(element, dtype=I64)).tolist()
        return [a | b << 32 | c << 64 | d << 96 for a, b, c, d in zip(*limbs)]

    def rows_from_ints(self, rows) -> np.ndarray:
        """Rows (k, 4, n) from k lists of n ints."""
        k = len(rows)
        flat = self.from_ints([v for row in rows for v in row])
        return np.ascontiguousarray(flat.reshape(4, k, -1).transpose(1, 0, 2))

    def const(self, c: int) -> np.ndarray:
        """A (4, 1) element, broadcast against batches; cached and read-only."""
        e = self._consts.get(c)
        if e is None:
            e = self.from_ints([c])
            e.setflags(write=False)
            if len(self._consts) < 4096:
                self._consts[c] = e
        return e

    def add(self, a, b):
        return _carry(np.add(a, b))

    def sub(self, a, b):
        return _carry(np.subtract(a, b))

    def neg(self, a):
        return np.negative(a)

    def mul(self, a, b):
        cols = _scratch("columns", (8, max(a.shape[-1], b.shape[-1])))
        cols.fill(0)
        _columns_add(cols, a, b)
        return _fold(cols)

    def dot(self, ws, vs):
        """sum(w * v) over pairs, folded once per LAZY_TERMS products."""
        pairs = list(zip(ws, vs))
        if not pairs:
            return self.const(0)
        cols = _scratch("columns", (8, max(max(w.shape[-1], v.shape[-1]) for w, v in pairs)))
        acc = None
        for start in range(0, len(pairs), LAZY_TERMS):
            cols.fill(0)
            for w, v in pairs[start:start + LAZY_TERMS]:
                _columns_add(cols, w, v)
            part = _fold(cols)
            acc = part if acc is None else self.add(acc, part)
        return acc

    def equal(self, a, b) -> np.ndarray:
        # The difference's value lies in (-p, p), so it is 0 mod p only when it
        # is 0; with every limb below 2**32 in size, that is every limb 0.
        return ~self.sub(a, b).any(axis=-2)

    def below_modulus(self, data: np.ndarray) -> np.ndarray:
        """Per report of data (uint8, (N, k*16)): every encoded element is below p."""
        words = np.ascontiguousarray(data).view("<u8").reshape(data.shape[0], -1, 2)
        high, low = words[:, :, 1], words[:, :, 0]
        return ((high < _P128_HIGH_WORD) | ((high == _P128_HIGH_WORD) & (low == 0))).all(axis=1)

    def decode(self, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, ok): data is uint8 of shape (N, k*16); rows is (k, 4, N); ok
        marks the reports whose every element is below the modulus."""
        n = data.shape[0]
        raw = np.ascontiguousarray(data)
        ok = self.below_modulus(raw)
        limbs = raw.view("<u4").reshape(n, -1, 4)
        rows = np.empty((limbs.shape[1], 4, n), dtype=I64)
        for s in range(0, n, _CODEC_BLOCK):
            block = rows[..., s:s + _CODEC_BLOCK]
            block[...] = limbs[s:s + _CODEC_BLOCK].transpose(1, 2, 0)
            _carry(block)
        return rows, ok

    def encode(self, rows: np.ndarray) -> np.ndarray:
        """uint8 (N, k*16) from rows (k, 4, N)."""
        k, _, n = rows.shape
        out = np.empty((n, k, 4), dtype="<u4")
        for s in range(0, n, _CODEC_BLOCK):
            out[s:s + _CODEC_BLOCK] = _canonical(rows[..., s:s + _CODEC_BLOCK]).transpose(2, 0, 1)
        return out.view(np.uint8).reshape(n, -1)

    def as_rows(self, elements, n: int) -> np.ndarray:
        if len(elements) == 0:
            return np.zeros((0, 4, n), dtype=I64)
        return np.stack([np.broadcast_to(e, (4, n)) for e in elements])

    def rows_zeros(self, k: int, n: int) -> np.ndarray:
        return np.zeros((k, 4, n), dtype=I64)

    def sum_rows(self, rows: np.ndarray, mask: np.ndarray) -> list[int]:
        """Per row, the sum mod p over the reports in mask (exact for N < 2**31)."""
        sums = rows[..., mask].sum(axis=-1)
        return [sum(int(s) << (32 * i) for i, s in enumerate(limbs)) % self.MODULUS for limbs in sums]


_VEC = {FIELD64.name: VecField64(), FIELD128.name: VecField128()}


def vector_field(field: Field):
    """The batch field for a scalar field of rase_device.vdaf_field."""
    return _VEC[field.name]
