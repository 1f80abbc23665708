"""Indexing ops: Gather (constant indices, as SINGA), GatherElements, ScatterElements,
OneHot, and the data-dependent NonZero and ConstantOfShape.

NonZero and ConstantOfShape have output shapes that depend on input *values*; they run on
concrete tensors only (an error names this when they meet a Placeholder).
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import norm_axes

__all__ = ["Take", "TakeGrad", "take", "Gather", "GatherGrad", "GatherElements", "ScatterElements", "NonZero", "OneHot",
           "ConstantOfShape", "gather", "gather_elements", "scatter_elements", "nonzero",
           "onehot", "constant_of_shape"]


def _axis(axis, ndim):
    return norm_axes(axis, ndim)[0]


class Gather(Operation):
    """``take(x, indices, axis)``: entries of ``axis`` picked by the constant ``indices``
    (any shape; negative ones count from the end). Output rank ``q + r - 1`` (ONNX)."""

    def __init__(self, axis, indices):
        self.axis = int(axis)
        self.indices = np.asarray(indices, np.int64)

    def infer(self, x):
        ax = _axis(self.axis, x.ndim)
        n = x.shape[ax]
        if self.indices.size and (self.indices.min() < -n or self.indices.max() >= n):
            raise ShapeError(f"gather indices out of range [-{n}, {n}) for axis {ax} of {x.shape}")
        self.axis = ax
        return [TensorSpec(x.shape[:ax] + self.indices.shape + x.shape[ax + 1:], x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [GatherGrad(self.axis, self.indices, inputs[0].shape)(dys[0])]


class GatherGrad(Operation):
    """Zeros of the gathered input's shape with ``dy`` added at the gathered entries."""

    def __init__(self, axis, indices, shape):
        self.axis, self.indices, self.shape = axis, np.asarray(indices), tuple(shape)

    def infer(self, dy):
        return [TensorSpec(self.shape, dy.dtype)]


