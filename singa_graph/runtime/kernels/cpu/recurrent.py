"""The fused LSTM cell and its gradient: one Numba loop over (N, H) each.

The gates are the Sigmoid and Tanh ops' formulas (ops/formulas.py, compiled by
:func:`..generate.compiled_formulas`), computed in the cell's dtype with the formulas'
constants ``k``, as the CUDA kernels compute them."""
from numba import njit

from ....ops import formulas
from ...registry import kernel
from ..generate import compiled_formulas
from .activation import contiguous

_f = compiled_formulas(("sigmoid", "tanh"), "cpu")
_sigmoid, _tanh = _f.sigmoid, _f.tanh


@njit(cache=True)
def _cell(pre, c, h, c_new, k):
    n, hid = c.shape
    z = k[0]
    for r in range(n):
        for j in range(hid):
            i = _sigmoid(pre[r, j], z, z, k)
            f = _sigmoid(pre[r, hid + j], z, z, k)
            o = _sigmoid(pre[r, 2 * hid + j], z, z, k)
            g = _tanh(pre[r, 3 * hid + j], z, z, k)
            cn = f * c[r, j] + i * g
            c_new[r, j] = cn
            h[r, j] = o * _tanh(cn, z, z, k)


@njit(cache=True)
def _cell_grad(pre, c, c_new, dh, dc_new, dpre, dc, k):
    n, hid = c.shape
    z, one = k[0], k[2]
    for r in range(n):
        for j in range(hid):
            i = _sigmoid(pre[r, j], z, z, k)
            f = _sigmoid(pre[r, hid + j], z, z, k)
            o = _sigmoid(pre[r, 2 * hid + j], z, z, k)
            g = _tanh(pre[r, 3 * hid + j], z, z, k)
            t = _tanh(c_new[r, j], z, z, k)
            d = dh[r, j] * o * (one - t * t) + dc_new[r, j]  # total gradient of c'
            dpre[r, j] = d * g * i * (one - i)
            dpre[r, hid + j] = d * c[r, j] * f * (one - f)
            dpre[r, 2 * hid + j] = dh[r, j] * t * o * (one - o)
            dpre[r, 3 * hid + j] = d * i * (one - g * g)
            dc[r, j] = d * f


@kernel("LSTMCell")
@contiguous
def lstm_cell(op, ins, outs):
    pre, c = ins
    h, c_new = outs
    k = formulas.constants(c.dtype)
    return lambda: _cell(pre, c, h, c_new, k)


@kernel("LSTMCellGrad")
@contiguous
def lstm_cell_grad(op, ins, outs):
    pre, c, c_new, dh, dc_new = ins
    dpre, dc = outs
    k = formulas.constants(c.dtype)
    return lambda: _cell_grad(pre, c, c_new, dh, dc_new, dpre, dc, k)
