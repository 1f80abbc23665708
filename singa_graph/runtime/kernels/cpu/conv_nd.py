"""N-d convolution: im2col from strided views of the input padded into workspace, then one
numpy matmul per group (BLAS for float32/float64); the transposed convolution runs the
product first and adds the columns back (col2im) over the same strided views."""
from __future__ import annotations

import numpy as np

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
