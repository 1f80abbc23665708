"""Pooling kernels: Numba loops, parallel over the N*C planes.

Max and average share one forward and one backward function (an ``is_max`` flag), which
halves the number of compiled variants. Windows are clipped to the real input, which is the
same as padding with -inf (max) or with zeros excluded from the count (average). Small
problems run on one thread (see ``loops.PARALLEL_WORK``).

The common 2x2, stride 2, unpadded case has its own loops (``_POOL2_*``): each output row
reads two contiguous input rows and vectorises; the backward fills each pair of dx rows at
once (zeros, then the gradient at the winner) instead of zeroing all of dx first. The max
backward recomputes the argmax from x, taking the first maximum in row-major window order in
both paths (as cuDNN and PyTorch do).
"""
import numpy as np
from numba import prange

from ...registry import kernel
from .loops import loops, pick


@loops
def _POOL_FWD(x, y, kh, kw, sh, sw, pt, pl, is_max, include_pad):
    n_, c_, h, w = x.shape
    ho, wo = y.shape[2], y.shape[3]
    full = kh * kw
    for t in prange(n_ * c_):
        n, c = t // c_, t % c_
        xp, yp = x[n, c], y[n, c]
        for oy in range(ho):
            y0 = oy * sh - pt
            ya, yb = max(y0, 0), min(y0 + kh, h)
            yr = yp[oy]
            if is_max:
                for ox in range(wo):
                    x0 = ox * sw - pl
                    xa, xb = max(x0, 0), min(x0 + kw, w)
                    m = xp[ya, xa]
                    for iy in range(ya, yb):
                        r = xp[iy]
                        for ix in range(xa, xb):
                            v = r[ix]
                            if v > m:
                                m = v
                    yr[ox] = m
            else:
                for ox in range(wo):
                    x0 = ox * sw - pl
                    xa, xb = max(x0, 0), min(x0 + kw, w)
                    s = 0.0  # float64 accumulator for float32 inputs too
                    for iy in range(ya, yb):
                        r = xp[iy]
                        for ix in range(xa, xb):
                            s += r[ix]
                    yr[ox] = s / (full if include_pad else (yb - ya) * (xb - xa))


@loops
def _POOL_BWD(x, dy, dx, kh, kw, sh, sw, pt, pl, is_max, include_pad):
    n_, c_, h, w = dx.shape
    ho, wo = dy.shape[2], dy.shape[3]
    full = kh * kw
    for t in prange(n_ * c_):  # one plane per iteration: overlapping windows stay race-free
        n, c = t // c_, t % c_
        xp, gp, dp = x[n, c], dy[n, c], dx[n, c]
        dp[:] = 0
        for oy in range(ho):
            y0 = oy * sh - pt
            ya, yb = max(y0, 0), min(y0 + kh, h)
            gr = gp[oy]
            if is_max:  # the first maximum takes it all, as cuDNN and PyTorch do
                for ox in range(wo):
                    x0 = ox * sw - pl
                    xa, xb = max(x0, 0), min(x0 + kw, w)
                    by, bx, m = ya, xa, xp[ya, xa]
                    for iy in range(ya, yb):
                        r = xp[iy]
                        for ix in range(xa, xb):
                            v = r[ix]
                            if v > m:
                                by, bx, m = iy, ix, v
                    dp[by, bx] += gr[ox]
            else:
                for ox in range(wo):
                    x0 = ox * sw - pl
                    xa, xb = max(x0, 0), min(x0 + kw, w)
                    g = gr[ox] / (full if include_pad else (yb - ya) * (xb - xa))
                    for iy in range(ya, yb):
                        r = dp[iy]
                        for ix in range(xa, xb):
                            r[ix] += g


@loops
def _POOL2_FWD(x, y, is_max):
    """2x2 windows, stride 2, no padding (floor mode: an odd last row/column is skipped)."""
    n_, c_ = x.shape[0], x.shape[1]
    ho, wo = y.shape[2], y.shape[3]
    for t in prange(n_ * c_):
        n, c = t // c_, t % c_
        xp, yp = x[n, c], y[n, c]
        for oy in range(ho):
            r0, r1, yr = xp[2 * oy], xp[2 * oy + 1], yp[oy]
            if is_max:
                for ox in range(wo):
                    m = r0[2 * ox]  # same comparisons, same order, as the general loop
                    v = r0[2 * ox + 1]
                    m = v if v > m else m
                    v = r1[2 * ox]
                    m = v if v > m else m
                    v = r1[2 * ox + 1]
                    yr[ox] = v if v > m else m
            else:
                for ox in range(wo):
                    s = 0.0  # float64, as the general loop
                    s += r0[2 * ox]
                    s += r0[2 * ox + 1]
                    s += r1[2 * ox]
                    s += r1[2 * ox + 1]
                    yr[ox] = s / 4


