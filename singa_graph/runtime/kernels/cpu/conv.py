"""Convolution kernels: im2col / col2im in Numba, the products in BLAS.

All groups go through one broadcast ``np.matmul`` on ``(G, Og, K)`` weights and
``(n, G, K, L)`` columns (K = C/G*kh*kw, L = Ho*Wo), so depthwise convs cost one call, not
one per channel. The im2col buffer is allocated once per node and capped at ``BUDGET``
bytes; larger batches run in chunks of samples.
"""
import types

import numpy as np
from numba import njit, prange

from ...registry import kernel

BUDGET = 64 << 20  # bytes of im2col scratch per node
# Below this many inner-loop steps a loop runs on the calling thread: waking the thread pool
# costs more than the loop (milliseconds when the machine is busy).
PARALLEL_WORK = 1 << 16


def loops(fn):
    """``(serial, parallel)`` Numba versions of a loop written with ``prange``.

    The serial one is compiled from a renamed copy, so the two never share a cache entry;
    each is compiled only when first called.
    """
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial",
                              fn.__defaults__, fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + "_serial"
    return njit(cache=True)(twin), njit(cache=True, parallel=True)(fn)


def pick(pair, work: int):
    """The version of ``pair`` (from :func:`loops`) worth running for ``work`` steps."""
    return pair[work >= PARALLEL_WORK]


@loops
def _IM2COL(x, cols, n0, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo):
    nb, c_in, h, w = cols.shape[0], x.shape[1], x.shape[2], x.shape[3]
    for t in prange(nb * c_in):
        n, c = t // c_in, t % c_in
        for i in range(kh):
            for j in range(kw):
                r = (c * kh + i) * kw + j
                for oy in range(ho):
                    iy = oy * sh - pt + i * dh
                    base = oy * wo
                    if iy < 0 or iy >= h:
                        for ox in range(wo):
                            cols[n, r, base + ox] = 0
                        continue
                    for ox in range(wo):
                        ix = ox * sw - pl + j * dw
                        cols[n, r, base + ox] = x[n0 + n, c, iy, ix] if 0 <= ix < w else 0


@loops
def _COL2IM(cols, dx, n0, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo):
    nb, c_in, h, w = cols.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]
    for t in prange(nb * c_in):  # one (n, c) plane per iteration: no write races
        n, c = t // c_in, t % c_in
        dx[n0 + n, c] = 0
        for i in range(kh):
            for j in range(kw):
                r = (c * kh + i) * kw + j
                for oy in range(ho):
                    iy = oy * sh - pt + i * dh
                    if iy < 0 or iy >= h:
                        continue
                    base = oy * wo
                    for ox in range(wo):
                        ix = ox * sw - pl + j * dw
                        if 0 <= ix < w:
                            dx[n0 + n, c, iy, ix] += cols[n, r, base + ox]


def _view(a, shape):
    """A reshaped *view*: a copy made here would leave the step reading stale data."""
    v = a.reshape(shape)
    if v.size and not np.may_share_memory(v, a):
        raise ValueError(f"kernel needs a reshapeable (contiguous) array, got strides "
                         f"{a.strides} for shape {a.shape}")
    return v


