"""N-d convolution: im2col from strided views of the input padded into workspace, then one
numpy matmul per group (BLAS for float32/float64); the transposed convolution runs the
product first and adds the columns back (col2im) over the same strided views. DeformConv
samples its columns bilinearly at the offset taps (a Numba loop), then multiplies."""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ...registry import carve, carved_bytes, kernel


def _conv_specs(op, ins, outs):
    x, w = ins
    y = outs[0]
    k = len(op.strides)
    padded = tuple(x.shape[:2]) + tuple(n + op.pads[i] + op.pads[k + i]
                                        for i, n in enumerate(x.shape[2:]))
    cg = x.shape[1] // op.groups
    cols = (x.shape[0], op.groups, cg * int(np.prod(w.shape[2:])),
            int(np.prod(y.shape[2:])))
    return [(padded, x.dtype), (cols, x.dtype)]


def _taps(big, offsets, dilations, strides, sizes):
    """Strided views of ``big`` (N, C, *spatial), one per kernel offset."""
    return [big[(slice(None),) * 2 + tuple(slice(o * d, o * d + s * (n - 1) + 1, s)
                                           for o, d, s, n in zip(offs, dilations, strides,
                                                                 sizes))]
            for offs in offsets]


@kernel("ConvNd", workspace=lambda op, ins, outs: carved_bytes(*_conv_specs(op, ins, outs)))
def conv_nd(op, ins, outs, ws):
    (x, w), (y,) = ins, outs
    pad, cols = carve(ws, *_conv_specs(op, ins, outs))
    k, g = len(op.strides), op.groups
    n, c = x.shape[:2]
    kernel_shape, out = w.shape[2:], y.shape[2:]
    inner = pad[(slice(None),) * 2 + tuple(slice(b, b + s) for b, s in
                                           zip(op.pads[:k], x.shape[2:]))]
    offsets = list(np.ndindex(*kernel_shape))
    views = _taps(pad, offsets, op.dilations, op.strides, out)
    # cols[n, g, (c, tap), p]
    c5 = cols.reshape((n, g, c // g, len(offsets)) + tuple(out))
    dsts = [c5[:, :, :, t] for t in range(len(offsets))]
    wr = w.reshape(g, w.shape[0] // g, -1)
    yr = y.reshape(n, g, w.shape[0] // g, -1)

    def step():
        pad.fill(0)
        np.copyto(inner, x)
        for dst, v in zip(dsts, views):
            np.copyto(dst, v.reshape(dst.shape))
        np.matmul(wr, cols, out=yr)
    return step


def _tconv_specs(op, ins, outs):
    x, w = ins
    g = op.groups
    cols = (x.shape[0], g, (w.shape[1]) * int(np.prod(w.shape[2:])),
            int(np.prod(x.shape[2:])))
    return [(cols, x.dtype)]


@kernel("ConvTransposeNd",
        workspace=lambda op, ins, outs: carved_bytes(*_tconv_specs(op, ins, outs)))
def conv_transpose_nd(op, ins, outs, ws):
    (x, w), (y,) = ins, outs
    (cols,) = carve(ws, *_tconv_specs(op, ins, outs))
    g = op.groups
    n, c = x.shape[:2]
    mg, kernel_shape = w.shape[1], w.shape[2:]
    offsets = list(np.ndindex(*kernel_shape))
    # cols[n, g, (m, tap), p] = sum_c w[c, m, tap] x[n, c, p]
    wt = w.reshape(g, c // g, mg * len(offsets)).transpose(0, 2, 1)
    xr = x.reshape(n, g, c // g, -1)
    c5 = cols.reshape((n, g * mg, len(offsets)) + tuple(x.shape[2:]))
    srcs = [c5[:, :, t] for t in range(len(offsets))]
    dsts = _taps(y, offsets, op.dilations, op.strides, x.shape[2:])

    def step():
        np.matmul(wt, xr, out=cols)
        y.fill(0)
        for dst, src in zip(dsts, srcs):
            np.add(dst, src, out=dst)
    return step


@njit(cache=True, parallel=True)
def _deform_cols(x, offset, mask, cols, sh, sw, dh, dw, ph, pw, kh_, kw_, og_):
    n_, c_, h_, w_ = x.shape
    oh_, ow_ = offset.shape[2], offset.shape[3]
    per_og = c_ // og_
    taps = kh_ * kw_
    for nc in prange(n_ * c_):
        n = nc // c_
        c = nc % c_
        g = c // per_og
        for t in range(taps):
            ki, kj = t // kw_, t % kw_
            for i in range(oh_):
                for j in range(ow_):
                    y = -ph + i * sh + ki * dh + offset[n, (g * taps + t) * 2, i, j]
                    xx = -pw + j * sw + kj * dw + offset[n, (g * taps + t) * 2 + 1, i, j]
                    y0, x0 = int(math.floor(y)), int(math.floor(xx))
                    ly, lx = y - y0, xx - x0
                    v = 0.0
                    for a in range(2):
                        yy = y0 + a
                        if yy < 0 or yy >= h_:
                            continue
                        wy = ly if a else 1.0 - ly
                        for b in range(2):
                            xb = x0 + b
                            if xb < 0 or xb >= w_:
                                continue
                            v += wy * (lx if b else 1.0 - lx) * x[n, c, yy, xb]
                    cols[n, c, t, i * ow_ + j] = v * mask[n, g * taps + t, i, j]


def _deform_specs(op, ins, outs):
    x, w = ins[0], ins[1]
    y = outs[0]
    return [((x.shape[0], x.shape[1], w.shape[2] * w.shape[3],
              int(np.prod(y.shape[2:]))), x.dtype)]


@kernel("DeformConv",
        workspace=lambda op, ins, outs: carved_bytes(*_deform_specs(op, ins, outs)))
def deform_conv(op, ins, outs, ws):
    (x, w, offset, mask), (y,) = ins, outs
    (cols,) = carve(ws, *_deform_specs(op, ins, outs))
    g = op.groups
    n, c = x.shape[:2]
    wr = w.reshape(g, w.shape[0] // g, -1)
    colsr = cols.reshape(n, g, (c // g) * w.shape[2] * w.shape[3], -1)
    yr = y.reshape(n, g, w.shape[0] // g, -1)
    (sh, sw), (dh, dw) = op.strides, op.dilations

    def step():
        _deform_cols(x, offset, mask, cols, sh, sw, dh, dw, op.pads[0], op.pads[1],
                     w.shape[2], w.shape[3], op.offset_groups)
        np.matmul(wr, colsr, out=yr)
    return step
