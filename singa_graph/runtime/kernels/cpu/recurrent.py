"""The fused LSTM cell and its gradient: one Numba loop over (N, H) each."""
import math

from numba import njit

from ...registry import kernel
from .activation import contiguous


@njit(cache=True)
def _sig(v):
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


@njit(cache=True)
def _cell(pre, c, h, c_new):
    n, hid = c.shape
    for r in range(n):
        for k in range(hid):
            i = _sig(pre[r, k])
            f = _sig(pre[r, hid + k])
            o = _sig(pre[r, 2 * hid + k])
            g = math.tanh(pre[r, 3 * hid + k])
            cn = f * c[r, k] + i * g
            c_new[r, k] = cn
            h[r, k] = o * math.tanh(cn)


@njit(cache=True)
def _cell_grad(pre, c, c_new, dh, dc_new, dpre, dc):
    n, hid = c.shape
    for r in range(n):
        for k in range(hid):
            i = _sig(pre[r, k])
            f = _sig(pre[r, hid + k])
            o = _sig(pre[r, 2 * hid + k])
            g = math.tanh(pre[r, 3 * hid + k])
            t = math.tanh(c_new[r, k])
            d = dh[r, k] * o * (1.0 - t * t) + dc_new[r, k]  # total gradient of c'
            dpre[r, k] = d * g * i * (1.0 - i)
            dpre[r, hid + k] = d * c[r, k] * f * (1.0 - f)
            dpre[r, 2 * hid + k] = dh[r, k] * t * o * (1.0 - o)
            dpre[r, 3 * hid + k] = d * i * (1.0 - g * g)
            dc[r, k] = d * f


@kernel("LSTMCell")
@contiguous
def lstm_cell(op, ins, outs):
    pre, c = ins
    h, c_new = outs
    return lambda: _cell(pre, c, h, c_new)


@kernel("LSTMCellGrad")
@contiguous
def lstm_cell_grad(op, ins, outs):
    pre, c, c_new, dh, dc_new = ins
    dpre, dc = outs
    return lambda: _cell_grad(pre, c, c_new, dh, dc_new, dpre, dc)
