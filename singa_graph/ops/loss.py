"""Losses with SINGA's formulas (each of shape ``(1,)``, as SINGA's SumAll), and ArgMax.

``N`` below is always the size of the first (batch) dimension, as in SINGA; every gradient
is one fused ``*Grad`` op scaled by the incoming scalar gradient ``dy``.
"""
from __future__ import annotations

from ..errors import ShapeError
from ..ir.dtypes import is_float
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import need_float, same_dtype

__all__ = ["SoftmaxCrossEntropy", "SoftmaxCrossEntropyGrad", "MeanSquareError",
           "MeanSquareErrorGrad", "CrossEntropy", "CrossEntropyGrad", "ArgMax",
           "softmax_cross_entropy", "mse_loss", "cross_entropy", "argmax"]


def _batch(shape) -> int:
    """SINGA's divisor N: the first dimension (1 for a scalar, never 0)."""
    return max(shape[0], 1) if shape else 1


def _scaled(dy, factor):
    from .elementwise import mul

    return mul(dy, factor)


class SoftmaxCrossEntropy(Operation):
    """``mean_n(logsumexp(x_n) - sum_c t_nc x_nc)``: cross-entropy of ``softmax(x)``.

    ``x`` holds (N, C) logits. ``t`` is either integer class labels of shape (N,) (int32 or
    int64; they get no gradient) or float targets of shape (N, C), one-hot or probabilities.
    """

    attribute_inputs = (1,)  # SINGA passes the target to the constructor

    def infer(self, x, t):
        need_float(x)
        if x.ndim != 2:
            raise ShapeError(f"logits must be 2-d (N, C), got {x.shape}")
        if is_float(t.dtype):
            if t.shape != x.shape:
                raise ShapeError(f"logits {x.shape} and targets {t.shape} differ in shape")
            same_dtype(x, t)
        elif t.shape != x.shape[:1]:
            raise ShapeError(f"logits {x.shape} need labels of shape ({x.shape[0]},), "
                             f"got labels {t.shape}")
        return [TensorSpec((1,), x.dtype)]

    def index_inputs(self, inputs):
        return _label_input(inputs)

    def gradient(self, inputs, outputs, dys, needs):
        from .activation import log_softmax

        x, t = inputs
        dx = SoftmaxCrossEntropyGrad()(x, t, dys[0]) if needs[0] else None
        dt = None
        if needs[1] and is_float(t.dtype):
            dt = _scaled(log_softmax(x, 1), _scaled(dys[0], -1.0 / _batch(x.shape)))
        return [dx, dt]


class SoftmaxCrossEntropyGrad(Operation):
    """``(softmax(x) * sum_c t_c - t) * dy / N``; with one-hot or integer targets this is
    SINGA's ``(softmax(x) - t) * dy / N``."""

    def infer(self, x, t, dy):
        return [TensorSpec(x.shape, x.dtype)]

    def index_inputs(self, inputs):
        return _label_input(inputs)


def _label_input(inputs) -> dict[int, int]:
    """Integer targets (input 1) are class indices into the logits' second axis."""
    x, t = inputs[0], inputs[1]
    return {} if is_float(t.dtype) or x.ndim != 2 else {1: x.shape[1]}


class MeanSquareError(Operation):
    """SINGA's ``MeanSquareError`` (SINGA >= 3.1): the mean over all elements,
    ``sum((x - t)^2) / x.size``. ``x`` and ``t`` must have the same shape and dtype.
    """

    attribute_inputs = (1,)  # SINGA passes the target to the constructor

    def infer(self, x, t):
        need_float(x)
        if x.shape != t.shape:
            raise ShapeError(f"prediction {x.shape} and target {t.shape} differ in shape")
        return [TensorSpec((1,), same_dtype(x, t))]

    def gradient(self, inputs, outputs, dys, needs):
        from .elementwise import neg

        dx = MeanSquareErrorGrad()(*inputs, dys[0])
        return [dx if needs[0] else None, neg(dx) if needs[1] else None]


class MeanSquareErrorGrad(Operation):
    """``2 (x - t) * dy / x.size``."""

    def infer(self, x, t, dy):
        return [TensorSpec(x.shape, x.dtype)]


class CrossEntropy(Operation):
    """SINGA's ``CrossEntropy``: ``-sum(t * log(y)) / N`` on probabilities ``y`` and one-hot
    (or probability) targets ``t`` of the same shape. Terms with ``t == 0`` count as 0, so a
    zero probability of a wrong class gives no NaN."""

    attribute_inputs = (1,)  # SINGA passes the target to the constructor

    def infer(self, y, t):
        need_float(y)
        if y.shape != t.shape:
            raise ShapeError(f"probabilities {y.shape} and targets {t.shape} differ in shape")
        return [TensorSpec((1,), same_dtype(y, t))]

    def gradient(self, inputs, outputs, dys, needs):
        from .elementwise import log

        y, t = inputs
        dy = CrossEntropyGrad()(y, t, dys[0]) if needs[0] else None
        dt = _scaled(log(y), _scaled(dys[0], -1.0 / _batch(y.shape))) if needs[1] else None
        return [dy, dt]


class CrossEntropyGrad(Operation):
    """``-t / y * dy / N`` (0 where ``t == 0``)."""

    def infer(self, y, t, dy):
        return [TensorSpec(y.shape, y.dtype)]


class ArgMax(Operation):
    """Index of the largest entry along ``axis`` (int64; the first one on ties)."""

    differentiable = False

    def __init__(self, axis=-1, keepdims=False):
        self.axis = int(axis)
        self.keepdims = bool(keepdims)

    def infer(self, x):
        if not -x.ndim <= self.axis < x.ndim:
            raise ShapeError(f"axis {self.axis} out of range for shape {x.shape}")
        self.axis %= x.ndim
        shape = list(x.shape)
        if self.keepdims:
            shape[self.axis] = 1
        else:
            del shape[self.axis]
        return [TensorSpec(tuple(shape), "int64")]


def softmax_cross_entropy(x, t):
    """SINGA's ``softmax_cross_entropy``: mean cross-entropy of ``softmax(x)`` against labels
    (N,) or one-hot targets (N, C)."""
    return SoftmaxCrossEntropy()(x, t)


def mse_loss(x, t):
    """SINGA's ``mse_loss`` (SINGA >= 3.1): the mean of ``(x - t)^2`` over all elements."""
    return MeanSquareError()(x, t)


def cross_entropy(y, t):
    """SINGA's ``cross_entropy``: ``-sum(t * log(y)) / y.shape[0]`` on probabilities ``y``."""
    return CrossEntropy()(y, t)


def argmax(x, axis=-1, keepdims=False):
    """Indices of the maxima along ``axis`` (int64), e.g. predicted classes for accuracy."""
    return ArgMax(axis, keepdims)(x)
