"""Reductions over axes: Sum and Mean (numpy semantics for ``axis`` and ``keepdims``)."""
from __future__ import annotations

import numpy as np

from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import norm_axes

__all__ = ["Sum", "Mean", "sum", "mean"]


class _Reduce(Operation):
    def __init__(self, axes=None, keepdims=False):
        self.axes = axes
        self.keepdims = bool(keepdims)

    def infer(self, x):
        self.axes = norm_axes(self.axes, x.ndim)
        return [TensorSpec(self._out_shape(x.shape), x.dtype)]

    def _all_axes(self, ndim):
        return tuple(range(ndim)) if self.axes is None else self.axes

    def _out_shape(self, shape):
        ax = self._all_axes(len(shape))
        if self.keepdims:
            return tuple(1 if i in ax else s for i, s in enumerate(shape))
        return tuple(s for i, s in enumerate(shape) if i not in ax)

    def _spread(self, dy, x):
        from .elementwise import broadcast_to
        from .shape import reshape

        ax = self._all_axes(x.ndim)
        kept = tuple(1 if i in ax else s for i, s in enumerate(x.shape))
        if dy.shape != kept:
            dy = reshape(dy, kept)
        return broadcast_to(dy, x.shape)

    def count(self, shape) -> int:
        return int(np.prod([shape[i] for i in self._all_axes(len(shape))], dtype=np.int64))


class Sum(_Reduce):
    def gradient(self, inputs, outputs, dys, needs):
        return [self._spread(dys[0], inputs[0])]


class Mean(_Reduce):
    def gradient(self, inputs, outputs, dys, needs):
        from .elementwise import mul

        x = inputs[0]
        return [mul(self._spread(dys[0], x), 1.0 / max(self.count(x.shape), 1))]


def sum(x, axis=None, keepdims=False):
    """Sum over ``axis`` (an int, a tuple, or None for all axes)."""
    return Sum(axis, keepdims)(x)


def mean(x, axis=None, keepdims=False):
    """Mean over ``axis`` (an int, a tuple, or None for all axes)."""
    return Mean(axis, keepdims)(x)
