"""GEMM kernels: numpy's matmul on (possibly transposed) views goes straight to BLAS."""
import numpy as np

from ...registry import kernel


def _t(a, trans):
    return np.swapaxes(a, -1, -2) if trans else a


@kernel("MatMul")
def matmul(op, ins, outs):
    a, b = _t(ins[0], op.trans_a), _t(ins[1], op.trans_b)
    (y,) = outs
    return lambda: np.matmul(a, b, out=y)


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

    def step():
        np.matmul(a, b, out=y)
        if alpha != 1.0:
            np.multiply(y, alpha, out=y)
        if c is not None:
            if beta == 1.0:
                np.add(y, c, out=y)
            else:
                np.add(y, beta * c, out=y)
    return step