class Take(Operation):
    """ONNX ``Gather`` with the indices as an input tensor (fed per batch, as an embedding
    lookup's word ids): ``take(x, indices, axis)``; output rank ``q + r - 1``."""

    def __init__(self, axis=0):
        self.axis = int(axis)

    def infer(self, x, indices):
        _need_int(indices, "indices")
        ax = _axis(self.axis, x.ndim)
        self.axis = ax
        return [TensorSpec(x.shape[:ax] + indices.shape + x.shape[ax + 1:], x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        x, idx = inputs
        return [TakeGrad(self.axis, x.shape)(dys[0], idx), None]


class TakeGrad(Operation):
    """Zeros of the input's shape with ``dy`` added at the taken entries (repeats add up)."""

    def __init__(self, axis, shape):
        self.axis, self.shape = int(axis), tuple(shape)

    def infer(self, dy, indices):
        return [TensorSpec(self.shape, dy.dtype)]


def _need_int(t, what):
    if t.dtype.kind not in "iu":
        raise DTypeError(f"{what} {t.name} has dtype {t.dtype}; an integer dtype is required")


class GatherElements(Operation):
    """``take_along_axis(x, indices, axis)`` (ONNX GatherElements)."""

    def __init__(self, axis=0):
        self.axis = int(axis)

    def infer(self, x, indices):
        _need_int(indices, "indices")
        if indices.ndim != x.ndim:
            raise ShapeError(f"indices {indices.shape} and data {x.shape} differ in rank")
        self.axis = _axis(self.axis, x.ndim)
        return [TensorSpec(indices.shape, x.dtype)]


class ScatterElements(Operation):
    """A copy of ``x`` with ``updates`` written at ``indices`` along ``axis`` (ONNX), or
    combined with what is there by ``reduction`` ("add", "mul", "max", "min"; those have
    no gradient here)."""

    def __init__(self, axis=0, reduction="none"):
        self.axis = int(axis)
        if reduction not in ("none", "add", "mul", "max", "min"):
            raise ValueError(f"ScatterElements reduction {reduction!r}")
        self.reduction = reduction
        if reduction != "none":
            self.differentiable = False

    def infer(self, x, indices, updates):
        _need_int(indices, "indices")
        if indices.shape != updates.shape or indices.ndim != x.ndim:
            raise ShapeError(f"indices {indices.shape}, updates {updates.shape} and data "
                             f"{x.shape} do not fit")
        if updates.dtype != x.dtype:
            raise DTypeError(f"updates have dtype {updates.dtype}, data {x.dtype}")
        self.axis = _axis(self.axis, x.ndim)
        return [TensorSpec(x.shape, x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        from .elementwise import mul

        x, idx, upd = inputs
        dx = ScatterElements(self.axis)(dys[0], idx, mul(upd, 0.0)) if needs[0] else None
        du = GatherElements(self.axis)(dys[0], idx) if needs[2] else None
        return [dx, None, du]


def _concrete(x, what):
    if x.data is None:
        raise ShapeError(f"{what}: the output shape depends on the values of {x.name}, which "
                         "is symbolic; call it on a concrete tensor")
    return x.host_data()  # the data itself on the CPU; a GPU tensor's values are copied


class NonZero(Operation):
    """Indices of the nonzero entries, shape ``(ndim, count)``, int64 (ONNX)."""

    differentiable = False

    def infer(self, x):
        count = int(np.count_nonzero(_concrete(x, "nonzero")))
        return [TensorSpec((x.ndim, count), np.int64)]


class ConstantOfShape(Operation):
    """A float32 tensor filled with ``value`` whose shape is the *values* of ``x``."""

    differentiable = False

    def __init__(self, value=0.0):
        self.value = float(value)

    def infer(self, x):
        shape = tuple(int(s) for s in np.asarray(_concrete(x, "constant_of_shape")).reshape(-1))
        if any(s < 0 for s in shape):
            raise ShapeError(f"constant_of_shape: negative dimension in {shape}")
        return [TensorSpec(shape, np.float32)]


class OneHot(Operation):
    """One-hot rows of ``depth`` along a new ``axis``, ``values = (off, on)``, float32
    (SINGA); indices in ``[-depth, depth)``."""

    differentiable = False

    def __init__(self, axis=-1, depth=2, values=(0.0, 1.0)):
        self.axis, self.depth = int(axis), int(depth)
        self.values = tuple(float(v) for v in np.asarray(values).reshape(-1))
        if len(self.values) != 2:
            raise ValueError(f"onehot: values must be (off, on), got {values!r}")

    def infer(self, indices):
        ax = _axis(self.axis, indices.ndim + 1)
        self.axis = ax
        return [TensorSpec(indices.shape[:ax] + (self.depth,) + indices.shape[ax:], np.float32)]


def gather(x, axis, indices):
    """SINGA's ``gather``: entries of ``axis`` at the (constant) ``indices``."""
    return Gather(axis, indices)(x)


def take(x, indices, axis=0):
    """Entries of ``axis`` of ``x`` at the integer tensor ``indices`` (ONNX Gather)."""
    return Take(axis)(x, indices)


def gather_elements(x, indices, axis=0):
    return GatherElements(axis)(x, indices)


def scatter_elements(x, indices, updates, axis=0, reduction="none"):
    """SINGA's ``scatter_elements``: ``x`` with ``updates`` written at ``indices`` (or
    combined with ``reduction``)."""
    return ScatterElements(axis, reduction)(x, indices, updates)


def nonzero(x):
    """Indices of the nonzero entries of a concrete tensor, shape ``(ndim, count)``."""
    return NonZero()(x)


def onehot(axis, indices, depth, values):
    """SINGA's ``onehot(axis, indices, depth, values)``."""
    return OneHot(axis, depth, values)(indices)


def constant_of_shape(x, value=0):
    """A float32 tensor of shape ``x`` (a concrete 1-d tensor of sizes) filled with
    ``value``."""
    return ConstantOfShape(value)(x)
