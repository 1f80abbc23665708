"""Comparisons, logic, Where and the elementwise Max/Min of several tensors.

As in SINGA, comparisons and logic ops return 0/1 in the dtype of their first input (float
for float tensors, so a mask multiplies directly), and logic ops treat nonzero as true.
(ONNX returns bool; an importer casts.) They have no gradient.
"""
from __future__ import annotations

from functools import reduce

import numpy as np

from ..errors import ShapeError
from ..ir.op import Operation
from ..ir.tensor import Tensor, TensorSpec
from ._util import broadcast_shape, same_dtype
from .elementwise import _reduce, mul, sub

__all__ = ["Greater", "Less", "Equal", "And", "Or", "Xor", "Not", "Where", "Max", "Min",
           "greater", "less", "equal", "logical_and", "logical_or", "logical_xor",
           "logical_not", "where", "maximum", "minimum"]


class _Compare(Operation):
    differentiable = False

    def infer(self, a, b):
        return [TensorSpec(broadcast_shape(a.shape, b.shape), same_dtype(a, b))]


class Greater(_Compare):
    """``a > b``."""

    formula = "greater"


class Less(_Compare):
    """``a < b``."""

    formula = "less"


class Equal(_Compare):
    """``a == b``."""

    formula = "equal"


class And(_Compare):
    """``a != 0 and b != 0``."""

    formula = "logical_and"


class Or(_Compare):
    """``a != 0 or b != 0``."""

    formula = "logical_or"


class Xor(_Compare):
    """Exactly one of ``a``, ``b`` is nonzero."""

    formula = "logical_xor"


class Not(Operation):
    """``x == 0``."""

    formula = "logical_not"

    differentiable = False
    inplace = {0: 0}

    def infer(self, x):
        return [TensorSpec(x.shape, x.dtype)]


class Where(Operation):
    """``x`` where ``condition`` is nonzero, ``y`` elsewhere (ONNX input order
    ``(condition, x, y)``; all three broadcast)."""

    attribute_inputs = (0,)  # SINGA's Where(condition)(x, y)

    formula = "where"

    def infer(self, cond, x, y):
        shape = broadcast_shape(cond.shape, broadcast_shape(x.shape, y.shape))
        return [TensorSpec(shape, same_dtype(x, y))]

    def gradient(self, inputs, outputs, dys, needs):
        cond, x, y = inputs
        dy = dys[0]
        zero = Tensor(data=np.zeros((), dy.dtype), device=dy.device, requires_grad=False)
        dx = _reduce(where(cond, dy, zero), x.shape) if needs[1] else None
        dyy = _reduce(where(cond, zero, dy), y.shape) if needs[2] else None
        return [None, dx, dyy]


class _Extreme(Operation):
    """Elementwise max/min of one or more tensors (numpy broadcasting). The gradient goes
    to the first input holding the extreme value (SINGA's tie rule)."""

    def infer(self, *xs):
        if not xs:
            raise ShapeError(f"{self.type} needs at least one input")
        shape = reduce(broadcast_shape, (x.shape for x in xs))
        return [TensorSpec(shape, same_dtype(*xs))]

    def gradient(self, inputs, outputs, dys, needs):
        y, dy = outputs[0], dys[0]
        out, free = [], None  # free: 1 where no earlier input took the gradient
        for x, need in zip(inputs, needs):
            hit = equal(x, y)
            mine = hit if free is None else mul(hit, free)
            out.append(_reduce(mul(dy, mine), x.shape) if need else None)
            free = sub(1.0, hit) if free is None else mul(free, sub(1.0, hit))
        return out


class Max(_Extreme):

    formula = "maximum"
    pass


class Min(_Extreme):

    formula = "minimum"
    pass


def greater(a, b):
    """``a > b`` as 0/1."""
    return Greater()(a, b)


def less(a, b):
    """``a < b`` as 0/1."""
    return Less()(a, b)


def equal(a, b):
    """``a == b`` as 0/1."""
    return Equal()(a, b)


def logical_and(a, b):
    return And()(a, b)


def logical_or(a, b):
    return Or()(a, b)


def logical_xor(a, b):
    return Xor()(a, b)


def logical_not(x):
    return Not()(x)


def where(condition, x, y):
    """``x`` where ``condition`` is nonzero, else ``y`` (ONNX/numpy argument order)."""
    return Where()(condition, x, y)


def maximum(*xs):
    """Elementwise maximum of the given tensors."""
    return Max()(*xs)


def minimum(*xs):
    """Elementwise minimum of the given tensors."""
    return Min()(*xs)
