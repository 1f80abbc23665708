"""Convolution kernels: batch-parallel im2col + GEMM, every byte of scratch planned.

Each kernel splits the batch into ``parts`` (the thread policy's thread count, see
:mod:`singa_graph.runtime.threads`). A part runs on its own worker thread over its own
samples, in its own slice of workspace: Numba ``nogil`` im2col/col2im loops and numpy
``matmul`` calls, whose single-threaded BLAS releases the GIL. So both cores do GEMM at once
and no two thread pools wait on each other. Inside a part, samples go through in chunks of
``chunk`` samples whose im2col columns fit in about a quarter of a core's L2 cache, so the
GEMM reads them while they are still cached (and the planned workspace stays small).

All groups go through one broadcast ``np.matmul`` on ``(G, Og, K)`` weights and
``(m, G, K, L)`` columns (K = C/G*kh*kw, L = Ho*Wo), so a depthwise conv costs one call per
chunk, not one per channel. 1x1 stride-1 convs are plain GEMMs on the input itself.

The scratch of every kernel (columns, flipped weights, partial weight gradients) is declared
through ``workspace=`` and carved out of the planned workspace, so nothing is allocated when
a plan is built or run.
"""
import types

import numpy as np
from numba import njit
from numpy.lib.stride_tricks import as_strided

from ....runtime import threads
from ...registry import carve, carved_bytes, kernel

CHUNK_BYTES = 256 << 10  # im2col columns per chunk: a quarter of a core's L2


@njit(cache=True, nogil=True)
def _col2im(cols, dx, n0, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo):
    """``dx[n0 + s] = col2im(cols[s])``: scatter-add the columns (the adjoint of im2col).

    A Numba loop: a scatter-add over strided taps is 1.5-2x faster here than numpy's
    strided adds."""
    c_in, h, w = dx.shape[1], dx.shape[2], dx.shape[3]
    for s in range(cols.shape[0]):
        n = n0 + s
        dx[n] = 0
        for c in range(c_in):
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
                                dx[n, c, iy, ix] += cols[s, r, base + ox]


class _Columns:
    """im2col and col2im for one chunk of samples, as numpy copies between prepared views.

    The chunk is copied into a zero-padded buffer (skipped when the conv has no padding),
    then one strided view of that buffer, shaped ``(m, C, kh, kw, Ho, Wo)``, is copied into
    the columns: a single ``copyto`` whose inner loop is a contiguous (stride 1) or strided
    row copy, measured 2-3x faster than a Numba loop with bounds checks per tap. col2im adds
    the ``kh*kw`` taps back into the padded buffer, then copies its interior out. Every view
    is made once, at bind time, so a step only copies and adds (numpy releases the GIL in
    each call, so parts on different threads run at once).
    """

    def __init__(self, gm, x, n0, m, cols, pad=None, rows_first=False):
        (sh, sw), (dh, dw) = gm.stride, gm.dilation
        pt, pl, pb, pr = gm.padding
        self.x = x[n0:n0 + m]
        self.pad = None
        if pad is not None:
            self.pad = pad[:m]
            self.inner = self.pad[:, :, pt:pt + gm.h, pl:pl + gm.w]
        src = self.x if self.pad is None else self.pad
        s0, s1, s2, s3 = src.strides
        self.taps = as_strided(src, (m, gm.c, gm.kh, gm.kw, gm.ho, gm.wo),
                               (s0, s1, s2 * dh, s3 * dw, s2 * sh, s3 * sw), writeable=True)
        self.cols = cols[:m]
        if rows_first:
            # the chunk's columns side by side, (C*kh*kw, m*L): one long GEMM per chunk
            flat = cols.reshape(-1)[:gm.c * gm.kh * gm.kw * m * gm.l]
            self.rows = flat.reshape(gm.g, gm.k, m * gm.l)
            self.cols6 = flat.reshape(gm.c, gm.kh, gm.kw, m, gm.ho, gm.wo).transpose(
                3, 0, 1, 2, 4, 5)
        else:
            self.cols6 = self.cols.reshape(m, gm.c, gm.kh, gm.kw, gm.ho, gm.wo)

    def im2col(self):
        if self.pad is not None:
            self.pad.fill(0)
            np.copyto(self.inner, self.x)
        np.copyto(self.cols6, self.taps)

    def col2im(self, dx, n0, gm):
        """``dx[chunk] = col2im(cols)`` (the chunk's rows of the input gradient)."""
        (sh, sw), (pt, pl, _, _), (dh, dw) = gm.stride, gm.padding, gm.dilation
        _col2im(self.cols, dx, n0, gm.kh, gm.kw, sh, sw, pt, pl, dh, dw, gm.ho, gm.wo)


