"""Elementwise arithmetic with numpy broadcasting, and the broadcast helpers of the backward.

Gradients of broadcast operands are reduced back to the operand's shape with :class:`SumTo`.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import broadcast_shape, need_float, same_dtype

__all__ = ["Add", "Sub", "Mul", "Div", "Neg", "Exp", "Log", "Sqrt", "Pow", "Abs", "Sign",
           "SumTo", "BroadcastTo", "Cast", "ElementwiseMean", "add", "sub", "mul", "div", "neg", "exp", "log",
           "sqrt", "pow", "abs", "sign", "sum_to", "broadcast_to", "cast", "mean_of"]


class _Binary(Operation):
    inplace = {0: 0}

    def infer(self, a, b):
        return [TensorSpec(broadcast_shape(a.shape, b.shape), same_dtype(a, b))]


def _reduce(g, shape):
    return None if g is None else (g if g.shape == tuple(shape) else sum_to(g, shape))


class Add(_Binary):

    formula = "add"
    def gradient(self, inputs, outputs, dys, needs):
        a, b = inputs
        return [_reduce(dys[0], a.shape), _reduce(dys[0], b.shape)]


class ElementwiseMean(Operation):
    """The elementwise mean of two or more tensors with numpy broadcasting (ONNX's Mean,
    SINGA's ``autograd.mean``): their sum, left to right, times ``1 / n``, as SINGA's. Each
    input's gradient is ``dy / n`` (summed over its broadcast axes)."""

    formula = "add"
    inplace = {0: 0}

    def infer(self, *xs):
        if len(xs) < 2:
            raise ShapeError(f"needs at least two tensors, got {len(xs)}")
        shape = xs[0].shape
        for x in xs[1:]:
            shape = broadcast_shape(shape, x.shape)
        self.alpha = 1.0 / len(xs)
        return [TensorSpec(shape, same_dtype(*xs))]

    @property
    def program(self):
        steps = [("add", (0, 1))] + [("add", (-(i - 1), i)) for i in range(2, self._n)]
        return tuple(steps) + (("scale", (-len(steps),)),)

    @property
    def values(self):
        return ((0.0, 0.0),) * (self._n - 1) + ((self.alpha, 0.0),)

    @property
    def _n(self):
        return int(round(1.0 / self.alpha))

    def gradient(self, inputs, outputs, dys, needs):
        g = mul(dys[0], self.alpha)
        return [_reduce(g, x.shape) if need else None for x, need in zip(inputs, needs)]


class Sub(_Binary):

    formula = "sub"
    def gradient(self, inputs, outputs, dys, needs):
        a, b = inputs
        return [_reduce(dys[0], a.shape), _reduce(neg(dys[0]), b.shape) if needs[1] else None]


class Mul(_Binary):

    formula = "mul"
    def gradient(self, inputs, outputs, dys, needs):
        a, b = inputs
        dy = dys[0]
        return [_reduce(mul(dy, b), a.shape) if needs[0] else None,
                _reduce(mul(dy, a), b.shape) if needs[1] else None]


class Div(_Binary):

    formula = "div"
    def gradient(self, inputs, outputs, dys, needs):
        a, b = inputs
        dy, y = dys[0], outputs[0]
        da = _reduce(div(dy, b), a.shape) if needs[0] else None
        db = _reduce(neg(div(mul(dy, y), b)), b.shape) if needs[1] else None
        return [da, db]


class Pow(_Binary):
    """``a ** b`` elementwise; the gradient w.r.t. ``b`` needs ``a > 0``."""

    formula = "power"

    inplace = {}

    def gradient(self, inputs, outputs, dys, needs):
        a, b = inputs
        dy, y = dys[0], outputs[0]
        da = _reduce(mul(dy, mul(b, pow(a, sub(b, 1.0)))), a.shape) if needs[0] else None
        db = _reduce(mul(dy, mul(y, log(a))), b.shape) if needs[1] else None
        return [da, db]


class _Unary(Operation):
    inplace = {0: 0}

    def infer(self, x):
        need_float(x, narrow=hasattr(self, "formula"))
        return [TensorSpec(x.shape, x.dtype)]


class Neg(_Unary):

    formula = "neg"
    def infer(self, x):
        return [TensorSpec(x.shape, x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [neg(dys[0])]


class Exp(_Unary):

    formula = "exp"
    def gradient(self, inputs, outputs, dys, needs):
        return [mul(dys[0], outputs[0])]


class Log(_Unary):

    formula = "log"
    def gradient(self, inputs, outputs, dys, needs):
        return [div(dys[0], inputs[0])]


class Sqrt(_Unary):

    formula = "sqrt"
    def gradient(self, inputs, outputs, dys, needs):
        return [div(dys[0], mul(outputs[0], 2.0))]


class Abs(_Unary):

    formula = "absolute"
    def infer(self, x):
        return [TensorSpec(x.shape, x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [mul(dys[0], sign(inputs[0]))]


class Sign(_Unary):
    """-1, 0 or 1; its gradient is zero (SINGA passes back zeros)."""

    formula = "sign"

    def infer(self, x):
        return [TensorSpec(x.shape, x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [mul(dys[0], 0.0)]


class SumTo(Operation):
    """Sum ``x`` down to ``shape``, the inverse of broadcasting (numpy's rule)."""

    def __init__(self, shape):
        self.shape = tuple(int(s) for s in shape)

    def infer(self, x):
        if broadcast_shape(self.shape, x.shape) != x.shape:
            raise ShapeError(f"cannot sum {x.shape} down to {self.shape}")
        return [TensorSpec(self.shape, x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [broadcast_to(dys[0], inputs[0].shape)]


class BroadcastTo(Operation):
    """Broadcast ``x`` up to ``shape`` (a copy, so the output owns its buffer)."""

    def __init__(self, shape):
        self.shape = tuple(int(s) for s in shape)

    def infer(self, x):
        if broadcast_shape(self.shape, x.shape) != self.shape:
            raise ShapeError(f"cannot broadcast {x.shape} to {self.shape}")
        return [TensorSpec(self.shape, x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [sum_to(dys[0], inputs[0].shape)]


class Cast(Operation):
    """Convert to another dtype (float <-> float keeps the gradient).

    ``saturate`` and ``round_mode`` are ONNX's: into float8, values out of range become the
    largest finite value instead of infinity or NaN; into float8_e8m0fnu, how the exponent
    rounds ("up", "nearest", "down")."""

    def __init__(self, dtype, saturate=True, round_mode="up"):
        self.dtype = np.dtype(dtype)
        self.saturate = bool(saturate)
        self.round_mode = str(round_mode)

    def infer(self, x):
        return [TensorSpec(x.shape, self.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [cast(dys[0], inputs[0].dtype)]


def add(a, b):
    """``a + b`` with broadcasting."""
    return Add()(a, b)


def sub(a, b):
    """``a - b`` with broadcasting."""
    return Sub()(a, b)


def mul(a, b):
    """``a * b`` with broadcasting."""
    return Mul()(a, b)


def div(a, b):
    """``a / b`` with broadcasting."""
    return Div()(a, b)


def pow(a, b):
    """``a ** b`` with broadcasting."""
    return Pow()(a, b)


def neg(x):
    return Neg()(x)


def exp(x):
    return Exp()(x)


def log(x):
    return Log()(x)


def sqrt(x):
    return Sqrt()(x)


def abs(x):
    return Abs()(x)


def sign(x):
    return Sign()(x)


def sum_to(x, shape):
    return SumTo(shape)(x)


def broadcast_to(x, shape):
    return BroadcastTo(shape)(x)


def mean_of(*xs):
    """The elementwise mean of two or more tensors (numpy broadcasting)."""
    return ElementwiseMean()(*xs)


def cast(x, dtype, saturate=True, round_mode="up"):
    """``x`` converted to ``dtype`` (see :class:`Cast` for the float8 attributes)."""
    return Cast(dtype, saturate, round_mode)(x)
