"""Activation layers."""
from __future__ import annotations

from .. import ops as _ops
from .base import Layer, _Fn


class ReLU(_Fn):
    """``max(x, 0)``."""

    fn = staticmethod(lambda x: _ops.relu(x))


class Sigmoid(_Fn):
    fn = staticmethod(lambda x: _ops.sigmoid(x))


class Tanh(_Fn):
    fn = staticmethod(lambda x: _ops.tanh(x))


class LeakyReLU(Layer):
    """``x`` for ``x > 0``, ``a * x`` otherwise."""

    def __init__(self, a=0.01):
        super().__init__()
        self.a = a

    def forward(self, x):
        return _ops.leakyrelu(x, self.a)


class SoftMax(Layer):
    """Softmax along ``axis`` (1: the classes of an (N, C) batch)."""

    def __init__(self, axis=1):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        return _ops.softmax(x, self.axis)