def _view(a, shape):
    """A reshaped *view*: a copy made here would leave the step reading stale data."""
    v = a.reshape(shape)
    if v.size and not np.may_share_memory(v, a):
        raise ValueError(f"kernel needs a reshapeable (contiguous) array, got strides "
                         f"{a.strides} for shape {a.shape}")
    return v


class _Geom:
    """Shapes of one conv node, and how its batch is split into parts and chunks."""

    def __init__(self, op, x_shape, w_shape, y_shape, dtype):
        self.n, self.c, self.h, self.w = x_shape
        self.o, self.cg, self.kh, self.kw = w_shape
        self.ho, self.wo = y_shape[2], y_shape[3]
        self.stride, self.padding, self.dilation = op.stride, op.padding, op.dilation
        self.g = op.groups
        self.og = self.o // self.g
        self.k = self.cg * self.kh * self.kw
        self.l = self.ho * self.wo
        self.dtype = np.dtype(dtype)
        self.pointwise = (self.kh == self.kw == 1 and op.stride == (1, 1)
                          and not any(op.padding))
        self.parts = max(1, min(threads.num_threads(), self.n))
        per = self.c * self.kh * self.kw * self.l * self.dtype.itemsize
        self.chunk = max(1, min(-(-self.n // self.parts), CHUNK_BYTES // max(per, 1)))

    def samples(self, t):
        """The sample range ``[a, b)`` of part ``t``."""
        return t * self.n // self.parts, (t + 1) * self.n // self.parts

    def chunks(self, t):
        a, b = self.samples(t)
        for n0 in range(a, b, self.chunk):
            yield n0, min(self.chunk, b - n0)

    def cols_specs(self, padded=True):
        """One part's scratch for im2col: the columns ``(chunk, C*kh*kw, L)`` and, when the
        conv pads (and ``padded``), the zero-padded input chunk."""
        pt, pl, pb, pr = self.padding
        specs = [((self.chunk, self.c * self.kh * self.kw, self.l), self.dtype)]
        if padded and any(self.padding):
            specs.append(((self.chunk, self.c, self.h + pt + pb, self.w + pl + pr), self.dtype))
        return specs

    def columns(self, x, arrays, padded=True, rows_first=False):
        """Per part, ``[(n0, m, _Columns, (m, G, K, L) columns view)]`` over its chunks;
        ``arrays`` are the carved :meth:`cols_specs` of all parts, in order."""
        per = len(self.cols_specs(padded))
        out = []
        for t in range(self.parts):
            cols, *pad = arrays[t * per:(t + 1) * per]
            out.append([(n0, m, _Columns(self, x, n0, m, cols, pad[0] if pad else None,
                                         rows_first),
                         cols[:m].reshape(m, self.g, self.k, self.l))
                        for n0, m in self.chunks(t)])
        return out


def _geom(op, x, w, y):
    return _Geom(op, x.shape, w.shape, y.shape, y.dtype)


def _cols_ws(gm):
    return 0 if gm.pointwise else carved_bytes(*gm.cols_specs() * gm.parts)


# ---------------------------------------------------------------------------- forward
def _conv_ws(op, ins, outs):
    return _cols_ws(_geom(op, ins[0], ins[1], outs[0]))


@kernel("Conv2d", workspace=_conv_ws)
def conv2d(op, ins, outs, ws):
    x, w = ins[0], ins[1]
    (y,) = outs
    gm = _geom(op, x, w, y)
    w3 = _view(w, (gm.g, gm.og, gm.k))
    y4 = _view(y, (gm.n, gm.g, gm.og, gm.l))
    bias = _view(ins[2], (gm.o, 1, 1)) if len(ins) == 3 else None
    relu = getattr(op, "relu", False)
    zero = y.dtype.type(0)

    def epilogue(a, b):
        """Bias and the fused ReLU on samples ``[a, b)``, while they are still cached."""
        if bias is not None:
            np.add(y[a:b], bias, out=y[a:b])
        if relu:
            np.maximum(y[a:b], zero, out=y[a:b])  # the ReLU kernel's own ufunc: same bits

    if gm.pointwise:  # a 1x1 conv is a GEMM on x itself
        x4 = _view(x, (gm.n, gm.g, gm.cg, gm.l))

        def part(t):
            a, b = gm.samples(t)
            np.matmul(w3, x4[a:b], out=y4[a:b])
            epilogue(a, b)
    else:
        chunks = gm.columns(x, carve(ws, *gm.cols_specs() * gm.parts))

        def part(t):
            for n0, m, col, c4 in chunks[t]:
                col.im2col()
                np.matmul(w3, c4, out=y4[n0:n0 + m])
                epilogue(n0, n0 + m)

    return lambda: threads.parallel(part, gm.parts)


# ---------------------------------------------------------------------------- dx
def _flip_plan(op, w):
    """For stride 1, the input gradient is a forward conv of ``dy`` with the kernel flipped
    and in/out channels swapped per group, padded by ``dilation*(k-1) - pad``: im2col + GEMM,
    no scatter-add. Its im2col runs over the ``og`` channels of ``dy`` where col2im runs
    over the ``cg`` of ``dx``, so it is used when ``og <= cg`` (1.2-3.5x faster there, 1.3x
    slower at og = 2 cg). Returns ``(forward op, flipped weight shape)`` or None."""
    o, cg, kh, kw = w.shape
    (dh, dw), (pt, pl, pb, pr) = op.dilation, op.padding
    pads = (dh * (kh - 1) - pt, dw * (kw - 1) - pl, dh * (kh - 1) - pb, dw * (kw - 1) - pr)
    g = op.groups
    og = o // g
    if op.stride != (1, 1) or min(pads) < 0 or og > cg or (kh == kw == 1 and not any(pads)):
        return None
    fwd = types.SimpleNamespace(type="Conv2d", stride=(1, 1), padding=pads,
                                dilation=op.dilation, groups=g)
    return fwd, (g * cg, og, kh, kw)


def _grad_input_ws(op, ins, outs):
    dy, w = ins
    (dx,) = outs
    flip = _flip_plan(op, w)
    if flip is not None:
        fwd, wt_shape = flip
        wt = types.SimpleNamespace(shape=wt_shape, dtype=dx.dtype)
        return carved_bytes((wt_shape, dx.dtype)) + _conv_ws(fwd, [dy, wt], [dx])
    gm = _Geom(op, dx.shape, w.shape, dy.shape, dx.dtype)
    return 0 if gm.pointwise else carved_bytes(*gm.cols_specs(padded=False) * gm.parts)


@kernel("Conv2dGradInput", workspace=_grad_input_ws)
def conv2d_grad_input(op, ins, outs, ws):
    dy, w = ins
    (dx,) = outs
    flip = _flip_plan(op, w)
    if flip is not None:
        fwd_op, wt_shape = flip
        (wt,) = carve(ws, (wt_shape, dx.dtype))
        rest = ws[carved_bytes((wt_shape, dx.dtype)):]
        fwd = conv2d(fwd_op, [dy, wt], [dx], rest[:_conv_ws(fwd_op, [dy, wt], [dx])])
        g, cg, og, kh, kw = op.groups, w.shape[1], wt_shape[1], w.shape[2], w.shape[3]
        wt5 = wt.reshape(g, cg, og, kh, kw)
        flipped = w.reshape(g, og, cg, kh, kw)[:, :, :, ::-1, ::-1].transpose(0, 2, 1, 3, 4)

        def step():
            np.copyto(wt5, flipped)  # the weights change every step
            fwd()
        return step
    gm = _Geom(op, dx.shape, w.shape, dy.shape, dx.dtype)
    w3t = _view(w, (gm.g, gm.og, gm.k)).transpose(0, 2, 1)
    dy4 = _view(dy, (gm.n, gm.g, gm.og, gm.l))
    if gm.pointwise:
        dx4 = _view(dx, (gm.n, gm.g, gm.cg, gm.l))

        def part(t):
            a, b = gm.samples(t)
            np.matmul(w3t, dy4[a:b], out=dx4[a:b])
    else:
        chunks = gm.columns(dx, carve(ws, *gm.cols_specs(False) * gm.parts), padded=False)

        def part(t):
            for n0, m, col, c4 in chunks[t]:
                np.matmul(w3t, dy4[n0:n0 + m], out=c4)
                col.col2im(dx, n0, gm)

    return lambda: threads.parallel(part, gm.parts)


# ---------------------------------------------------------------------------- dW
def _grad_weight_specs(gm):
    """Per part: the im2col scratch (the chunk's columns side by side), the chunk's ``dy``
    transposed to ``(O, m*L)``, the part's partial ``dW^T`` and a chunk's product."""
    dyt = ((gm.g, gm.og, gm.chunk * gm.l), gm.dtype)
    acc = ((gm.g, gm.k, gm.og), gm.dtype)
    return (gm.cols_specs() + [dyt, acc, acc]) * gm.parts


def _grad_weight_ws(op, ins, outs):
    dy, x = ins
    (dw,) = outs
    return carved_bytes(*_grad_weight_specs(_Geom(op, x.shape, dw.shape, dy.shape, dw.dtype)))


@kernel("Conv2dGradWeight", workspace=_grad_weight_ws)
def conv2d_grad_weight(op, ins, outs, ws):
    """``dW = sum_n dy[n] @ cols[n]^T``, computed transposed and one chunk at a time:
    ``dW^T += cols_chunk @ dy_chunk^T`` with the chunk's samples side by side, so each GEMM
    has a long inner dimension (m*L) and no per-sample products are stored. The GEMM with
    the long K side as rows measured about 20% faster for these thin shapes."""
    dy, x = ins
    (dw,) = outs
    gm = _Geom(op, x.shape, dw.shape, dy.shape, dw.dtype)
    dw3t = _view(dw, (gm.g, gm.og, gm.k)).transpose(0, 2, 1)
    dy3 = _view(dy, (gm.n, gm.o, gm.l))
    arrays = carve(ws, *_grad_weight_specs(gm))
    per = len(gm.cols_specs()) + 3
    cols = [arrays[t * per:t * per + per - 3] for t in range(gm.parts)]
    sums = [arrays[t * per + per - 3:(t + 1) * per] for t in range(gm.parts)]
    chunks = gm.columns(x, [a for c in cols for a in c], rows_first=True)

    def part(t):
        dyt, acc, tmp = sums[t]
        for i, (n0, m, col, _) in enumerate(chunks[t]):
            col.im2col()
            d = dyt.reshape(-1)[:gm.o * m * gm.l]
            np.copyto(d.reshape(gm.o, m, gm.l), dy3[n0:n0 + m].transpose(1, 0, 2))
            d3t = d.reshape(gm.g, gm.og, m * gm.l).transpose(0, 2, 1)
            np.matmul(col.rows, d3t, out=acc if i == 0 else tmp)
            if i:
                np.add(acc, tmp, out=acc)

    def step():
        threads.parallel(part, gm.parts)
        np.copyto(dw3t, sums[0][1])
        for t in range(1, gm.parts):
            np.add(dw3t, sums[t][1], out=dw3t)
    return step
