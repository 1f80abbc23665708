"""Recurrent layers with SINGA's per-timestep API: ``RNN`` and ``LSTM``.

Both take a list of per-timestep tensors ``xs`` (each ``(N, input_size)``) and the initial
state, and are unrolled into the graph, one timestep after another, so the backward, the
memory plan and eager mode need nothing special. An RNN step is MatMul, Add, AddBias and the
nonlinearity; an LSTM step is two MatMuls on the four gates' weights side by side and one
fused :class:`~singa_graph.ops.recurrent.LSTMCell` (the gate nonlinearities and the state
update), whose plan needs a fraction of the steps and memory of the op-by-op cell::

    rnn = layer.RNN(3, 2)
    hs, h = rnn(xs, h0)
    lstm = layer.LSTM(3, 2)
    hs, h, c = lstm(xs, (h0, c0))      # SINGA returns the three, not (hs, (h, c))

Parameters and their initialisation are SINGA's: RNN ``Wx (in, hid)``, ``Wh (hid, hid)``
from N(0, 1) and ``b`` zeros; LSTM ``Wx_g, Wh_g`` from N(0, 0.01^2) and ``Bx_g, Bh_g``
zeros for each gate g in i, f, o, g. ``num_layers > 1``, ``bidirectional``, ``dropout`` and
``batch_first`` (cuDNN options in SINGA) are refused rather than ignored. Initial states
are ``(batch, hidden)`` or, as SINGA's cuDNN layer takes them, ``(num_layers * directions,
batch, hidden)``; final states come back in the layout the initial ones were given in.
"""
from __future__ import annotations

import numpy as np

from .. import initializer
from .. import ops as _ops
from ..errors import ShapeError
from .base import Layer, _param

__all__ = ["RNN_Base", "RNN", "LSTM"]


