"""Activations: ReLU, LeakyReLU, Sigmoid, Tanh, Softmax and LogSoftmax.

Each gradient is one dedicated ``*Grad`` op that reads the forward *output* where that is
enough (``y > 0``, ``y (1 - y)``, ``1 - y^2``, the softmax itself), so the input can be
overwritten in place by the forward op and the backward is a single fused kernel.
"""
from __future__ import annotations

from ..errors import ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import need_float, same_dtype

__all__ = ["ReLU", "ReLUGrad", "LeakyReLU", "LeakyReLUGrad", "Sigmoid", "SigmoidGrad", "Tanh",
           "TanhGrad", "Softmax", "SoftmaxGrad", "LogSoftmax", "LogSoftmaxGrad", "relu",
           "leakyrelu", "sigmoid", "tanh", "softmax", "log_softmax"]


class _Unary(Operation):
    inplace = {0: 0}

    def infer(self, x):
        need_float(x, narrow=hasattr(self, "formula"))
        return [TensorSpec(x.shape, x.dtype)]


class _Grad(Operation):
    """``dx = f(dy, ref)`` elementwise; ``dx`` may overwrite ``dy``."""

    inplace = {0: 0}

    def infer(self, dy, ref):
        if dy.shape != ref.shape:
            raise ShapeError(f"gradient of shape {dy.shape} does not match {ref.shape}")
        return [TensorSpec(dy.shape, same_dtype(dy, ref))]


class ReLU(_Unary):
    """``max(x, 0)``."""

    formula = "relu"

    def gradient(self, inputs, outputs, dys, needs):
        return [ReLUGrad()(dys[0], outputs[0])]


class ReLUGrad(_Grad):
    """``dy * (y > 0)`` from the ReLU output ``y``."""

    formula = "relu_grad"


class LeakyReLU(_Unary):
    """``x`` where ``x > 0``, ``alpha * x`` elsewhere."""

    formula = "leaky_relu"

    def __init__(self, alpha=0.01):
        self.alpha = float(alpha)

    def gradient(self, inputs, outputs, dys, needs):
        # y has the sign of x unless alpha < 0; only then must the backward keep x alive
        ref = outputs[0] if self.alpha >= 0 else inputs[0]
        return [LeakyReLUGrad(self.alpha)(dys[0], ref)]


class LeakyReLUGrad(_Grad):
    """``dy`` where ``ref > 0``, ``alpha * dy`` elsewhere (``ref`` is y or x, same sign)."""

    formula = "leaky_relu_grad"

    def __init__(self, alpha=0.01):
        self.alpha = float(alpha)


class Sigmoid(_Unary):
    """``1 / (1 + exp(-x))``, computed without overflow for large ``|x|``."""

    formula = "sigmoid"

    def gradient(self, inputs, outputs, dys, needs):
        return [SigmoidGrad()(dys[0], outputs[0])]


class SigmoidGrad(_Grad):
    """``dy * y * (1 - y)`` from the sigmoid output ``y``."""

    formula = "sigmoid_grad"


class Tanh(_Unary):
    """Hyperbolic tangent."""

    formula = "tanh"

    def gradient(self, inputs, outputs, dys, needs):
        return [TanhGrad()(dys[0], outputs[0])]


class TanhGrad(_Grad):
    """``dy * (1 - y^2)`` from the tanh output ``y``."""

    formula = "tanh_grad"


class _AxisOp(Operation):
    inplace = {0: 0}

    def __init__(self, axis=-1):
        self.axis = int(axis)

    def _norm(self, x):
        if not -x.ndim <= self.axis < x.ndim:
            raise ShapeError(f"axis {self.axis} out of range for shape {x.shape}")
        self.axis %= x.ndim


class Softmax(_AxisOp):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (the max makes it overflow-free)."""

    def infer(self, x):
        need_float(x)
        self._norm(x)
        return [TensorSpec(x.shape, x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [SoftmaxGrad(self.axis)(dys[0], outputs[0])]


class SoftmaxGrad(_AxisOp):
    """``y * (dy - sum(dy * y, axis))`` from the softmax output ``y``."""

    def infer(self, dy, y):
        self._norm(y)
        return _Grad.infer(self, dy, y)


class LogSoftmax(Softmax):
    """``x - max - log(sum(exp(x - max)))`` along ``axis``."""

    def gradient(self, inputs, outputs, dys, needs):
        return [LogSoftmaxGrad(self.axis)(dys[0], outputs[0])]


class LogSoftmaxGrad(SoftmaxGrad):
    """``dy - exp(y) * sum(dy, axis)`` from the log-softmax output ``y``."""


def relu(x):
    """Rectified linear unit, ``max(x, 0)``."""
    return ReLU()(x)


def leakyrelu(x, a=0.01):
    """SINGA's ``leakyrelu``: ``x`` for ``x > 0``, ``a * x`` otherwise."""
    return LeakyReLU(a)(x)


def sigmoid(x):
    """Logistic sigmoid."""
    return Sigmoid()(x)


def tanh(x):
    """Hyperbolic tangent."""
    return Tanh()(x)


def softmax(x, axis=1):
    """SINGA's ``softmax``: normalised exponentials along ``axis`` (default 1, the classes of
    an (N, C) batch)."""
    return Softmax(axis)(x)


def log_softmax(x, axis=1):
    """Logarithm of :func:`softmax`, computed directly (stable for very negative logits)."""
    return LogSoftmax(axis)(x)
