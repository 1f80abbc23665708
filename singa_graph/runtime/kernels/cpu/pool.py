"""Pooling kernels: Numba loops, parallel over the N*C planes.

Max and average share one forward and one backward function (an ``is_max`` flag), which
halves the number of compiled variants. Windows are clipped to the real input, which is the
same as padding with -inf (max) or with zeros excluded from the count (average). Small
problems run on one thread (see ``conv.PARALLEL_WORK``).
"""
import numpy as np
from numba import prange

from ...registry import kernel
from .conv import loops, pick


@loops
def _POOL_FWD(x, y, kh, kw, sh, sw, pt, pl, is_max, include_pad):
    n_, c_, h, w = x.shape
    ho, wo = y.shape[2], y.shape[3]
    for t in prange(n_ * c_):
        n, c = t // c_, t % c_
        for oy in range(ho):
            y0 = oy * sh - pt
            ya, yb = max(y0, 0), min(y0 + kh, h)
            for ox in range(wo):
                x0 = ox * sw - pl
                xa, xb = max(x0, 0), min(x0 + kw, w)
                if is_max:
                    m = x[n, c, ya, xa]
                    for iy in range(ya, yb):
                        for ix in range(xa, xb):
                            if x[n, c, iy, ix] > m:
                                m = x[n, c, iy, ix]
                    y[n, c, oy, ox] = m
                else:
                    s = 0.0  # float64 accumulator for float32 inputs too
                    for iy in range(ya, yb):
                        for ix in range(xa, xb):
                            s += x[n, c, iy, ix]
                    y[n, c, oy, ox] = s / (kh * kw if include_pad else (yb - ya) * (xb - xa))


@loops
def _POOL_BWD(x, dy, dx, kh, kw, sh, sw, pt, pl, is_max, include_pad):
    n_, c_, h, w = dx.shape
    ho, wo = dy.shape[2], dy.shape[3]
    for t in prange(n_ * c_):  # one plane per iteration: overlapping windows stay race-free
        n, c = t // c_, t % c_
        dx[n, c] = 0
        for oy in range(ho):
            y0 = oy * sh - pt
            ya, yb = max(y0, 0), min(y0 + kh, h)
            for ox in range(wo):
                x0 = ox * sw - pl
                xa, xb = max(x0, 0), min(x0 + kw, w)
                g = dy[n, c, oy, ox]
                if is_max:  # the first maximum takes it all, as cuDNN and PyTorch do
                    by, bx, m = ya, xa, x[n, c, ya, xa]
                    for iy in range(ya, yb):
                        for ix in range(xa, xb):
                            if x[n, c, iy, ix] > m:
                                by, bx, m = iy, ix, x[n, c, iy, ix]
                    dx[n, c, by, bx] += g
                else:
                    g = g / (kh * kw if include_pad else (yb - ya) * (xb - xa))
                    for iy in range(ya, yb):
                        for ix in range(xa, xb):
                            dx[n, c, iy, ix] += g


def _bind(pair, op, pooled):
    """The loop version worth running for this size, and its arguments after the arrays."""
    (kh, kw), (sh, sw), (pt, pl, _, _) = op.kernel, op.stride, op.padding
    is_max = op.type.startswith("Max")
    include_pad = False if is_max else op.count_include_pad
    return pick(pair, pooled.size * kh * kw), (kh, kw, sh, sw, pt, pl, is_max, include_pad)


@kernel("MaxPool2d")
@kernel("AvgPool2d")
def pool2d(op, ins, outs):
    (x,), (y,) = ins, outs
    fwd, args = _bind(_POOL_FWD, op, y)
    return lambda: fwd(x, y, *args)


@kernel("MaxPool2dGrad")
def max_pool2d_grad(op, ins, outs):
    (dy, x), (dx,) = ins, outs
    bwd, args = _bind(_POOL_BWD, op, dy)
    return lambda: bwd(x, dy, dx, *args)


@kernel("AvgPool2dGrad")
def avg_pool2d_grad(op, ins, outs):
    (dy,), (dx,) = ins, outs
    bwd, args = _bind(_POOL_BWD, op, dy)
    # x is not read when averaging; passing dx keeps the argument types of the max variant
    return lambda: bwd(dx, dy, dx, *args)


@kernel("GlobalAveragePool")
def global_average_pool(op, ins, outs):
    (x,), (y,) = ins, outs
    return lambda: np.mean(x, axis=(2, 3), keepdims=True, out=y)
