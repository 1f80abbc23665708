"""BLAS GEMM called from Numba code, on any 2-d views, and GEMMs split across threads.

``gemm(a, b, c, beta, blas)`` computes ``c = a @ b + beta * c`` for float32/float64 2-d
views whose rows or columns are contiguous (a transposed view, a block of rows or of columns
of a larger matrix): it hands BLAS the data pointers and leading dimensions, so no operand
is ever copied. (Numba's own ``np.dot`` copies any view it cannot type as C- or
F-contiguous, which is an allocation per call.)

``blas`` is :data:`HANDLE`: the addresses of the CBLAS ``sgemm``/``dgemm`` of numpy's own
BLAS and whether it takes 64-bit integers, found when this module is imported. That BLAS is
the one numpy's matmul uses, and for these thin products numpy's OpenBLAS build ran up to
30% faster than SciPy's (the one Numba's ``np.dot`` calls): 16x144 @ 144x1024, the ResNet's
most frequent conv GEMM, 50 against 70 us. The address is an argument, not a constant, so
cached compiled kernels stay valid in every process. Where numpy's BLAS exports no CBLAS
GEMM, ``HANDLE`` holds zeros and ``gemm`` calls SciPy's BLAS through Numba's own
``numba_xxgemm`` helper. The thread policy's BLAS limit covers both.

Kernels call ``gemm`` from inside their ``prange`` loops: every part of a batch-parallel
kernel runs its own single-threaded GEMMs on Numba's thread pool, the one pool of the
process (see runtime/threads.py).
"""
import ctypes

import numpy as np
from llvmlite import ir
from numba import int64, njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array
from numba.np.linalg import check_blas_return, ensure_blas, get_blas_kind

_CHAR = ir.IntType(8)
_N, _T = ord("n"), ord("t")
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112  # CBLAS enums


def _numpy_cblas(name="gemm"):
    """``(s<name> address, d<name> address, ilp64)`` of numpy's own CBLAS ``gemm`` (or
    ``gemv``), or zeros."""
    try:
        from numpy._core import _multiarray_umath as mod
    except ImportError:  # numpy < 2
        from numpy.core import _multiarray_umath as mod
    try:
        lib = ctypes.CDLL(mod.__file__)  # dlsym also searches the BLAS it links
    except OSError:
        return 0, 0, False
    for prefix, suffix, ilp64 in (("scipy_", "64_", True), ("", "64_", True),
                                  ("scipy_", "", False), ("", "", False)):
        try:
            fs = getattr(lib, f"{prefix}cblas_s{name}{suffix}")
            fd = getattr(lib, f"{prefix}cblas_d{name}{suffix}")
        except AttributeError:
            continue
        addr = [ctypes.cast(f, ctypes.c_void_p).value for f in (fs, fd)]
        return addr[0], addr[1], ilp64
    return 0, 0, False


HANDLE = _numpy_cblas()
#: the same for the matrix-vector product (zeros where numpy exports none)
GEMV = _numpy_cblas("gemv") if HANDLE[0] else (0, 0, False)
if HANDLE[0] == 0:
    ensure_blas()  # the fallback needs SciPy's BLAS: say so now, not at the first kernel


def _arguments(context, builder, sig, args, dtype, iw):
    """Lowerers of an intrinsic's arguments for a C call: ``num(i, t=iw)`` an integer of
    LLVM type ``t``, ``data(i)`` an array's data pointer, ``scalar(i)`` a ``dtype`` value."""
    tys = sig.args

    def num(i, t=iw):
        v = context.cast(builder, args[i], tys[i], types.int64)
        return builder.trunc(v, t) if t.width < 64 else v

    def data(i):
        return builder.bitcast(make_array(tys[i])(context, builder, args[i]).data,
                               cgutils.voidptr_t)

    def scalar(i):
        return context.cast(builder, args[i], tys[i], dtype)

    return num, data, scalar


