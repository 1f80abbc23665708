"""Pooling kernels: Numba loops, parallel over the N*C planes.

Max pooling's forward folds a row of outputs in vector registers (simd_window.window_max, strides
1 and 2), tiny planes of many channels with the channels innermost (max_pool.py). Max and
average share the 2x2 forward and both backwards (an ``is_max`` flag), which halves the
number of compiled variants. Windows are clipped to the real input, which is the
same as padding with -inf (max) or with zeros excluded from the count (average). With
``include_pad`` the divisor counts a window's cells inside the explicitly padded input
(``[-pt, h + pb)``), which is ``kh * kw`` except for a ceil-mode window hanging past the
trailing padding. Small problems run on one thread (see ``loops.PARALLEL_WORK``).

The common 2x2, stride 2, unpadded case (where ceil mode adds no partial window) has its own
loops (``_POOL2_*``): each output row reads two contiguous input rows and vectorises; the
backward writes every dx cell once. The max backward recomputes the argmax from x, taking
the first maximum in row-major window order in both paths (as cuDNN and PyTorch do), and can
mask its result with a ReLU's output (``relu``, set by passes/fuse.py).
"""
import numpy as np
from numba import njit, prange, uintp

from ... import threads
from ...registry import carve, carved_bytes, kernel
from . import max_pool, simd_window
from .conv import _view
from .loops import bound, loops, pick
from .reduce import mean_planes

# strides 1 and 2, windows 3 wide (unrolled) or any width; one output row or ROWS at once
ROWS = 4
_WMAX = {(s, k, g): simd_window.window_max(s, k, g) for s in (1, 2) for k in (0, 3)
         for g in (1, ROWS)}
_WMAX_13, _WMAX_23, _WMAX_1, _WMAX_2 = (_WMAX[1, 3, 1], _WMAX[2, 3, 1], _WMAX[1, 0, 1],
                                        _WMAX[2, 0, 1])
_WMAX_13G, _WMAX_23G, _WMAX_1G, _WMAX_2G = (_WMAX[1, 3, ROWS], _WMAX[2, 3, ROWS],
                                            _WMAX[1, 0, ROWS], _WMAX[2, 0, ROWS])


@njit(inline="always")
def _fold_rows(x, xs, w, rows, kw, pl, sw, y, yr, wo, grouped, gs):
    """Output row ``y[yr:yr + wo]`` (strides 1 and 2) from ``rows`` input rows at ``xs``,
    or with ``grouped`` the ``ROWS`` output rows from there on, ``gs`` apart in ``x``."""
    if grouped:
        if sw == 1 and kw == 3:
            _WMAX_13G(x, xs, w, rows, kw, -pl, w, y, yr, wo, gs, wo)
        elif sw == 2 and kw == 3:
            _WMAX_23G(x, xs, w, rows, kw, -pl, w, y, yr, wo, gs, wo)
        elif sw == 1:
            _WMAX_1G(x, xs, w, rows, kw, -pl, w, y, yr, wo, gs, wo)
        else:
            _WMAX_2G(x, xs, w, rows, kw, -pl, w, y, yr, wo, gs, wo)
    elif sw == 1 and kw == 3:
        _WMAX_13(x, xs, w, rows, kw, -pl, w, y, yr, wo, 0, 0)
    elif sw == 2 and kw == 3:
        _WMAX_23(x, xs, w, rows, kw, -pl, w, y, yr, wo, 0, 0)
    elif sw == 1:
        _WMAX_1(x, xs, w, rows, kw, -pl, w, y, yr, wo, 0, 0)
    else:
        _WMAX_2(x, xs, w, rows, kw, -pl, w, y, yr, wo, 0, 0)


