"""CUDA kernels of :mod:`..cpu.pool`: max and average pooling, their gradients, and the
global average.

The forward is a thread per output element (grid-stride). The backward is a gather: a
thread per input pixel visits the windows that cover it, so overlapping windows need no
atomics and every pixel is written once (zero where no window reaches). Both follow the CPU
loops exactly: windows are clipped to the real input (padding is -inf for max, and left out
of the divisor for average unless ``count_include_pad``, which counts the cells inside the
explicitly padded input, fewer than ``kh * kw`` only for a ceil-mode window hanging past the
trailing padding); the max is the *first* maximum in
row-major window order (``v > m`` from the window's first cell), which the backward
recomputes from ``x`` to decide which pixel of a window receives its gradient; averages sum
in float64, as the CPU does, and the max backward adds in the input's dtype in the CPU's
window order, so its sums are bit for bit the CPU's.

``geo`` is ``(H, W, kh, kw, sh, sw, pt, pl, pb, pr, Ho, Wo)``; one launch per op. Ceil mode
needs nothing else: its output shape has the extra windows, and they are clipped as any.

GlobalAveragePool is a reduction per ``(n, c)`` plane: a block per plane with a
shared-memory tree when the plane holds at least a block of elements, else a thread per
plane (small planes, such as the 7x7 before a classifier, would leave most of a block idle).
"""
from __future__ import annotations

from numba import cuda, float64

from ...registry import kernel
from .launch import TPB, flat, noop, per_block, scalar, step
# F0, a float64 zero, starts the average's sums: a literal 0.0 also compiles to float64,
# but on the simulator numpy adds float32 to a Python float in float32
from .reduce import F0, tree_sum


@cuda.jit(device=True)
def _window(o, s, p, k, n):
    """The window of output ``o`` clipped to ``[0, n)``: ``(first, end)``."""
    a = o * s - p
    return max(a, 0), min(a + k, n)


@cuda.jit(device=True)
def _counted(o, s, p, k, n, p_end):
    """Cells of output ``o``'s window inside the padded ``[-p, n + p_end)``: the
    ``count_include_pad`` divisor along one axis."""
    a = o * s - p
    return min(a + k, n + p_end) - a


@cuda.jit(device=True)
def _argmax(x, base, w, ya, yb, xa, xb):
    """Row-major offset of the first maximum of the window (as the CPU: start at the first
    cell, move on ``v > m``, so NaN at the start wins and NaN later is skipped)."""
    best = ya * w + xa
    m = x[base + best]
    for iy in range(ya, yb):
        for ix in range(xa, xb):
            v = x[base + iy * w + ix]
            if v > m:
                m = v
                best = iy * w + ix
    return best


