"""Elementwise math on floating tensors: trigonometric and hyperbolic functions, erf,
rounding and the reciprocal (ONNX op names; SINGA's function names below).

Each op's gradient is built from other ops: ``dy * f'(x)`` (or from the output ``y`` where
that is cheaper). Rounding ops have a zero gradient almost everywhere and, as in SINGA, pass
back zeros.
"""
from __future__ import annotations

import math

from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import need_float
from .elementwise import add, div, exp, mul, neg, sqrt, sub

__all__ = ["Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
           "Atanh", "Erf", "Ceil", "Floor", "Round", "RoundHalfAway", "Reciprocal", "sin",
           "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
           "erf", "ceil", "floor", "round", "rounde", "reciprocal"]


class _Math(Operation):
    """``y = f(x)`` elementwise on a floating tensor; ``dx = dy * derivative(x, y)``."""

    inplace = {0: 0}

    def infer(self, x):
        need_float(x)
        return [TensorSpec(x.shape, x.dtype)]

    def derivative(self, x, y):
        raise NotImplementedError

    def gradient(self, inputs, outputs, dys, needs):
        return [mul(dys[0], self.derivative(inputs[0], outputs[0]))]


class _Step(_Math):
    """A piecewise-constant function: the gradient is zero (SINGA returns zeros too)."""

    def gradient(self, inputs, outputs, dys, needs):
        return [mul(dys[0], 0.0)]


def _one_minus_sq(x):
    return sub(1.0, mul(x, x))


class Sin(_Math):

    formula = "sin"
    def derivative(self, x, y):
        return cos(x)


class Cos(_Math):

    formula = "cos"
    def derivative(self, x, y):
        return neg(sin(x))


class Tan(_Math):

    formula = "tan"
    def derivative(self, x, y):
        return add(mul(y, y), 1.0)


class Asin(_Math):

    formula = "asin"
    def derivative(self, x, y):
        return div(1.0, sqrt(_one_minus_sq(x)))


class Acos(_Math):

    formula = "acos"
    def derivative(self, x, y):
        return div(-1.0, sqrt(_one_minus_sq(x)))


class Atan(_Math):

    formula = "atan"
    def derivative(self, x, y):
        return div(1.0, add(mul(x, x), 1.0))


class Sinh(_Math):

    formula = "sinh"
    def derivative(self, x, y):
        return cosh(x)


class Cosh(_Math):

    formula = "cosh"
    def derivative(self, x, y):
        return sinh(x)


class Asinh(_Math):

    formula = "asinh"
    def derivative(self, x, y):
        return div(1.0, sqrt(add(mul(x, x), 1.0)))


class Acosh(_Math):

    formula = "acosh"
    def derivative(self, x, y):
        return div(1.0, sqrt(sub(mul(x, x), 1.0)))


class Atanh(_Math):

    formula = "atanh"
    def derivative(self, x, y):
        return div(1.0, _one_minus_sq(x))


class Erf(_Math):
    """The error function ``2/sqrt(pi) * integral_0^x exp(-t^2) dt``."""

    formula = "erf"

    def derivative(self, x, y):
        return mul(exp(neg(mul(x, x))), 2.0 / math.sqrt(math.pi))


class Reciprocal(_Math):
    """``1 / x``."""

    formula = "reciprocal"

    def derivative(self, x, y):
        return neg(mul(y, y))


class Ceil(_Step):

    formula = "ceil"
    pass


class Floor(_Step):

    formula = "floor"
    pass


class Round(_Step):
    """Round half to even (ONNX ``Round``, numpy ``rint``; SINGA's ``rounde``)."""

    formula = "rint"


class RoundHalfAway(_Step):
    """Round half away from zero (C's ``round``; SINGA's ``round``)."""

    formula = "round_half_away"


def sin(x):
    return Sin()(x)


def cos(x):
    return Cos()(x)


def tan(x):
    return Tan()(x)


def asin(x):
    return Asin()(x)


def acos(x):
    return Acos()(x)


def atan(x):
    return Atan()(x)


def sinh(x):
    return Sinh()(x)


def cosh(x):
    return Cosh()(x)


def asinh(x):
    return Asinh()(x)


def acosh(x):
    return Acosh()(x)


def atanh(x):
    return Atanh()(x)


def erf(x):
    """The error function, elementwise."""
    return Erf()(x)


def ceil(x):
    return Ceil()(x)


def floor(x):
    return Floor()(x)


def round(x):
    """SINGA's ``round``: halves round away from zero (``round(2.5) == 3``)."""
    return RoundHalfAway()(x)


def rounde(x):
    """SINGA's ``rounde``: halves round to the nearest even integer (``rounde(2.5) == 2``)."""
    return Round()(x)


def reciprocal(x):
    """``1 / x`` as one op."""
    return Reciprocal()(x)
