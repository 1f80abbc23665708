"""Row-wise CUDA kernels of :mod:`..cpu.activation`: Softmax, LogSoftmax and their gradients
along ``op.axis`` (the elementwise activations are in :mod:`.elementwise`).

As on the CPU, the array is viewed as ``(outer, n, inner)``: row ``r`` is
``(r // inner, :, r % inner)``, so a non-last axis needs no transposed copy. Each row is
owned by a group of ``w`` threads (:func:`.reduce.width`): one thread per row for rows of a
few classes (a 10-class row is ten loads, which a barrier-free loop does faster than any
tree, and neighbouring threads then own neighbouring rows), for longer rows a power of two
giving each lane about eight elements (a warp for rows of ~256, 128 lanes for 1000
classes), at most a whole block. A row is one launch of up to three passes, the
group's lanes striding over its elements: the max (shared-memory tree), the sum of
exponentials (tree, float64 as on the CPU), then the writes. Every lane writes only the
elements it read itself, after the trees' barriers, so the output may overwrite the input
(the ops declare ``inplace``).
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, float64

from ....errors import UnsupportedOpError
from ...registry import kernel
from .launch import TPB, flat, launcher, noop
from .reduce import F0, grid, tree_max, tree_sum, width

SOFTMAX, LOG_SOFTMAX, SOFTMAX_GRAD, LOG_SOFTMAX_GRAD = range(4)


def rows3(shape, axis) -> tuple:
    """``(outer, n, inner)`` of a C-contiguous array of ``shape`` taken along ``axis``."""
    shape = tuple(int(s) for s in shape)
    return (int(np.prod(shape[:axis], dtype=np.int64)), shape[axis],
            int(np.prod(shape[axis + 1:], dtype=np.int64)))


@cuda.jit(device=True)
def row_max(a, base, n, inner, live, lane, w, shv):
    """The largest element of the row at ``base`` (elements ``inner`` apart), to every lane
    of the group; ``shv`` is a shared array of the data's dtype."""
    m = a[base]  # any element of the row starts the max
    if live:
        for k in range(lane, n, w):
            v = a[base + k * inner]
            if v > m:
                m = v
    return tree_max(shv, m, lane, w)


@cuda.jit(device=True)
def _rows_body(code, a, b, y, n, inner, nrows, w, shv, shd):
    t = cuda.threadIdx.x
    lane = t % w
    per = TPB // w
    for r0 in range(cuda.blockIdx.x * per, nrows, cuda.gridDim.x * per):
        r = r0 + t // w  # the whole group shares r: it is live or idle as one
        live = r < nrows
        base = (r // inner) * n * inner + r % inner if live else 0
        s = F0
        if code == SOFTMAX or code == LOG_SOFTMAX:
            m = row_max(a, base, n, inner, live, lane, w, shv)
            if live:
                for k in range(lane, n, w):
                    e = math.exp(a[base + k * inner] - m)
                    if code == SOFTMAX:
                        y[base + k * inner] = e  # kept and rescaled: one exp per element
                    s += e
            s = tree_sum(shd, s, lane, w)
            if live:
                if code == SOFTMAX:
                    inv = 1.0 / s
                    for k in range(lane, n, w):
                        i = base + k * inner
                        y[i] = y[i] * inv
                else:
                    lse = m + math.log(s)
                    for k in range(lane, n, w):
                        i = base + k * inner
                        y[i] = a[i] - lse
        else:  # gradients: a is dy, b the forward output
            if live:
                for k in range(lane, n, w):
                    i = base + k * inner
                    if code == SOFTMAX_GRAD:
                        s += a[i] * b[i]
                    else:
                        s += a[i]
            s = tree_sum(shd, s, lane, w)
            if live:
                for k in range(lane, n, w):
                    i = base + k * inner
                    if code == SOFTMAX_GRAD:
                        y[i] = b[i] * (a[i] - s)
                    else:
                        y[i] = a[i] - math.exp(b[i]) * s


@cuda.jit(cache=True)
def _rows_f32(code, a, b, y, n, inner, nrows, w):
    shv = cuda.shared.array(TPB, float32)
    shd = cuda.shared.array(TPB, float64)
    _rows_body(code, a, b, y, n, inner, nrows, w, shv, shd)


@cuda.jit(cache=True)
def _rows_f64(code, a, b, y, n, inner, nrows, w):
    shv = cuda.shared.array(TPB, float64)
    shd = cuda.shared.array(TPB, float64)
    _rows_body(code, a, b, y, n, inner, nrows, w, shv, shd)


def typed(kernels, op, dtype):
    """The kernel of ``kernels`` (float32, float64) for ``dtype``: the max trees hold the
    data's own type (the max is one of the values, exactly)."""
    dt = np.dtype(dtype)
    if dt == np.float32:
        return kernels[0]
    if dt == np.float64:
        return kernels[1]
    raise UnsupportedOpError(f"no cuda kernel for {op.type} in {dt}")


def rows_step(op, code, a, b, y, axis):
    """A step running row function ``code`` over the rows of ``y`` along ``axis``."""
    outer, n, inner = rows3(y.shape, axis)
    nrows = outer * inner
    kern = typed((_rows_f32, _rows_f64), op, y.dtype)
    if y.size == 0:
        return noop
    w = width(n)
    launch = launcher(kern, grid(nrows, w), TPB)
    fa, fb, fy = flat(a), flat(b), flat(y)
    return lambda: launch(code, fa, fb, fy, n, inner, nrows, w)


def _rowwise(code):
    def factory(op, ins, outs):
        b = ins[1] if len(ins) > 1 else ins[0]
        return rows_step(op, code, ins[0], b, outs[0], op.axis)
    return factory


kernel("Softmax", "cuda")(_rowwise(SOFTMAX))
kernel("LogSoftmax", "cuda")(_rowwise(LOG_SOFTMAX))
kernel("SoftmaxGrad", "cuda")(_rowwise(SOFTMAX_GRAD))
kernel("LogSoftmaxGrad", "cuda")(_rowwise(LOG_SOFTMAX_GRAD))
