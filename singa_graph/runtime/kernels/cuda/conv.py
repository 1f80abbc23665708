"""CUDA kernels of :mod:`..cpu.conv`: im2col + GEMM (cuBLAS, see :mod:`.blas`), with the
columns as declared workspace, and direct kernels for depthwise convolutions.

Columns. A chunk of ``m`` samples is unrolled into columns by one launch (:func:`_columns`,
a thread per column entry). Two layouts, picked so that each chunk needs one GEMM launch
whatever the number of groups:

- ``groups == 1``: per sample, ``(m, C*kh*kw, L)`` (``L = Ho*Wo``). One strided-batched GEMM
  ``W (O, K) @ cols[s] (K, L)`` writes every sample of the chunk straight into ``y``; the
  input gradient is the same product transposed, ``W^T @ dy[s]``.
- ``groups > 1``, and the weight gradient always: rows first, ``(C*kh*kw, m*L)``, the
  chunk's samples side by side, so group ``g`` is the contiguous block ``(K, m*L)`` and one
  GEMM batched over the groups covers the chunk. Its output ``(O, m*L)`` is permuted into
  NCHW by the epilogue launch (which adds the bias and applies the fused ReLU anyway).

Workspace rule: a chunk holds as many samples as fit :data:`COLUMN_BYTES` (128 MiB) of
per-sample scratch (the columns, plus the GEMM output or the transposed ``dy`` where the
layout needs them), and at least one. So small batches run as one chunk (fewest launches)
and big ones stay bounded. 1x1 stride-1 unpadded convs with one group need no columns: the
GEMM reads ``x`` (or ``dy``) itself, one launch for the whole batch.

Depthwise convs (one input channel per group, any channel multiplier) skip the GEMM: see
:mod:`.depthwise` (direct kernels, one launch each, no workspace).

The input gradient is col2im as a gather (a thread per input pixel sums the column entries
that cover it, in the CPU's tap order): no atomics, deterministic.

Launches per chunk (bracketed: only where needed): forward im2col, GEMM [, epilogue for
bias/ReLU with one group; always with groups and m > 1]; input gradient [dy transpose
with groups and m > 1,] GEMM, col2im; weight gradient im2col fused with the dy transpose,
GEMM (beta = 1 after the first chunk; with groups, a product and an add).
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from ...registry import carve, carved_bytes, kernel
from ..cpu.epilogue import NONE, RELU, act_args, act_code
from . import depthwise
from .blas import batched_step, gemm_step
from .depthwise import finish
from .elementwise import add_step
from .epilogue import epilogue_kernel
from .launch import configured, flat, noop, scalar, sequence, step

#: scratch per chunk of samples (columns and their companions): the workspace bound
COLUMN_BYTES = 128 << 20


# ---------------------------------------------------------------------- kernels
@cuda.jit(cache=True)
def _columns(x, cols, ncol, m, geo, rows_first, dy, dyt, o_, ndy):
    """im2col of ``m`` samples (``x`` starts at the chunk's first one) into ``ncol`` column
    entries; then, when ``ndy``, ``dyt = dy`` transposed ``(m, O, L) -> (O, m*L)``. Both in one
    launch: the weight gradient needs both before its GEMM."""
    c_, h, w, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo = geo
    l_ = ho * wo
    r_ = c_ * kh * kw
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, ncol, stride):
        # l fastest: neighbouring threads write neighbouring entries, read along a row of x
        l = i % l_
        q = i // l_
        if rows_first:
            s = q % m
            r = q // m
        else:
            r = q % r_
            s = q // r_
        j = r % kw
        t = r // kw
        k = t % kh
        c = t // kh
        iy = (l // wo) * sh - pt + k * dh
        ix = (l % wo) * sw - pl + j * dw
        if iy >= 0 and iy < h and ix >= 0 and ix < w:
            cols[i] = x[((s * c_ + c) * h + iy) * w + ix]
        else:
            cols[i] = 0
    for i in range(start, ndy, stride):
        l = i % l_
        q = i // l_
        dyt[i] = dy[((q % m) * o_ + q // m) * l_ + l]


@cuda.jit(cache=True)
def _col2im(cols, dx, m, geo, rows_first, zero):
    """``dx`` (``m`` samples from the chunk's first) from the columns: each input pixel sums
    the entries of the taps that read it, in the CPU's tap order."""
    c_, h, w, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo = geo
    l_ = ho * wo
    r_ = c_ * kh * kw
    for i in range(cuda.grid(1), m * c_ * h * w, cuda.gridsize(1)):
        ix = i % w
        t = i // w
        iy = t % h
        t = t // h
        c = t % c_
        s = t // c_
        acc = zero
        for k in range(kh):
            ty = iy + pt - k * dh
            if ty < 0 or ty % sh != 0 or ty // sh >= ho:
                continue
            oy = ty // sh
            for j in range(kw):
                tx = ix + pl - j * dw
                if tx < 0 or tx % sw != 0 or tx // sw >= wo:
                    continue
                r = (c * kh + k) * kw + j
                l = oy * wo + tx // sw
                if rows_first:
                    acc += cols[(r * m + s) * l_ + l]
                else:
                    acc += cols[(s * r_ + r) * l_ + l]
        dx[i] = acc


@cuda.jit(cache=True)
def _epilogue(src, y, bias, m, o_, l_, src_ss, src_cs, has_bias, relu, zero):
    """``y[s, o, l] = finish(src[s*src_ss + o*src_cs + l])`` over ``m`` samples: in place
    (src is y) or out of the rows-first GEMM output (NCHW permute)."""
    for i in range(cuda.grid(1), m * o_ * l_, cuda.gridsize(1)):
        l = i % l_
        t = i // l_
        o = t % o_
        y[i] = finish(src[(t // o_) * src_ss + o * src_cs + l], bias, o, has_bias, relu,
                      zero)


# ---------------------------------------------------------------------- geometry
class _Geom:
    """Shapes of one conv node (from shapes alone: the workspace functions see specs)."""

    def __init__(self, op, x_shape, w_shape, y_shape, dtype):
        self.n, self.c, self.h, self.w = (int(s) for s in x_shape)
        self.o, cg, kh, kw = (int(s) for s in w_shape)
        ho, wo = int(y_shape[2]), int(y_shape[3])
        (sh, sw), (dh, dw), (pt, pl, _, _) = op.stride, op.dilation, op.padding
        self.g = op.groups
        self.og = self.o // self.g
        self.k = cg * kh * kw          # GEMM inner size per group
        self.rows = self.c * kh * kw   # column rows over all groups
        self.l = ho * wo
        self.itemsize = np.dtype(dtype).itemsize
        self.depthwise = cg == 1
        self.pointwise = (kh == kw == 1 and (sh, sw) == (1, 1) and not any(op.padding)
                          and self.g == 1)
        self.geo = (self.c, self.h, self.w, kh, kw, sh, sw, pt, pl, dh, dw, ho, wo)

    def chunk(self, per_sample):
        """Samples per chunk: as many as fit :data:`COLUMN_BYTES` of ``per_sample``
        elements of scratch each, at least one."""
        return max(1, min(self.n, COLUMN_BYTES // max(1, per_sample * self.itemsize)))

    def chunks(self, m):
        for n0 in range(0, self.n, m):
            yield n0, min(m, self.n - n0)


def _columns_step(gm, x, n0, m, cols, rows_first, dy=None, dyt=None):
    """The launch that fills the chunk's columns (and ``dyt`` from ``dy`` when given)."""
    ncol = gm.rows * m * gm.l if x is not None else 0
    ndy = gm.o * m * gm.l if dy is not None else 0
    chw = gm.c * gm.h * gm.w
    xs = flat(x)[n0 * chw:] if x is not None else flat(dyt)
    dys = flat(dy)[n0 * gm.o * gm.l:] if dy is not None else flat(cols)
    k = configured(_columns, max(ncol, ndy))
    args = (xs, flat(cols), ncol, m, gm.geo, rows_first, dys,
            flat(dyt) if dyt is not None else flat(cols), gm.o, ndy)
    return lambda: k(*args)


def _sample(a, n0, m, per):
    """Samples ``[n0, n0+m)`` of contiguous ``a`` as a flat slice (``per`` elements each)."""
    return flat(a)[n0 * per:(n0 + m) * per]


# ---------------------------------------------------------------------- forward
def _rows_first(gm, dtype):
    """Rows-first scratch for chunks of samples side by side: the ``(C*kh*kw, m*L)``
    columns and, for chunks of more than one sample, an ``(O, m*L)`` buffer (the forward's
    GEMM output, permuted into y by the epilogue; ``dy`` transposed for the gradients).
    Returns ``(specs, m)``."""
    m = gm.chunk((gm.rows + gm.o) * gm.l)
    specs = [((gm.rows, m * gm.l), dtype)]
    if m > 1:
        specs.append(((gm.o, m * gm.l), dtype))
    return specs, m


def _specs(gm, dtype):
    """The forward's and the input gradient's scratch specs and chunk size: one sample's
    columns after another without groups, rows-first with them."""
    if gm.depthwise or gm.pointwise:
        return [], gm.n
    if gm.g == 1:
        m = gm.chunk(gm.rows * gm.l)
        return [((m, gm.rows, gm.l), dtype)], m
    return _rows_first(gm, dtype)


def _conv_ws(op, ins, outs):
    y = outs[0]
    gm = _Geom(op, ins[0].shape, ins[1].shape, y.shape, y.dtype)
    return carved_bytes(*_specs(gm, y.dtype)[0])


@kernel("Conv2d", "cuda", workspace=_conv_ws)
def conv2d(op, ins, outs, ws):
    """The convolution, bias and a ReLU in its own launches; a residual and the other
    epilogue activations (passes/inference.py) in one more launch over ``y``
    (:mod:`.epilogue`)."""
    has_res = bool(getattr(op, "residual", False))
    code = act_code(op)
    if not has_res and code in (NONE, RELU):
        return _conv2d(op, ins, outs, ws, code == RELU)
    y = outs[0]
    base = _conv2d(op, ins[:-1] if has_res else ins, outs, ws, False)
    alpha, beta, k = act_args(op, y.dtype)
    res = flat(ins[-1]) if has_res else flat(y)
    return sequence([base, step(epilogue_kernel, y.size, flat(y), res, has_res, code, alpha,
                                beta, k)])


def _conv2d(op, ins, outs, ws, relu):
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) == 3 else None
    (y,) = outs
    gm = _Geom(op, tuple(x.shape), tuple(w.shape), tuple(y.shape), y.dtype)
    has_bias = bias is not None
    zero = scalar(y.dtype, 0)
    if gm.depthwise:
        return depthwise.forward_step(x, w, y, bias, gm.og, gm.geo, relu, zero)
    bf = flat(bias) if has_bias else flat(y)  # never read without a bias
    ol = gm.o * gm.l

    def epilogue(src, n0, m, ss, cs):
        if src is None and not (has_bias or relu):
            return noop
        dst = _sample(y, n0, m, ol)
        return step(_epilogue, m * ol, dst if src is None else flat(src), dst, bf, m, gm.o,
                    gm.l, ss, cs, has_bias, relu, zero)

    y3 = y.reshape(gm.n, gm.o, gm.l)
    if gm.pointwise:  # the GEMM reads x itself: one launch for the batch
        return sequence([batched_step(w.reshape(gm.o, gm.c), x.reshape(gm.n, gm.c, gm.l), y3),
                          epilogue(None, 0, gm.n, ol, gm.l)])
    specs, chunk = _specs(gm, y.dtype)
    cols, *tmp = carve(ws, *specs)
    steps = []
    if gm.g == 1:
        w2 = w.reshape(gm.o, gm.rows)
        for n0, m in gm.chunks(chunk):
            steps.append(_columns_step(gm, x, n0, m, cols, False))
            if m == 1:
                steps.append(gemm_step(w2, cols[0], y3[n0]))
            else:
                steps.append(batched_step(w2, cols[:m], y3[n0:n0 + m]))
            steps.append(epilogue(None, n0, m, ol, gm.l))
        return sequence(steps)
    w3 = w.reshape(gm.g, gm.og, gm.k)
    for n0, m in gm.chunks(chunk):
        steps.append(_columns_step(gm, x, n0, m, cols, True))
        cv = flat(cols)[:gm.rows * m * gm.l].reshape(gm.g, gm.k, m * gm.l)
        if m == 1:  # the rows-first output of one sample is already NCHW
            steps.append(batched_step(w3, cv, y3[n0].reshape(gm.g, gm.og, gm.l)))
            steps.append(epilogue(None, n0, 1, ol, gm.l))
        else:
            out = flat(tmp[0])[:ol * m]
            steps.append(batched_step(w3, cv, out.reshape(gm.g, gm.og, m * gm.l)))
            steps.append(epilogue(out, n0, m, gm.l, m * gm.l))
    return sequence(steps)


# ---------------------------------------------------------------------- dx
def _grad_input_ws(op, ins, outs):
    dx = outs[0]
    gm = _Geom(op, dx.shape, ins[1].shape, ins[0].shape, dx.dtype)
    return carved_bytes(*_specs(gm, dx.dtype)[0])


@kernel("Conv2dGradInput", "cuda", workspace=_grad_input_ws)
def conv2d_grad_input(op, ins, outs, ws):
    dy, w = ins
    (dx,) = outs
    gm = _Geom(op, tuple(dx.shape), tuple(w.shape), tuple(dy.shape), dx.dtype)
    zero = scalar(dx.dtype, 0)
    if gm.depthwise:
        return depthwise.grad_input_step(dy, w, dx, gm.og, gm.geo, zero)
    dy3 = dy.reshape(gm.n, gm.o, gm.l)
    if gm.pointwise:
        return batched_step(w.reshape(gm.o, gm.c), dy3, dx.reshape(gm.n, gm.c, gm.l),
                            trans_a=True)
    specs, chunk = _specs(gm, dx.dtype)
    cols, *dyt = carve(ws, *specs)
    chw = gm.c * gm.h * gm.w
    steps = []

    def col2im(n0, m, rows_first):
        return step(_col2im, m * chw, flat(cols), flat(dx)[n0 * chw:], m, gm.geo, rows_first,
                    zero)

    if gm.g == 1:
        w2 = w.reshape(gm.o, gm.rows)
        for n0, m in gm.chunks(chunk):
            if m == 1:
                steps.append(gemm_step(w2, dy3[n0], cols[0], trans_a=True))
            else:
                steps.append(batched_step(w2, dy3[n0:n0 + m], cols[:m], trans_a=True))
            steps.append(col2im(n0, m, False))
        return sequence(steps)
    w3 = w.reshape(gm.g, gm.og, gm.k)
    for n0, m in gm.chunks(chunk):
        if m == 1:
            d = dy3[n0]
        else:
            steps.append(_columns_step(gm, None, n0, m, cols, True, dy, dyt[0]))
            d = flat(dyt[0])[:gm.o * m * gm.l]
        cv = flat(cols)[:gm.rows * m * gm.l].reshape(gm.g, gm.k, m * gm.l)
        steps.append(batched_step(w3, d.reshape(gm.g, gm.og, m * gm.l), cv, trans_a=True))
        steps.append(col2im(n0, m, True))
    return sequence(steps)


# ---------------------------------------------------------------------- dW
def _dw_specs(gm, dtype):
    """The weight gradient's scratch specs and chunk size: rows-first columns, ``dy``
    transposed (chunks of more than one sample), and with groups and several chunks, a
    chunk's product (the batched GEMM cannot accumulate)."""
    if gm.depthwise:
        return [], gm.n
    specs, m = _rows_first(gm, dtype)
    if gm.g > 1 and m < gm.n:
        specs.append(((gm.o * gm.k,), dtype))
    return specs, m


def _grad_weight_ws(op, ins, outs):
    dw = outs[0]
    gm = _Geom(op, ins[1].shape, dw.shape, ins[0].shape, dw.dtype)
    return carved_bytes(*_dw_specs(gm, dw.dtype)[0])


@kernel("Conv2dGradWeight", "cuda", workspace=_grad_weight_ws)
def conv2d_grad_weight(op, ins, outs, ws):
    """``dW = sum_n dy[n] @ cols[n]^T``, one GEMM per chunk over its samples side by side
    (inner size ``m*L``), accumulating into ``dW`` from the second chunk on."""
    dy, x = ins
    (dw,) = outs
    gm = _Geom(op, tuple(x.shape), tuple(dw.shape), tuple(dy.shape), dw.dtype)
    if gm.depthwise:
        return depthwise.grad_weight_step(dy, x, dw, gm.og, gm.geo)
    specs, chunk = _dw_specs(gm, dw.dtype)
    cols, *rest = carve(ws, *specs)
    dyt = rest[0] if chunk > 1 else None
    tmp = rest[-1] if gm.g > 1 and chunk < gm.n else None
    steps = []
    for i, (n0, m) in enumerate(gm.chunks(chunk)):
        steps.append(_columns_step(gm, x, n0, m, cols, True, *((dy, dyt) if m > 1 else ())))
        ml = m * gm.l
        d = flat(dyt)[:gm.o * ml] if m > 1 else _sample(dy, n0, 1, gm.o * gm.l)
        cv = flat(cols)[:gm.rows * ml]
        if gm.g == 1:
            steps.append(gemm_step(d.reshape(gm.o, ml), cv.reshape(gm.rows, ml),
                                   dw.reshape(gm.o, gm.k), trans_b=True,
                                   beta=0.0 if i == 0 else 1.0))
            continue
        out = dw if i == 0 else tmp
        steps.append(batched_step(d.reshape(gm.g, gm.og, ml), cv.reshape(gm.g, gm.k, ml),
                                  out.reshape(gm.g, gm.og, gm.k), trans_b=True))
        if i:
            steps.append(add_step(flat(dw), flat(tmp), flat(dw)))
    return sequence(steps)

