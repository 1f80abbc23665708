"""Products of a weight matrix with a few vectors as dot products, each weight row read once.

A classifier at batch 2 (``(2, 1280) @ W^T`` with ``W`` 1000x1280, 5 MB) and a 1x1 conv
over a 2x2 plane are products of a large matrix with a handful of vectors. A BLAS GEMM packs
the whole matrix for them; a GEMV per vector reads it once per vector. Here both operands
are read along their contiguous inner dimension, and :func:`products` computes them in
blocks of four weight rows by four vectors (:func:`dot44`: eight loads for sixteen
multiply-adds, the sixteen sums held in vector registers), then the leftover rows and
vectors four (:func:`dot4`), two (:func:`dot2`: a classifier at batch 2 then reads each
weight row once, 132 -> 119 us on one thread for 1000x1280) or one (:func:`dot1`) at a
time. Two or three vectors go by four weight rows (:func:`dot42`: a squeeze-and-excitation
block's 2 x 576 -> 144 at batch 2 on one thread, 10.0 -> 6.1 us, AMD EPYC, 2026-11-29): one
row at a time, the reduction across a vector that ends every sum cost as much as the sum.
The blocks ran at 90-98 GFLOP/s per core against 45-52 for dot products four vectors at a
time (1000x512 weights by 18 vectors, 2026-11-26); with four to fifteen vectors over short
rows the product is bound by memory, and rows go one at a time (see :func:`products`). LLVM
vectorises the loops along the inner dimension; the callers compile them with ``fastmath``
``reassoc`` (these helpers are inlined and take the caller's flags), so the sums are
reassociated. Each output is one thread's sum in a fixed order: results do not depend on
the thread count, and differ from BLAS's in the last bits.

Arrays are flat (1-d) with offsets, indices unsigned so Numba drops its wrap-around tests.
"""
from numba import njit, prange, uintp

from .loops import bound, loops

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
def dot2(w, wb, x, b0, b1, k_):
    """``w[wb:wb+k] . x[bi:bi+k]`` for two offsets ``bi``: the weight row read once."""
    s0 = s1 = w.dtype.type(0)
    for k in range(k_):
        u = uintp(k)
        a = w[wb + u]
        s0 += a * x[b0 + u]
        s1 += a * x[b1 + u]
    return s0, s1


@njit(inline="always")
def dot1(w, wb, x, b0, k_):
    """``w[wb:wb+k] . x[b0:b0+k]``."""
    s0 = w.dtype.type(0)
    for k in range(k_):
        u = uintp(k)
        s0 += w[wb + u] * x[b0 + u]
    return s0


@njit(inline="always")
def dot44(w, w0, w1, w2, w3, x, b0, b1, b2, b3, k_):
    """The 16 dot products of ``w[wi:wi+k]`` (four rows) with ``x[bj:bj+k]`` (four
    vectors), row-major: ``(w0.x0, w0.x1, ..., w3.x3)``."""
    z = w.dtype.type(0)
    s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = z
    s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = z
    for k in range(k_):
        u = uintp(k)
        x0, x1, x2, x3 = x[b0 + u], x[b1 + u], x[b2 + u], x[b3 + u]
        a = w[w0 + u]
        s00 += a * x0
        s01 += a * x1
        s02 += a * x2
        s03 += a * x3
        a = w[w1 + u]
        s10 += a * x0
        s11 += a * x1
        s12 += a * x2
        s13 += a * x3
        a = w[w2 + u]
        s20 += a * x0
        s21 += a * x1
        s22 += a * x2
        s23 += a * x3
        a = w[w3 + u]
        s30 += a * x0
        s31 += a * x1
        s32 += a * x2
        s33 += a * x3
    return (s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23, s30, s31, s32, s33)


@njit(inline="always")
def dot42(w, w0, w1, w2, w3, x, b0, b1, k_):
    """The 8 dot products of ``w[wi:wi+k]`` (four rows) with ``x[bj:bj+k]`` (two vectors),
    row-major: ``(w0.x0, w0.x1, w1.x0, ..., w3.x1)``."""
    z = w.dtype.type(0)
    s00 = s01 = s10 = s11 = s20 = s21 = s30 = s31 = z
    for k in range(k_):
        u = uintp(k)
        x0, x1 = x[b0 + u], x[b1 + u]
        a = w[w0 + u]
        s00 += a * x0
        s01 += a * x1
        a = w[w1 + u]
        s10 += a * x0
        s11 += a * x1
        a = w[w2 + u]
        s20 += a * x0
        s21 += a * x1
        a = w[w3 + u]
        s30 += a * x0
        s31 += a * x1
    return (s00, s01, s10, s11, s20, s21, s30, s31)