def _cblas(width):
    """An intrinsic calling the row-major CBLAS GEMM at address ``fn`` (a runtime integer),
    with ``width``-bit integer dimensions; alpha and beta by value in ``c``'s dtype."""

    @intrinsic
    def call(typingctx, fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        dtype = c.dtype
        sig = types.void(fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)

        def codegen(context, builder, sig, args):
            i32, iw = ir.IntType(32), ir.IntType(width)
            ft = context.get_value_type(dtype)
            voidp = cgutils.voidptr_t
            fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, iw, iw, iw, ft, voidp, iw,
                                                   voidp, iw, ft, voidp, iw])
            ptr = builder.inttoptr(args[0], fnty.as_pointer())

            num, data, scalar = _arguments(context, builder, sig, args, dtype, iw)
            builder.call(ptr, (ir.Constant(i32, _ROW_MAJOR), num(1, i32), num(2, i32), num(3),
                               num(4), num(5), scalar(6), data(7), num(8), data(9), num(10),
                               scalar(11), data(12), num(13)))
            return context.get_dummy_value()

        return sig, codegen

    return call


_cblas64, _cblas32 = _cblas(64), _cblas(32)


@intrinsic
def _xgemm(typingctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """Column-major ``gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)`` on the
    data pointers of the arrays ``a``, ``b``, ``c`` (of any layout; views start where their
    data pointer is). ``alpha``/``beta`` are passed by address in ``c``'s dtype."""
    dtype = c.dtype
    kind = get_blas_kind(dtype, "gemm")
    sig = types.void(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)

    def codegen(context, builder, sig, args):
        intp = context.get_value_type(types.intp)
        voidp = cgutils.voidptr_t
        fnty = ir.FunctionType(ir.IntType(32), [_CHAR, _CHAR, _CHAR, intp, intp, intp, voidp,
                                                voidp, intp, voidp, intp, voidp, voidp, intp])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemm")
        tys = sig.args

        def num(i):
            return context.cast(builder, args[i], tys[i], types.intp)

        def char(i):
            return builder.trunc(num(i), _CHAR)

        def scalar(i):
            v = context.cast(builder, args[i], tys[i], dtype)
            return builder.bitcast(cgutils.alloca_once_value(builder, v), voidp)

        def data(i):
            return builder.bitcast(make_array(tys[i])(context, builder, args[i]).data, voidp)

        res = builder.call(fn, (ir.Constant(_CHAR, ord(kind)), char(0), char(1), num(2),
                                num(3), num(4), scalar(5), data(6), num(7), data(8), num(9),
                                scalar(10), data(11), num(12)))
        check_blas_return(context, builder, res)
        return context.get_dummy_value()

    return sig, codegen


# One compiled form per dtype: the kernels work from strides alone, so the views are typed
# 'A' (any layout) and read-only where they are only read; a C, F or strided view, writable
# or not, converts to these. Typed lazily, every layout combination of every caller
# compiled its own copy of these functions and of the parallel split (63 copies in a run
# of the test suite, 130 s of compiling).
_HANDLE_T = types.Tuple((types.int64, types.int64, types.boolean))


def _signatures(*args):
    """``void(args)`` for float32 and float64, ``'in'``/``'out'`` standing for a read-only
    and a writable 2-d view of that dtype."""
    def arg(a, dt):
        if a in ("in", "out"):
            return types.Array(dt, 2, "A", readonly=a == "in")
        return a
    return [types.void(*(arg(a, dt) for a in args)) for dt in (types.float32, types.float64)]


@njit(cache=True, nogil=True)
def _operand(x):
    """``(transpose flag, leading dimension)`` of a 2-d view as a row-major BLAS operand:
    rows contiguous -> 'n', columns contiguous (a transposed view) -> 't'."""
    s0, s1 = x.strides[0] // x.itemsize, x.strides[1] // x.itemsize
    if s1 == 1 or x.shape[1] <= 1:
        return _N, max(s0, x.shape[1], 1)
    return _T, max(s1, x.shape[0], 1)


@njit(_signatures("in", "in", "out", types.float64, _HANDLE_T), cache=True, nogil=True)
def gemm(a, b, c, beta, blas):
    """``c = a @ b + beta * c`` (row-major views; ``c``'s rows contiguous), with the BLAS
    of ``blas`` (:data:`HANDLE`)."""
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:  # BLAS scales c by beta; a zero beta must also clear NaNs
        if beta == 0:
            c[:, :] = 0
        else:
            c[:, :] *= beta
        return
    ta, lda = _operand(a)
    tb, ldb = _operand(b)
    ldc = max(c.strides[0] // c.itemsize, n, 1)
    fn = blas[0] if c.itemsize == 4 else blas[1]
    if fn != 0:  # numpy's CBLAS, row-major
        ca = _NO_TRANS if ta == _N else _TRANS
        cb = _NO_TRANS if tb == _N else _TRANS
        if blas[2]:
            _cblas64(fn, ca, cb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc)
        else:
            _cblas32(fn, ca, cb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc)
    else:  # SciPy's Fortran BLAS, column-major: c^T = b^T a^T
        _xgemm(tb, ta, n, m, k, 1.0, b, ldb, a, lda, beta, c, ldc)


#: OpenBLAS multiplies small products (M*N*K up to 100**3 in its AVX-512 builds) with kernels
#: that skip packing, and the thin products of convs over large planes (few rows, many
#: columns) run up to 1.8x faster cut into column blocks that qualify: measured per sample
#: on one thread (2026-11-26), 96x16 by 16x1024 (mobilenet_v2's 1x1 conv at 32x32) 54 -> 31
#: us, 48x32 by 32x1024 50 -> 30, 64x27 by 27x961 37 -> 32. Narrow blocks are a gamble:
#: 128x192 by 192x256 in blocks of 32 ran 1.13x faster, 130x192 by 192x576 1.6x slower,
#: so blocks narrower than MIN_BLOCK_COLUMNS are not cut
SMALL_PRODUCT, MIN_BLOCK_COLUMNS = 1_000_000, 128


@njit(_signatures("in", "in", "out", types.float64, _HANDLE_T), cache=True, nogil=True)
def gemm_columns(a, b, c, beta, blas):
    """:func:`gemm` in blocks of ``b``'s and ``c``'s columns small enough for OpenBLAS's
    small-matrix kernels (:data:`SMALL_PRODUCT`), where that leaves blocks of at least
    :data:`MIN_BLOCK_COLUMNS`. The block width follows from the shapes alone, so the same
    product is always cut the same way (the small kernels sum in another order than the
    packed ones: results differ from the whole product's in the last bits)."""
    m, k = a.shape
    n = b.shape[1]
    width = SMALL_PRODUCT // max(m * k, 1) // 16 * 16
    if width < MIN_BLOCK_COLUMNS or width >= n:
        gemm(a, b, c, beta, blas)
        return
    for j in range(0, n, width):
        e = min(j + width, n)
        gemm(a, b[:, j:e], c[:, j:e], beta, blas)


def _cblas_gemv(width):
    """An intrinsic calling the row-major CBLAS GEMV at address ``fn`` with ``width``-bit
    integer dimensions: ``y = alpha * op(A) @ x + beta * y``."""

    @intrinsic
    def call(typingctx, fn, ta, m, n, alpha, a, lda, x, incx, beta, y, incy):
        dtype = y.dtype
        sig = types.void(fn, ta, m, n, alpha, a, lda, x, incx, beta, y, incy)

        def codegen(context, builder, sig, args):
            i32, iw = ir.IntType(32), ir.IntType(width)
            ft = context.get_value_type(dtype)
            voidp = cgutils.voidptr_t
            fnty = ir.FunctionType(ir.VoidType(), [i32, i32, iw, iw, ft, voidp, iw, voidp,
                                                   iw, ft, voidp, iw])
            ptr = builder.inttoptr(args[0], fnty.as_pointer())

            num, data, scalar = _arguments(context, builder, sig, args, dtype, iw)
            builder.call(ptr, (ir.Constant(i32, _ROW_MAJOR), num(1, i32), num(2), num(3),
                               scalar(4), data(5), num(6), data(7), num(8), scalar(9),
                               data(10), num(11)))
            return context.get_dummy_value()

        return sig, codegen

    return call


_gemv64, _gemv32 = _cblas_gemv(64), _cblas_gemv(32)

#: products with at most this many rows are computed row by row with GEMV
#: (:func:`gemm_rows`): OpenBLAS's GEMM packs the whole of ``b`` for them, and 2 rows
#: times a 1280x1000 classifier weight took 690 us against 127 us as two GEMVs
GEMV_ROWS = 8


@njit(_signatures("in", "in", "out", _HANDLE_T, _HANDLE_T), cache=True, nogil=True)
def gemm_rows(a, b, c, gv, bl):
    """``c = a @ b`` one row at a time, ``c[i] = b^T @ a[i]`` (a GEMV on ``b``, whose rows
    or columns are contiguous), with the GEMV of ``gv`` (:data:`GEMV`); :func:`gemm` where
    there is none or an operand is strided in both directions."""
    m, k = a.shape
    n = b.shape[1]
    fn = gv[0] if c.itemsize == 4 else gv[1]
    sa = a.strides[1] // a.itemsize
    sc = c.strides[1] // c.itemsize
    if fn == 0 or m == 0 or n == 0 or k == 0 or sa < 1 or sc != 1:
        gemm(a, b, c, 0.0, bl)
        return
    tb, ldb = _operand(b)
    for i in range(m):
        # row-major b (k x n): c[i] = b^T a[i] is 'T' on a k x n matrix; a transposed view
        # of a row-major (n x k) matrix: 'N' on that n x k matrix
        if tb == _N:
            if gv[2]:
                _gemv64(fn, _TRANS, k, n, 1.0, b, ldb, a[i], sa, 0.0, c[i], 1)
            else:
                _gemv32(fn, _TRANS, k, n, 1.0, b, ldb, a[i], sa, 0.0, c[i], 1)
        else:
            if gv[2]:
                _gemv64(fn, _NO_TRANS, n, k, 1.0, b, ldb, a[i], sa, 0.0, c[i], 1)
            else:
                _gemv32(fn, _NO_TRANS, n, k, 1.0, b, ldb, a[i], sa, 0.0, c[i], 1)


@njit(_signatures("in", "in", "out", types.int64, types.int64, types.boolean, _HANDLE_T,
                 _HANDLE_T), cache=True, nogil=True)
def _block(a, b, c, t, parts, by_rows, blas, gv):
    if by_rows:
        m = c.shape[0]
        r0, r1 = t * m // parts, (t + 1) * m // parts
        gemm(a[r0:r1], b, c[r0:r1], 0.0, blas)
    else:
        n = c.shape[1]
        c0, c1 = t * n // parts, (t + 1) * n // parts
        if c.shape[0] <= GEMV_ROWS:
            gemm_rows(a, b[:, c0:c1], c[:, c0:c1], gv, blas)
        else:
            gemm(a, b[:, c0:c1], c[:, c0:c1], 0.0, blas)


@njit(_signatures("in", "in", "out", types.int64, types.boolean, _HANDLE_T, _HANDLE_T),
      cache=True, nogil=True, parallel=True)
def gemm_split(a, b, c, parts, by_rows, blas, gv):
    """``c = a @ b`` as ``parts`` blocks of rows (``by_rows``) or of columns of ``c``, one
    per thread, each a single-threaded GEMM (GEMVs for few rows, with ``gv``: :data:`GEMV`,
    or zeros for none)."""
    for t in prange(parts):
        _block(a, b, c, int64(t), parts, by_rows, blas, gv)


def usable(*arrays) -> bool:
    """Whether :func:`gemm` takes these 2-d arrays ``(a, b, c)`` as they are: float32 or
    float64 alike, non-empty, with non-negative strides, each operand with one unit stride
    and the output with contiguous rows."""
    dt = arrays[0].dtype
    if dt not in (np.float32, np.float64):
        return False
    last = len(arrays) - 1
    for i, x in enumerate(arrays):
        if x.ndim != 2 or x.dtype != dt or x.size == 0 or min(x.strides) < 0:
            return False
        s0, s1 = (s // x.itemsize for s in x.strides)
        if not (s1 == 1 or x.shape[1] <= 1 or (i < last and (s0 == 1 or x.shape[0] <= 1))):
            return False
    return True


def by_rows(m: int, n: int) -> bool:
    """Split a product into row blocks (else column blocks). Each block re-reads (BLAS
    packs) the operand it is not split along: rows re-read ``b`` (k x n), columns re-read
    ``a`` (m x k), so the split goes along the longer side of ``c``."""
    return m >= n
