"""The fused LSTM cell: gate nonlinearities and the state update of one timestep as one op.

``LSTMCell(pre, c) -> (h, c')`` takes the gate pre-activations ``pre = x Wx + h Wh + b`` of
shape (N, 4H), gates in the order i, f, o, g (SINGA's), and the cell state (N, H)::

    i, f, o = sigmoid(pre_i), sigmoid(pre_f), sigmoid(pre_o);  g = tanh(pre_g)
    c' = f * c + i * g;  h = o * tanh(c')

Its gradient is one :class:`LSTMCellGrad` op that recomputes the gates from ``pre`` instead
of keeping them, so a timestep keeps two (N, H) tensors and one (N, 4H) alive, not ten.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.op import Operation
from ..ir.tensor import Tensor, TensorSpec
from ._util import need_float, same_dtype

__all__ = ["LSTMCell", "LSTMCellGrad", "lstm_cell"]


class LSTMCell(Operation):
    """One LSTM timestep from gate pre-activations; outputs ``(h, c')``."""

    def infer(self, pre, c):
        need_float(pre)
        if pre.ndim != 2 or c.ndim != 2 or pre.shape != (c.shape[0], 4 * c.shape[1]):
            raise ShapeError(f"pre-activations {pre.shape} must be (N, 4H) for a cell state "
                             f"(N, H), got cell state {c.shape}")
        dt = same_dtype(pre, c)
        return [TensorSpec(c.shape, dt), TensorSpec(c.shape, dt)]

    def gradient(self, inputs, outputs, dys, needs):
        pre, c = inputs
        dh, dc = (d if d is not None else
                  Tensor(data=np.zeros(c.shape, c.dtype), device=c.device, requires_grad=False)
                  for d in dys)
        dpre, dc_prev = LSTMCellGrad()(pre, c, outputs[1], dh, dc)
        return [dpre if needs[0] else None, dc_prev if needs[1] else None]


class LSTMCellGrad(Operation):
    """``(dpre, dc)`` of :class:`LSTMCell` from ``pre, c, c', dh, dc'``."""

    def infer(self, pre, c, c_new, dh, dc_new):
        for t in (c_new, dh, dc_new):
            if t.shape != c.shape:
                raise ShapeError(f"LSTM cell gradient: {t.name} has shape {t.shape}, expected "
                                 f"{c.shape}")
        dt = same_dtype(pre, c, c_new, dh, dc_new)
        return [TensorSpec(pre.shape, dt), TensorSpec(c.shape, dt)]


def lstm_cell(pre, c):
    """``(h, c')`` of one LSTM step from the (N, 4H) gate pre-activations (i, f, o, g)."""
    return LSTMCell()(pre, c)