class _Geom:
    """Shapes of one conv node, from the op attributes and the x / W / y shapes."""

    def __init__(self, op, x_shape, w_shape, y_shape):
        self.n, self.c, self.h, self.w = x_shape
        self.o, self.cg, self.kh, self.kw = w_shape
        self.ho, self.wo = y_shape[2], y_shape[3]
        self.g = op.groups
        self.og = self.o // self.g
        self.k = self.cg * self.kh * self.kw
        self.l = self.ho * self.wo
        self.pointwise = (self.kh == self.kw == 1 and op.stride == (1, 1)
                          and not any(op.padding))
        (sh, sw), (pt, pl, _, _), (dh, dw) = op.stride, op.padding, op.dilation
        self.args = (self.kh, self.kw, sh, sw, pt, pl, dh, dw, self.ho, self.wo)

    def scratch(self, dtype):
        """The im2col buffer ``(nb, C*kh*kw, L)`` and its ``(nb, G, K, L)`` view."""
        per = self.c * self.kh * self.kw * self.l * np.dtype(dtype).itemsize
        nb = max(1, min(self.n, BUDGET // max(per, 1)))
        cols = np.empty((nb, self.c * self.kh * self.kw, self.l), dtype)
        return nb, cols, cols.reshape(nb, self.g, self.k, self.l)


@kernel("Conv2d")
def conv2d(op, ins, outs):
    x, w = ins[0], ins[1]
    (y,) = outs
    gm = _Geom(op, x.shape, w.shape, y.shape)
    w3 = _view(w, (gm.g, gm.og, gm.k))
    y4 = _view(y, (gm.n, gm.g, gm.og, gm.l))
    bias = _view(ins[2], (gm.o, 1, 1)) if len(ins) == 3 else None
    if gm.pointwise:  # a 1x1 conv is a GEMM on x itself
        x4 = _view(x, (gm.n, gm.g, gm.cg, gm.l))

        def step():
            np.matmul(w3, x4, out=y4)
            if bias is not None:
                np.add(y, bias, out=y)
        return step
    nb, cols, cols4 = gm.scratch(x.dtype)
    im2col = pick(_IM2COL, cols.size)

    def step():
        for n0 in range(0, gm.n, nb):
            m = min(nb, gm.n - n0)
            im2col(x, cols[:m], n0, *gm.args)
            np.matmul(w3, cols4[:m], out=y4[n0:n0 + m])
        if bias is not None:
            np.add(y, bias, out=y)
    return step


def _transposed_conv(op, dy, w, dx):
    """For stride 1, the input gradient is a forward conv of ``dy`` with the kernel flipped
    and in/out channels swapped per group, padded by ``dilation*(k-1) - pad``: im2col + GEMM,
    no scatter-add (col2im was the slowest piece of the backward). Its im2col runs over the
    ``og`` channels of ``dy`` where col2im ran over the ``cg`` of ``dx``, so it is used when
    ``og <= cg`` (1.2-3.5x faster there, 1.3x slower at og = 2 cg). None when not used."""
    o, cg, kh, kw = w.shape
    (dh, dw), (pt, pl, pb, pr) = op.dilation, op.padding
    pads = (dh * (kh - 1) - pt, dw * (kw - 1) - pl, dh * (kh - 1) - pb, dw * (kw - 1) - pr)
    g = op.groups
    og = o // g
    if op.stride != (1, 1) or min(pads) < 0 or og > cg:
        return None
    wt = np.empty((g * cg, og, kh, kw), w.dtype)
    wt5 = wt.reshape(g, cg, og, kh, kw)
    flipped = w.reshape(g, og, cg, kh, kw)[:, :, :, ::-1, ::-1].transpose(0, 2, 1, 3, 4)
    fwd = conv2d(types.SimpleNamespace(stride=(1, 1), padding=pads, dilation=op.dilation,
                                       groups=g), [dy, wt], [dx])

    def step():
        np.copyto(wt5, flipped)  # the weights change every step
        fwd()
    return step


@kernel("Conv2dGradInput")
def conv2d_grad_input(op, ins, outs):
    dy, w = ins
    (dx,) = outs
    gm = _Geom(op, dx.shape, w.shape, dy.shape)
    if not gm.pointwise:
        step = _transposed_conv(op, dy, w, dx)
        if step is not None:
            return step
    w3t = _view(w, (gm.g, gm.og, gm.k)).transpose(0, 2, 1)
    dy4 = _view(dy, (gm.n, gm.g, gm.og, gm.l))
    if gm.pointwise:
        dx4 = _view(dx, (gm.n, gm.g, gm.cg, gm.l))
        return lambda: np.matmul(w3t, dy4, out=dx4)
    nb, cols, cols4 = gm.scratch(dx.dtype)
    col2im = pick(_COL2IM, cols.size)

    def step():
        for n0 in range(0, gm.n, nb):
            m = min(nb, gm.n - n0)
            np.matmul(w3t, dy4[n0:n0 + m], out=cols4[:m])
            col2im(cols[:m], dx, n0, *gm.args)
    return step


@kernel("Conv2dGradWeight")
def conv2d_grad_weight(op, ins, outs):
    dy, x = ins
    (dw,) = outs
    gm = _Geom(op, x.shape, dw.shape, dy.shape)
    dw3 = _view(dw, (gm.g, gm.og, gm.k))
    dy4 = _view(dy, (gm.n, gm.g, gm.og, gm.l))
    if gm.pointwise:
        xt = _view(x, (gm.n, gm.g, gm.cg, gm.l)).transpose(0, 1, 3, 2)
        per_sample = np.empty((gm.n, gm.g, gm.og, gm.k), dw.dtype)

        def step():
            np.matmul(dy4, xt, out=per_sample)
            np.sum(per_sample, axis=0, out=dw3)
        return step
    nb, cols, cols4 = gm.scratch(x.dtype)
    im2col = pick(_IM2COL, cols.size)
    colst = cols4.transpose(0, 1, 3, 2)
    # products per sample, summed over the batch afterwards (one GEMM call per chunk)
    per_sample = np.empty((nb, gm.g, gm.og, gm.k), dw.dtype)
    part = np.empty_like(dw3) if nb < gm.n else None

    def step():
        for n0 in range(0, gm.n, nb):
            m = min(nb, gm.n - n0)
            im2col(x, cols[:m], n0, *gm.args)
            np.matmul(dy4[n0:n0 + m], colst[:m], out=per_sample[:m])
            if n0 == 0:
                np.sum(per_sample[:m], axis=0, out=dw3)
            else:
                np.sum(per_sample[:m], axis=0, out=part)
                np.add(dw3, part, out=dw3)
    return step