@loops
def _POOL2_BWD(x, dy, dx, is_max):
    """dx of the 2x2 / stride 2 / unpadded pooling, one pair of dx rows at a time."""
    n_, c_, h, w = dx.shape
    ho, wo = dy.shape[2], dy.shape[3]
    for t in prange(n_ * c_):
        n, c = t // c_, t % c_
        xp, gp, dp = x[n, c], dy[n, c], dx[n, c]
        for oy in range(ho):
            i0 = 2 * oy
            gr, d0, d1 = gp[oy], dp[i0], dp[i0 + 1]
            if is_max:
                # zero the two rows while they are in L1 (a vector loop), then one store
                # per window; the argmax selects compile to conditional moves, not branches
                for j in range(w):
                    d0[j] = 0
                    d1[j] = 0
                r0, r1 = xp[i0], xp[i0 + 1]
                for ox in range(wo):
                    j = 2 * ox
                    k = 0  # the first maximum in row-major order, as the general loop
                    m = r0[j]
                    if r0[j + 1] > m:
                        m = r0[j + 1]
                        k = 1
                    if r1[j] > m:
                        m = r1[j]
                        k = 2
                    if r1[j + 1] > m:
                        k = 3
                    dp[i0 + (k >> 1), j + (k & 1)] = gr[ox]
            else:
                for ox in range(wo):
                    g = gr[ox] / 4
                    d0[2 * ox] = g
                    d0[2 * ox + 1] = g
                    d1[2 * ox] = g
                    d1[2 * ox + 1] = g
                if w > 2 * wo:  # the odd last column no window covers
                    d0[w - 1] = 0
                    d1[w - 1] = 0
        if h > 2 * ho:  # the odd last row
            dp[h - 1] = 0


def _bind(pair, op, pooled):
    """The loop version worth running for this size, and its arguments after the arrays."""
    (kh, kw), (sh, sw), (pt, pl, _, _) = op.kernel, op.stride, op.padding
    is_max = op.type.startswith("Max")
    include_pad = False if is_max else op.count_include_pad
    return pick(pair, pooled.size * kh * kw), (kh, kw, sh, sw, pt, pl, is_max, include_pad)


def _is_2x2(op):
    return op.kernel == (2, 2) and op.stride == (2, 2) and not any(op.padding)


def _bind2(pair, op, pooled):
    """The 2x2 / stride 2 loop for ``op``, or None where its windows are not that shape."""
    if not _is_2x2(op):
        return None
    return pick(pair, pooled.size * 4), op.type.startswith("Max")


@kernel("MaxPool2d")
@kernel("AvgPool2d")
def pool2d(op, ins, outs):
    (x,), (y,) = ins, outs
    fast = _bind2(_POOL2_FWD, op, y)
    if fast:
        fwd2, is_max = fast
        return lambda: fwd2(x, y, is_max)
    fwd, args = _bind(_POOL_FWD, op, y)
    return lambda: fwd(x, y, *args)


@kernel("MaxPool2dGrad")
def max_pool2d_grad(op, ins, outs):
    (dy, x), (dx,) = ins, outs
    fast = _bind2(_POOL2_BWD, op, dy)
    if fast:
        bwd2, is_max = fast
        return lambda: bwd2(x, dy, dx, is_max)
    bwd, args = _bind(_POOL_BWD, op, dy)
    return lambda: bwd(x, dy, dx, *args)


@kernel("AvgPool2dGrad")
def avg_pool2d_grad(op, ins, outs):
    (dy,), (dx,) = ins, outs
    # x is not read when averaging; passing dx keeps the argument types of the max variant
    fast = _bind2(_POOL2_BWD, op, dy)
    if fast:
        bwd2, is_max = fast
        return lambda: bwd2(dx, dy, dx, is_max)
    bwd, args = _bind(_POOL_BWD, op, dy)
    return lambda: bwd(dx, dy, dx, *args)


@kernel("GlobalAveragePool")
def global_average_pool(op, ins, outs):
    (x,), (y,) = ins, outs
    return lambda: np.mean(x, axis=(2, 3), keepdims=True, out=y)
