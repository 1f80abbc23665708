"""Indexing by tuples and sorting-like ops (ONNX): GatherND, ScatterND (with its
reductions), TopK, CumProd and ReverseSequence; and Det.

None of them has a gradient here: GatherND/ScatterND and TopK move values by run-time
indices (their gradients would be scatters of the upstream gradient, not built yet),
CumProd's gradient divides by the input and is left out, and ReverseSequence feeds
recurrent inference graphs.
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import norm_axes

__all__ = ["GatherND", "ScatterND", "TopK", "CumProd", "ReverseSequence", "Det",
           "gather_nd", "scatter_nd", "topk", "cumprod", "reverse_sequence", "det"]

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _need_int(t, what, op):
    if t.dtype.kind not in "iu":
        raise DTypeError(f"{op}: {what} {t.name} has dtype {t.dtype}; an integer dtype is "
                         "required")


class GatherND(Operation):
    """Slices of ``x`` at the index tuples in the last axis of ``indices``, after
    ``batch_dims`` leading axes that ``x`` and ``indices`` share."""

    differentiable = False

    def __init__(self, batch_dims=0):
        self.batch_dims = int(batch_dims)

    def infer(self, x, indices):
        _need_int(indices, "indices", self.type)
        b, k = self.batch_dims, indices.shape[-1] if indices.ndim else 0
        if indices.ndim < 1 or b + k > x.ndim or x.shape[:b] != indices.shape[:b]:
            raise ShapeError(f"GatherND: indices {indices.shape} with batch_dims={b} do not "
                             f"fit data {x.shape}")
        return [TensorSpec(indices.shape[:-1] + x.shape[b + k:], x.dtype)]


class ScatterND(Operation):
    """A copy of ``x`` with ``updates`` written (or combined by ``reduction``) at the index
    tuples of ``indices``."""

    differentiable = False

    def __init__(self, reduction="none"):
        if reduction not in REDUCTIONS:
            raise ValueError(f"ScatterND reduction must be one of {REDUCTIONS}")
        self.reduction = reduction

    def infer(self, x, indices, updates):
        _need_int(indices, "indices", self.type)
        k = indices.shape[-1] if indices.ndim else 0
        want = indices.shape[:-1] + x.shape[k:]
        if indices.ndim < 1 or k > x.ndim or updates.shape != want:
            raise ShapeError(f"ScatterND: updates {updates.shape} must have shape {want} for "
                             f"indices {indices.shape} into {x.shape}")
        if updates.dtype != x.dtype:
            raise DTypeError(f"ScatterND: updates {updates.dtype}, data {x.dtype}")
        return [TensorSpec(x.shape, x.dtype)]


class TopK(Operation):
    """The ``k`` largest (or smallest) entries along ``axis`` and their int64 indices,
    sorted; equal values keep the lower index first."""

    differentiable = False

    def __init__(self, k, axis=-1, largest=True):
        self.k, self.axis, self.largest = int(k), int(axis), bool(largest)

    def infer(self, x):
        self.axis = norm_axes(self.axis, x.ndim)[0]
        if not 0 <= self.k <= x.shape[self.axis]:
            raise ShapeError(f"TopK: k={self.k} for an axis of {x.shape[self.axis]}")
        shape = x.shape[:self.axis] + (self.k,) + x.shape[self.axis + 1:]
        return [TensorSpec(shape, x.dtype), TensorSpec(shape, np.int64)]


class CumProd(Operation):
    """Running product along ``axis`` (``exclusive``: starting from 1; ``reverse``: from
    the end)."""

    differentiable = False

    def __init__(self, axis=0, exclusive=False, reverse=False):
        self.axis, self.exclusive, self.reverse = int(axis), bool(exclusive), bool(reverse)

    def infer(self, x):
        self.axis = norm_axes(self.axis, x.ndim)[0]
        return [TensorSpec(x.shape, x.dtype)]


class ReverseSequence(Operation):
    """Reverse the first ``lengths[b]`` entries along ``time_axis`` of each batch entry."""

    differentiable = False

    def __init__(self, batch_axis=1, time_axis=0):
        self.batch_axis, self.time_axis = int(batch_axis), int(time_axis)

    def infer(self, x, lengths):
        _need_int(lengths, "sequence lengths", self.type)
        if lengths.shape != (x.shape[self.batch_axis],):
            raise ShapeError(f"ReverseSequence: lengths {lengths.shape} for batch axis "
                             f"{self.batch_axis} of {x.shape}")
        return [TensorSpec(x.shape, x.dtype)]


def gather_nd(x, indices, batch_dims=0):
    return GatherND(batch_dims)(x, indices)


def scatter_nd(x, indices, updates, reduction="none"):
    return ScatterND(reduction)(x, indices, updates)


def topk(x, k, axis=-1, largest=True):
    """``(values, indices)`` of the ``k`` largest (or smallest) entries along ``axis``."""
    return TopK(k, axis, largest)(x)


def cumprod(x, axis=0, exclusive=False, reverse=False):
    return CumProd(axis, exclusive, reverse)(x)


def reverse_sequence(x, lengths, batch_axis=1, time_axis=0):
    return ReverseSequence(batch_axis, time_axis)(x, lengths)


class Det(Operation):
    """Determinants of the square matrices in the last two axes (LU with partial
    pivoting). Not differentiable here (d det / dA = det * A^-T is not built)."""

    differentiable = False

    def infer(self, x):
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise ShapeError(f"Det needs square matrices in the last two axes, got {x.shape}")
        if x.dtype.kind != "f":
            raise DTypeError(f"Det of {x.dtype}: a floating dtype is required")
        return [TensorSpec(x.shape[:-2], x.dtype)]


def det(x):
    return Det()(x)
