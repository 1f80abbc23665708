"""Layers that combine or reshape tensors: Add, Cat, Flatten, Reshape."""
from __future__ import annotations

from .. import ops as _ops
from .base import Layer, _Fn


class Add(_Fn):
    """``a + b`` (broadcasting)."""

    fn = staticmethod(lambda a, b: _ops.add(a, b))


class Flatten(Layer):
    """2-d view ``(prod(shape[:axis]), prod(shape[axis:]))``."""

    def __init__(self, axis=1):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        return _ops.flatten(x, self.axis)


class Reshape(Layer):
    """``forward(x, shape)``: ``x`` viewed with ``shape``."""

    def forward(self, x, shape):
        return _ops.reshape(x, shape)


class Cat(Layer):
    """``forward(xs)``: concatenate a list of tensors along ``axis``."""

    def __init__(self, axis=0):
        super().__init__()
        self.axis = axis

    def forward(self, xs):
        return _ops.cat(list(xs), self.axis)