@cuda.jit(cache=True)
def _pool_fwd(x, y, geo, is_max, include_pad):
    h, w, kh, kw, sh, sw, pt, pl, pb, pr, ho, wo = geo
    for i in range(cuda.grid(1), y.shape[0], cuda.gridsize(1)):
        ox = i % wo
        t = i // wo
        oy = t % ho
        ya, yb = _window(oy, sh, pt, kh, h)
        xa, xb = _window(ox, sw, pl, kw, w)
        base = (t // ho) * h * w
        if is_max:
            y[i] = x[base + _argmax(x, base, w, ya, yb, xa, xb)]
        else:
            s = F0  # float64 for float32 inputs too, as the CPU loop
            for iy in range(ya, yb):
                for ix in range(xa, xb):
                    s += x[base + iy * w + ix]
            y[i] = s / (_counted(oy, sh, pt, kh, h, pb) * _counted(ox, sw, pl, kw, w, pr)
                        if include_pad else (yb - ya) * (xb - xa))


@cuda.jit(device=True)
def _covering(i, p, s, k, n):
    """The outputs ``[first, last]`` whose windows (stride ``s``, padding ``p``, ``k``
    taps) cover input ``i``, among ``n`` outputs."""
    a = i + p - k + 1
    first = 0 if a <= 0 else (a + s - 1) // s
    return first, min(n - 1, (i + p) // s)


@cuda.jit(cache=True)
def _pool_bwd(x, dy, dx, geo, is_max, include_pad, zero, relu):
    h, w, kh, kw, sh, sw, pt, pl, pb, pr, ho, wo = geo
    for i in range(cuda.grid(1), dx.shape[0], cuda.gridsize(1)):
        ix = i % w
        t = i // w
        iy = t % h
        p = t // h
        oy0, oy1 = _covering(iy, pt, sh, kh, ho)
        ox0, ox1 = _covering(ix, pl, sw, kw, wo)
        base = p * h * w
        g = p * ho * wo
        if is_max:
            acc = zero  # the dtype's own adds, in the CPU's (oy, ox) order
            for oy in range(oy0, oy1 + 1):
                ya, yb = _window(oy, sh, pt, kh, h)
                for ox in range(ox0, ox1 + 1):
                    xa, xb = _window(ox, sw, pl, kw, w)
                    if _argmax(x, base, w, ya, yb, xa, xb) == iy * w + ix:
                        acc += dy[g + oy * wo + ox]
            # relu (fused): x is a ReLU's output, masked as the ReLUGrad kernel does
            dx[i] = acc if not relu or x[i] > zero else zero
        else:
            s = F0
            for oy in range(oy0, oy1 + 1):
                ya, yb = _window(oy, sh, pt, kh, h)
                for ox in range(ox0, ox1 + 1):
                    xa, xb = _window(ox, sw, pl, kw, w)
                    s += dy[g + oy * wo + ox] / (
                        _counted(oy, sh, pt, kh, h, pb) * _counted(ox, sw, pl, kw, w, pr)
                        if include_pad else (yb - ya) * (xb - xa))
            dx[i] = s


def _geo(op, x_shape, y_shape):
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = op.kernel, op.stride, op.padding
    return (int(x_shape[2]), int(x_shape[3]), kh, kw, sh, sw, pt, pl, pb, pr, int(y_shape[2]),
            int(y_shape[3]))


def _flags(op):
    is_max = op.type.startswith("Max")
    return is_max, False if is_max else bool(op.count_include_pad)


@kernel("MaxPool2d", "cuda")
@kernel("AvgPool2d", "cuda")
def pool2d(op, ins, outs):
    (x,), (y,) = ins, outs
    return step(_pool_fwd, y.size, flat(x), flat(y), _geo(op, tuple(x.shape), tuple(y.shape)),
                *_flags(op))


@kernel("MaxPool2dGrad", "cuda")
def max_pool2d_grad(op, ins, outs):
    (dy, x), (dx,) = ins, outs
    return step(_pool_bwd, dx.size, flat(x), flat(dy), flat(dx),
                _geo(op, tuple(dx.shape), tuple(dy.shape)), *_flags(op), scalar(dx.dtype, 0),
                bool(getattr(op, "relu", False)))


@kernel("AvgPool2dGrad", "cuda")
def avg_pool2d_grad(op, ins, outs):
    (dy,), (dx,) = ins, outs
    # x is not read when averaging: dx stands in for it, keeping the max variant's types
    return step(_pool_bwd, dx.size, flat(dx), flat(dy), flat(dx),
                _geo(op, tuple(dx.shape), tuple(dy.shape)), *_flags(op), scalar(dx.dtype, 0),
                False)


# ---------------------------------------------------------------------- global average
@cuda.jit(cache=True)
def _gap_tree(x, y, planes, hw):
    buf = cuda.shared.array(TPB, float64)
    for p in range(cuda.blockIdx.x, planes, cuda.gridDim.x):  # uniform per block
        acc = F0
        for e in range(cuda.threadIdx.x, hw, cuda.blockDim.x):
            acc += x[p * hw + e]
        total = tree_sum(buf, acc, cuda.threadIdx.x, TPB)
        if cuda.threadIdx.x == 0:
            y[p] = total / hw


@cuda.jit(cache=True)
def _gap_thread(x, y, planes, hw):
    for p in range(cuda.grid(1), planes, cuda.gridsize(1)):
        acc = F0
        for e in range(hw):
            acc += x[p * hw + e]
        y[p] = acc / hw


@kernel("GlobalAveragePool", "cuda")
def global_average_pool(op, ins, outs):
    (x,), (y,) = ins, outs
    n, c, h, w = tuple(x.shape)
    planes, hw = n * c, h * w
    if planes == 0:
        return noop
    if hw >= TPB:
        k = per_block(_gap_tree, planes)
        args = (flat(x), flat(y), planes, hw)
        return lambda: k(*args)
    return step(_gap_thread, planes, flat(x), flat(y), planes, hw)
