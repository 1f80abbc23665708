"""CUDA kernels of the fused LSTM cell and its gradient (:mod:`..cpu.recurrent`): one
grid-stride pass over (N, H) each, a thread per (sample, unit) reading its four gates.

The arithmetic stays in the input's dtype (``one`` is a typed 1 passed at launch): a float64
literal would turn every exp and tanh of a float32 cell into double precision, which an
H100 runs at a fraction of the single-precision rate.
"""
from __future__ import annotations

import math

from numba import cuda

from ...registry import kernel
from .launch import flat, scalar, step


@cuda.jit(device=True)
def _sig(v, one):
    # exp of a non-positive number only: nothing overflows
    if v >= 0:
        return one / (one + math.exp(-v))
    e = math.exp(v)
    return e / (one + e)


@cuda.jit(cache=True)
def _cell(pre, c, h, c_new, hid, one):
    for i in range(cuda.grid(1), c.shape[0], cuda.gridsize(1)):
        k = i % hid
        row = (i - k) * 4  # start of this sample's (4H) pre-activations
        ig = _sig(pre[row + k], one)
        fg = _sig(pre[row + hid + k], one)
        og = _sig(pre[row + 2 * hid + k], one)
        g = math.tanh(pre[row + 3 * hid + k])
        cn = fg * c[i] + ig * g
        c_new[i] = cn
        h[i] = og * math.tanh(cn)


@cuda.jit(cache=True)
def _cell_grad(pre, c, c_new, dh, dc_new, dpre, dc, hid, one):
    for i in range(cuda.grid(1), c.shape[0], cuda.gridsize(1)):
        k = i % hid
        row = (i - k) * 4
        ig = _sig(pre[row + k], one)
        fg = _sig(pre[row + hid + k], one)
        og = _sig(pre[row + 2 * hid + k], one)
        g = math.tanh(pre[row + 3 * hid + k])
        t = math.tanh(c_new[i])
        d = dh[i] * og * (one - t * t) + dc_new[i]  # total gradient of c'
        dpre[row + k] = d * g * ig * (one - ig)
        dpre[row + hid + k] = d * c[i] * fg * (one - fg)
        dpre[row + 2 * hid + k] = dh[i] * t * og * (one - og)
        dpre[row + 3 * hid + k] = d * ig * (one - g * g)
        dc[i] = d * fg


@kernel("LSTMCell", "cuda")
def lstm_cell(op, ins, outs):
    pre, c = ins
    h, c_new = outs
    hid = int(c.shape[1])
    return step(_cell, c.size, flat(pre), flat(c), flat(h), flat(c_new), hid,
                scalar(c.dtype, 1))


@kernel("LSTMCellGrad", "cuda")
def lstm_cell_grad(op, ins, outs):
    pre, c, c_new, dh, dc_new = ins
    dpre, dc = outs
    hid = int(c.shape[1])
    return step(_cell_grad, c.size, flat(pre), flat(c), flat(c_new), flat(dh), flat(dc_new),
                flat(dpre), flat(dc), hid, scalar(c.dtype, 1))