@njit(cache=True, nogil=True)
def _max_plane(x, y, xo, yo, h, w, ho, wo, kh, kw, sh, sw, pt, pl):
    """``y[yo + oy*wo + ox]`` of the plane ``x[xo:xo + h*w]``: the max fold of the window's
    cells inside the plane in row-major order, the first maximum kept (``v > m``), so a NaN
    in front stays and later NaNs are skipped. Strides 1 and 2 fold a row of outputs in
    vector registers (simd_window.window_max), the rows whose windows lie inside the
    plane's rows ``ROWS`` at a time (the last group overlapping the one before it, writing
    the same values again); flat offsets, not per-row views, since a view costs a
    reference count pair, more than a short row's work."""
    if sw == 1 or sw == 2:
        # [oa, ob): the output rows whose windows lie inside the plane's rows
        oa = min(ho, (pt + sh - 1) // sh)
        ob = max(oa, min(ho, (h - kh + pt) // sh + 1))
        if ob - oa < ROWS:
            oa = ob = 0
        for first in range(oa, ob, ROWS):
            oy = min(first, ob - ROWS)
            _fold_rows(x, xo + (oy * sh - pt) * w, w, kh, kw, pl, sw, y, yo + oy * wo, wo,
                       True, sh * w)
        for oy in range(ho):
            if oa <= oy < ob:
                continue
            y0 = oy * sh - pt
            ya, yb = max(y0, 0), min(y0 + kh, h)
            _fold_rows(x, xo + ya * w, w, yb - ya, kw, pl, sw, y, yo + oy * wo, wo, False, 0)
        return
    for oy in range(ho):
        y0 = oy * sh - pt
        ya, yb = max(y0, 0), min(y0 + kh, h)
        xs, yr = xo + ya * w, yo + oy * wo
        for ox in range(wo):
            x0 = ox * sw - pl
            xa, xb = max(x0, 0), min(x0 + kw, w)
            m = x[xs + xa]
            for iy in range(yb - ya):
                for ix in range(xa, xb):
                    v = x[xs + iy * w + ix]
                    m = v if v > m else m
            y[yr + ox] = m


@loops
def _MAX_POOL_FWD(x, y, dims, kh, kw, sh, sw, pt, pl):
    """``x`` and ``y`` flat, ``dims`` ``(N*C, H, W, Ho, Wo)``."""
    planes, h, w, ho, wo = dims
    for t in prange(planes):
        _max_plane(x, y, t * h * w, t * ho * wo, h, w, ho, wo, kh, kw, sh, sw, pt, pl)


@loops
def _AVG_POOL_FWD(x, y, kh, kw, sh, sw, pt, pl, pb, pr, include_pad):
    n_, c_, h, w = x.shape
    ho, wo = y.shape[2], y.shape[3]
    for t in prange(n_ * c_):
        n, c = t // c_, t % c_
        xp, yp = x[n, c], y[n, c]
        for oy in range(ho):
            y0 = oy * sh - pt
            ya, yb = max(y0, 0), min(y0 + kh, h)
            ny = min(y0 + kh, h + pb) - y0  # rows counted with include_pad
            yr = yp[oy]
            for ox in range(wo):
                x0 = ox * sw - pl
                xa, xb = max(x0, 0), min(x0 + kw, w)
                s = 0.0  # float64 accumulator for float32 inputs too
                for iy in range(ya, yb):
                    r = xp[iy]
                    for ix in range(xa, xb):
                        s += r[ix]
                cnt = ny * (min(x0 + kw, w + pr) - x0) if include_pad else (yb - ya) * (xb - xa)
                yr[ox] = s / cnt


@loops
def _POOL_BWD(x, dy, dx, kh, kw, sh, sw, pt, pl, pb, pr, is_max, include_pad, relu):
    n_, c_, h, w = dx.shape
    ho, wo = dy.shape[2], dy.shape[3]
    zero = dx.dtype.type(0)
    for t in prange(n_ * c_):  # one plane per iteration: overlapping windows stay race-free
        n, c = t // c_, t % c_
        xp, gp, dp = x[n, c], dy[n, c], dx[n, c]
        dp[:] = 0
        for oy in range(ho):
            y0 = oy * sh - pt
            ya, yb = max(y0, 0), min(y0 + kh, h)
            ny = min(y0 + kh, h + pb) - y0
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
                    # with the ReLU mask (x > 0), a cell where x <= 0 only ever gets zeros
                    # added: the masked sum, bit for bit
                    dp[by, bx] += gr[ox] if not relu or m > 0 else zero
            else:
                for ox in range(wo):
                    x0 = ox * sw - pl
                    xa, xb = max(x0, 0), min(x0 + kw, w)
                    cnt = ny * (min(x0 + kw, w + pr) - x0) if include_pad else (yb - ya) * (xb - xa)
                    g = gr[ox] / cnt
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


@njit(cache=True, nogil=True)
def _winner(a, b, c, d):
    """``(k, value)`` of the first maximum of a 2x2 window in row-major order, as the general
    loop finds it (a NaN in front keeps it: v > NaN is false), by selects, not branches."""
    kb = b > a
    m = b if kb else a
    kc = c > m
    m = c if kc else m
    kd = d > m
    m = d if kd else m
    k = 0
    k = 1 if kb else k
    k = 2 if kc else k
    k = 3 if kd else k
    return k, m


@loops
def _POOL2_BWD(x, dy, dx, is_max, relu):
    """dx of the 2x2 / stride 2 / unpadded pooling: every dx cell written once, no zeroing
    pass first. The max writes all four cells of a window by selects (the branches of the
    old loop mispredicted on random data: 3x slower); ``relu`` masks the gradient by
    ``x > 0`` at the winner. The flags select one of three loops outside the window loop:
    tested inside it, the loop compiled 1.7-3x slower."""
    n_, c_, h, w = dx.shape
    ho, wo = dy.shape[2], dy.shape[3]
    zero = dx.dtype.type(0)
    for t in prange(n_ * c_):
        n, c = uintp(t // c_), uintp(t % c_)
        for oy in range(ho):
            i0 = uintp(2 * oy)
            i1 = i0 + uintp(1)
            uy = uintp(oy)
            if is_max and relu:
                for ox in range(wo):
                    j0 = uintp(2 * ox)
                    j1 = j0 + uintp(1)
                    k, m = _winner(x[n, c, i0, j0], x[n, c, i0, j1], x[n, c, i1, j0],
                                   x[n, c, i1, j1])
                    g = dy[n, c, uy, uintp(ox)]
                    g = g if m > 0 else zero
                    dx[n, c, i0, j0] = g if k == 0 else zero
                    dx[n, c, i0, j1] = g if k == 1 else zero
                    dx[n, c, i1, j0] = g if k == 2 else zero
                    dx[n, c, i1, j1] = g if k == 3 else zero
            elif is_max:
                for ox in range(wo):
                    j0 = uintp(2 * ox)
                    j1 = j0 + uintp(1)
                    k, m = _winner(x[n, c, i0, j0], x[n, c, i0, j1], x[n, c, i1, j0],
                                   x[n, c, i1, j1])
                    g = dy[n, c, uy, uintp(ox)]
                    dx[n, c, i0, j0] = g if k == 0 else zero
                    dx[n, c, i0, j1] = g if k == 1 else zero
                    dx[n, c, i1, j0] = g if k == 2 else zero
                    dx[n, c, i1, j1] = g if k == 3 else zero
            else:
                for ox in range(wo):
                    j0 = uintp(2 * ox)
                    j1 = j0 + uintp(1)
                    g = dy[n, c, uy, uintp(ox)] / 4
                    dx[n, c, i0, j0] = g
                    dx[n, c, i0, j1] = g
                    dx[n, c, i1, j0] = g
                    dx[n, c, i1, j1] = g
            if w > 2 * wo:  # the odd last column no window covers
                dx[n, c, i0, uintp(w - 1)] = zero
                dx[n, c, i1, uintp(w - 1)] = zero
        if h > 2 * ho:  # the odd last row
            for j in range(w):
                dx[n, c, uintp(h - 1), uintp(j)] = zero


def _bind(pair, op, pooled):
    """The loop version worth running for this size, and its arguments after the arrays."""
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = op.kernel, op.stride, op.padding
    is_max = op.type.startswith("Max")
    include_pad = False if is_max else op.count_include_pad
    return (pick(pair, pooled.size * kh * kw),
            (kh, kw, sh, sw, pt, pl, pb, pr, is_max, include_pad))


def _is_2x2(op, x_shape, pooled):
    """Whether every window is a whole 2x2 block at stride 2: not so where ceil mode keeps a
    partial last window (an odd size), which the general loop clips."""
    return (op.kernel == (2, 2) and op.stride == (2, 2) and not any(op.padding)
            and 2 * pooled.shape[2] <= x_shape[2] and 2 * pooled.shape[3] <= x_shape[3])


def _bind2(pair, op, x_shape, pooled):
    """The 2x2 / stride 2 loop for ``op``, or None where its windows are not that shape."""
    if not _is_2x2(op, x_shape, pooled):
        return None
    return pick(pair, pooled.size * 4), op.type.startswith("Max")


def _max_pool_spec(op, ins, outs):
    """The workspace of max_pool.py's channels-innermost kernel and its split, or None
    where the plane-by-plane loops here run."""
    x, y = ins[0], outs[0]
    if _is_2x2(op, x.shape, y) or not max_pool.chosen(x.shape, y.shape):
        return None
    parts, per_sample, per = max_pool.plan(x.shape, y.shape, threads.num_threads())
    return ((parts, per), y.dtype), parts, per_sample


def _max_pool_ws(op, ins, outs):
    spec = _max_pool_spec(op, ins, outs)
    return 0 if spec is None else carved_bytes(spec[0])


@kernel("MaxPool2d", workspace=_max_pool_ws)
def max_pool2d(op, ins, outs, ws):
    spec = _max_pool_spec(op, ins, outs)
    if spec is None:
        (x,), (y,) = ins, outs
        fast = _bind2(_POOL2_FWD, op, x.shape, y)
        if fast:
            return bound(fast[0], x, y, True)
        (kh, kw), (sh, sw), (pt, pl, _, _) = op.kernel, op.stride, op.padding
        dims = (x.shape[0] * x.shape[1], *x.shape[2:], *y.shape[2:])
        return bound(pick(_MAX_POOL_FWD, y.size * kh * kw), _view(x, (-1,)), _view(y, (-1,)),
                     dims, kh, kw, sh, sw, pt, pl)
    (scratch,) = carve(ws, spec[0])
    return max_pool.bind(ins[0], outs[0], op, scratch, spec[1], spec[2])


@kernel("MaxPool2dNHWC")
def max_pool2d_nhwc(op, ins, outs):
    return max_pool.bind_nhwc(ins[0], outs[0], op, threads.num_threads())


@kernel("AvgPool2d")
def pool2d(op, ins, outs):
    (x,), (y,) = ins, outs
    fast = _bind2(_POOL2_FWD, op, x.shape, y)
    if fast:
        return bound(fast[0], x, y, False)
    fwd, (*window, _, include_pad) = _bind(_AVG_POOL_FWD, op, y)  # no is_max flag
    return bound(fwd, x, y, *window, include_pad)


@kernel("MaxPool2dGrad")
def max_pool2d_grad(op, ins, outs):
    (dy, x), (dx,) = ins, outs
    relu = getattr(op, "relu", False)
    fast = _bind2(_POOL2_BWD, op, dx.shape, dy)
    if fast:
        bwd2, is_max = fast
        return bound(bwd2, x, dy, dx, is_max, relu)
    bwd, args = _bind(_POOL_BWD, op, dy)
    return bound(bwd, x, dy, dx, *args, relu)


@kernel("AvgPool2dGrad")
def avg_pool2d_grad(op, ins, outs):
    (dy,), (dx,) = ins, outs
    # x is not read when averaging; passing dx keeps the argument types of the max variant
    fast = _bind2(_POOL2_BWD, op, dx.shape, dy)
    if fast:
        bwd2, is_max = fast
        return bound(bwd2, dx, dy, dx, is_max, False)
    bwd, args = _bind(_POOL_BWD, op, dy)
    return bound(bwd, dx, dy, dx, *args, False)


@kernel("GlobalAveragePool")
def global_average_pool(op, ins, outs):
    (x,), (y,) = ins, outs
    if x.dtype in (np.float32, np.float64) and x.flags.c_contiguous and x.size:
        return mean_planes(x, y)
    return lambda: np.mean(x, axis=(2, 3), keepdims=True, out=y)
