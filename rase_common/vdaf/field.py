"""Field64 and Field128 over a whole batch of reports at once.

One field "element" here is an array holding that element for every report of
the batch; the op names match edge_agent.vdaf_field.Field (const, add, sub,
mul), so the validity circuits of edge_agent.flp run unchanged over batches.

- Field64 (p = 2**64 - 2**32 + 1) lives in numpy uint64 arrays. A product is
  formed from 32-bit limbs (four 32x32 -> 64-bit products) and reduced with
  2**64 = 2**32 - 1 and 2**96 = -1 (mod p): about 25 array operations, exact.
- Field128 (p = 2**128 - 7 * 2**66 + 1) lives in numpy object arrays of
  Python ints: measured faster here than 32-bit limb arithmetic for the few
  hundred products a Histogram report needs (docs/performance.md).
"""

from __future__ import annotations

import numpy as np

from edge_agent.vdaf_field import FIELD64, FIELD128, Field

U64 = np.uint64
_M32 = U64(0xFFFFFFFF)
_EPS = U64(0xFFFFFFFF)  # 2**64 mod p for Field64
_S32 = U64(32)


class VecField64:
    """Field64 on uint64 arrays (values canonical in [0, p))."""

    scalar: Field = FIELD64
    ENCODED_SIZE = 8
    dtype = np.dtype(np.uint64)

    def __init__(self) -> None:
        self.MODULUS = FIELD64.MODULUS
        self._p = U64(FIELD64.MODULUS)

    def const(self, c: int) -> np.uint64:
        return U64(c % self.MODULUS)

    def zeros(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.uint64)

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

    def decode(self, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, ok): data is uint8 of shape (N, k*8); rows is (k, N); ok marks
        the reports whose every element is below the modulus."""
        n = data.shape[0]
        vals = np.ascontiguousarray(data).view("<u8").reshape(n, -1).astype(np.uint64)
        return vals.T.copy(), (vals < self._p).all(axis=1)

    def encode(self, rows: np.ndarray) -> np.ndarray:
        """uint8 (N, k*8) from rows (k, N)."""
        return np.ascontiguousarray(np.asarray(rows, dtype=np.uint64).T).astype("<u8").view(np.uint8)

    def as_rows(self, elements, n: int) -> np.ndarray:
        return np.vstack([np.broadcast_to(np.asarray(e, dtype=np.uint64), (n,)) for e in elements])

    def sum_rows(self, rows: np.ndarray, mask: np.ndarray) -> list[int]:
        """Per row, the sum mod p over the reports in mask (exact for any N < 2**32)."""
        sel = rows[:, mask]
        lo = (sel & _M32).sum(axis=1, dtype=np.uint64)
        hi = (sel >> _S32).sum(axis=1, dtype=np.uint64)
        return [(int(h) * (1 << 32) + int(low)) % self.MODULUS for low, h in zip(lo, hi)]


class VecField128:
    """Field128 on object arrays of Python ints."""

    scalar: Field = FIELD128
    ENCODED_SIZE = 16
    dtype = np.dtype(object)

    def __init__(self) -> None:
        self.MODULUS = FIELD128.MODULUS

    def const(self, c: int) -> int:
        return c % self.MODULUS

    def zeros(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=object)

    def add(self, a, b):
        return (a + b) % self.MODULUS

    def sub(self, a, b):
        return (a - b) % self.MODULUS

    def neg(self, a):
        return (-a) % self.MODULUS

    def mul(self, a, b):
        return (a * b) % self.MODULUS

    def equal(self, a, b) -> np.ndarray:
        return np.asarray(a == b, dtype=bool)

    def dot(self, ws, vs):
        """sum(w * v) over pairs with one reduction at the end (Python ints do not overflow)."""
        acc = 0
        for w, v in zip(ws, vs):
            acc = acc + w * v
        return acc % self.MODULUS

    def decode(self, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = data.shape[0]
        halves = np.ascontiguousarray(data).view("<u8").reshape(n, -1, 2)
        lo = halves[:, :, 0].astype(object)
        hi = halves[:, :, 1].astype(object)
        vals = lo + (hi << 64)
        return vals.T.copy(), (vals < self.MODULUS).all(axis=1).astype(bool)

    def encode(self, rows: np.ndarray) -> np.ndarray:
        vals = np.asarray(rows, dtype=object).T
        n, k = vals.shape
        out = np.empty((n, k, 2), dtype="<u8")
        out[:, :, 0] = (vals & ((1 << 64) - 1)).astype(np.uint64)
        out[:, :, 1] = (vals >> 64).astype(np.uint64)
        return out.reshape(n, 2 * k).view(np.uint8)

    def as_rows(self, elements, n: int) -> np.ndarray:
        out = np.empty((len(elements), n), dtype=object)
        for i, e in enumerate(elements):
            out[i, :] = e
        return out

    def sum_rows(self, rows: np.ndarray, mask: np.ndarray) -> list[int]:
        return [int(sum(row[mask].tolist())) % self.MODULUS for row in rows]


_VEC = {FIELD64.name: VecField64(), FIELD128.name: VecField128()}


def vector_field(field: Field):
    """The batch field for a scalar field of edge_agent.vdaf_field."""
    return _VEC[field.name]
