"""Products of a weight matrix with a few vectors as dot products, each weight row read once.

A classifier at batch 2 (``(2, 1280) @ W^T`` with ``W`` 1000x1280, 5 MB) and a 1x1 conv
over a 2x2 plane are products of a large matrix with a handful of vectors. A BLAS GEMM packs
the whole matrix for them; a GEMV per vector reads it once per vector. Here each row of
the matrix is read once, from memory, and stays in L1 while it is multiplied with every
vector: four at a time (:func:`dot4`: one load of the row for four multiply-adds), then
one by one. LLVM vectorises the loops along the inner dimension; the callers compile them
with ``fastmath`` ``reassoc`` (these helpers are inlined and take the caller's flags), so
the sums are reassociated. Each output is one thread's sum in a fixed order: results do
not depend on the thread count, and differ from BLAS's in the last bits.

Arrays are flat (1-d) with offsets, indices unsigned so Numba drops its wrap-around tests.
"""
from numba import njit, prange, uintp

from .loops import loops

FAST = {"reassoc", "contract"}


@njit(inline="always")
def dot4(w, wb, x, b0, b1, b2, b3, k_):
    """``w[wb:wb+k] . x[bi:bi+k]`` for four offsets ``bi``."""
    s0 = s1 = s2 = s3 = w.dtype.type(0)
    for k in range(k_):
        u = uintp(k)
        a = w[wb + u]
        s0 += a * x[b0 + u]
        s1 += a * x[b1 + u]
        s2 += a * x[b2 + u]
        s3 += a * x[b3 + u]
    return s0, s1, s2, s3


@njit(inline="always")
def dot1(w, wb, x, b0, k_):
    """``w[wb:wb+k] . x[b0:b0+k]``."""
    s0 = w.dtype.type(0)
    for k in range(k_):
        u = uintp(k)
        s0 += w[wb + u] * x[b0 + u]
    return s0


def _rows_by_dots(a, w, c, parts):
    # c[i, j] = a[i] . w[j]; a: flat (m, k), w: flat (n, k), both row-major
    m_, n_ = c.shape
    k_ = a.shape[0] // m_ if m_ else 0
    for t in prange(parts):
        for j in range(t * n_ // parts, (t + 1) * n_ // parts):
            wb = uintp(j * k_)
            i = 0
            while i + 4 <= m_:
                s0, s1, s2, s3 = dot4(w, wb, a, uintp(i * k_), uintp((i + 1) * k_),
                                      uintp((i + 2) * k_), uintp((i + 3) * k_), k_)
                c[i, j] = s0
                c[i + 1, j] = s1
                c[i + 2, j] = s2
                c[i + 3, j] = s3
                i += 4
            while i < m_:
                c[i, j] = dot1(w, wb, a, uintp(i * k_), k_)
                i += 1


_ROWS = loops(_rows_by_dots, error_model="numpy", fastmath=FAST)


def rows_by_dots(a, w, c, parts: int):
    """A step computing ``c = a @ w.T`` (``a`` ``(m, k)``, ``w`` ``(n, k)``, both
    C-contiguous; ``c`` with contiguous rows) in ``parts`` blocks of ``w``'s rows, one per
    thread (1: on the calling thread)."""
    fn, af, wf = _ROWS[parts > 1], a.reshape(-1), w.reshape(-1)
    return lambda: fn(af, wf, c, parts)