class RNN_Base(Layer):
    """Base of the recurrent layers (SINGA's name)."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0, bidirectional=False):
        super().__init__()
        if num_layers != 1 or bidirectional or dropout or batch_first:
            raise NotImplementedError(
                f"{type(self).__name__}: only num_layers=1, unidirectional, no dropout, "
                "time-major lists are supported (stack layers for more)")
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.num_layers, self.nonlinearity, self.bias = 1, nonlinearity, bool(bias)
        self.batch_first, self.dropout, self.bidirectional = False, 0, False

    def _check(self, xs, *states):
        """Check the timesteps and bring each initial state to (batch, hidden).

        A state may come as ``(batch, hidden)``, in cuDNN's ``(num_layers * directions,
        batch, hidden)`` layout (SINGA's CudnnRNN; ``(1, batch, hidden)`` here), or as
        anything that broadcasts to ``(batch, hidden)`` (SINGA's cell multiplies by it
        elementwise, so its own tests pass a ``(batch, 1)`` cell state). Returns the states
        as (batch, hidden) tensors and whether they came in the 3-d layout."""
        if not xs:
            raise ShapeError(f"{type(self).__name__} needs at least one timestep")
        n = xs[0].shape[0]
        for t, x in enumerate(xs):
            if x.shape != (n, self.input_size):
                raise ShapeError(f"{type(self).__name__}: timestep {t} has shape {x.shape}, "
                                 f"expected ({n}, {self.input_size})")
        want, out, layered = (n, self.hidden_size), [], False
        for s in states:
            if s.shape == (1,) + want:
                out.append(_ops.reshape(s, want))
                layered = True
            elif s.shape == want:
                out.append(s)
            elif s.ndim <= 2 and _broadcasts(s.shape, want):
                out.append(_ops.broadcast_to(s, want))
            else:
                raise ShapeError(
                    f"{type(self).__name__}: initial state of shape {s.shape}; expected "
                    f"(num_layers * directions, batch, hidden) = (1, {n}, {self.hidden_size})"
                    f" or (batch, hidden) = {want}")
        return out, layered

    def step_forward(self, *args):
        raise NotImplementedError


def _broadcasts(shape, to) -> bool:
    try:
        return tuple(np.broadcast_shapes(shape, to)) == tuple(to)
    except ValueError:
        return False


def _layout(t, layered):
    """A final state in the layout its initial state came in."""
    return _ops.reshape(t, (1,) + tuple(t.shape)) if layered else t


def _affine(x, w, b):
    y = _ops.matmul(x, w)
    return y if b is None else _ops.add_bias(y, b, 0)


class RNN(RNN_Base):
    """``h_t = act(x_t Wx + h_{t-1} Wh + b)``; ``forward(xs, h0) -> (hs, h)``."""

    def initialize(self, xs, h0):
        x = xs[0]
        self.Wx = _param((self.input_size, self.hidden_size), x, initializer.gaussian, std=1.0)
        self.Wh = _param((self.hidden_size, self.hidden_size), x, initializer.gaussian,
                         std=1.0)
        if self.bias:
            self.b = _param((self.hidden_size,), x, initializer.zeros)

    def forward(self, xs, h0):
        xs = list(xs)
        (h,), layered = self._check(xs, h0)
        out = []
        for x in xs:
            h = self.step_forward(x, h, self.Wx, self.Wh, self.b if self.bias else None)
            out.append(h)
        return out, _layout(h, layered)

    def step_forward(self, x, h, Wx, Wh, b):
        y = _ops.add(_ops.matmul(h, Wh), _ops.matmul(x, Wx))
        y = y if b is None else _ops.add_bias(y, b, 0)
        return _ops.tanh(y) if self.nonlinearity == "tanh" else _ops.relu(y)


class LSTM(RNN_Base):
    """Long short-term memory; ``forward(xs, (h0, c0)) -> (hs, h, c)`` as SINGA::

        i, f, o = sigmoid(x Wx_* + Bx_* + h Wh_* + Bh_*),  g = tanh(x Wx_g + ... )
        c' = f * c + i * g,  h' = o * tanh(c')
    """

    _GATES = ("i", "f", "o", "g")

    def __init__(self, input_size, hidden_size, nonlinearity="tanh", num_layers=1, bias=True,
                 batch_first=False, dropout=0, bidirectional=False):
        super().__init__(input_size, hidden_size, num_layers, nonlinearity, bias, batch_first,
                         dropout, bidirectional)

    def initialize(self, xs, h0_c0):
        x = xs[0]
        for g in self._GATES:
            setattr(self, f"Wx_{g}", _param((self.input_size, self.hidden_size), x,
                                            initializer.gaussian, std=0.01))
            setattr(self, f"Wh_{g}", _param((self.hidden_size, self.hidden_size), x,
                                            initializer.gaussian, std=0.01))
        if self.bias:
            for g in self._GATES:
                setattr(self, f"Bx_{g}", _param((self.hidden_size,), x, initializer.zeros))
                setattr(self, f"Bh_{g}", _param((self.hidden_size,), x, initializer.zeros))

    def forward(self, xs, h0_c0):
        xs = list(xs)
        (h, c), layered = self._check(xs, *h0_c0)
        weights = self._fused_weights()  # once per sequence, not per step
        out = []
        for x in xs:
            h, c = self._step(x, h, c, *weights)
            out.append(h)
        return out, _layout(h, layered), _layout(c, layered)

    def _fused_weights(self):
        """The four gates' weights side by side, (in, 4H) and (H, 4H), and the summed
        biases (4H,): one MatMul per input per step instead of eight."""
        wx = _ops.cat([getattr(self, f"Wx_{g}") for g in self._GATES], 1)
        wh = _ops.cat([getattr(self, f"Wh_{g}") for g in self._GATES], 1)
        if not self.bias:
            return wx, wh, None
        b = _ops.cat([_ops.add(getattr(self, f"Bx_{g}"), getattr(self, f"Bh_{g}"))
                      for g in self._GATES], 0)
        return wx, wh, b

    def _step(self, x, h, c, wx, wh, b):
        pre = _affine(x, wx, None)
        pre = _ops.add(pre, _ops.matmul(h, wh))
        pre = pre if b is None else _ops.add_bias(pre, b, 0)
        return _ops.lstm_cell(pre, c)

    def step_forward(self, x, h, c):
        """One timestep (SINGA's name): ``(h', c')``."""
        return self._step(x, h, c, *self._fused_weights())
