"""GEMM kernels: numpy's matmul on (possibly transposed) views goes straight to BLAS,
split into one block per thread when the product is large."""
import numpy as np

from ... import threads
from ...registry import kernel


def _t(a, trans):
    return np.swapaxes(a, -1, -2) if trans else a


# From this many flops a 2-d product is split into one block per thread (each calling
# single-threaded BLAS, see runtime/threads.py); below it the dispatch costs more than it buys.
SPLIT_FLOPS = 1 << 24


def split_matmul(a, b, y):
    """``np.matmul(a, b, out=y)`` as one step, split into per-thread blocks of rows (or of
    columns, when there are more of those) for large 2-d products."""
    m, n = y.shape[-2:]
    # the size test first: asking Numba for its thread count costs more than it, and
    # plans of deep models bind thousands of small products
    if y.ndim != 2 or a.ndim != 2 or b.ndim != 2 or 2 * m * n * a.shape[1] < SPLIT_FLOPS:
        return lambda: np.matmul(a, b, out=y)
    parts = threads.num_threads()
    if parts < 2:
        return lambda: np.matmul(a, b, out=y)
    if m >= n:
        cuts = [(t * m // parts, (t + 1) * m // parts) for t in range(parts)]
        blocks = [(a[r0:r1], b, y[r0:r1]) for r0, r1 in cuts]
    else:
        cuts = [(t * n // parts, (t + 1) * n // parts) for t in range(parts)]
        blocks = [(a, b[:, c0:c1], y[:, c0:c1]) for c0, c1 in cuts]

    def part(t):
        aa, bb, yy = blocks[t]
        np.matmul(aa, bb, out=yy)
    return lambda: threads.parallel(part, parts)


@kernel("MatMul")
def matmul(op, ins, outs):
    a, b = _t(ins[0], op.trans_a), _t(ins[1], op.trans_b)
    (y,) = outs
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
