"""CUDA kernels of the fused LSTM cell and its gradient (:mod:`..cpu.recurrent`): one
grid-stride pass over (N, H) each, a thread per (sample, unit) reading its four gates.

The gates are the Sigmoid and Tanh ops' formulas (ops/formulas.py), compiled as device
functions. The arithmetic stays in the input's dtype (the formulas' constants ``k`` are
typed at launch): a float64 literal would turn every exp and tanh of a float32 cell into
double precision, which an H100 runs at a fraction of the single-precision rate.
"""
from __future__ import annotations

from numba import cuda

from ....ops import formulas
from ...registry import kernel
from ..generate import compiled_formulas
from .launch import flat, step

_f = compiled_formulas(("sigmoid", "tanh"), "cuda")
_sigmoid, _tanh = _f.sigmoid, _f.tanh


@cuda.jit(cache=True)
def _cell(pre, c, h, c_new, hid, k):
    z = k[0]
    for i in range(cuda.grid(1), c.shape[0], cuda.gridsize(1)):
        j = i % hid
        row = (i - j) * 4  # start of this sample's (4H) pre-activations
        ig = _sigmoid(pre[row + j], z, z, k)
        fg = _sigmoid(pre[row + hid + j], z, z, k)
        og = _sigmoid(pre[row + 2 * hid + j], z, z, k)
        g = _tanh(pre[row + 3 * hid + j], z, z, k)
        cn = fg * c[i] + ig * g
        c_new[i] = cn
        h[i] = og * _tanh(cn, z, z, k)


@cuda.jit(cache=True)
def _cell_grad(pre, c, c_new, dh, dc_new, dpre, dc, hid, k):
    z, one = k[0], k[2]
    for i in range(cuda.grid(1), c.shape[0], cuda.gridsize(1)):
        j = i % hid
        row = (i - j) * 4
        ig = _sigmoid(pre[row + j], z, z, k)
        fg = _sigmoid(pre[row + hid + j], z, z, k)
        og = _sigmoid(pre[row + 2 * hid + j], z, z, k)
        g = _tanh(pre[row + 3 * hid + j], z, z, k)
        t = _tanh(c_new[i], z, z, k)
        d = dh[i] * og * (one - t * t) + dc_new[i]  # total gradient of c'
        dpre[row + j] = d * g * ig * (one - ig)
        dpre[row + hid + j] = d * c[i] * fg * (one - fg)
        dpre[row + 2 * hid + j] = dh[i] * t * og * (one - og)
        dpre[row + 3 * hid + j] = d * ig * (one - g * g)
        dc[i] = d * fg


@kernel("LSTMCell", "cuda")
def lstm_cell(op, ins, outs):
    pre, c = ins
    h, c_new = outs
    hid = int(c.shape[1])
    return step(_cell, c.size, flat(pre), flat(c), flat(h), flat(c_new), hid,
                formulas.constants(c.dtype))


@kernel("LSTMCellGrad", "cuda")
def lstm_cell_grad(op, ins, outs):
    pre, c, c_new, dh, dc_new = ins
    dpre, dc = outs
    hid = int(c.shape[1])
    return step(_cell_grad, c.size, flat(pre), flat(c), flat(c_new), flat(dh), flat(dc_new),
                flat(dpre), flat(dc), hid, formulas.constants(c.dtype))
