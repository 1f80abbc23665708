"""The BLAS GEMM that Numba kernels call (runtime/kernels/cpu/blas.py) against numpy's
float64 product: every operand layout it takes (row-major, transposed views, blocks of a
larger matrix), accumulation, empty dimensions, and the per-thread split; through numpy's
CBLAS (blas.HANDLE) and through the SciPy fallback alike."""
import numpy as np
import pytest

from singa_graph.runtime.kernels.cpu import blas, dots, linalg

rng = np.random.default_rng(3)
SCIPY = (0, 0, False)  # no CBLAS address: the SciPy fallback
HANDLES = pytest.mark.parametrize("bl", [blas.HANDLE, SCIPY], ids=["numpy", "scipy"])


def test_numpy_cblas_is_found():
    # numpy's wheels export their OpenBLAS's CBLAS GEMMs; the kernels should be using them
    assert blas.HANDLE[0] and blas.HANDLE[1]
    assert blas.GEMV[0] and blas.GEMV[1]


def _ref(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


def _views(m, k, n, dtype):
    """(a, b) pairs of the same product as plain, transposed and sliced views."""
    A = rng.standard_normal((m + 3, k + 2)).astype(dtype)
    B = rng.standard_normal((k + 1, n + 4)).astype(dtype)
    a, b = A[1:m + 1, 2:k + 2], B[1:, 3:n + 3]            # blocks: leading dims > widths
    at, bt = np.ascontiguousarray(a.T).T, np.ascontiguousarray(b.T).T  # column-major views
    return [(np.ascontiguousarray(a), np.ascontiguousarray(b)), (a, b), (at, b), (a, bt),
            (at, bt)]


@HANDLES
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-13)])
@pytest.mark.parametrize("m,k,n", [(5, 7, 3), (1, 9, 4), (6, 1, 5), (17, 33, 2)])
def test_gemm_every_layout(m, k, n, dtype, tol, bl):
    for a, b in _views(m, k, n, dtype):
        assert blas.usable(a, b, np.empty((m, n), dtype))
        c = np.full((m, n), np.nan, dtype)  # beta = 0 must not read c
        blas.gemm(a, b, c, 0.0, bl)
        np.testing.assert_allclose(c, _ref(a, b), rtol=tol, atol=tol)


@HANDLES
def test_gemm_accumulates_and_writes_into_a_block(bl):
    a, b = rng.standard_normal((4, 6)), rng.standard_normal((6, 5))
    big = rng.standard_normal((7, 9))
    want = big.copy()
    want[2:6, 3:8] += a @ b
    blas.gemm(a, b, big[2:6, 3:8], 1.0, bl)
    np.testing.assert_allclose(big, want, rtol=1e-13, atol=1e-13)


@HANDLES
def test_gemm_empty_inner_dimension(bl):
    a, b = np.empty((3, 0)), np.empty((0, 4))
    c = np.full((3, 4), np.nan)
    blas.gemm(a, b, c, 0.0, bl)
    assert (c == 0).all()
    c = np.ones((3, 4))
    blas.gemm(a, b, c, 2.0, bl)
    assert (c == 2).all()


@HANDLES
@pytest.mark.parametrize("rows", [True, False])
@pytest.mark.parametrize("parts", [1, 2, 3, 8])
def test_gemm_split_matches(parts, rows, bl):
    for a, b in _views(7, 11, 6, np.float64):
        c = np.empty((7, 6))
        blas.gemm_split(a, b, c, parts, rows, bl, blas.GEMV if bl is blas.HANDLE else SCIPY)
        np.testing.assert_allclose(c, _ref(a, b), rtol=1e-13, atol=1e-13)


@HANDLES
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-13)])
@pytest.mark.parametrize("m,k,n", [(2, 7, 3), (1, 9, 4), (8, 1, 5), (3, 33, 2)])
def test_gemm_rows_every_layout(m, k, n, dtype, tol, bl):
    # few-row products go through GEMV, one row at a time (the SciPy handle: through gemm)
    gv = blas.GEMV if bl is blas.HANDLE else SCIPY
    for a, b in _views(m, k, n, dtype):
        c = np.full((m, n), np.nan, dtype)
        blas.gemm_rows(a, b, c, gv, bl)
        np.testing.assert_allclose(c, _ref(a, b), rtol=tol, atol=tol)


def test_usable_refuses_what_it_cannot_pass_to_blas():
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6, 5)).astype(np.float32)
    c = np.empty((4, 5), np.float32)
    assert blas.usable(a, b, c)
    assert not blas.usable(a[:, ::2], b[:3], c)                 # no unit stride
    assert not blas.usable(a, b, np.empty((5, 4), np.float32).T)  # output columns strided
    assert not blas.usable(a.astype(np.int32), b.astype(np.int32), np.empty((4, 5), np.int32))
    assert not blas.usable(a, b.astype(np.float64), c)            # mixed dtypes
    assert not blas.usable(a[::-1], b, c)                         # negative strides


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8, 9])
@pytest.mark.parametrize("parts", [1, 2, 3])
def test_rows_by_dots_matches_float64(m, parts):
    # few rows times a transposed weight (a classifier's Gemm): four rows at a time, then
    # one by one, each weight row split among the parts (float32 only: ops._util.tiled)
    a = rng.standard_normal((m, 37)).astype(np.float32)
    w = rng.standard_normal((11, 37)).astype(np.float32)
    c = np.full((m, 11), np.nan, np.float32)
    dots.rows_by_dots(a, w, c, parts)()
    np.testing.assert_allclose(c, _ref(a, w.T), rtol=1e-5, atol=1e-5)


def test_few_row_products_with_a_transposed_weight_take_the_dot_products(monkeypatch):
    # split_matmul's choice: same result as the kernel itself, and independent of threads
    a = rng.standard_normal((2, 300)).astype(np.float32)
    w = rng.standard_normal((500, 300)).astype(np.float32)
    seen = []
    real = dots.rows_by_dots
    monkeypatch.setattr(dots, "rows_by_dots", lambda *args: seen.append(args) or real(*args))
    y = np.empty((2, 500), np.float32)
    linalg.split_matmul(a, w.T, y)()
    assert len(seen) == 1
    y1 = np.empty_like(y)
    real(a, w, y1, 1)()
    np.testing.assert_array_equal(y, y1)
    np.testing.assert_allclose(y, _ref(a, w.T), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("m,k,n", [(96, 16, 1024), (48, 32, 1000), (64, 27, 961),
                                   (8, 16, 64), (192, 576, 256), (128, 192, 256)])
def test_gemm_in_column_blocks_matches_numpy(m, k, n):
    """blas.gemm_columns cuts thin products into column blocks for OpenBLAS's small-matrix
    kernels (the last block narrower); the values are the product's, and the cut is the
    same on every call."""
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    blas.gemm_columns(a, b, c, 0.0, blas.HANDLE)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    again = np.full_like(c, np.nan)
    blas.gemm_columns(a, b, again, 0.0, blas.HANDLE)
    np.testing.assert_array_equal(again, c)
    width = blas.SMALL_PRODUCT // (m * k) // 16 * 16
    cut = blas.MIN_BLOCK_COLUMNS <= width < n
    assert cut == ((m, k, n) in {(96, 16, 1024), (48, 32, 1000), (64, 27, 961)})
