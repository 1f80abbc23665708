"""ONNX -> singa_graph: activations, Softmax, LogSoftmax and Hardmax.

Most map to one op of the library (Relu, Selu, Elu, HardSigmoid, Softplus, Softsign, Gelu,
PRelu ...); the rest are exact compositions of such ops (Celu, HardSwish, Swish, Mish,
ThresholdedRelu, Shrink, Hardmax).
"""
from __future__ import annotations

import numpy as np

from .. import ops
from ..ir.dtypes import NARROW_FLOATS
from .import_nn import _Retyped
from .program import scalar_like
from .registry import importer


@importer("LeakyRelu")
def leaky_relu(n):
    return ops.leakyrelu(n.t(0), n.attr("alpha", 0.01))


@importer("PRelu")
def prelu(n):
    x, slope = n.t(0), n.t(1)
    if slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1] != x.shape[-1]:
        # before opset 7 a 1-d slope of length C is per channel, not per last axis
        slope = ops.reshape(slope, (slope.shape[0],) + (1,) * (x.ndim - 2))
    return ops.prelu(x, slope)


@importer("Elu")
def elu(n):
    return ops.elu(n.t(0), n.attr("alpha", 1.0))


@importer("Selu")
def selu(n):
    return ops.selu(n.t(0), n.attr("alpha", 1.67326319217681884765625),
                    n.attr("gamma", 1.05070102214813232421875))


@importer("Celu")
def celu(n):
    x, a = n.t(0), n.attr("alpha", 1.0)
    if a == 1.0:
        return ops.elu(x, 1.0)
    # alpha * elu(x / alpha) rounds positive x; x stays x there
    scaled = ops.mul(scalar_like(a, x), ops.elu(ops.div(x, scalar_like(a, x)), 1.0))
    return ops.where(ops.less(x, scalar_like(0, x)), scaled, x)


@importer("HardSigmoid")
def hardsigmoid(n):
    return ops.hardsigmoid(n.t(0), n.attr("alpha", 0.2), n.attr("beta", 0.5))


@importer("HardSwish")
def hardswish(n):
    x = n.t(0)
    return ops.mul(x, ops.hardsigmoid(x, 1 / 6, 0.5))


@importer("Swish")
def swish(n):
    x = n.t(0)
    a = n.attr("alpha", 1.0)
    return ops.mul(x, ops.sigmoid(ops.mul(x, scalar_like(a, x)) if a != 1.0 else x))


@importer("Mish")
def mish(n):
    x = n.t(0)
    return ops.mul(x, ops.tanh(ops.softplus(x)))


@importer("Gelu")
def gelu(n):
    return ops.gelu(n.t(0), n.attr("approximate", "none"))


@importer("ThresholdedRelu")
def thresholded_relu(n):
    x = n.t(0)
    return ops.where(ops.greater(x, scalar_like(n.attr("alpha", 1.0), x)), x, scalar_like(0, x))


@importer("Shrink")
def shrink(n):
    x = n.t(0)
    lambd, bias = n.attr("lambd", 0.5), n.attr("bias", 0.0)
    zero = scalar_like(0, x)
    upper = ops.where(ops.greater(x, scalar_like(lambd, x)), ops.sub(x, scalar_like(bias, x)), zero)
    return ops.where(ops.less(x, scalar_like(-lambd, x)), ops.add(x, scalar_like(bias, x)), upper)


def _coerced(n, fn, legacy, default_axis):
    """``fn(x, axis)``; before opset 13 the input is coerced to 2-d at ``axis`` first.
    bfloat16/float8 inputs are computed in float32 and the result rounded once."""
    x = n.t(0)
    if x.dtype in NARROW_FLOATS:
        narrow = x.dtype
        return ops.cast(_coerced(_Retyped(n, [ops.cast(x, np.float32)]), fn, legacy,
                                 default_axis), narrow)
    axis = n.attr("axis", default_axis)
    axis = axis + x.ndim if axis < 0 else axis
    if not legacy or axis == x.ndim - 1:
        return fn(x, axis)
    y = fn(ops.flatten(x, axis), 1)
    return ops.reshape(y, x.shape)


@importer("Softmax", since=1)
def softmax_1(n):
    return _coerced(n, ops.softmax, True, 1)


@importer("Softmax", since=13)
def softmax_13(n):
    return _coerced(n, ops.softmax, False, -1)


@importer("LogSoftmax", since=1)
def log_softmax_1(n):
    return _coerced(n, ops.log_softmax, True, 1)


@importer("LogSoftmax", since=13)
def log_softmax_13(n):
    return _coerced(n, ops.log_softmax, False, -1)


def _hardmax(x, axis):
    """1 at the first maximum along ``axis``, 0 elsewhere: ArgMax then OneHot."""
    if x.size == 0:
        return ops.identity(x)
    hot = ops.onehot(axis, ops.argmax(x, axis, False), x.shape[axis], (0.0, 1.0))
    return hot if hot.dtype == x.dtype else ops.cast(hot, x.dtype)


@importer("Hardmax", since=1)
def hardmax_1(n):
    return _coerced(n, _hardmax, True, 1)


@importer("Hardmax", since=13)
def hardmax_13(n):
    return _coerced(n, _hardmax, False, -1)
