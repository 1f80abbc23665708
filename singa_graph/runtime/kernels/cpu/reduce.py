"""Reduction kernels.

numpy's pairwise summation (accurate and vectorised) in general. The common reduction of a
gradient over every axis but a middle block (the bias gradient of a convolution, a sum over
N, H and W) is a Numba loop instead: numpy walks such a reduction with strided inner loops
(0.19 ms for the CNN's 64x16x28x28 gradient); here each kept index sums its contiguous
planes in float64, in parallel over the kept indices (about 0.03 ms).
"""
import numpy as np
from numba import njit, prange

from ...registry import kernel
from .loops import bound, loops, pick

# From this plane length (the product of the reduced trailing axes) the Numba loop is used.
MIN_PLANE = 16


@njit(cache=True, fastmath={"reassoc"})
def _plane_sum(v):
    """Sum of a 1-d array in float64 (``reassoc`` lets LLVM vectorise the additions)."""
    s = 0.0
    for i in range(v.shape[0]):
        s += v[i]
    return s


@loops
def _SUM_PLANES(x3, y, div):
    """``y[c] = sum(x3[:, c, :]) / div`` for ``x3`` of shape ``(A, C, B)``."""
    a_, c_ = x3.shape[0], x3.shape[1]
    for c in prange(c_):
        s = 0.0
        for a in range(a_):
            s += _plane_sum(x3[a, c])
        y[c] = s / div


def _planes(x, axes):
    """``(A, C, B)`` when the kept axes of ``x`` are one contiguous block with the reduced
    axes before and after it, the trailing ones at least MIN_PLANE elements (or any number
    when nothing is reduced before the block: a mean over the small planes of a mobile
    net's last stage took numpy 47 us for 10K elements); else None."""
    kept = [i for i in range(x.ndim) if i not in axes]
    if (not kept or kept != list(range(kept[0], kept[-1] + 1)) or x.dtype not in
            (np.float32, np.float64) or not x.flags.c_contiguous):
        return None
    a = int(np.prod(x.shape[:kept[0]], dtype=np.int64))
    c = int(np.prod(x.shape[kept[0]:kept[-1] + 1], dtype=np.int64))
    b = int(np.prod(x.shape[kept[-1] + 1:], dtype=np.int64))
    return (a, c, b) if (b >= MIN_PLANE or a == 1) and a * c * b > 0 else None


@loops(error_model="numpy")
def _SUM_MIDDLE(x3, y2, div):
    """``y2[a] = sum(x3[a, :, :], axis=0) / div`` for ``x3`` of shape ``(A, B, C)``: a
    running sum of rows of ``C`` in the output's dtype (vectorised along C; the plane sums
    above add in float64, one value at a time). Written as loops over ``C`` (numpy's error
    model: no zero check per division), which LLVM vectorises; as array expressions the
    mean of mnasnet0_5's 1280 channels at 2x2, batch 2, took 2.0 us."""
    c_ = x3.shape[2]
    for a in prange(x3.shape[0]):
        for c in range(c_):
            y2[a, c] = x3[a, 0, c]
        for b in range(1, x3.shape[1]):
            for c in range(c_):
                y2[a, c] += x3[a, b, c]
        if div != 1.0:
            for c in range(c_):
                y2[a, c] = y2[a, c] / div


def _middle(x, axes):
    """``(A, B, C)`` when the reduced axes of ``x`` are one contiguous block with kept
    axes after it at least MIN_PLANE elements long (the global mean of a channels-last
    activation: numpy took 30 us for 1280 channels of 2x2 pixels, batch 2); else None."""
    axes = sorted(axes)
    if (not axes or axes != list(range(axes[0], axes[-1] + 1)) or axes[-1] == x.ndim - 1
            or x.dtype not in (np.float32, np.float64) or not x.flags.c_contiguous):
        return None
    a = int(np.prod(x.shape[:axes[0]], dtype=np.int64))
    b = int(np.prod(x.shape[axes[0]:axes[-1] + 1], dtype=np.int64))
    c = int(np.prod(x.shape[axes[-1] + 1:], dtype=np.int64))
    return (a, b, c) if c >= MIN_PLANE and a * b * c > 0 else None


def mean_planes(x, y):
    """A step computing ``y[i] = mean(x[i, :])`` for ``x`` viewed as ``(M, B)`` (``y``
    holds M elements; both contiguous): the float64 plane sums of :func:`_reduce`."""
    m = y.size
    x3, y1 = x.reshape(1, m, -1), y.reshape(-1)
    div = float(x3.shape[2])
    loop = pick(_SUM_PLANES, x.size)
    return bound(loop, x3, y1, div)


def _reduce(fn, mean):
    def factory(op, ins, outs):
        (x,), (y,) = ins, outs
        axes = tuple(range(x.ndim)) if op.axes is None else op.axes
        shape = _planes(x, axes)
        if shape is not None and y.flags.c_contiguous:
            x3, y1 = x.reshape(shape), y.reshape(-1)
            div = float(shape[0] * shape[2]) if mean else 1.0
            loop = pick(_SUM_PLANES, x.size)
            return bound(loop, x3, y1, div)
        shape = _middle(x, axes)
        if shape is not None and y.flags.c_contiguous:
            x3, y2 = x.reshape(shape), y.reshape(shape[0], shape[2])
            loop = pick(_SUM_MIDDLE, x.size)
            return bound(loop, x3, y2, float(shape[1]) if mean else 1.0)
        kept = y.reshape(tuple(1 if i in axes else s for i, s in enumerate(x.shape)))
        return lambda: fn(x, axis=axes, keepdims=True, out=kept)
    return factory


kernel("Sum")(_reduce(np.sum, False))
kernel("Mean")(_reduce(np.mean, True))
