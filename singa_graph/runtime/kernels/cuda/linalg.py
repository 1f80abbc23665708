"""CUDA kernels of :mod:`..cpu.linalg`: matrix products through :mod:`.blas` (cuBLAS, or the
tiled fallback), bias additions as broadcasting elementwise kernels."""
from __future__ import annotations

from numba import cuda

from ...registry import kernel
from .blas import batched_step, gemm_step
from .elementwise import add_step
from .launch import broadcast_strides, flat, offset_of, padded, sequence, step


@cuda.jit(cache=True)
def _axpby(y, c, beta, shape, sc):
    # y += beta * c, c broadcast to y
    for i in range(cuda.grid(1), y.shape[0], cuda.gridsize(1)):
        y[i] += beta * c[offset_of(i, shape, sc)]


@kernel("MatMul", "cuda")
def matmul(op, ins, outs):
    a, b = ins
    (y,) = outs
    return batched_step(a, b, y, op.trans_a, op.trans_b)


@kernel("AddBias", "cuda")
def add_bias(op, ins, outs):
    x, b = ins
    (y,) = outs
    bb = b.reshape((b.size,) + (1,) * (x.ndim - op.dim - 1))
    return add_step(x, bb, y)


@kernel("Gemm", "cuda")
def gemm(op, ins, outs):
    a, b = ins[:2]
    c = ins[2] if len(ins) == 3 else None
    (y,) = outs
    product = gemm_step(a, b, y, op.trans_a, op.trans_b, alpha=op.alpha)
    if c is None:
        return product
    # y = alpha a b, then y += beta c with c broadcast: one GEMM, one elementwise kernel
    bias = step(_axpby, y.size, flat(y), flat(c), y.dtype.type(op.beta), padded(y.shape),
                broadcast_strides(c.shape, y.shape))
    return sequence([product, bias])
