"""GEMM kernels: float 2-d products go to BLAS through :mod:`.blas` (no operand copied),
split into one block per thread when the product is large; other products (batched,
integer) use numpy's matmul."""
import numpy as np

from ....ops._util import tiled
from ... import threads
from ...registry import kernel
from . import blas, dots
from .loops import bound


def _t(a, trans):
    return np.swapaxes(a, -1, -2) if trans else a


# From this many flops a 2-d product is split into one block per thread, each a
# single-threaded GEMM on Numba's pool (waking it costs a few microseconds, so a product of
# 2 MFLOP, some 15-20 us, already gains; measured on the MLP's products).
SPLIT_FLOPS = 1 << 21


def split_matmul(a, b, y):
    """``np.matmul(a, b, out=y)`` as one step: :func:`blas.gemm` for float 2-d operands,
    split into per-thread blocks of rows (or of columns, see :func:`blas.by_rows`) for
    large products."""
    if not blas.usable(a, b, y) or not y.flags.c_contiguous:
        return lambda: np.matmul(a, b, out=y)
    m, n = y.shape
    zero = y.dtype.type(0)
    # the size test first: asking Numba for its thread count costs more than it, and
    # plans of deep models bind thousands of small products
    parts = threads.num_threads() if 2 * m * n * a.shape[1] >= SPLIT_FLOPS else 1
    if (m <= blas.GEMV_ROWS and a.flags.c_contiguous and b.T.flags.c_contiguous
            and tiled(y.dtype)):
        # a few rows times a transposed weight (a classifier: Gemm with transB, batch 2):
        # each weight row read once for all rows, where a GEMV per row read the weight
        # once per row (mobilenet_v2's 1280x1000 in the whole model: see dots.py)
        return dots.rows_by_dots(a, b.T, y, parts)
    if parts < 2:
        if m <= blas.GEMV_ROWS:
            return bound(blas.gemm_rows, a, b, y, blas.GEMV, blas.HANDLE)
        return bound(blas.gemm, a, b, y, zero, blas.HANDLE)
    rows = blas.by_rows(m, n)
    return bound(blas.gemm_split, a, b, y, parts, rows, blas.HANDLE, blas.GEMV)


@kernel("MatMul")
def matmul(op, ins, outs):
    a, b = _t(ins[0], op.trans_a), _t(ins[1], op.trans_b)
    (y,) = outs
    if (a.ndim > 2 and b.ndim == 2 and not op.trans_a and a.flags.c_contiguous
            and y.flags.c_contiguous and y.shape[:-1] == a.shape[:-1]):
        # (..., M, K) @ (K, N), a Linear layer on a 4-d activation (ConvNeXt's MLPs): one
        # product of all rows, where numpy's matmul made one GEMM per leading index, each
        # packing all of b again (convnext_tiny: 89 of its 103 ms)
        return split_matmul(a.reshape(-1, a.shape[-1]), b, y.reshape(-1, y.shape[-1]))
    return split_matmul(a, b, y)


@kernel("AddBias")
def add_bias(op, ins, outs):
    x, b = ins
    (y,) = outs
    bb = b.reshape((-1,) + (1,) * (x.ndim - op.dim - 1))
    return lambda: np.add(x, bb, out=y)


@kernel("Gemm")
def gemm(op, ins, outs):
    a, b = _t(ins[0], op.trans_a), _t(ins[1], op.trans_b)
    c = ins[2] if len(ins) == 3 else None
    (y,) = outs
    alpha, beta = op.alpha, op.beta

    product = split_matmul(a, b, y)

    def step():
        product()
        if alpha != 1.0:
            np.multiply(y, alpha, out=y)
        if c is not None:
            if beta == 1.0:
                np.add(y, c, out=y)
            else:
                np.add(y, beta * c, out=y)
    return step
