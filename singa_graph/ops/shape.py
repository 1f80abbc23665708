"""Ops that move or view data without arithmetic: Reshape, Flatten, Transpose, Concat, Split,
Identity."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import norm_axes, same_dtype

__all__ = ["Reshape", "Flatten", "Transpose", "Concat", "Split", "Identity", "reshape",
           "flatten", "transpose", "cat", "concat", "split", "identity"]


class Reshape(Operation):
    """View ``x`` with another shape of the same size; one entry may be -1 (inferred) and, as
    in ONNX, 0 copies the input dimension. The output aliases the input's buffer."""

    alias = {0: 0}

    def __init__(self, shape):
        self.shape = tuple(int(s) for s in shape)

    def infer(self, x):
        shape = [x.shape[i] if s == 0 and i < x.ndim else s for i, s in enumerate(self.shape)]
        if shape.count(-1) > 1:
            raise ShapeError(f"cannot reshape {x.shape} to {self.shape}: more than one -1")
        known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
        if -1 in shape:
            if known == 0 or x.size % known:
                raise ShapeError(f"cannot reshape {x.shape} to {self.shape}")
            shape[shape.index(-1)] = x.size // known
        if int(np.prod(shape, dtype=np.int64)) != x.size:
            raise ShapeError(f"cannot reshape {x.shape} (size {x.size}) to {self.shape}")
        return [TensorSpec(tuple(shape), x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [reshape(dys[0], inputs[0].shape)]


class Flatten(Reshape):
    """Collapse dimensions ``[axis:]`` into one and ``[:axis]`` into another (ONNX Flatten)."""

    def __init__(self, axis=1):
        self.axis = int(axis)

    def infer(self, x):
        ax = self.axis % (x.ndim + 1) if self.axis < 0 else self.axis
        if ax > x.ndim:
            raise ShapeError(f"flatten axis {self.axis} out of range for shape {x.shape}")
        self.shape = (int(np.prod(x.shape[:ax], dtype=np.int64)),
                      int(np.prod(x.shape[ax:], dtype=np.int64)))
        return [TensorSpec(self.shape, x.dtype)]


class Transpose(Operation):
    """Permute axes (reverse them when ``perm`` is None)."""

    def __init__(self, perm=None):
        self.perm = None if perm is None else tuple(int(p) for p in perm)

    def infer(self, x):
        if self.perm is None:
            self.perm = tuple(range(x.ndim))[::-1]
        if sorted(p % max(x.ndim, 1) for p in self.perm) != list(range(x.ndim)):
            raise ShapeError(f"perm {self.perm} is not a permutation of the axes of {x.shape}")
        self.perm = tuple(p % x.ndim for p in self.perm)
        return [TensorSpec(tuple(x.shape[p] for p in self.perm), x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [transpose(dys[0], tuple(np.argsort(self.perm)))]


class Concat(Operation):
    """Join tensors along ``axis`` (SINGA's ``cat``)."""

    def __init__(self, axis=0):
        self.axis = int(axis)

    def infer(self, *xs):
        if not xs:
            raise ShapeError("concat needs at least one input")
        nd = xs[0].ndim
        ax = norm_axes(self.axis, nd)[0]
        for x in xs[1:]:
            if x.ndim != nd or any(a != b for i, (a, b) in enumerate(zip(x.shape, xs[0].shape))
                                   if i != ax):
                raise ShapeError("cannot concatenate shapes "
                                 + ", ".join(str(t.shape) for t in xs) + f" on axis {self.axis}")
        self.axis = ax
        shape = list(xs[0].shape)
        shape[ax] = sum(x.shape[ax] for x in xs)
        return [TensorSpec(tuple(shape), same_dtype(*xs))]

    def gradient(self, inputs, outputs, dys, needs):
        parts = split(dys[0], self.axis, [x.shape[self.axis] for x in inputs])
        return list(parts) if isinstance(parts, tuple) else [parts]


class Split(Operation):
    """Cut ``x`` along ``axis`` into pieces of the given sizes (SINGA's ``split``)."""

    def __init__(self, axis, parts):
        self.axis = int(axis)
        self.parts = tuple(int(p) for p in parts)

    def infer(self, x):
        ax = norm_axes(self.axis, x.ndim)[0]
        if sum(self.parts) != x.shape[ax] or any(p < 0 for p in self.parts):
            raise ShapeError(f"split sizes {self.parts} do not add up to dimension {ax} "
                             f"of {x.shape}")
        self.axis = ax
        return [TensorSpec(x.shape[:ax] + (p,) + x.shape[ax + 1:], x.dtype) for p in self.parts]

    def gradient(self, inputs, outputs, dys, needs):
        from ..ir.tensor import Tensor

        filled = [d if d is not None else Tensor(data=np.zeros(o.shape, o.dtype),
                                                 requires_grad=False)
                  for d, o in zip(dys, outputs)]
        return [cat(filled, self.axis)]


class Identity(Operation):
    """Copy ``x`` (a fresh buffer, so it can be a graph output distinct from its input)."""

    inplace = {0: 0}

    def infer(self, x):
        return [TensorSpec(x.shape, x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [dys[0]]


def reshape(x, shape):
    """A view of ``x`` with a new shape (-1 infers one dimension)."""
    return Reshape(shape)(x)


def flatten(x, axis=1):
    """ONNX/SINGA flatten: a 2-d view ``(prod(shape[:axis]), prod(shape[axis:]))``."""
    return Flatten(axis)(x)


def transpose(x, perm=None):
    return Transpose(perm)(x)


def cat(xs, axis=0):
    """Concatenate a list of tensors along ``axis``."""
    return Concat(axis)(*xs)


concat = cat


def split(x, axis, parts):
    """Split along ``axis`` into pieces of sizes ``parts``; returns a tuple."""
    out = Split(axis, parts)(x)
    return out if isinstance(out, tuple) else (out,)


def identity(x):
    return Identity()(x)