@njit(inline="always")
def _vector(j, l_):
    """``(j // l_, j % l_)``: where vector ``j`` goes in ``(N, O, L)``, with no division for
    ``L`` = 1 (every channels-last and matrix product). Two divisions per stored value cost
    as much as the dot products on AMD Zen 3 (1280 x 160 weights by 8 vectors, two
    threads: 74 -> 52 us; 576 x 96: 22 -> 16)."""
    if l_ == 1:
        return j, 0
    n = j // l_
    return n, j - n * l_


@njit(inline="always")
def products(w, x, y3, o0, o1, k_):
    """``y3[j // L, o, j % L] = w[o*k:(o+1)*k] . x[j*k:(j+1)*k]`` for the weight rows ``o``
    in ``[o0, o1)`` and every vector ``j < N*L`` (``y3`` is ``(N, O, L)``)."""
    l_ = y3.shape[2]
    j_ = y3.shape[0] * l_
    o = o0
    # four rows at a time only where the work per weight byte is high: with few vectors
    # the product waits on memory, and four rows streamed side by side came from memory
    # slower than one (1280x320 weights by 8 vectors, weights not in cache: 93 us one row
    # at a time against 129; 1000x512 by 18: 193 against 291 the other way)
    # two or three vectors go by four rows too (dot42): one row at a time, the reduction
    # across a vector that ends each short sum cost as much as the sum
    pairs = 2 <= j_ < 4
    blocks = j_ >= 16 or (j_ >= 8 and k_ >= 512) or pairs
    while blocks and o + 4 <= o1:
        wb = (uintp(o * k_), uintp((o + 1) * k_), uintp((o + 2) * k_), uintp((o + 3) * k_))
        j = 0
        while j + 4 <= j_:
            r = dot44(w, wb[0], wb[1], wb[2], wb[3], x, uintp(j * k_), uintp((j + 1) * k_),
                      uintp((j + 2) * k_), uintp((j + 3) * k_), k_)
            for p in range(4):
                n, at = _vector(j + p, l_)
                for q in range(4):
                    y3[n, o + q, at] = r[q * 4 + p]
            j += 4
        while pairs and j + 2 <= j_:
            r8 = dot42(w, wb[0], wb[1], wb[2], wb[3], x, uintp(j * k_),
                       uintp((j + 1) * k_), k_)
            for p in range(2):
                n, at = _vector(j + p, l_)
                for q in range(4):
                    y3[n, o + q, at] = r8[q * 2 + p]
            j += 2
        while j < j_:
            r4 = dot4(x, uintp(j * k_), w, wb[0], wb[1], wb[2], wb[3], k_)
            n, at = _vector(j, l_)
            for q in range(4):
                y3[n, o + q, at] = r4[q]
            j += 1
        o += 4
    while o < o1:
        wb0 = uintp(o * k_)
        j = 0
        while j + 4 <= j_:
            r4 = dot4(w, wb0, x, uintp(j * k_), uintp((j + 1) * k_), uintp((j + 2) * k_),
                      uintp((j + 3) * k_), k_)
            for p in range(4):
                n, at = _vector(j + p, l_)
                y3[n, o, at] = r4[p]
            j += 4
        if j + 2 <= j_:
            r2 = dot2(w, wb0, x, uintp(j * k_), uintp((j + 1) * k_), k_)
            n, at = _vector(j, l_)
            y3[n, o, at] = r2[0]
            n, at = _vector(j + 1, l_)
            y3[n, o, at] = r2[1]
            j += 2
        while j < j_:
            n, at = _vector(j, l_)
            y3[n, o, at] = dot1(w, wb0, x, uintp(j * k_), k_)
            j += 1
        o += 1


@njit(inline="always")
def block_of(t, parts, n):
    """Part ``t``'s rows ``[o0, o1)`` of ``n``, in whole blocks of four where possible."""
    nb = (n + 3) // 4
    return min(n, 4 * (t * nb // parts)), min(n, 4 * ((t + 1) * nb // parts))


def _rows_by_dots(a, w, c, parts):
    # c[i, j] = a[i] . w[j]; a: flat (m, k), w: flat (n, k), both row-major; c viewed as
    # (m, n, 1), the (N, O, L) of products()
    m_, n_ = c.shape
    k_ = a.shape[0] // m_ if m_ else 0
    y3 = c.reshape(m_, n_, 1)
    for t in prange(parts):
        o0, o1 = block_of(t, parts, n_)
        products(w, a, y3, o0, o1, k_)


_ROWS = loops(_rows_by_dots, error_model="numpy", fastmath=FAST)


def rows_by_dots(a, w, c, parts: int):
    """A step computing ``c = a @ w.T`` (``a`` ``(m, k)``, ``w`` ``(n, k)``, both
    C-contiguous; ``c`` with contiguous rows) in ``parts`` blocks of ``w``'s rows, one per
    thread (1: on the calling thread)."""
    fn, af, wf = _ROWS[parts > 1], a.reshape(-1), w.reshape(-1)
    return bound(fn, af, wf, c, parts)
